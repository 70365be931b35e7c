"""One launch each of torch.matmul (cuBLAS) and of named warpsched GEMM configurations (the
sweep's ``CONFIGS``) on one shape, between cudaProfilerStart / Stop, for ``ncu
--profile-from-start off``:

  ncu --profile-from-start off --section SpeedOfLight \\
      --section MemoryWorkloadAnalysis --metrics lts__t_sector_hit_rate.pct \\
      python3 tools/gemm_profile.py --shape 4096x4096x4096 --configs coop128x256,coop128x256sk

bf16 in and out, fresh random inputs. Every kernel is launched (and compiled) once before the
profiled range, and its result checked against torch.matmul (relative Frobenius error < 1e-2),
so a profile of a wrong kernel is not read as a speed result.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))  # bench/: timing helpers, sweep configurations


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096x4096x4096", help="MxNxK")
    ap.add_argument("--configs", default="coop128x256", help="comma-separated names of gemm_sweep_configs.CONFIGS")
    args = ap.parse_args()
    import torch

    import gemm_persistent as gp
    from gemm_sweep_configs import CONFIGS

    M, N, K = (int(x) for x in args.shape.split("x"))
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    ref = torch.mm(a, b.t())
    launches = [("torch", lambda c: torch.mm(a, b.t(), out=c))]
    for name in args.configs.split(","):
        cfg = dict(CONFIGS[name])
        cfg.setdefault("split_k", 1)
        launches.append((name, lambda c, cfg=cfg: gp.gemm(a, b, c, **cfg)))
    outs = {}
    for name, launch in launches:  # compile and check outside the profiled range
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(c)
        torch.cuda.synchronize()
        err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
        print(f"{name:18s} rel. error vs torch.matmul {err:.2e}", flush=True)
        if not err < 1e-2:
            raise SystemExit(f"{name}: wrong result, not profiled")
        outs[name] = c
    torch.cuda.cudart().cudaProfilerStart()
    for name, launch in launches:
        launch(outs[name])
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled, in order:", ", ".join(name for name, _ in launches))


if __name__ == "__main__":
    main()
