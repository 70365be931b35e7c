"""H200: one decode-sized op at a time, as a model calls it, with grad mode off and on: the host's issue
time per call (no synchronization between calls) and the wall time per call (synchronized at the end),
for warpsched's ``linear`` / attention and torch's, so a cost that only grad mode adds shows per op.

    python3 tools/grad_host_ops.py [--calls 300]

Rows: ``linear`` (16 x 4096 by a 6144 x 4096 weight), ``linear+silu``, ``attention`` (1 x 32 / 8 heads x 16
queries, head dim 128, causal). Columns per side: no_grad, grad (inputs and weights require grad; the forward
saves what its backward needs), grad with the weights detached (only x requires grad).
"""
import argparse
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--calls", type=int, default=300)
a = ap.parse_args()

import warpsched.nn as wnn  # noqa: E402
import warpsched.nn.functional as wf  # noqa: E402


def per_call(f):
    for _ in range(10):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.calls):
        f()
    issue = (time.perf_counter() - t0) / a.calls
    torch.cuda.synchronize()
    return issue * 1e6, (time.perf_counter() - t0) / a.calls * 1e6


dev = "cuda"
bf = torch.bfloat16
x = torch.randn(1, 16, 4096, device=dev, dtype=bf)
w = (torch.randn(6144, 4096, device=dev) / 64).to(bf)
q = torch.randn(1, 32, 16, 128, device=dev, dtype=bf)
k = torch.randn(1, 8, 16, 128, device=dev, dtype=bf)
v = torch.randn(1, 8, 16, 128, device=dev, dtype=bf)
ops = {
    "linear": (lambda x, w: wf.linear(x, w), lambda x, w: F.linear(x, w), (x, w)),
    "linear+silu": (lambda x, w: wf.linear(x, w, activation="silu"), lambda x, w: F.silu(F.linear(x, w)), (x, w)),
    "attention": (lambda q, k, v: wnn.scaled_dot_product_attention(q, k, v, is_causal=True),
                  lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), (q, k, v)),
}
print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
print("| op | side | no_grad issue / wall (us) | grad issue / wall | grad, weights detached issue / wall |")
print("|---|---|---|---|---|")
for name, (ours, theirs, args) in ops.items():
    for side, f in (("warpsched", ours), ("torch", theirs)):
        cells = []
        for mode in ("no_grad", "grad", "x only"):
            if mode == "no_grad":
                xs = args
            elif mode == "grad":
                xs = tuple(t.detach().requires_grad_() for t in args)
            else:
                xs = (args[0].detach().requires_grad_(),) + tuple(t.detach() for t in args[1:])
            with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
                i, wall = per_call(lambda: f(*xs))
            cells.append(f"{i:.0f} / {wall:.0f}")
        print(f"| {name} | {side} | " + " | ".join(cells) + " |", flush=True)
