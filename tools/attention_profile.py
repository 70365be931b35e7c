"""One launch each of warpsched's FlashAttention configurations, of torch SDPA (cuDNN) and of
FlashAttention-4's forward (``--fa4``, when ``flash_attn.cute`` is installed) on one shape, between
cudaProfilerStart / Stop, for ``ncu --profile-from-start off``:

  ncu --profile-from-start off --section SpeedOfLight \\
      --section WarpStateStats --section SchedulerStats --section Occupancy \\
      python3 tools/attention_profile.py --shape 16x16x1024 --dim 64 --causal \\
      --variants "ovl:q_stages=2;tma_store_o=1;o_buffer=1;causal_pairs=1;unit_overlap=1"

The kernels run in this order: the default (``ops.attention``'s options), each variant, cuDNN, FA4.
Every kernel is launched (and compiled) once before the profiled range. Where the SASS spends its
instructions and stalls (what found the doubled exp2, the PRMT-packed P and the hoisted P V wait at
head dim 256, docs/attention.md "Head dim 256"):

  ncu --profile-from-start off --clock-control none --set full -o fwd \
      python3 tools/attention_profile.py --shape 4x16x4096 --dim 256 --no-cudnn --fa4
  ncu -i fwd.ncu-rep --page source --csv --print-source sass > fwd_sass.csv
  python3 tools/ncu_sass_summary.py fwd_sass.csv

``--varlen N`` profiles the packed forward instead, on batch N of bench/attention_varlen.py (its lengths, heads
and head dim; ``--shape`` / ``--dim`` / ``--causal`` are ignored): ``ops.attention_varlen``'s default, each
variant's options over ``varlen.varlen_options``, and with ``--fa4`` FA4's ``flash_attn_varlen_func``, e.g.

  ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \
      python3 tools/attention_profile.py --varlen 3 --variants "dyn:dynamic_units=1" --fa4
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))  # bench/: timing helpers, sweep configurations

from attention_correctness import parse_variants  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="16x16x1024", help="BxHxS")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--variants", default="")
    ap.add_argument("--no-cudnn", action="store_true")
    ap.add_argument("--fa4", action="store_true", help="also FlashAttention-4's forward (flash_attn.cute)")
    ap.add_argument("--varlen", type=int, default=None, help="the packed forward on bench/attention_varlen.py's "
                                                             "batch N (no cuDNN side)")
    args = ap.parse_args()
    if args.varlen is not None:
        return profile(varlen_launches(args.varlen, args.variants, args.fa4))
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from warpsched.kernels.attention import host as att

    B, H, S = (int(x) for x in args.shape.split("x"))
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, args.dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    launches = [("default", att.prepare(q, k, v, causal=args.causal)[0])]
    for name, options in parse_variants(args.variants).items():
        launches.append((name, att.prepare(q, k, v, causal=args.causal, **options)[0]))

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

    if not args.no_cudnn:
        launches.append(("cudnn", cudnn))
    if args.fa4:
        from flash_attn.cute import flash_attn_func

        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        launches.append(("fa4", lambda: flash_attn_func(qt, kt, vt, causal=args.causal)))
    profile(launches)


def varlen_launches(index, variants, with_fa4):
    """(name, launch) pairs for the packed forward on batch ``index`` of bench/attention_varlen.py."""
    import torch
    from attention_varlen import BATCHES, _offsets, for_dim, variants as parse_varlen_variants

    from warpsched import ops
    from warpsched.kernels.attention import varlen

    name, lengths, H, Hk, D, causal = BATCHES[index]
    print(f"batch {name}: H/Hk {H}/{Hk}, D {D}, causal {causal}", flush=True)
    torch.manual_seed(0)
    total, top = sum(lengths), max(lengths)
    cu = _offsets(lengths)
    q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    packed = varlen.varlen_options(D, causal, top, H // Hk)
    launches = [("default", lambda: ops.attention_varlen(q, k, v, cu, cu, top, top, causal=causal))]
    for n, opts in for_dim(parse_varlen_variants(variants), D).items():  # name@D: at head dim D only, as the probes
        chosen = dict(packed, **opts)
        launches.append((n, lambda chosen=chosen: varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal,
                                                                          options=chosen)))
    if with_fa4:
        from flash_attn.cute import flash_attn_varlen_func

        launches.append(("fa4", lambda: flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                               max_seqlen_q=top, max_seqlen_k=top, causal=causal)))
    return launches


def profile(launches):
    """Each launch twice (compile, warm up), then once each between cudaProfilerStart / Stop."""
    import torch

    for _, fn in launches:  # compile and warm up outside the profiled range
        fn()
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, fn in launches:
        print(f"profiled: {name}", flush=True)
        fn()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
