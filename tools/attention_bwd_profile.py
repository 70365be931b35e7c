"""One launch each of warpsched's attention backward variants, of torch SDPA's cuDNN backward and of
FlashAttention-4's backward (when installed), on one shape, between cudaProfilerStart / Stop, for
``ncu --profile-from-start off`` (where the backward's time goes: tensor pipe, stalls, DRAM / L2 traffic
of the dQ reduce-adds):

  ncu --profile-from-start off --clock-control none --set full -o bwd \\
      python3 tools/attention_bwd_profile.py --shape 8x32x2048 --dim 128 --causal --variants default --no-cudnn
  ncu -i bwd.ncu-rep --page source --csv --print-source sass > sass.csv   # stall samples per instruction

Every kernel runs once before the profiled range (compiles, autotuners and caches warm). ``--variants``
picks ours by name (``default``: the call's default options); ``--options k=v,...`` adds one more (those options
over the default ones, e.g. ``dq_finish=1``).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

VARIANTS = {64: {"default": {}, "plain": {"tma_stats": False}, "order": {"wg_order": True}},
            128: {"default": {}, "sds": {"shared_ds": True}, "order": {"wg_order": True},
                  "sds+order": {"shared_ds": True, "wg_order": True}}}


def fa4_backward(q, k, v, dout, causal):
    """FlashAttention-4's backward of (B, H, S, D) inputs as a call (its forward run once here, in its (B, S, H, D)
    layout): one pre-pass, its backward kernel and the dQ post-pass per call. Raises ImportError without it."""
    import torch
    from flash_attn.cute import flash_attn_func

    xt = tuple(t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    res = flash_attn_func(*xt, causal=causal)
    o4, dot = (res[0] if isinstance(res, tuple) else res), dout.transpose(1, 2).contiguous()
    return lambda: torch.autograd.grad(o4, xt, dot, retain_graph=True)


def parse_options(text):
    """``k=v,...`` -> kernel options (``1`` / ``true`` / ``0`` / ``false`` as booleans, digits as ints)."""
    out = {}
    for item in filter(None, text.split(",")):
        k, _, x = item.partition("=")
        low = x.lower()
        out[k] = low in ("1", "true") if low in ("0", "1", "true", "false") else int(x) if x.isdigit() else x
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8x32x2048", help="BxHxS")
    ap.add_argument("--dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--variants", help="comma-separated VARIANTS names (default: all for the head dim)")
    ap.add_argument("--options", help="one more of ours: kernel options k=v,... over the default ones")
    ap.add_argument("--no-cudnn", action="store_true")
    ap.add_argument("--no-fa4", action="store_true")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from warpsched import ops
    from warpsched.kernels.attention import backward_host as bwd

    B, H, S = (int(x) for x in a.shape.split("x"))
    q, k, v, dout = (torch.randn(B, H, S, a.dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = ops.attention(q, k, v, causal=a.causal, return_lse=True)
    runs = {}
    ours = {n: o for n, o in VARIANTS[a.dim].items() if not a.variants or n in a.variants.split(",")}
    if a.options:  # on top of the call's default options, as the benchmarks' variants are
        ours[a.options] = dict(bwd.default_options(a.dim), **parse_options(a.options))
    for name, options in ours.items():
        launch, dq_acc, _, _ = bwd.prepare_backward(q, k, v, out, dout, lse, causal=a.causal, **options)
        runs[f"warpsched {name}"] = launch
    if not a.no_cudnn:
        x = tuple(t.clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(*x, is_causal=a.causal)
        runs["cuDNN"] = lambda: torch.autograd.grad(o, x, dout, retain_graph=True)
    try:
        if a.no_fa4:
            raise ImportError("--no-fa4")
        runs["FA4"] = fa4_backward(q, k, v, dout, a.causal)
    except Exception as e:  # noqa: BLE001
        print(f"FA4 unavailable: {type(e).__name__}: {e}")
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    print("profiled, in order:", ", ".join(runs), flush=True)
    torch.cuda.cudart().cudaProfilerStart()
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
