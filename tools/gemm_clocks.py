"""SM clock and board power while a GEMM runs back to back: is a kernel limited by its cycles or
by the power it draws (the H200 lowers its clock under a 700 W cap)?

Each side is replayed from a CUDA graph for ``--seconds`` while ``nvidia-smi`` samples the SM
clock and power every 50 ms; the table gives each side's time per launch and its mean clock and
power over the window (the first quarter dropped: the clock settles). torch.matmul is one side,
so a difference in clock between it and ours at the same shape is power, not scheduling:

  python3 tools/gemm_clocks.py \\
      --shapes 1024x14336x4096,4096x4096x4096 --configs coop128x256,coop128x224,coop128x256c21
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/: timing helpers, sweep configurations
for p in (os.path.join(ROOT, "examples", "hopper"), os.path.join(ROOT, "src"), HERE):
    sys.path.insert(0, p)


def sampler():
    """nvidia-smi printing 'epoch-ms, MHz, W' lines every 50 ms (timestamps taken on our side)."""
    return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                             "-lms", "50"], stdout=subprocess.PIPE, text=True, bufsize=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1024x14336x4096,4096x4096x4096")
    ap.add_argument("--configs", default="coop128x256,coop128x224,coop128x256c21")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    import threading

    import torch

    import gemm_persistent as gp
    from _graphs import capture, reps_for
    from gemm_sweep_configs import CONFIGS

    samples = []  # (time, MHz, W)
    proc = sampler()

    def read():
        for line in proc.stdout:
            try:
                mhz, watts = (float(x) for x in line.split(","))
            except ValueError:
                continue
            samples.append((time.time(), mhz, watts))

    threading.Thread(target=read, daemon=True).start()
    torch.manual_seed(0)
    print("| shape | side | us / launch | TFLOP/s | SM MHz | W |\n|---|---|---|---|---|---|", flush=True)
    for text in args.shapes.split(","):
        M, N, K = (int(x) for x in text.split("x"))
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ref = (a.double() @ b.double().t())
        bt = b.t()
        runs = {"torch": lambda: torch.mm(a, bt, out=c)}
        for name in args.configs.split(","):
            cfg = dict(CONFIGS[name])
            cfg.setdefault("split_k", 1)
            runs[name] = lambda cfg=cfg: gp.gemm(a, b, c, **cfg)
        for name, launch in runs.items():
            c.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            err = float((c.double() - ref).norm() / ref.norm()) if bool(torch.isfinite(c).all()) else float("nan")
            if not err < 1e-2:
                print(f"{name} at {text}: wrong (rel. error {err}); not timed", flush=True)
                continue
            est_ms = 2.0 * M * N * K / 6.5e14 * 1e3
            reps = reps_for(est_ms)
            g = capture(torch, launch, reps)
            torch.cuda.synchronize()
            time.sleep(0.5)  # idle between sides: each window starts from the same thermal state
            t0 = time.time()
            replays = 0
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            while time.time() - t0 < args.seconds:
                for _ in range(10):
                    g.replay()
                replays += 10
                torch.cuda.synchronize()
            end.record()
            torch.cuda.synchronize()
            t1 = time.time()
            us = start.elapsed_time(end) * 1e3 / (replays * reps)
            window = [(m, w) for (t, m, w) in samples if t0 + 0.25 * (t1 - t0) <= t <= t1]
            mhz = sum(m for m, _ in window) / max(1, len(window))
            watts = sum(w for _, w in window) / max(1, len(window))
            print(f"| {text} | {name} | {us:.1f} | {2.0 * M * N * K / us / 1e6:.0f} | {mhz:.0f} | {watts:.0f} |",
                  flush=True)
            del g
    proc.terminate()


if __name__ == "__main__":
    main()
