"""H200: where a compiled decoder block's host time goes, warpsched's side against torch's (bench/model_block.py's
block under ``torch.compile``): per side, the wall time per block (alternating rounds), then one profiled loop's
operators by self CPU time per block and its kernels (count and device µs per block).

    python3 tools/compiled_block_profile.py [--size decode] [--pass forward|forward+backward] [--calls 20] [--top 20]
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))  # bench/: model_block, _eager

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--size", default="decode")
ap.add_argument("--pass", dest="pas", default="forward")
ap.add_argument("--calls", type=int, default=20)
ap.add_argument("--top", type=int, default=20)
a = ap.parse_args()

import model_block as mb  # noqa: E402
from _eager import alternate  # noqa: E402

print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), a.size, a.pas, flush=True)
B, S = mb.SIZES[a.size]
p = mb.params()
pf = mb.fused_mlp_params(p)
x = torch.randn(B, S, mb.HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn_like(x)
import warpsched.nn.functional as wf  # noqa: E402

steps = {}
for name, (lin, att, pp) in {"warpsched": (wf.linear, mb.warpsched_bshd, pf), "torch": (mb.F.linear, mb.sdpa_bshd, p)}.items():
    torch._dynamo.reset()
    f = torch.compile(lambda x, lin=lin, att=att, pp=pp: mb.block(x, pp, lin, att))
    if a.pas == "forward":
        steps[name] = (lambda f=f: mb._no_grad(f, x.detach()))
    else:
        steps[name] = (lambda f=f, pp=pp: torch.autograd.grad(f(x), [x] + list(pp.values()), dy))
    for _ in range(3):
        steps[name]()
torch.cuda.synchronize()
med = alternate(torch, steps, rounds=3, iters=a.calls)
print("wall per block (us): " + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in med.items()), flush=True)
for name, step in steps.items():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(a.calls):
            step()
        torch.cuda.synchronize()
    ev = prof.key_averages()
    print(f"\n== {name}: operators by self CPU time (us per block, calls per block)", flush=True)
    for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:a.top]:
        print(f"  {e.self_cpu_time_total / a.calls:8.1f}  {e.count / a.calls:5.1f}  {e.key[:100]}")
    kern = [e for e in ev if (getattr(e, "self_device_time_total", 0) or 0) > 0]
    total = sum(e.self_device_time_total for e in kern) / a.calls
    print(f"== {name}: device time {total:.0f} us per block; its kernels (us per block, launches per block):")
    for e in sorted(kern, key=lambda e: -e.self_device_time_total)[:a.top]:
        print(f"  {e.self_device_time_total / a.calls:8.1f}  {e.count / a.calls:5.1f}  {e.key[:100]}", flush=True)
