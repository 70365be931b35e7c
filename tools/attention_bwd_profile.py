"""One launch each of warpsched's attention backward variants, of torch SDPA's cuDNN backward and of
FlashAttention-4's backward (when installed), on one shape, between cudaProfilerStart / Stop, for
``ncu --profile-from-start off`` (where the backward's time goes: tensor pipe, stalls, DRAM / L2 traffic
of the dQ reduce-adds):

  ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \\
      --section MemoryWorkloadAnalysis --section Occupancy \\
      python3 tools/attention_bwd_profile.py --shape 8x32x2048 --dim 128 --causal

Every kernel runs once before the profiled range (compiles, autotuners and caches warm).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

VARIANTS = {64: {"default": {}, "order": {"wg_order": True}},
            128: {"default": {}, "sds": {"shared_ds": True}, "order": {"wg_order": True},
                  "sds+order": {"shared_ds": True, "wg_order": True}}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8x32x2048", help="BxHxS")
    ap.add_argument("--dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--causal", action="store_true")
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
    for name, options in VARIANTS[a.dim].items():
        launch, dq_acc, _, _ = bwd.prepare_backward(q, k, v, out, dout, lse, causal=a.causal, **options)
        runs[f"warpsched {name}"] = launch
    x = tuple(t.clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(*x, is_causal=a.causal)
    runs["cuDNN"] = lambda: torch.autograd.grad(o, x, dout, retain_graph=True)
    try:
        from flash_attn.cute import flash_attn_func

        xt = tuple(t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
        res = flash_attn_func(*xt, causal=a.causal)
        o4, dot = (res[0] if isinstance(res, tuple) else res), dout.transpose(1, 2).contiguous()
        runs["FA4"] = lambda: torch.autograd.grad(o4, xt, dot, retain_graph=True)
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
