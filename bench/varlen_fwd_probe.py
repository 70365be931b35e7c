"""H200: where the packed (varlen) attention forward's time goes: the packed kernel beside the dense one on the
same work.

    python3 bench/varlen_fwd_probe.py [--rounds 3] [--variants "w3:wgs=3,ring_order=1"] [--ragged 0,2,3]

On batches of equal sequences (where packed and dense attention do the same work), device time (CUDA graphs,
triton's do_bench median, sides in a balanced order per round), us:

- ``ws``: ``ops.attention_varlen`` with its defaults (``varlen.varlen_options``: O stored from registers, live
  units); each ``--variants`` entry: kernel options over those;
- ``ws dense same``: the dense kernel (``attention.host.prepare``) with the static packed options
  (``varlen.static_varlen_options``) but for the varlen-only ``live_units`` (O from registers too): what the
  packing alone costs;
- ``ws dense``: the dense kernel with its tuned options (O by TMA through its own SMEM tile): what storing O from
  registers costs on top;
- FA4's ``flash_attn_varlen_func`` and ``flash_attn_func`` on the same sequences.

Before timing, the packed O is compared with the dense O (the same math: they must agree to bf16 rounding).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from _eager import fa4, round_order  # noqa: E402
from _graphs import graph_ms  # noqa: E402
from attention_varlen import BATCHES, _offsets, for_dim, variant_options, variants as parse_variants  # noqa: E402
from warpsched import ops  # noqa: E402
from warpsched.kernels.attention import host as att, varlen  # noqa: E402

# (name, lengths, H, Hk, D, causal): the long batches attention_varlen.py's table has furthest behind FA4, equalized
EQUAL = [("8 x 4096", [4096] * 8, 16, 4, 64, True), ("8 x 4096", [4096] * 8, 16, 4, 64, False),
         ("16 x 2048", [2048] * 16, 16, 16, 128, True), ("16 x 2048", [2048] * 16, 16, 16, 128, False),
         ("32 x 1024", [1024] * 32, 16, 16, 64, False)]


def probe(name, lengths, H, Hk, D, causal, variants, rounds):
    from triton.testing import do_bench

    total, top, B = sum(lengths), max(lengths), len(lengths)
    cu = _offsets(lengths)
    q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    equal = len(set(lengths)) == 1  # ragged batches (--ragged): no dense sides
    qb, kb, vb = ((t.view(B, top, -1, D).transpose(1, 2).contiguous() for t in (q, k, v)) if equal
                  else (None, None, None))
    sides = {"ws": lambda: ops.attention_varlen(q, k, v, cu, cu, top, top, causal=causal)}
    variant_out = {}  # each variant's O from its first call, into a NaN-poisoned buffer
    for name_, opts in for_dim(variants, D).items():
        chosen = variant_options(opts, D, causal, top, H // Hk)
        o_var = torch.full_like(q, float("nan"))
        try:  # compiled here, so that a refused form is named and left out rather than ending the run
            varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal, options=chosen, out=o_var)
        except Exception as e:  # noqa: BLE001 - a variant the kernel refuses (SMEM, an option it cannot serve)
            print(f"  {name_}: refused: {type(e).__name__}: {str(e)[:160]}", flush=True)
            continue
        variant_out[name_] = o_var
        sides[name_] = lambda chosen=chosen: varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal,
                                                                     options=chosen)
    if equal:
        same = {k_: v_ for k_, v_ in varlen.static_varlen_options(D, causal, top, H // Hk).items()
                if k_ not in ("live_units", "unit_in_regs", "dynamic_units", "load_fetches_units")}
        o_same = torch.empty_like(qb)
        launch_same, _, _ = att.prepare(qb, kb, vb, causal=causal, out=o_same, **same)
        sides["ws dense same"] = launch_same
        o_dense = torch.empty_like(qb)
        launch_dense, _, _ = att.prepare(qb, kb, vb, causal=causal, out=o_dense)
        sides["ws dense"] = launch_dense
    fv, fd = fa4("flash_attn_varlen_func"), fa4("flash_attn_func") if equal else None
    if fv is not None:
        sides["fa4"] = lambda: fv(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=top, max_seqlen_k=top,
                                  causal=causal)
    if fd is not None:
        qd, kd, vd = (t.view(B, top, -1, D) for t in (q, k, v))
        sides["fa4 dense"] = lambda: fd(qd, kd, vd, causal=causal)
    # packed and dense O on the same sequences: the same math, so they agree to bf16 rounding
    o_ref = sides["ws"]()
    errs, bad = [0.0, 0.0], []
    if equal:
        o_packed = o_ref.view(B, top, H, D).transpose(1, 2).float()
        launch_same()
        launch_dense()
        errs = [((o.float() - o_packed).abs().max() / o_packed.abs().max()).item() for o in (o_same, o_dense)]
        bad = [e for e in errs if not e < 1e-2]  # NaN fails too
    # each variant's O against the default's (bit for bit where it changes only where values are computed)
    for n, o_var in variant_out.items():
        e = ((o_var.float() - o_ref.float()).abs().max() / o_ref.float().abs().max()).item()
        print(f"  {n}: O " + ("bit for bit the default's" if torch.equal(o_var, o_ref) else
                             f"within {e:.1e} of the default's"), flush=True)
        bad += [] if e < 1e-2 else [n]
    times = {n: [] for n in sides}
    for r in range(rounds):
        for n in round_order(list(sides), r):
            times[n].append(graph_ms(torch, do_bench, sides[n], 0.5, 200) * 1e3)
    us = {n: statistics.median(t) for n, t in times.items()}
    pairs = sum(n * (n + 1) / 2 if causal else n * n for n in lengths)
    flops = 4 * D * H * pairs
    print(f"| {name} | {H}/{Hk} | {D} | {causal} | " + " | ".join(
        f"{n} {us[n]:.0f} ({flops / us[n] / 1e6:.0f} TF, {us[n] / us['ws']:.3f}x)" for n in sides)
        + (f" | dense vs packed O {errs[0]:.1e} / {errs[1]:.1e}" if equal else " | ragged (no dense sides)")
        + f"{' MISMATCH' if bad else ''} |", flush=True)
    return len(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="balanced timing rounds (the median is shown)")
    ap.add_argument("--variants", default="", help='packed forms: "name:opt=1,opt=0;name@64:..." over '
                    "varlen_options (ints; 0 / 1 for switches; @D: at head dim D only; "
                    "queued=1: over queued_varlen_options)")
    ap.add_argument("--batches", default="", help=f"comma-separated indices 0..{len(EQUAL) - 1} (default: all)")
    ap.add_argument("--ragged", default="", help="comma-separated indices into attention_varlen.py's batches, "
                    "timed without the dense sides")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    torch.manual_seed(0)
    pick = [EQUAL[int(i)] for i in args.batches.split(",")] if args.batches else ([] if args.ragged else EQUAL)
    pick += [BATCHES[int(i)] for i in args.ragged.split(",") if i]
    print("device us per call (TFLOP/s over visible pairs, time / the packed default's)")
    bad = sum(probe(*batch, parse_variants(args.variants), args.rounds) for batch in pick)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
