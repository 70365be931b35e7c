"""H200: does the deep ring gemm.host.deep_ring gives small tiles on long K pay? The cooperative 64x32 and
64x32 wide-K (block_k=128) tiles at their 8-stage default (``ab_stages=8`` / ``ab_stages`` of the old
candidate) against the ring SMEM holds (18 / 9 stages, ``k_tiles_min`` set by the host), and torch.matmul,
on small-M, long-K shapes; device time (CUDA graphs, rotated rounds), outputs poisoned with NaN and
checked against fp64.

    python3 tools/gemm_deep_ring.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/: timing helpers
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

SHAPES = [(1, 4096, 4096), (16, 4096, 14336), (64, 14336, 4096), (32, 8192, 8192), (16, 28672, 4096),
          (64, 4096, 14336)]
SIDES = {  # name: the config ops.gemm is given (split_k=1: the deep ring is for unsplit K)
    "64x32 8 stages": dict(schedule="cooperative", tile_mn=(64, 32), split_k=1, ab_stages=8),
    "64x32 deep": dict(schedule="cooperative", tile_mn=(64, 32), split_k=1),
    "64x32 k128 8 stages": dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, split_k=1, ab_stages=8),
    "64x32 k128 deep": dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, split_k=1),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch
    from triton.testing import do_bench

    from _graphs import graph_ms, launch_poisoned, print_ratio_table, rel_error, time_rounds
    from warpsched import ops
    from warpsched.kernels.gemm import host as gemm_host

    print(torch.cuda.get_device_name(), flush=True)
    results, bad = {}, 0
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        runs = {"torch": lambda: torch.mm(a, b, out=c)}
        for name, cfg in SIDES.items():
            runs[name] = (lambda cfg=cfg: ops.gemm(a, b, c, config=cfg))
            launch_poisoned(torch, runs[name], c, graph=False)
            err = rel_error(torch, c, ref)
            plan = gemm_host.plan(a, b, c, **{k: v for k, v in cfg.items()})
            stages = gemm_host._kernel(a.dtype, c.dtype, {**plan.options, "max_ctas": 1}).ab_stage
            ok = err == err and err < 1e-2
            bad += not ok
            print(f"{M}x{N}x{K} {name}: {stages} stages, rel err {err:.2e} {'PASS' if ok else 'FAIL'}", flush=True)
        results[(M, N, K)] = time_rounds((M, N, K), runs, args.rounds,
                                         lambda f: graph_ms(torch, do_bench, f, 0.05, 100))
    print_ratio_table(results, ["torch"] + list(SIDES))
    for base, deep in (("64x32 8 stages", "64x32 deep"), ("64x32 k128 8 stages", "64x32 k128 deep")):
        ratios = [r[base] / r[deep] for r in results.values()]
        geo = 1.0
        for x in ratios:
            geo *= x
        print(f"{deep} vs {base}: geomean {geo ** (1 / len(ratios)):.3f}x, per shape "
              + ", ".join(f"{x:.3f}" for x in ratios), flush=True)
    print(f"{'PASS' if not bad else 'FAIL'}: {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
