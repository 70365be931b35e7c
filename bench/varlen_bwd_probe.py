"""H200: where the packed (varlen) attention backward's time goes, against FlashAttention-4's.

    python3 bench/varlen_bwd_probe.py [--rounds 3] [--batches 0,3] [--variants "live:live_units=1"]

For each batch of ``attention_varlen.py`` and two batches of equal sequences (where the packed kernel can be
set beside the dense one on the same work):

- the backward alone (dQ, dK, dV from the forward's O and LSE), eager, CUDA events over 10 back-to-back calls,
  sides alternating in rounds, median: warpsched's packed call (``ops.attention_varlen_backward``: pre-pass,
  kernel, dQ conversion), each ``--variants`` entry (kernel options over the packed defaults), FA4's backward
  through autograd (its forward outside the timing), and for the equal batches warpsched's and FA4's dense
  backward on the same sequences;
- the kernels of one warpsched call and of one FA4 backward under ``torch.profiler``, device time each.

Before timing, every variant's gradients are compared with the default's and the default's with FA4's.
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

from _eager import fa4  # noqa: E402
from attention_varlen import (BATCHES, _offsets, backward_calls, backward_variants_of, for_dim,  # noqa: E402
                             training_steps)
from warpsched import ops  # noqa: E402
from warpsched.kernels.attention.backward_host import default_options  # noqa: E402

UNIFORM = [("16 x 2048 (equal)", [2048] * 16, 16, 16, 128, True), ("8 x 4096 (equal)", [4096] * 8, 16, 4, 64, True)]


def event_us(fn, iters=10):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def kernels(fn, calls=3):
    """{kernel name: device us per call} of ``fn`` under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.key and not e.key.startswith("ProfilerStep"):
            out[e.key] = out.get(e.key, 0.0) + t / calls
    return out


def show_kernels(label, ks, top=6):
    total = sum(ks.values())
    items = sorted(ks.items(), key=lambda kv: -kv[1])[:top]
    print(f"  {label}: {total:.0f} us in kernels: " + "; ".join(f"{v:.0f} us {k[:70]}" for k, v in items),
          flush=True)


