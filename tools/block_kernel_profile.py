"""H200: where a decoder block's device time goes, kernel by kernel, for warpsched's block and torch's
(``bench/model_block.py``'s block), under ``torch.profiler``: one table per side of the kernels by total
device time over ``--calls`` calls (name, count per block, µs per block), then the device total and the
wall time per block. ``--compile``: the block under ``torch.compile``; ``--host``: also the operators by self
CPU time per block (where a host-bound block's time goes: ops, launches, the compiled graph's own call).

    python3 tools/block_kernel_profile.py [--size decode|prefill|training] [--pass forward|forward+backward]
                                          [--calls 10] [--top 15] [--compile] [--host]
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))  # bench/: model_block

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--size", default="decode")
ap.add_argument("--pass", dest="pas", default="forward+backward")
ap.add_argument("--calls", type=int, default=10)
ap.add_argument("--top", type=int, default=15)
ap.add_argument("--compile", action="store_true", help="the block under torch.compile")
ap.add_argument("--host", action="store_true", help="also the operators by self CPU time per block")
a = ap.parse_args()

from model_block import profiled_steps  # noqa: E402

print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), a.size, a.pas,
      "compiled" if a.compile else "eager", flush=True)
activities = [torch.profiler.ProfilerActivity.CUDA] + ([torch.profiler.ProfilerActivity.CPU] if a.host else [])
for name, step in profiled_steps(a.size, a.pas, compiled=a.compile).items():
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.calls):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / a.calls
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(a.calls):
            step()
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(ev.name[:90], [0, 0.0])
            r[0] += 1
            r[1] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    total = sum(r[1] for r in rows.values()) / a.calls
    print(f"\n{name}: wall {wall * 1e6:.0f} us / block, kernels {total:.0f} us / block "
          f"({sum(r[0] for r in rows.values()) / a.calls:.0f} launches)")
    print("| kernel | per block | us / block |\n|---|---|---|")
    for k, (n, us) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"| {k} | {n / a.calls:.0f} | {us / a.calls:.1f} |")
    if a.host:
        print("\n| operator (self CPU time) | per block | us / block |\n|---|---|---|")
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:a.top]:
            print(f"| {e.key[:90]} | {e.count / a.calls:.1f} | {e.self_cpu_time_total / a.calls:.1f} |")
