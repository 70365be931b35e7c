"""Where one attention backward call's device time goes: torch.profiler's per-kernel device time for
``warpsched.ops.attention_backward`` (pre-pass, kernel, dQ conversion) and for FlashAttention-4's backward
(``flash_attn.cute``: pre-pass, kernel, post-pass) when installed, averaged over 5 calls after 3 warm-ups.

    python3 tools/attention_bwd_breakdown.py [--shapes 4x16x4096x128,8x32x2048x128c,...]

A shape is BxHxSxD, with a trailing ``c`` for causal. Fresh random bf16 inputs; our forward's O and LSE.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

DEFAULT = "4x16x4096x128,8x32x2048x128c,4x16x4096x64"
CALLS = 5


def table(torch, prof, label):
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            row = rows.setdefault(e.name[:90], [0, 0.0])
            row[0] += 1
            row[1] += e.device_time_total
    print(f"--- {label}: {sum(r[1] for r in rows.values()) / CALLS:.1f} us per call")
    for name, (count, total) in sorted(rows.items(), key=lambda x: -x[1][1]):
        print(f"  {total / CALLS:9.1f} us  x{count // CALLS:<3d} {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT)
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from warpsched import ops
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # noqa: BLE001
        flash_attn_func = None
        print(f"FA4 unavailable: {type(e).__name__}: {e}")
    for shape in a.shapes.split(","):
        causal = shape.endswith("c")
        B, H, S, D = (int(x) for x in shape.rstrip("c").split("x"))
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        sides = {"warpsched": lambda: ops.attention_backward(q, k, v, out, do, lse, causal=causal)}
        if flash_attn_func is not None:
            xt = tuple(t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
            res = flash_attn_func(*xt, causal=causal)
            o4, dot = (res[0] if isinstance(res, tuple) else res), do.transpose(1, 2).contiguous()
            sides["FA4"] = lambda o4=o4, xt=xt, dot=dot: torch.autograd.grad(o4, xt, dot, retain_graph=True)
        for name, fn in sides.items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(CALLS):
                    fn()
                torch.cuda.synchronize()
            table(torch, prof, f"{name} {B}x{H}x{S} d{D} {'causal' if causal else 'full'}")


if __name__ == "__main__":
    main()
