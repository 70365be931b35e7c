"""H200: what a decode-sized op costs a model in forward + backward (``torch.autograd.grad`` of its output for
its inputs and weights), warpsched's and torch's side by side, host issue / wall µs per call; then the decode
block's forward + backward (bench/model_block.py's) with autograd's device threads on and off
(``torch.autograd.set_multithreading_enabled``): how much of a block's backward is the hand-over of each
Python backward to the engine's CUDA thread and back.

    python3 tools/backward_host_ops.py [--calls 200]

Ops: ``linear`` (16 x 4096 by a 6144 x 4096 weight), ``linear x2`` (two in a row: the second's backward feeds
the first's), ``swiglu`` (16 x 4096 by the 28672 x 4096 gate / up weight; warpsched's interleaved, torch's
``silu(gate) * up``), ``attention`` (1 x 32 / 8 heads x 16 queries, head dim 128, causal).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _eager import per_call_us  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--calls", type=int, default=200)
a = ap.parse_args()
print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)

import model_block as mb  # noqa: E402
import warpsched.nn as wnn  # noqa: E402
import warpsched.nn.functional as wf  # noqa: E402
from warpsched import ops  # noqa: E402

bf = torch.bfloat16


def leaf(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(bf).requires_grad_()


x = leaf(1, 16, 4096)
w1, w2 = leaf(6144, 4096, scale=1 / 64), leaf(4096, 6144, scale=1 / 78)
wgu = leaf(28672, 4096, scale=1 / 64)
wgu_i = ops.interleave_gate_up(*wgu.detach().chunk(2, dim=0))[0].requires_grad_()
q, k, v = leaf(1, 32, 16, 128), leaf(1, 8, 16, 128), leaf(1, 8, 16, 128)


def grad_of(f, *inputs):
    out = f(*inputs)
    return lambda: torch.autograd.grad(f(*inputs), inputs, torch.ones_like(out))


def swiglu_torch(x, w):
    g, u = F.linear(x, w).chunk(2, dim=-1)
    return F.silu(g) * u


rows = {
    "linear": (grad_of(wf.linear, x, w1), grad_of(F.linear, x, w1)),
    "linear x2": (grad_of(lambda x, a, b: wf.linear(wf.linear(x, a), b), x, w1, w2),
                  grad_of(lambda x, a, b: F.linear(F.linear(x, a), b), x, w1, w2)),
    "swiglu": (grad_of(lambda x, w: wf.linear(x, w, activation="swiglu"), x, wgu_i), grad_of(swiglu_torch, x, wgu)),
    "attention": (grad_of(lambda q, k, v: wnn.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v),
                  grad_of(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                          q, k, v)),
}
print("| op (forward + backward) | warpsched issue / wall (us) | torch issue / wall (us) |")
print("|---|---|---|")
for name, (ours, theirs) in rows.items():
    cells = ["%.0f / %.0f" % per_call_us(torch, f, a.calls) for f in (ours, theirs)]
    print(f"| {name} | " + " | ".join(cells) + " |", flush=True)

steps = mb.profiled_steps("decode", "forward+backward")
print("\n| decode block, forward + backward | warpsched issue / wall (us) | torch issue / wall (us) |")
print("|---|---|---|")
for threads in (True, False):
    torch.autograd.set_multithreading_enabled(threads)
    cells = ["%.0f / %.0f" % per_call_us(torch, steps[s], a.calls // 2) for s in ("warpsched", "torch")]
    print(f"| autograd device threads {'on' if threads else 'off'} | " + " | ".join(cells) + " |", flush=True)
torch.autograd.set_multithreading_enabled(True)
