"""H200: where a decoder block's device time goes, kernel by kernel, for warpsched's block and torch's
(``bench/model_block.py``'s block), under ``torch.profiler``: one table per side of the kernels by total
device time over ``--calls`` calls in each of ``--rounds`` rounds, the sides alternating (name, count per
block, µs per block), then the device total and the wall time per block. ``--compile``: the block under
``torch.compile``; ``--host``: also the operators by self CPU time per block (where a host-bound block's time
goes: ops, launches, the compiled graph's own call); ``--gemms``: also each GEMM shape's device time per block,
warpsched against torch (which GEMM of a device-bound block is behind cuBLAS).

    python3 tools/block_kernel_profile.py [--size decode|prefill|training] [--pass forward|forward+backward]
                                          [--calls 10] [--rounds 2] [--top 15] [--compile] [--host]
                                          [--gemms]
"""
import argparse
import os
import statistics
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
ap.add_argument("--rounds", type=int, default=2, help="rounds of both sides, alternating (the order reversed every "
                "other round)")
ap.add_argument("--compile", action="store_true", help="the block under torch.compile")
ap.add_argument("--host", action="store_true", help="also the operators by self CPU time per block")
ap.add_argument("--gemms", action="store_true", help="also every GEMM by its M x N x K, device time per block, "
                "warpsched against torch (the GEMM ops' recorded input shapes)")
a = ap.parse_args()

from model_block import profiled_steps  # noqa: E402

print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), a.size, a.pas,
      "compiled" if a.compile else "eager", flush=True)
activities = [torch.profiler.ProfilerActivity.CUDA] + ([torch.profiler.ProfilerActivity.CPU]
                                                      if a.host or a.gemms else [])
GEMM_OPS = {"warpsched_native::gemm", "warpsched::gemm", "warpsched::linear", "aten::mm", "aten::addmm"}
gemms = {}  # side -> {"MxNxK": (calls per block, us per block)}


def device_us(event):
    """An event's device time (the attribute's name before torch 2.4: cuda_time_total)."""
    return event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total


def mnk(op, shapes):
    """M x N x K of a GEMM op's recorded input shapes: (.., K) x (N, K) for the linear-shaped ops (warpsched's;
    the weight may be a transposed view, its shape is (N, K) either way), (M, K) x (K, N) for aten's."""
    a, b = shapes[0], shapes[1]
    m = 1
    for d in a[:-1]:
        m *= d
    n = b[0] if op.startswith("warpsched") else b[-1]
    return f"{m}x{n}x{a[-1]}"


steps = profiled_steps(a.size, a.pas, compiled=a.compile)
walls = {name: [] for name in steps}
kernels = {name: {} for name in steps}  # side -> {kernel name: [count, device us]} over every round
host_ops = {name: {} for name in steps}  # side -> {operator: [count, self CPU us]}
for name, step in steps.items():  # warm (a compiled side compiles here)
    for _ in range(3):
        step()
torch.cuda.synchronize()
for rnd in range(a.rounds):  # the sides alternate, the order reversed every other round: a GPU that heats up
    # (and clocks down under its power limit) over a run slows no side more than the other
    for name in (list(steps) if rnd % 2 == 0 else list(steps)[::-1]):
        step = steps[name]
        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.calls):
            step()
        torch.cuda.synchronize()
        walls[name].append((time.perf_counter() - t0) / a.calls)
        with torch.profiler.profile(activities=activities, record_shapes=a.gemms) as prof:
            for _ in range(a.calls):
                step()
            torch.cuda.synchronize()
        rows = kernels[name]
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                r = rows.setdefault(ev.name[:90], [0, 0.0])
                r[0] += 1
                r[1] += device_us(ev)
        if a.gemms:
            side = gemms.setdefault(name, {})
            for e in prof.key_averages(group_by_input_shape=True):
                if e.key in GEMM_OPS and len(e.input_shapes) >= 2 and all(e.input_shapes[:2]):
                    n, us = side.get(mnk(e.key, e.input_shapes), (0, 0.0))
                    dev = device_us(e)
                    side[mnk(e.key, e.input_shapes)] = (n + e.count / a.calls / a.rounds,
                                                        us + dev / a.calls / a.rounds)
        if a.host:
            for e in prof.key_averages():
                r = host_ops[name].setdefault(e.key[:90], [0, 0.0])
                r[0] += e.count
                r[1] += e.self_cpu_time_total

per_block = a.calls * a.rounds
for name in steps:
    rows = kernels[name]
    total = sum(r[1] for r in rows.values()) / per_block
    print(f"\n{name}: wall {statistics.median(walls[name]) * 1e6:.0f} us / block (median of {a.rounds} rounds), "
          f"kernels {total:.0f} us / block ({sum(r[0] for r in rows.values()) / per_block:.0f} launches)")
    print("| kernel | per block | us / block |\n|---|---|---|")
    for k, (n, us) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"| {k} | {n / per_block:.0f} | {us / per_block:.1f} |")
    if a.host:
        print("\n| operator (self CPU time) | per block | us / block |\n|---|---|---|")
        for k, (n, us) in sorted(host_ops[name].items(), key=lambda kv: -kv[1][1])[:a.top]:
            print(f"| {k} | {n / per_block:.1f} | {us / per_block:.1f} |")

if a.gemms:
    ws, th = gemms.get("warpsched", {}), gemms.get("torch", {})
    print("\n| GEMM M x N x K | warpsched calls / us per block | torch calls / us per block | torch / warpsched |")
    print("|---|---|---|---|")
    for key in sorted(set(ws) | set(th), key=lambda k: -max(ws.get(k, (0, 0))[1], th.get(k, (0, 0))[1])):
        (wn, wus), (tn, tus) = ws.get(key, (0, 0.0)), th.get(key, (0, 0.0))
        ratio = f"{tus / wus:.3f}" if wus and tus and wn == tn else "-"
        print(f"| {key} | {wn:.0f} / {wus:.1f} | {tn:.0f} / {tus:.1f} | {ratio} |")
