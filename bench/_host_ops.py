"""The per-op host-overhead table of bench/model_block.py (and tools/grad_host_ops.py): one decode-sized op
after another as a model calls it, warpsched's and torch's, with grad mode off and on: the host's issue time
per call (no synchronization between calls) and the wall time per call (synchronized at the end), µs.

Rows: ``linear`` (16 x 4096 by a 6144 x 4096 weight), ``linear+silu``, ``attention`` (1 x 32 / 8 heads x 16
queries, head dim 128, causal). Columns: no_grad; grad (inputs and weights require grad: the forward saves
what its backward needs); grad with the weights detached (only x requires grad)."""
from __future__ import annotations

from _eager import per_call_us


def host_table(calls=300):
    """Print the table (markdown)."""
    import torch
    import torch.nn.functional as F

    import warpsched.nn as wnn
    import warpsched.nn.functional as wf

    bf = torch.bfloat16
    x = torch.randn(1, 16, 4096, device="cuda", dtype=bf)
    w = (torch.randn(6144, 4096, device="cuda") / 64).to(bf)
    q = torch.randn(1, 32, 16, 128, device="cuda", dtype=bf)
    k, v = (torch.randn(1, 8, 16, 128, device="cuda", dtype=bf) for _ in range(2))
    ops = {
        "linear": (lambda x, w: wf.linear(x, w), lambda x, w: F.linear(x, w), (x, w)),
        "linear+silu": (lambda x, w: wf.linear(x, w, activation="silu"), lambda x, w: F.silu(F.linear(x, w)),
                        (x, w)),
        "attention": (lambda q, k, v: wnn.scaled_dot_product_attention(q, k, v, is_causal=True),
                      lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                      (q, k, v)),
    }
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
                    issue, wall = per_call_us(torch, lambda: f(*xs), calls)
                cells.append(f"{issue:.0f} / {wall:.0f}")
            print(f"| {name} | {side} | " + " | ".join(cells) + " |", flush=True)
