"""H200: warpsched's attention forward over packed variable-length sequences (``ops.attention_varlen``,
kernels/attention/varlen.py): correctness against an fp64 reference, then time against FlashAttention-4's
``flash_attn_varlen_func`` and against warpsched on the same sequences padded to a (B, H, max_S, D) batch;
the backward (``warpsched.nn.attention_varlen``'s autograd) checked the same way and timed as a training step.

    python3 bench/attention_varlen.py [--rounds 3] [--no-time]
    WS_BWD_VARLEN_DEFAULTS=tma_stats=1 python3 bench/attention_varlen.py   # the packed backward with tma_stats
    VARLEN_PARTS=training python3 bench/attention_varlen.py                 # after correctness, one table only

Correctness: fresh random inputs, O and the LSE poisoned with NaN, an fp64 reference per sequence; O's max
error relative to max |ref| (bar 8e-3, bf16's rounding; 4e-3 for fp16) and the LSE's max abs error (bar
1e-2) over rows that see a key; rows that see none must give O = 0 and LSE = +inf. Batches with empty and
one-token sequences, S_q != S_k per sequence, GQA, causal, a window, softcap, a mask_mod that reads the
sequence index, hd 64 / 128 / 256, fp16. Time: device time (CUDA graphs of back-to-back launches, triton's
do_bench median, sides alternating in rounds), TFLOP/s over the visible (query, key) pairs. Gradients: dQ, dK,
dV against fp64 autograd, max error over max(max |ref|, 0.01) (bar 1e-2 bf16, 2e-3 fp16), and autograd's O must equal
``ops.attention_varlen``'s bit for bit.
"""
from __future__ import annotations

import math
import os
import random
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from _eager import alternate, check_then_time, fa4  # noqa: E402
from _graphs import graph_ms  # noqa: E402
from warpsched import nn as wnn  # noqa: E402
from warpsched import ops  # noqa: E402
from warpsched.kernels.attention import live_units, varlen  # noqa: E402

import _bwd_defaults  # noqa: E402  (WS_BWD_VARLEN_DEFAULTS: options on trial as defaults; parse_options)


def per_sequence_prefix(b, h, q, kv):  # sequence b: its first 50 * (b + 1) keys bidirectional, then causal
    return (kv < 50 * (b + 1)) | (kv <= q)


def _rand_lengths(seed, n, lo, hi):
    r = random.Random(seed)
    return [r.randrange(lo, hi) for _ in range(n)]


CASES = [  # name, lengths_q, lengths_k (None: the same), H, Hk, D, dtype, causal, window, softcap, mask_mod
    ("empty and one-token sequences", [5, 0, 1, 300, 129, 1], None, 16, 4, 128, torch.bfloat16, True, None, None, None),
    ("S_q != S_k per sequence", [5, 0, 1, 300, 129], [5, 7, 0, 300, 1000], 8, 8, 64, torch.bfloat16, False, None,
     None, None),
    ("8 random, GQA 32/8", _rand_lengths(0, 8, 1, 2000), None, 32, 8, 128, torch.bfloat16, True, None, None, None),
    ("hd256", _rand_lengths(1, 5, 1, 900), None, 8, 8, 256, torch.bfloat16, False, None, None, None),
    ("window (255, 0) + softcap 30", _rand_lengths(2, 6, 1, 1500), None, 8, 2, 128, torch.bfloat16, True,
     (255, 0), 30.0, None),
    ("mask_mod reading the sequence", _rand_lengths(3, 5, 1, 700), None, 4, 4, 128, torch.bfloat16, False, None,
     None, per_sequence_prefix),
    ("fp16, 50 one-token sequences", [1] * 50, None, 8, 8, 64, torch.float16, False, None, None, None),
    ("keys only in the last sequence", [3, 4, 5], [0, 0, 777], 4, 2, 128, torch.bfloat16, False, None, None, None),
]


def _offsets(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device="cuda")


