"""H200: where the GPU waits during a decoder block (``bench/model_block.py``'s), side by side for warpsched
and torch: one block under ``torch.profiler`` (CPU + CUDA, Python stacks), its kernels in time order, and the
largest idle gaps between them. For each gap: the kernels on either side, whether the next kernel's launch
call was made only after the previous kernel had ended (the host was late: a slow Python path or a host
synchronization) or earlier (the GPU had the launch and waited on something else), and the Python frames
(innermost last) that issued that launch, plus the longest host calls made inside the gap.

    python3 tools/block_gaps.py [--size prefill] [--pass forward+backward] [--gaps 12] [--side warpsched,torch]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))  # bench/: model_block

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--size", default="prefill")
ap.add_argument("--pass", dest="pas", default="forward+backward")
ap.add_argument("--gaps", type=int, default=12)
ap.add_argument("--side", default="warpsched,torch")
a = ap.parse_args()

from model_block import profiled_steps  # noqa: E402

STEPS = profiled_steps(a.size, a.pas)
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaMemsetAsync",
            "cudaMemcpyAsync")
print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), a.size, a.pas, flush=True)


def python_frames(events, tid, t):
    """The python_function events on thread ``tid`` that enclose time ``t``, outermost first."""
    hits = [e for e in events if e.get("tid") == tid and e["ts"] <= t <= e["ts"] + e.get("dur", 0)]
    return [e["name"] for e in sorted(hits, key=lambda e: e["ts"])]


for name in a.side.split(","):
    step = STEPS[name]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                                with_stack=True) as prof:
        step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")), key=lambda e: e["ts"])
    launch_of = {e["args"].get("correlation"): e for e in events
                 if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCHES}
    pyf = [e for e in events if e.get("cat") == "python_function"]
    busy = sum(k["dur"] for k in kernels)
    span = kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]
    print(f"\n{name}: {len(kernels)} kernels, {busy:.0f} us busy over {span:.0f} us from the first to the last "
          f"({span - busy:.0f} us idle)", flush=True)
    runtime = {}
    for e in events:
        if e.get("cat") == "cuda_runtime" and e["name"] not in LAUNCHES:
            r = runtime.setdefault(e["name"], [0, 0.0])
            r[0] += 1
            r[1] += e.get("dur", 0)
    print("  other CUDA runtime calls (count, us): " + ", ".join(
        f"{n} {c} / {d:.0f}" for n, (c, d) in sorted(runtime.items(), key=lambda kv: -kv[1][1])[:8]), flush=True)
    gaps = []
    for prev, nxt in zip(kernels, kernels[1:]):
        gap = nxt["ts"] - (prev["ts"] + prev["dur"])
        if gap > 0:
            gaps.append((gap, prev, nxt))
    for gap, prev, nxt in sorted(gaps, key=lambda g: -g[0])[:a.gaps]:
        end = prev["ts"] + prev["dur"]
        launch = launch_of.get(nxt["args"].get("correlation"))
        late = launch is not None and launch["ts"] > end
        print(f"- {gap:.0f} us idle: after {prev['name'][:60]} -> {nxt['name'][:60]}; the launch came "
              + ("?" if launch is None else f"{launch['ts'] - end:+.0f} us after the previous kernel ended"
                 + (" (host late)" if late else "")), flush=True)
        if launch is not None:
            frames = [f for f in python_frames(pyf, launch["tid"], launch["ts"]) if "site-packages/torch" not in f]
            print("    issued from: " + " > ".join(frames[-6:]), flush=True)
            inside = [e for e in pyf if e.get("tid") == launch["tid"] and end <= e["ts"] < launch["ts"]]
            for e in sorted(inside, key=lambda e: -e.get("dur", 0))[:3]:
                print(f"    in the gap: {e.get('dur', 0):.0f} us {e['name'][:110]}", flush=True)
