"""What a cooperative tile's epilogue costs: the same kernels timed with their epilogue body
replaced (a diagnostic, not a kernel anyone should run: ``smem`` does not store C).

  full  the real epilogue (acc -> bf16 -> SMEM sub-tiles -> TMA store, its buffer waits)
  smem  SMEM writes, fence and one barrier per sub-tile; no TMA store, no buffer wait

(An empty body is no measure: with the accumulator unused, the compiler drops the wgmmas too and
the "rate" comes out above the H200's peak.)

The schedule (and so the checked program) is the same in both; only ``GmemC.store_tile``'s
body is swapped, before anything is compiled, in a child process per mode. torch.matmul is
timed in every child, so each row's ratio comes from one process:

  python3 tools/gemm_epilogue_cost.py \\
      --shapes 1024x14336x4096,4096x4096x4096 --configs coop128x224,coop128x256
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/: timing helpers, sweep configurations
for p in (os.path.join(ROOT, "examples", "hopper"), os.path.join(ROOT, "src"), HERE):
    sys.path.insert(0, p)

MODES = ("full", "smem")
# fewer A/B stages (room for a whole-tile C buffer) and wider epilogue sub-tiles, for comparison
EXTRA = {"coop128x224st3": dict(schedule="cooperative", tile_mn=(128, 224), ab_stages=3),
         "coop128x256st3": dict(schedule="cooperative", tile_mn=(128, 256), ab_stages=3),
         "coop128x256e64": dict(schedule="cooperative", tile_mn=(128, 256), epi_n=64)}


def patch(mode):
    """Swap GmemC.store_tile's body (before any kernel is traced)."""
    if mode == "full":
        return
    import cutlass
    import cutlass.cute as cute

    from warpsched.kernels.gemm.resources import GmemC

    @cute.jit
    def smem_only(self, acc, tiled_copy_r2s, tRS_sC, tRS_acc, tRS_rAcc, tRS_rC, gather, bSG_sC, bSG_gC, epi_shape,
                  epi_layout, store_pipe, epi_bar, warp_idx):
        g = self.g
        for e in cutlass.range_constexpr(cute.size(epi_shape)):
            pairs = gather.pairs(e)
            for j in cutlass.range_constexpr(len(pairs)):
                tRS_rAcc[pairs[j][0]] = tRS_acc[pairs[j][1]]
            tRS_rC.store(tRS_rAcc.load().to(g.c_dtype))
            cute.copy(tiled_copy_r2s, tRS_rC, tRS_sC[(None, None, None, e % g.epi_stage)])
            cute.arch.fence_proxy("async.shared", space="cta")
            epi_bar.arrive_and_wait()

    GmemC.store_tile = smem_only


def child(args):
    patch(args.mode)
    import torch
    import triton.testing

    import gemm_persistent as gp
    from _graphs import graph_ms, time_rounds
    from gemm_sweep_configs import CONFIGS

    torch.manual_seed(0)
    for text in args.shapes.split(","):
        M, N, K = (int(x) for x in text.split("x"))
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        bt = b.t()
        runs = {"torch": lambda: torch.mm(a, bt, out=c)}
        for name in args.configs.split(","):
            cfg = dict(EXTRA.get(name) or CONFIGS[name])
            cfg.setdefault("split_k", 1)
            runs[f"{name}:{args.mode}"] = lambda cfg=cfg: gp.gemm(a, b, c, **cfg)
        for launch in runs.values():
            launch()
        torch.cuda.synchronize()
        est = 2.0 * M * N * K / 6e14 * 1e3
        time_rounds((M, N, K), runs, args.rounds,
                    lambda f: graph_ms(torch, triton.testing.do_bench, f, est, args.rep_ms))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1024x14336x4096,4096x4096x4096")
    ap.add_argument("--configs", default="coop128x224,coop128x256", help="names in gemm_sweep_configs.CONFIGS (bf16)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--mode", help=argparse.SUPPRESS)  # set in the child
    args = ap.parse_args()
    if args.mode:
        return child(args)
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise SystemExit(f"--modes: {mode!r} is not one of {MODES}")
        print(f"== epilogue {mode}", flush=True)
        subprocess.run([sys.executable, __file__, "--mode", mode, "--shapes", args.shapes, "--configs", args.configs,
                        "--rounds", str(args.rounds), "--rep-ms", str(args.rep_ms)], check=False, timeout=400)


if __name__ == "__main__":
    main()