def reference(q, k, v, lq, lk, causal, window, softcap, mask_mod, scale, dout=None):
    """fp64 O (total_q, H, D) and LSE (H, total_q), one sequence at a time; with ``dout`` also the fp64
    (dq, dk, dv) of sum(O * dout)."""
    H, Hk = q.shape[1], k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_(dout is not None) for t in (q, k, v))
    outs, lses, visible = [], [], []
    cq = ck = 0
    for b, (nq, nk) in enumerate(zip(lq, lk)):
        qs, ks, vs = q64[cq:cq + nq], k64[ck:ck + nk], v64[ck:ck + nk]
        ks, vs = (t.repeat_interleave(H // Hk, 1) for t in (ks, vs))
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(nq, device="cuda").view(nq, 1)
        ki = torch.arange(nk, device="cuda").view(1, nk)
        keep = torch.ones(nq, nk, dtype=torch.bool, device="cuda")
        if causal:
            keep &= ki <= qi
        if window is not None:
            keep &= (ki >= qi - window[0]) & (ki <= qi + window[1])
        if mask_mod is not None:
            keep &= mask_mod(b, None, qi, ki)
        s = s.masked_fill(~keep, float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, -1).nan_to_num(0.0), vs))
        lses.append(torch.logsumexp(s, -1))
        visible.append(keep.any(-1).expand(H, nq))
        cq, ck = cq + nq, ck + nk
    o = torch.cat(outs)
    grads = torch.autograd.grad(o, (q64, k64, v64), dout.double()) if dout is not None else None
    return o.detach(), torch.cat(lses, 1).detach(), torch.cat(visible, 1), grads


def err(a, ref, floor=1e-6):
    return ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(floor)).item()


