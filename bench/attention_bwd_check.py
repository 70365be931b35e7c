"""H200: warpsched's attention backward, correctness and speed.

Correctness: fresh random inputs per case, dK / dV outputs poisoned with NaN, our forward's O and LSE,
then dQ, dK, dV against an fp64 reference (autograd through softmax(QK^T * scale) V); torch SDPA's own
bf16 / fp16 gradients against the same reference set the bar (ours must be within 2x its error + 1e-3).
Autograd: ``warpsched.nn.scaled_dot_product_attention`` (custom ops fwd + bwd) against the fp64 reference,
and ``torch.compile(fullgraph=True)`` of a function calling it: O, dK, dV bitwise equal to eager, dQ (reduce-
added in the order the CTAs finish) within its rounding.
Speed (``_eager.alternate``: calls between two synchronizations, sides alternated): backward only, TFLOP/s counted as 2.5x the forward's FLOPs (the field's
convention): warpsched (kernel alone, and the whole call with the delta pre-pass and dQ conversion),
torch SDPA's cuDNN and flash backends, FlashAttention-4 (``flash_attn.cute``) when installed; then
forward + backward as a model calls them (autograd, eager), TFLOP/s counted as 3.5x the forward's. The kernel
sides write the same dQaccum / dK / dV (``--own-buffers``: each its own), and each variant is also compared with
the default kernel round by round (``_eager.paired_ratio``).

Deterministic (``deterministic=True``): dQ bitwise equal over repeated runs, accurate, and its cost.

    python3 bench/attention_bwd_check.py [--only correctness|autograd|deterministic|speed] [--rounds 3]
                                         [--variants default,...] [--head-dims 64,128,256]
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

import _bwd_defaults  # noqa: F401  (WS_BWD_DEFAULTS: options on trial as the defaults)
from _eager import alternate, paired_ratio  # bench/_eager.py: sides alternated, host time included
from warpsched import ops
from warpsched.kernels.attention.forward import AttentionConfigError
from warpsched.kernels.attention import backward_host as bwd

CASES = [  # B, H, Hk, Sq, Sk, D, causal, dtype
    (2, 4, 4, 128, 128, 64, False, torch.bfloat16),
    (1, 2, 2, 1000, 1000, 128, True, torch.bfloat16),
    (2, 8, 2, 257, 511, 128, False, torch.float16),
    (1, 4, 1, 1, 300, 64, True, torch.bfloat16),
    (1, 2, 2, 700, 200, 128, True, torch.bfloat16),
    (2, 6, 3, 333, 333, 64, True, torch.float16),
    (1, 4, 2, 200, 700, 64, False, torch.bfloat16),
    (2, 4, 2, 517, 333, 64, False, torch.float16),  # fp16 through the non-causal head dim 64 default (dq_defer)
    (3, 2, 2, 64, 64, 128, True, torch.float16),
    (1, 4, 2, 333, 500, 256, True, torch.bfloat16),
    (2, 2, 2, 129, 129, 256, False, torch.float16),
    (1, 2, 1, 1, 300, 256, True, torch.bfloat16),
    (1, 2, 2, 700, 200, 256, False, torch.bfloat16),
]
# kernel options checked and timed per head dim (name: options; "default" is what a call without options runs,
# attention_bwd_host.default_options); ``--variants a,b`` picks some by name
_D64, _D128 = bwd.default_options(64), bwd.default_options(128)
_M64 = {"tma_stats": True, "tma_store_dkv": True, "dq_stages": 2}  # 64-row Q blocks: room for a third Q / dO stage
VARIANTS = {64: {"plain": {"tma_stats": False}, "default": {}, "ts": {"tma_stats": True},
                 "q3": dict(_M64, qdo_stages=3, dq_stages=1), "q3+dq2": dict(_M64, qdo_stages=3),
                 "os+odq": {"overlap_scores": True, "overlap_dq": True}, "order": {"wg_order": True},
                 # 64-row Q blocks (the default before 128-row blocks with dQ shared by rows), and 128-row blocks
                 # with each warp group's dQ over its own keys
                 "m64": _M64,
                 "m128": {"tma_stats": True, "tma_store_dkv": True, "block_m": 128, "dq_stages": 1},
                 "odq": dict(_D64, overlap_dq=True),  # the dK GEMM issued last, dQ staged while it runs
                 # dQ tiles in register order (backward_post; the default), in 4 TMA boxes a
                 # tile, and the (rows, columns) tiles before it
                 "flat": dict(_D64, flat_dq=True), "flat4": dict(_D64, flat_dq=True, flat_boxes=4),
                 "rows": dict(_D64, flat_dq=False),
                 "es": dict(_D64, early_stats=True),  # the LSE read before the S / dP GEMMs are issued
                 "fin": dict(_D64, dq_finish=True, grid3d=False),  # dQ converted in the kernel (attention.dq_finish)
                 "kvds": dict(_D64, dkv_in_ds=True),  # dK / dV staged in the dS tile, one store wait
                 # each step's dQ GEMM issued at the next step (two dS stages), alone and with kvds / es
                 "defer": dict(_D64, dq_defer=True), "defer+kvds": dict(_D64, dq_defer=True, dkv_in_ds=True),
                 "defer+es": dict(_D64, dq_defer=True, early_stats=True)},
            128: {"no-sds": {"shared_ds": False}, "sds": {"shared_ds": True}, "default": {},
                  "sds+ts": {"shared_ds": True, "tma_stats": True},
                  "q3": dict(_D128, qdo_stages=3, dq_stages=1), "dq2": dict(_D128, dq_stages=2),
                  "sds+os+odq": {"shared_ds": True, "overlap_scores": True, "overlap_dq": True},
                  "order": {"wg_order": True}, "sds+order": {"shared_ds": True, "wg_order": True},
                  "odq": dict(_D128, overlap_dq=True), "flat": dict(_D128, flat_dq=True),
                  "flat4": dict(_D128, flat_dq=True, flat_boxes=4), "rows": dict(_D128, flat_dq=False),
                  "sf": dict(_D128, stage_first=True),  # the S / dP GEMMs' Q / dO stage sliced first
                  # LSE / delta read before the S / dP GEMMs are issued, with and without overlap_dq
                  "es": dict(_D128, early_stats=True), "odq+es": dict(_D128, overlap_dq=True, early_stats=True),
                  # 80-row Q blocks, dQ computed transposed (FA4's non-causal tile), with and without the LSE
                  # read before the S / dP GEMMs
                  "m80": dict(_D128, block_m=80, dq_stages=1),
                  "m80ne": dict(_D128, block_m=80, dq_stages=1, early_stats=False),
                  "m80f": dict(_D128, block_m=80, dq_stages=1, full_only=True),  # m80 on the non-causal rows alone
                  # m80 over the non-causal default (with grid3d)
                  "m80g": dict(bwd.default_options(128, full=True), block_m=80, dq_stages=1, full_only=True),
                  "fin": dict(_D128, dq_finish=True),
                  # each step's dQ GEMM issued at the next step (staged under the dK GEMM), and without overlap_dq
                  "defer": dict(_D128, dq_defer=True), "defer-odq": dict(_D128, dq_defer=True, overlap_dq=False)},
            # head dim 256: the default splits the step's queries between the warp groups (P^T / dS^T swapped
            # through SMEM) with own_first (the dV / dK k-blocks of the warp group's own queries issued before it
            # waits for the other's); "dsplit": the warp groups split D alone (both compute S / dP)
            256: {"default": {}, "dsplit": dict(bwd.D_SPLIT_OPTIONS),
                  "odq": dict(bwd.D_SPLIT_OPTIONS, overlap_dq=True),
                  "flat": dict(bwd.D_SPLIT_OPTIONS, flat_dq=True),
                  "flat4": dict(bwd.D_SPLIT_OPTIONS, flat_dq=True, flat_boxes=4),
                  "es": dict(bwd.D_SPLIT_OPTIONS, early_stats=True),
                  "odq+es": dict(bwd.D_SPLIT_OPTIONS, overlap_dq=True, early_stats=True),
                  "sq": dict(bwd.D_SPLIT_OPTIONS, split_queries=True),
                  "sq+es": dict(bwd.default_options(256), early_stats=True),
                  # the own queries' dV / dK k-steps with A from the P^T / dS^T registers, not the tiles
                  "regs": dict(bwd.default_options(256), own_regs=True)}}
for _d in VARIANTS:  # a control: the call's default kernel again, what two equal sides differ by
    VARIANTS[_d]["again"] = {}
for _d in VARIANTS:  # every 2nd / 4th / 8th / 16th of P's exp2 on the FMA pipe (attention.poly_exp2)
    for _k in (2, 4, 8, 16):
        VARIANTS[_d][f"p{_k}"] = dict(bwd.default_options(_d), poly_exp2=_k)
        # each polynomial after the MUFU value before it (poly_interleave): spread among the MUFU instructions
        VARIANTS[_d][f"p{_k}i"] = dict(bwd.default_options(_d), poly_exp2=_k, poly_interleave=True)
for _d in (64, 128):  # two dS stages per warp group without deferring the dQ GEMM (FA4's num_stages_PdS=2)
    VARIANTS[_d]["ds2"] = dict(bwd.default_options(_d), ds_stages=2)
    # FA4's head dim 64 SMEM split: two dS stages, one dQ tile per warp group (the SMEM of today's default)
    VARIANTS[_d]["ds2+dq1"] = dict(bwd.default_options(_d), ds_stages=2, dq_stages=1)
for _d in VARIANTS:  # the (key blocks, K/V heads, batches) grid: no division by the key-block count in the step
    VARIANTS[_d]["g3"] = dict(bwd.default_options(_d), grid3d=True, causal_only=_d == 64)
VARIANTS[64]["g3f"] = dict(bwd.default_options(64, full=True), grid3d=True, full_only=True)  # with dq_defer
for _d in VARIANTS:  # P's mask on the exponent before the exp2 (mask_first), or on P after it
    VARIANTS[_d]["mf"] = dict(bwd.default_options(_d), mask_first=True)
    VARIANTS[_d]["ml"] = dict(bwd.default_options(_d), mask_first=False)
# the deferred dQ GEMM with every 8th exp2 on the FMA pipe, interleaved (each measured faster alone on non-causal
# head dim 64 rows at locked clocks: tools/attention_clocked_ab.py)
VARIANTS[64]["defer+p8i"] = dict(_D64, dq_defer=True, poly_exp2=8, poly_interleave=True)
for _d in VARIANTS:  # the grid's units longest first (causal rows only), over every head or groups of 4 / 8 / 16
    VARIANTS[_d]["lpt"] = dict(bwd.default_options(_d), lpt=True, grid3d=False, causal_only=True)
    for _g in (4, 8, 16):
        VARIANTS[_d][f"lpt{_g}"] = dict(bwd.default_options(_d), lpt=True, lpt_heads=_g, grid3d=False,
                                           causal_only=True)


def variants_for(head_dim, causal):
    """(name, kernel options) of the head dim's variants that apply to this mask (``causal_only``)."""
    for name, options in VARIANTS[head_dim].items():
        if (options.get("causal_only") and not causal) or (options.get("full_only") and causal):
            continue
        yield name, {k: v for k, v in options.items() if k not in ("causal_only", "full_only")}


