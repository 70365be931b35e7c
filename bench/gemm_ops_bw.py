"""``warpsched.ops.gemm`` end to end on the shapes the small-M work targets: autotuned from an
empty cache (the deterministic candidates), checked against fp64 with a NaN-poisoned ``out``,
called twice (the bits must not change), then timed against torch.matmul / torch._scaled_mm.

  python3 bench/gemm_ops_bw.py 2>&1 | tee bench/results/ops_bw.log
  ... --shapes 64x4096x4096,1024x1024x1024 --dtypes bf16,fp8 --rounds 3 --rep-ms 25

Timing: CUDA graphs of back-to-back calls (ops.gemm with the tuned configuration dict, so
the graph holds the kernel and not the cache look-up), ``--rounds`` rounds in alternating
order, triton do_bench medians; the table gives the median over rounds and torch / ops."""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

from _graphs import capture, reps_for  # noqa: E402

SHAPES = "64x4096x4096,64x4096x14336,64x14336x4096,256x4096x4096,1024x1024x1024"
E4M3_MAX = 448.0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep-ms", type=int, default=25)
    args = p.parse_args()
    import torch
    import triton.testing

    from warpsched import ops
    from warpsched.kernels.gemm import autotune as tune

    cache = tune.TuneCache(os.path.join(tempfile.mkdtemp(prefix="ops_bw_"), "gemm_autotune.json"))
    dev = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    failures = 0
    rows = []
    for shape in args.shapes.split(","):
        M, N, K = (int(x) for x in shape.split("x"))
        for dt in args.dtypes.split(","):
            a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
            kw = {}
            if dt == "fp8":
                sa, sb = a.abs().amax().float() / E4M3_MAX, w.abs().amax().float() / E4M3_MAX
                a, w = (a.float() / sa).to(torch.float8_e4m3fn), (w.float() / sb).to(torch.float8_e4m3fn)
                ref = torch.mm(a.double() * sa.double(), (w.double() * sb.double()).t())
                kw = dict(scale_a=float(sa), scale_b=float(sb))  # floats: no .item() inside a graph capture
            else:
                ref = torch.mm(a.double(), w.double().t())
            out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
            t0 = time.time()
            ops.gemm(a, w.t(), out, cache=cache, **kw)
            torch.cuda.synchronize()
            tune_s = time.time() - t0
            key = tune.cache_key(M, N, K, a.dtype, w.dtype, out.dtype, torch.cuda.get_device_name())
            cfg = cache.get(key)
            err = float((out.double() - ref).norm() / ref.norm()) if bool(torch.isfinite(out).all()) else math.nan
            first = out.clone()
            out.fill_(float("nan"))
            ops.gemm(a, w.t(), out, cache=cache, **kw)
            same = bool(torch.equal(first, out))
            ok = err < 1e-2 and same
            failures += not ok
            print(f"  check {dt} {shape:16s} ops.gemm {'OK ' if ok else 'BAD'} err={err:.2e} same bits={same} "
                  f"tune {tune_s:.1f}s choice {cfg}", flush=True)
            if dt == "fp8":
                wt = w.t()
                t_launch = lambda: torch._scaled_mm(a, wt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,  # noqa: E731
                                                    use_fast_accum=True, out=out)
            else:
                wt = w.t()
                t_launch = lambda: torch.mm(a, wt, out=out)  # noqa: E731
            o_launch = lambda: ops.gemm(a, wt, out, config=cfg, **kw)  # noqa: E731
            reps = reps_for(2.0 * M * N * K / (1e15 if dt == "fp8" else 5e14) * 1e3)
            graphs = {"torch": capture(torch, t_launch, reps), "ops": capture(torch, o_launch, reps)}
            times = {n: [] for n in graphs}
            for r in range(args.rounds):
                for n in (["torch", "ops"] if r % 2 == 0 else ["ops", "torch"]):
                    times[n].append(triton.testing.do_bench(graphs[n].replay, warmup=args.rep_ms // 4,
                                                            rep=args.rep_ms, return_mode="median") / reps)
            med = {n: statistics.median(v) * 1e3 for n, v in times.items()}
            ratio = med["torch"] / med["ops"]
            rows.append((dt, shape, med["torch"], med["ops"], ratio, cfg))
            print(f"  time  {dt} {shape:16s} torch {med['torch']:8.2f} us  ops.gemm {med['ops']:8.2f} us  "
                  f"torch/ops {ratio:.3f}", flush=True)
            del graphs
    for dt in args.dtypes.split(","):
        rs = [r[4] for r in rows if r[0] == dt]
        if rs:
            print(f"{dt}: geomean torch/ops {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} over {len(rs)} shapes, "
                  f"min {min(rs):.3f}", flush=True)
    print(f"failures: {failures}", flush=True)


if __name__ == "__main__":
    main()
