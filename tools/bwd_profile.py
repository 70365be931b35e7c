"""One backward launch of warpsched's attention kernel and one of FlashAttention-4's, for Nsight Compute:
each is warmed up first, then run once between cudaProfilerStart / Stop, so
``ncu --profile-from-start off`` sees only those launches (ours: the delta pre-pass and the kernel; FA4's:
its pre-pass, kernel and dQ conversion).

    ncu --profile-from-start off --clock-control none --set full -o bwd python3 tools/bwd_profile.py
    ncu -i bwd.ncu-rep --page details > details.txt

``--configs B,H,S,D,causal;...`` picks the shapes (bf16, H = H_kv); ``--options k=v,...`` passes kernel
options to ours (default: the call's defaults). Needs a GPU, torch and (for FA4's side) flash_attn.cute.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))


def parse_configs(text):
    out = []
    for item in text.split(";"):
        b, h, s, d, c = item.split(",")
        out.append((int(b), int(h), int(s), int(d), c.strip().lower() in ("1", "true", "causal", "yes")))
    return out


def parse_options(text):
    opts = {}
    for item in filter(None, (text or "").split(",")):
        k, _, x = item.partition("=")
        opts[k] = x.lower() in ("1", "true", "yes") if x.lower() in ("0", "1", "true", "false", "yes", "no") else x
    return opts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="8,32,2048,128,causal;4,16,4096,64,full")
    ap.add_argument("--options", default="")
    ap.add_argument("--no-fa4", action="store_true")
    a = ap.parse_args()

    import torch

    from _eager import fa4
    from warpsched import ops
    from warpsched.kernels.attention import backward_host as bwd

    fa4_func = None if a.no_fa4 else fa4()
    runs = []
    for B, H, S, D, causal in parse_configs(a.configs):
        torch.manual_seed(0)
        q, k, v, dout = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        launch, dq_acc, _, _ = bwd.prepare_backward(q, k, v, out, dout, lse, causal=causal,
                                                    **parse_options(a.options))
        runs.append((f"ws {B}x{H}x{S} d{D} {'causal' if causal else 'full'}", launch))
        if fa4_func is not None:
            qt, kt, vt = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
            res = fa4_func(qt, kt, vt, causal=causal)
            o4 = res[0] if isinstance(res, tuple) else res
            dot = dout.transpose(1, 2).contiguous()
            runs.append((f"FA4 {B}x{H}x{S} d{D}",
                         lambda o4=o4, x=(qt, kt, vt), dot=dot: torch.autograd.grad(o4, x, dot, retain_graph=True)))
    for _, fn in runs:  # warm-up: compiles and caches outside the profiled range
        fn()
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, fn in runs:
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled:", ", ".join(n for n, _ in runs), flush=True)


if __name__ == "__main__":
    main()