def probe(name, lengths, H, Hk, D, causal, variants, rounds, dense):
    flash_varlen, flash_dense = fa4("flash_attn_varlen_func"), fa4("flash_attn_func")
    total, top, B = sum(lengths), max(lengths), len(lengths)
    cu = _offsets(lengths)
    q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    out, lse = ops.attention_varlen(q, k, v, cu, cu, top, top, causal=causal, return_lse=True)
    variants = for_dim(variants, D)
    chosen = {"ws": None}
    for n, opts in variants.items():
        chosen[n] = dict(default_options(D, varlen=True), **opts)
    sides, grads, refused = backward_calls(q, k, v, out, dout, lse, cu, top, causal, chosen)
    for n, why in refused.items():
        print(f"  {n}: refused: {why[:160]}", flush=True)
    if flash_varlen is not None:
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o = flash_varlen(qq, kk, vv, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=top, max_seqlen_k=top,
                         causal=causal)
        o = o[0] if isinstance(o, tuple) else o

        def fa_bwd(o=o, qq=qq, kk=kk, vv=vv):
            return torch.autograd.grad(o, (qq, kk, vv), dout, retain_graph=True)
        grads["fa4"] = fa_bwd()
        sides["fa4"] = fa_bwd
    if dense:
        qd = q.view(B, top, H, D)
        kd, vd = (t.view(B, top, Hk, D) for t in (k, v))
        qb, kb, vb, dob = (t.transpose(1, 2).contiguous() for t in (qd, kd, vd, dout.view(B, top, H, D)))
        od, lsed = ops.attention(qb, kb, vb, causal=causal, return_lse=True)
        sides["ws dense"] = lambda: ops.attention_backward(qb, kb, vb, od, dob, lsed, causal=causal)
        if flash_dense is not None:
            qq, kk, vv = (t.detach().clone().requires_grad_() for t in (qd, kd, vd))
            o = flash_dense(qq, kk, vv, causal=causal)
            o = o[0] if isinstance(o, tuple) else o
            sides["fa4 dense"] = (lambda o=o, qq=qq, kk=kk, vv=vv:
                                  torch.autograd.grad(o, (qq, kk, vv), dout.view(B, top, H, D), retain_graph=True))
    errs = []
    for n in grads:
        if n != "ws":
            e = max(((g.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-2)).item()
                    for g, r in zip(grads[n], grads["ws"]))
            errs.append(f"{n} {e:.1e}{'' if e < 2e-2 else ' MISMATCH'}")
    times = {n: [] for n in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for n in order:
            times[n].append(event_us(sides[n]))
    us = {n: statistics.median(t) for n, t in times.items()}
    pairs = sum(n * (n + 1) / 2 if causal else n * n for n in lengths)
    flops = 2.5 * 4 * D * H * pairs
    print(f"| {name} | {H}/{Hk} | {D} | {causal} | " + " | ".join(
        f"{n} {us[n]:.0f} us ({flops / us[n] / 1e6:.0f} TF, {us['ws'] / us[n]:.3f}x)" for n in sides)
        + f" | {', '.join(errs)} |", flush=True)
    show_kernels("warpsched", kernels(sides["ws"]))
    if "fa4" in sides:
        show_kernels("FA4", kernels(sides["fa4"]))
    if "ws dense" in sides:
        show_kernels("warpsched dense", kernels(sides["ws dense"]))
    for n in variants:
        if n in sides:
            show_kernels(n, kernels(sides[n]), top=3)
    train_step(name, H, Hk, D, causal, q, k, v, cu, top, rounds)


def train_step(name, H, Hk, D, causal, q, k, v, cu, top, rounds):
    """Forward + backward through autograd, eager (host included), warpsched's nn.attention_varlen and FA4's
    flash_attn_varlen_func (``attention_varlen.training_steps``), alternating."""
    sides = training_steps(q, k, v, cu, top, causal, fa4("flash_attn_varlen_func"))
    times = {n: [] for n in sides}
    for r in range(rounds):
        for n in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            times[n].append(event_us(sides[n]))
    us = {n: statistics.median(t) for n, t in times.items()}
    print(f"  training step {name} {H}/{Hk} d{D} {'causal' if causal else 'full'}: ws {us['ws']:.0f} us, FA4 "
          f"{us.get('fa4', float('nan')):.0f} us, FA4 / ws {us.get('fa4', float('nan')) / us['ws']:.3f}x", flush=True)


def check_tables():
    """The device's SequenceOrderTable against its Python twin: the same entries, each sequence's together in
    head order, the sequences by key-block count (ties in any order)."""
    from warpsched.kernels.attention import live_units

    for lengths in ([5, 0, 1, 300, 129, 1], [700, 3, 700, 129, 2000, 0], [1] * 50, [4096, 64, 4095, 128, 129]):
        cu = _offsets(lengths)
        for heads in (1, 4):
            t = live_units.build_backward_table(cu, sum(lengths), 128, heads, max(lengths)).tolist()
            got = [live_units.decode_entry(t[2 + 2 * i], t[3 + 2 * i]) for i in range(t[0])]
            ref = live_units.reference_sequence_order(lengths, heads, 128)
            blocks = [-(-lengths[b] // 128) for b, _, _ in got]
            runs = [b for i, (b, _, _) in enumerate(got) if i == 0 or got[i - 1][0] != b]
            ok = (sorted(got) == sorted(ref) and blocks == sorted(blocks, reverse=True) and len(runs) == len(set(runs))
                  and all(got[i][1:] < got[i + 1][1:] for i in range(len(got) - 1) if got[i][0] == got[i + 1][0]))
            print(f"sequence-order table {lengths[:6]} heads {heads}: {t[0]} entries, "
                  f"{'equal to its twin' if ok else 'MISMATCH'}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (the median is shown)")
    ap.add_argument("--variants", default=os.environ.get("VARLEN_BWD_VARIANTS", ""),
                    help='more warpsched forms: "name:opt=1,opt=0;name@64:..." (kernel options over the packed '
                         'defaults; @D: at head dim D only)')
    ap.add_argument("--batches", default="", help="comma-separated indices into the batches (default: all), "
                    f"0..{len(BATCHES) - 1} attention_varlen.py's, then {len(BATCHES)}.. the equal ones")
    args = ap.parse_args()
    check_tables()
    variants = backward_variants_of(args.variants)
    print(f"{torch.cuda.get_device_name()} {torch.__version__}; packed defaults hd128 "
          f"{default_options(128, varlen=True)}, hd64 {default_options(64, varlen=True)}")
    print("the backward alone, eager, us per call (TFLOP/s at 2.5x the forward's visible pairs; ws / side)")
    chosen = {int(i) for i in args.batches.split(",") if i.strip()}
    for i, (name, lengths, H, Hk, D, causal) in enumerate(BATCHES + UNIFORM):
        if not chosen or i in chosen:
            probe(name, lengths, H, Hk, D, causal, variants, args.rounds, dense=i >= len(BATCHES))


if __name__ == "__main__":
    main()