def correctness():
    bad = 0
    print("| case | sequences (q lengths) | H/Hk | D | O err | LSE max abs err | rows without keys O = 0, LSE = +inf | "
          "dQ / dK / dV err (autograd) | live table, O = every block's | result |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, lq, lk, H, Hk, D, dtype, causal, window, softcap, mask_mod in CASES:
        lk = lk or lq
        q = torch.randn(sum(lq), H, D, device="cuda", dtype=dtype)
        k, v = (torch.randn(sum(lk), Hk, D, device="cuda", dtype=dtype) for _ in range(2))
        out = torch.full_like(q, float("nan"))
        lse = torch.full((H, sum(lq)), float("nan"), device="cuda")
        cu_q, cu_k = _offsets(lq), _offsets(lk)
        ops.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, out=out, lse=lse,
                             window_size=window, softcap=softcap, mask_mod=mask_mod)
        dout = torch.randn_like(q)
        ref, ref_lse, vis, ref_grads = reference(q, k, v, lq, lk, causal, window, softcap, mask_mod,
                                                 1 / math.sqrt(D), dout)
        o_err = err(out, ref)
        # the backward through warpsched.nn.attention_varlen's autograd
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o = wnn.attention_varlen(qq, kk, vv, cu_q, cu_k, max(lq), max(lk), causal=causal, window_size=window,
                                 softcap=softcap, mask_mod=mask_mod)
        grads = torch.autograd.grad(o, (qq, kk, vv), dout)
        # against max(|ref|, 0.01): one-token sequences have dQ = dK = 0 exactly (P = 1, so dS = P (dP - delta)
        # = 0), where the error relative to |ref| alone is rounding noise over fp64's 1e-16
        grad_errs = [err(g, r, floor=1e-2) for g, r in zip(grads, ref_grads)]
        bar = 1e-2 if dtype == torch.bfloat16 else 2e-3
        grads_ok = all(e == e and e <= bar for e in grad_errs) and torch.equal(o, out)
        # the live-unit table as the device wrote it, and the same O from every block of every sequence (the form
        # before the table: each unit's arithmetic is the same, only the order of the units differs)
        table_ok = all(live_units.build_table(cu_q, sum(lq), bm)[:2 + 2 * sum(-(-n // bm) for n in lq)].tolist()
                       == live_units.reference_table(lq, bm) for bm in (64, 128, 192))
        every_block = varlen.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, window_size=window,
                                           softcap=softcap, mask_mod=mask_mod,
                                           options=dict(varlen.static_varlen_options(D, causal, max(lq), H // Hk),
                                                        live_units=False))
        longest_first = varlen.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                             window_size=window, softcap=softcap, mask_mod=mask_mod,
                                             options=dict(varlen.static_varlen_options(D, causal, max(lq), H // Hk),
                                                          lpt_units=True))
        table_ok = table_ok and torch.equal(every_block, out) and torch.equal(longest_first, out)
        # VARLEN_VARIANTS' forms on the same inputs: each within the bar of the reference (bit for bit the
        # default's where a form changes only where values are computed, e.g. unit_in_regs)
        for vn, vopts in variants().items():
            chosen = variant_options(vopts, D, causal, max(lq), H // Hk)
            if not runs_at(chosen, D):
                continue
            o_var = varlen.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                            window_size=window, softcap=softcap, mask_mod=mask_mod, options=chosen)
            v_err = err(o_var, ref)
            table_ok = table_ok and v_err < (8e-3 if dtype == torch.bfloat16 else 4e-3)
            print(f"  variant {vn}: O " + ("bit for bit the default's" if torch.equal(o_var, out)
                                          else f"err {v_err:.2e}"), flush=True)
        for bm in (64, 192):  # the longest-first table: the same blocks, by level from the top
            levels = live_units.levels_for(max(lq), bm)
            got = live_units.build_table(cu_q, sum(lq), bm, causal, max(lq)).tolist()
            order, level = live_units.reference_levels(lq, bm, causal, levels)
            pairs = list(zip(got[2:2 + 2 * got[0]:2], got[3:2 + 2 * got[0]:2]))
            table_ok = (table_ok and got[0] == len(order) and sorted(pairs) == sorted(order)
                        and [level[p] for p in pairs] == [level[p] for p in order])
        lse_err = (lse.double() - ref_lse)[vis].abs().max().item()
        rows_vis = vis.transpose(0, 1)  # (total_q, H)
        empty_ok = bool((out[~rows_vis] == 0).all() and (lse[~vis] == float("inf")).all())
        ok = (o_err < (8e-3 if dtype == torch.bfloat16 else 4e-3) and lse_err < 1e-2 and empty_ok and grads_ok
              and table_ok and not out.isnan().any() and not lse.isnan().any())
        bad += not ok
        shown = str(lq) if len(lq) <= 6 else f"{len(lq)} of {min(lq)}..{max(lq)}"
        shown_grads = " / ".join(f"{e:.1e}" for e in grad_errs)
        print(f"| {name} | {shown} | {H}/{Hk} | {D} | {o_err:.2e} | {lse_err:.1e} | "
              f"{empty_ok if (~vis).any() else 'none'} | {shown_grads} | {table_ok} | {'PASS' if ok else 'FAIL'} |",
              flush=True)
    print(f"correctness: {len(CASES) - bad}/{len(CASES)} PASS", flush=True)
    return bad


BATCHES = [  # name, lengths, H, Hk, D, causal (VARLEN_BATCHES=LONGFULL adds a long non-causal head dim 64 batch)
    ("16 x 64..4096", _rand_lengths(10, 16, 64, 4096), 16, 16, 128, True),
    ("16 x 64..4096", _rand_lengths(10, 16, 64, 4096), 16, 16, 128, False),
    ("64 x 16..1024", _rand_lengths(11, 64, 16, 1024), 32, 8, 128, True),
    ("8 x 1000..8000", _rand_lengths(12, 8, 1000, 8000), 16, 4, 64, True),
    ("128 x 1..512", _rand_lengths(13, 128, 1, 512), 16, 16, 64, False),
] + ([("8 x 1000..8000", _rand_lengths(12, 8, 1000, 8000), 16, 4, 64, False),
      ("32 x 16..2048", _rand_lengths(14, 32, 16, 2048), 16, 16, 64, False)]
     if "LONGFULL" in os.environ.get("VARLEN_BATCHES", "") else [])


def variant_options(opts, D, causal, top, group):
    """A variant's kernel options: ``opts`` over ``varlen_options`` (the default, the queued units), over
    ``queued_varlen_options`` where ``opts`` has ``queued=1`` or over ``static_varlen_options`` where it has
    ``static=1`` (the queue's registers depend on the warp groups, so neither base can be written as one variant
    for every batch)."""
    opts = dict(opts)
    queued, static = opts.pop("queued", 0), opts.pop("static", 0)
    base = (varlen.queued_varlen_options if queued else varlen.static_varlen_options if static
            else varlen.varlen_options)
    return dict(base(D, causal, top, group), **opts)


def runs_at(options, D):
    """Whether a variant's resolved options serve head dim ``D``: three warp groups are a head dim 64 form."""
    return options.get("wgs", 2) != 3 or D == 64


def variants(text=None):
    """``VARLEN_VARIANTS="every:live_units=0;wgs2:wgs=2;q:queued=1"`` (or ``text`` in that form): more warpsched
    forms timed beside the default, each its options over ``varlen_options`` (ints; 0 / 1 for switches;
    ``queued=1``: over ``queued_varlen_options``; ``static=1``: over ``static_varlen_options``)."""
    out = {}
    for item in filter(None, (os.environ.get("VARLEN_VARIANTS", "") if text is None else text).split(";")):
        name, _, opts = item.partition(":")
        out[name] = {k: int(v) for k, v in (kv.split("=") for kv in opts.split(",") if kv)}
    return out


def backward_calls(q, k, v, out, dout, lse, cu, top, causal, sides):
    """The packed backward call for each of ``sides`` ({name: kernel options, None for the defaults}), each run
    once: ({name: call}, {name: its (dq, dk, dv)}, {name: why it was refused}) (a refusal is an
    ``AttentionConfigError``)."""
    from warpsched.kernels.attention.masks import AttentionConfigError

    fns, grads, refused = {}, {}, {}
    for n, opts in sides.items():
        def call(opts=opts):
            return varlen.attention_varlen_backward(q, k, v, out, dout, lse, cu, cu, top, top, causal=causal,
                                                    options=opts)
        try:
            grads[n] = call()
            fns[n] = call
        except AttentionConfigError as e:
            refused[n] = str(e)
    return fns, grads, refused


def backward_variants_of(text):
    """``"name:a=1,b=0;name2@64:..."``: the packed backward's kernel options over its defaults, flags and counts
    typed by the kernel's signature (``_bwd_defaults.parse_options``); ``name@D``: at head dim D only (``for_dim``)."""
    return {name: _bwd_defaults.parse_options(opts)
            for name, _, opts in (item.partition(":") for item in filter(None, text.split(";")))}


def for_dim(variants, D):
    """The variants that apply at head dim ``D``, by their names without ``@D``."""
    return {n.partition("@")[0]: o for n, o in variants.items() if "@" not in n or int(n.partition("@")[2]) == D}


def backward_variants(rows, rounds):
    """``VARLEN_BWD_VARIANTS="flat:flat_dq=1;old@64:..."``: the packed backward's kernel options over its defaults
    (``backward_host.default_options(D, varlen=True)``; ``name@D``: at head dim D only, in column ``name``), each
    checked against the default's gradients (within
    1e-2 of their max; the default is checked against fp64 above) and timed beside it (device time, CUDA graphs,
    the call: pre-pass, kernel, dQ conversion)."""
    from warpsched.kernels.attention.backward_host import default_options

    extra = backward_variants_of(os.environ.get("VARLEN_BWD_VARIANTS", ""))
    columns = list(dict.fromkeys(n.partition("@")[0] for n in extra))  # "name@D": in column name
    if not extra:
        return
    from triton.testing import do_bench

    print("\nthe packed backward's call, device time (CUDA graphs), us; a variant: its time / the default's, and its "
          "gradients' max error against the default's")
    print("| batch | H/Hk | D | causal | default |" + "".join(f" {n} |" for n in columns))
    print("|---|---|---|---|---|" + "---|" * len(columns))
    for name, lengths, H, Hk, D, causal, q, k, v, cu in rows:
        top = max(lengths)
        out, lse = ops.attention_varlen(q, k, v, cu, cu, top, top, causal=causal, return_lse=True)
        dout = torch.randn_like(q)
        sides = {"default": dict(default_options(D, varlen=True))}
        for n, opts in for_dim(extra, D).items():
            sides[n] = dict(default_options(D, varlen=True), **opts)
        fns, grads, refused = backward_calls(q, k, v, out, dout, lse, cu, top, causal, sides)
        cells = dict({n: "-" for n in columns}, **{n: f"refused ({why[:40]})" for n, why in refused.items()})
        times = {n: [] for n in fns}
        for _ in range(rounds):
            for n, fn in fns.items():
                times[n].append(graph_ms(torch, do_bench, fn, 0.3, 50))
        us = {n: statistics.median(t) * 1e3 for n, t in times.items()}
        for n in columns:
            if n in us:
                e = max(((g.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-2)).item()
                        for g, r in zip(grads[n], grads["default"]))
                cells[n] = f"{us[n]:.0f} ({us[n] / us['default']:.3f}x, err {e:.1e}{'' if e < 1e-2 else ' FAIL'})"
        print(f"| {name} | {H}/{Hk} | {D} | {causal} | {us['default']:.0f} |"
              + "".join(f" {cells[n]} |" for n in columns), flush=True)


def training_steps(q, k, v, cu, top, causal, flash_attn_varlen_func):
    """{"ws": step[, "fa4": step]}: forward + backward through autograd on copies of q, k, v that need
    gradients, warpsched's ``nn.attention_varlen`` and FA4's ``flash_attn_varlen_func`` (when given and it
    takes the shape)."""
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(q)

    def ws_step():
        o = wnn.attention_varlen(qq, kk, vv, cu, cu, top, top, causal=causal)
        torch.autograd.grad(o, (qq, kk, vv), dout)
    sides = {"ws": ws_step}
    if flash_attn_varlen_func is not None:
        def fa_step():
            o = flash_attn_varlen_func(qq, kk, vv, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=top,
                                       max_seqlen_k=top, causal=causal)
            o = o[0] if isinstance(o, tuple) else o
            torch.autograd.grad(o, (qq, kk, vv), dout)
        try:
            fa_step()
            sides["fa4"] = fa_step
        except Exception as e:  # noqa: BLE001 - FA4's varlen backward may refuse a shape
            print(f"  (FA4 varlen backward: {type(e).__name__}: {str(e)[:120]})", flush=True)
    return sides


def speed(rounds):
    from triton.testing import do_bench

    flash_attn_varlen_func = fa4("flash_attn_varlen_func")
    extra = variants()
    # VARLEN_PARTS (a call budget's choice): which of the forward, backward and training tables run
    parts = set(os.environ.get("VARLEN_PARTS", "forward,backward,training").split(","))
    if "forward" in parts:
        print("\ndevice time (CUDA graphs), us; TFLOP/s over visible pairs; a variant's column: its time / the "
              "default's")
        print("| batch | H/Hk | D | causal | warpsched varlen | FA4 varlen | warpsched padded | ws TFLOP/s | FA4 / ws | "
              "padded / ws |" + "".join(f" {n} |" for n in extra))
        print("|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(extra))
    rows = []
    for name, lengths, H, Hk, D, causal in BATCHES:
        total, top, B = sum(lengths), max(lengths), len(lengths)
        cu = _offsets(lengths)
        q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(total, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        rows.append((name, lengths, H, Hk, D, causal, q, k, v, cu))
        if "forward" not in parts:
            continue
        qp, kp, vp = (torch.randn(B, h, top, D, device="cuda", dtype=torch.bfloat16) for h in (H, Hk, Hk))
        sides = {"ws": lambda: ops.attention_varlen(q, k, v, cu, cu, top, top, causal=causal),
                 "padded": lambda: ops.attention(qp, kp, vp, causal=causal)}
        if flash_attn_varlen_func is not None:
            sides["fa4"] = lambda: flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=top,
                                                          max_seqlen_k=top, causal=causal)
        for n, opts in extra.items():
            chosen = variant_options(opts, D, causal, top, H // Hk)
            if not runs_at(chosen, D):
                continue
            sides[n] = (lambda chosen=chosen: varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal,
                                                                      options=chosen))
        times = {n: [] for n in sides}
        for _ in range(rounds):
            for n, fn in sides.items():
                times[n].append(graph_ms(torch, do_bench, fn, 0.3, 200))
        us = {n: statistics.median(t) * 1e3 for n, t in times.items()}
        pairs = sum(n * (n + 1) / 2 if causal else n * n for n in lengths)
        tflops = 4 * D * H * pairs / (us["ws"] * 1e-6) / 1e12
        print(f"| {name} | {H}/{Hk} | {D} | {causal} | {us['ws']:.0f} | {us.get('fa4', float('nan')):.0f} | "
              f"{us['padded']:.0f} | {tflops:.0f} | {us.get('fa4', float('nan')) / us['ws']:.3f}x | "
              f"{us['padded'] / us['ws']:.3f}x |"
              + "".join(f" {us[n]:.0f} ({us[n] / us['ws']:.3f}x) |" if n in us else " - |" for n in extra),
              flush=True)
    if "backward" in parts:
        backward_variants(rows, rounds)
    if os.environ.get("VARLEN_NO_TRAIN") or "training" not in parts:
        return
    print("\ntraining step (forward + backward through autograd, eager, host included), us")
    print("| batch | H/Hk | D | causal | warpsched | FA4 | FA4 / ws |")
    print("|---|---|---|---|---|---|---|")
    for name, lengths, H, Hk, D, causal, q, k, v, cu in rows:
        sides = training_steps(q, k, v, cu, max(lengths), causal, flash_attn_varlen_func)
        us = {n: ms * 1e3 for n, ms in alternate(torch, sides, rounds=rounds, iters=10).items()}
        print(f"| {name} | {H}/{Hk} | {D} | {causal} | {us['ws']:.0f} | {us.get('fa4', float('nan')):.0f} | "
              f"{us.get('fa4', float('nan')) / us['ws']:.3f}x |", flush=True)


if __name__ == "__main__":
    check_then_time(__doc__, correctness, speed)