SPEED = [  # B, H, S, D, causal
    (8, 32, 2048, 128, True), (4, 16, 4096, 128, False), (16, 16, 1024, 64, True), (2, 16, 8192, 128, True),
    (4, 16, 4096, 64, False), (16, 16, 1024, 128, False), (4, 16, 2048, 256, False), (8, 16, 2048, 256, True),
    (16, 16, 1024, 128, True), (16, 16, 1024, 64, False),
]


def reference(q, k, v, dout, causal, scale):
    """fp64 dq, dk, dv (K / V heads repeated for GQA, their gradients summed back)."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    kk, vv = k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q64, kk) * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        hide = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(hide, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    o = torch.einsum("bhqk,bhkd->bhqd", p, vv)
    return torch.autograd.grad(o, (q64, k64, v64), dout.double())


def sdpa_grads(q, k, v, dout, causal):
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    return torch.autograd.grad(o, (qq, kk, vv), dout)


def err(a, ref):
    """max |a - ref| over max(max |ref|, 0.01), as bench/attention_varlen.py: with one query a causal mask
    leaves one key, P = 1 and dQ = dK = 0 exactly, and both we and SDPA return rounding noise (~1e-7)
    that a floor of 1e-6 turned into "errors" of 0.1-0.8."""
    return ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(0.01)).item()


def correctness():
    fails = 0
    print("| B x H/Hk x Sq x Sk | D | causal | dtype | dQ err | dK err | dV err | SDPA dQ/dK/dV err | result |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        B, H, Hk, Sq, Sk, D, causal, dt = case
        torch.manual_seed(hash(case) % 1000)
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=dt)
        k = torch.randn(B, Hk, Sk, D, device="cuda", dtype=dt)
        v = torch.randn(B, Hk, Sk, D, device="cuda", dtype=dt)
        dout = torch.randn(B, H, Sq, D, device="cuda", dtype=dt)
        scale = 1.0 / math.sqrt(D)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        ref = reference(q, k, v, dout, causal, scale)
        theirs = [err(a, r) for a, r in zip(sdpa_grads(q, k, v, dout, causal), ref)]
        for name, options in variants_for(D, causal):
            dk = torch.full_like(k, float("nan"))
            dv = torch.full_like(v, float("nan"))
            dq, dk, dv = bwd.attention_backward(q, k, v, out, dout, lse, causal=causal, dk=dk, dv=dv, **options)
            torch.cuda.synchronize()
            ours = [err(a, r) for a, r in zip((dq, dk, dv), ref)]
            ok = all(o == o and o <= 2 * t + 1e-3 for o, t in zip(ours, theirs))
            if options.get("dq_finish"):  # the kernel's own dQ, every row written: into a NaN-poisoned tensor
                launch, dq_own, _, _, _ = bwd._prepare(q, k, v, out, dout, lse, causal=causal, **options)
                dq_own.fill_(float("nan"))
                launch()
                own = err(dq_own, ref[0])
                same = own == own and own <= 2 * theirs[0] + 1e-3
                ok = ok and same
                name += "" if same else f" (poisoned dQ: {own:.2e})"
            elif options.get("flat_dq"):  # the post-pass kernel against its torch twin, on one accumulator
                launch, dq_acc, _, _, flat = bwd._prepare(q, k, v, out, dout, lse, causal=causal, **options)
                launch()
                same = torch.equal(bwd.finish_dq(dq_acc, flat, scale, dt, Sq),
                                   bwd.flat_to_rows(dq_acc, *flat, scale, dt, Sq))
                ok = ok and same
                name += "" if same else " (post-pass kernel != torch)"
            fails += not ok
            print(f"| {B}x{H}/{Hk}x{Sq}x{Sk} | {D} {name} | {causal} | {str(dt)[6:]} | "
                  + " | ".join(f"{e:.2e}" for e in ours) + " | " + "/".join(f"{e:.1e}" for e in theirs)
                  + f" | {'PASS' if ok else 'FAIL'} |", flush=True)
    print(f"correctness: {len(CASES) - fails}/{len(CASES)} PASS; verdicts: {bwd.VERDICT_OF}", flush=True)
    return fails


AUTOGRAD = [(2, 8, 2, 500, 128, True), (1, 4, 4, 256, 64, False), (1, 4, 2, 300, 256, True)]  # B, H, Hk, S, D, causal


def autograd_check():
    """warpsched.nn.scaled_dot_product_attention: gradients against fp64, torch.compile without a graph break
    and bitwise equal to eager."""
    import warpsched.nn as wnn

    fails = 0
    for B, H, Hk, S, D, causal in AUTOGRAD:
        torch.manual_seed(1)
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, Hk, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, Hk, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        out = wnn.scaled_dot_product_attention(q, k, v, is_causal=causal)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        ref = reference(q, k, v, dout, causal, 1.0 / math.sqrt(D))
        theirs = [err(a, r) for a, r in zip(sdpa_grads(q, k, v, dout, causal), ref)]
        ours = [err(a, r) for a, r in zip(grads, ref)]

        def fwd(q, k, v):
            return wnn.scaled_dot_product_attention(q, k, v, is_causal=causal)

        torch._dynamo.reset()
        explained = torch._dynamo.explain(fwd)(q, k, v)
        out_c = torch.compile(fwd, fullgraph=True)(q, k, v)
        compiled = torch.autograd.grad(out_c, (q, k, v), dout)  # the compiled graph's backward
        # O, dK and dV are written once each (bitwise reproducible); dQ is reduce-added by the CTAs of every
        # key block in whatever order they finish (as FlashAttention's default), so it is compared within
        # the fp32 rounding of that order, not bitwise
        same = torch.equal(out_c, out) and torch.equal(compiled[1], grads[1]) and torch.equal(compiled[2], grads[2])
        dq_close = err(compiled[0], grads[0].double()) < 1e-2
        ok = (all(o <= 2 * t + 1e-3 for o, t in zip(ours, theirs)) and same and dq_close
              and explained.graph_break_count == 0)
        fails += not ok
        print(f"autograd {B}x{H}/{Hk}x{S} d{D} {'causal' if causal else 'full'}: dq/dk/dv err "
              + "/".join(f"{e:.2e}" for e in ours) + " (SDPA " + "/".join(f"{e:.1e}" for e in theirs)
              + f"); torch.compile graph breaks {explained.graph_break_count}, O / dK / dV bitwise equal to eager: "
              f"{same}, dQ within {err(compiled[0], grads[0].double()):.1e}"
              + f" -> {'PASS' if ok else 'FAIL'}", flush=True)
    return fails


def model_speed(rounds):
    """Forward + backward through autograd, eager, as a model calls it (host time included)."""
    import warpsched.nn as wnn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        from flash_attn.cute import flash_attn_func
    except Exception:  # noqa: BLE001
        flash_attn_func = None
    print("| fwd+bwd (autograd, eager) B x H x S | D | mask | warpsched | SDPA cuDNN | FA4 | ws / cuDNN | ws / FA4 |")
    print("|---|---|---|---|---|---|---|---|")
    for B, H, S, D, causal in SPEED[:4]:
        torch.manual_seed(0)
        q, k, v, dout = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        x = tuple(t.clone().requires_grad_() for t in (q, k, v))

        def ws():
            o = wnn.scaled_dot_product_attention(*x, is_causal=causal)
            torch.autograd.grad(o, x, dout)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                o = F.scaled_dot_product_attention(*x, is_causal=causal)
            torch.autograd.grad(o, x, dout)

        sides = {"warpsched": ws, "cuDNN": cudnn}
        if flash_attn_func is not None:
            xt = tuple(t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
            dot = dout.transpose(1, 2).contiguous()

            def fa4():
                res = flash_attn_func(*xt, causal=causal)
                torch.autograd.grad(res[0] if isinstance(res, tuple) else res, xt, dot)
            sides["FA4"] = fa4
        flop = 3.5 * 4 * B * H * S * S * D / (2 if causal else 1)
        med = alternate(torch, sides, rounds=rounds, iters=5)
        tf = {s: f"{flop / med[s] / 1e9:.0f}" for s in med}
        ratio = lambda b: f"{med[b] / med['warpsched']:.3f}x" if b in med else "-"  # noqa: E731
        print(f"| {B}x{H}x{S} | {D} | {'causal' if causal else 'full'} | {tf['warpsched']} | {tf['cuDNN']} | "
              f"{tf.get('FA4', '-')} | {ratio('cuDNN')} | {ratio('FA4')} |", flush=True)


def speed(rounds, calls=False, own_buffers=False):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # noqa: BLE001
        flash_attn_func = None
        print(f"FA4 unavailable: {type(e).__name__}: {e}")
    names = list(dict.fromkeys(n for per_d in VARIANTS.values() for n in per_d))
    cols = (["ws call"] + [f"ws {n}" for n in names] + ([f"call {n}" for n in names if n != "default"] if calls else [])
            + ["cuDNN", "flash", "FA4"])
    print("warpsched kernels alone per variant, the default options' whole call (ws call: pre-pass, kernel, dQ "
          "conversion); TFLOP/s; ratios: ws call and the best kernel variant")
    print("| B x H x S | D | mask | " + " | ".join(cols) + " | call / cuDNN | call / FA4 | best kernel / FA4 |")
    print("|---|---|---|" + "---|" * (len(cols) + 3))
    paired = []  # (row, variant, (median, min, max) of the default kernel's time / the variant's, round by round)
    for B, H, S, D, causal in SPEED:
        torch.manual_seed(0)
        q, k, v, dout = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        sides = {"ws call": lambda: bwd.attention_backward(q, k, v, out, dout, lse, causal=causal)}
        shared = {}  # dq_acc / dk / dv of the first kernel side, reused by the others (unless --own-buffers)
        for name, options in variants_for(D, causal):  # the kernel alone, per variant
            try:
                launch, dq_acc, dk, dv = bwd.prepare_backward(q, k, v, out, dout, lse, causal=causal, **shared,
                                                              **options)
            except AttentionConfigError:  # another Q block (a padded dq_acc of another shape): its own buffers
                launch, dq_acc, dk, dv = bwd.prepare_backward(q, k, v, out, dout, lse, causal=causal, **options)
            if not shared and not own_buffers:
                shared = {"dq_acc": dq_acc, "dk": dk, "dv": dv}
            sides[f"ws {name}"] = lambda launch=launch, dq_acc=dq_acc: (dq_acc.zero_(), launch())
            if calls and name != "default":
                sides[f"call {name}"] = (lambda options=options: bwd.attention_backward(q, k, v, out, dout, lse,
                                                                                        causal=causal, **options))
        for name, kind in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
            try:
                with sdpa_kernel([kind]):
                    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                sides[name] = (lambda o=o, x=(qq, kk, vv): torch.autograd.grad(o, x, dout, retain_graph=True))
            except Exception as e:  # noqa: BLE001
                print(f"{name} unavailable for {B}x{H}x{S} d{D}: {e}")
        if flash_attn_func is not None:
            try:
                qt, kt, vt = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
                res = flash_attn_func(qt, kt, vt, causal=causal)
                o4 = res[0] if isinstance(res, tuple) else res
                dot = dout.transpose(1, 2).contiguous()
                sides["FA4"] = lambda o4=o4, x=(qt, kt, vt): torch.autograd.grad(o4, x, dot, retain_graph=True)
            except Exception as e:  # noqa: BLE001
                print(f"FA4 failed for {B}x{H}x{S} d{D}: {type(e).__name__}: {e}")
        flop = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
        samples = {}
        med = alternate(torch, sides, rounds=rounds, iters=10, samples=samples)
        for s in samples:
            if s.startswith("ws ") and s not in ("ws call", "ws default") and "ws default" in samples:
                paired.append((f"{B}x{H}x{S} d{D} {'causal' if causal else 'full'}", s[3:],
                               paired_ratio(samples, s, "ws default")))
        tf = {s: flop / med[s] / 1e9 for s in med}
        cell = lambda s: f"{tf[s]:.0f}" if s in tf else "-"  # noqa: E731
        ratio = lambda a, b: f"{med[b] / med[a]:.3f}x" if a in med and b in med else "-"  # noqa: E731
        best = min((s for s in med if s.startswith("ws ") and s != "ws call"), key=med.get)
        print(f"| {B}x{H}x{S} | {D} | {'causal' if causal else 'full'} | " + " | ".join(
            cell(s) for s in cols)
            + f" | {ratio('ws call', 'cuDNN')} | {ratio('ws call', 'FA4')} | {best[3:]} {ratio(best, 'FA4')} |",
            flush=True)
    if paired:
        print("\neach kernel variant against the default kernel, paired by round (the default's time over the "
              "variant's in the same round; above 1: the variant is faster): median, min - max over the rounds")
        print("| row | variant | median | min - max |\n|---|---|---|---|")
        for row, name, (mid, lo, hi) in paired:
            print(f"| {row} | {name} | {mid:.3f} | {lo:.3f} - {hi:.3f} |")


DETERMINISTIC = [  # B, H, Hk, Sq, Sk, D, causal
    (2, 8, 2, 1000, 1000, 128, True), (1, 4, 4, 777, 1500, 64, False), (2, 16, 16, 2048, 2048, 128, False),
    (1, 8, 2, 4096, 4096, 64, True), (1, 4, 2, 700, 900, 256, True),
]


def deterministic_check(rounds):
    """``deterministic=True`` (attention.dq_order): dQ bitwise equal over 5 runs, within the bar against fp64
    (as ``correctness``), dK / dV equal to the default's; how often the default's dQ differs between runs;
    then the kernel's time against the default's (the kernel alone, dq_accum and the turn words zeroed)."""
    fails = 0
    print("| B x H/Hk x Sq x Sk | D | causal | dQ err (det.) | SDPA dQ err | det. dQ equal over 5 runs | "
          "default dQ equal over 5 runs | dK, dV equal to default | det. kernel us | default kernel us | "
          "det. / default | result |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for B, H, Hk, Sq, Sk, D, causal in DETERMINISTIC:
        torch.manual_seed(7)
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hk, Sk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        dout = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        runs = [ops.attention_backward(q, k, v, out, dout, lse, causal=causal, deterministic=True) for _ in range(5)]
        plain = [ops.attention_backward(q, k, v, out, dout, lse, causal=causal) for _ in range(5)]
        det_same = all(torch.equal(r[0], runs[0][0]) for r in runs)
        plain_same = all(torch.equal(r[0], plain[0][0]) for r in plain)
        dkv_same = torch.equal(runs[0][1], plain[0][1]) and torch.equal(runs[0][2], plain[0][2])
        small = Sq * Sk <= 1500 * 1500
        if small:
            ref = reference(q, k, v, dout, causal, 1.0 / math.sqrt(D))
            ours = err(runs[0][0], ref[0])
            theirs = err(sdpa_grads(q, k, v, dout, causal)[0], ref[0])
            accurate = ours <= 2 * theirs + 1e-3
        else:  # the fp64 reference of 4k x 4k is slow: against the default's dQ (same math, another order)
            ours, theirs = err(runs[0][0], plain[0][0].double()), float("nan")
            accurate = ours < 1e-2
        times = {}
        for name, det in (("det", True), ("plain", False)):
            launch, dq_acc, _, _ = bwd.prepare_backward(q, k, v, out, dout, lse, causal=causal, deterministic=det)
            times[name] = (lambda launch=launch, dq_acc=dq_acc: (dq_acc.zero_(), launch()))
        med = alternate(torch, times, rounds=rounds, iters=10)
        ok = det_same and dkv_same and accurate
        fails += not ok
        print(f"| {B}x{H}/{Hk}x{Sq}x{Sk} | {D} | {causal} | {ours:.2e} | {theirs:.1e} | {det_same} | {plain_same} | "
              f"{dkv_same} | {med['det'] * 1e3:.0f} | {med['plain'] * 1e3:.0f} | {med['det'] / med['plain']:.3f}x | "
              f"{'PASS' if ok else 'FAIL'} |", flush=True)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("correctness", "autograd", "deterministic", "speed"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", help="comma-separated VARIANTS names to check and time (default: all)")
    ap.add_argument("--head-dims", help="comma-separated head dims to keep in every table (default: all)")
    ap.add_argument("--kernels-only", action="store_true", help="speed: skip the forward + backward autograd table")
    ap.add_argument("--own-buffers", action="store_true", help="speed: each kernel side its own dQaccum / dK / dV "
                    "(by default they share the first side's, so equal kernels write the same memory)")
    ap.add_argument("--calls", action="store_true", help="speed: also time each variant's whole call")
    a = ap.parse_args()
    if a.head_dims:
        dims = {int(d) for d in a.head_dims.split(",")}
        for table, col in ((CASES, 5), (AUTOGRAD, 4), (DETERMINISTIC, 5), (SPEED, 3)):
            table[:] = [row for row in table if row[col] in dims]
    if a.variants:
        keep = a.variants.split(",")
        for per_d in VARIANTS.values():
            for name in [n for n in per_d if n not in keep]:
                del per_d[name]
    print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
    fails = 0
    if a.only in (None, "correctness"):
        fails += correctness()
    if a.only in (None, "autograd"):
        fails += autograd_check()
    if a.only in (None, "deterministic"):
        fails += deterministic_check(a.rounds)
    if a.only in (None, "speed") and not fails:
        speed(a.rounds, a.calls, a.own_buffers)
        if not a.kernels_only:
            model_speed(a.rounds)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
