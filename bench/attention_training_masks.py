"""H200: attention for training with a sliding window, a ``mask_mod`` and a ``softcap``, forward and
backward (``window_size=(left, right)``, ``mask_mod(b, h, q, kv)``, ``softcap``).

Correctness: fresh random inputs per case; ``ops.attention`` with NaN-poisoned O and LSE, then
``ops.attention_backward`` with NaN-poisoned dK / dV, against an fp64 reference (autograd through a
masked, capped softmax; a query that sees no key gives O = 0 and zero gradients); torch SDPA's own
gradients with the same boolean mask set the bar (ours within 2x its error + 2e-3, at most 2e-2; with a
softcap, which SDPA lacks, 1e-2). Also the autograd path (``warpsched.nn.scaled_dot_product_attention``).
Speed (``_eager.alternate``: calls between two synchronizations, sides alternated): a training step's
attention (forward + backward, autograd, eager) with a 256-key causal window on long sequences:
warpsched against FlashAttention-4 (``flash_attn.cute``, ``window_size=(255, 0)``) and against
warpsched's own full causal attention (what the window saves).

    python3 bench/attention_training_masks.py [--rounds 3] [--no-time]
"""
from __future__ import annotations

import math

import torch

import _bwd_defaults  # noqa: F401  (WS_BWD_DEFAULTS: options on trial as the defaults)
from _eager import alternate, check_then_time, fa4  # bench/_eager.py: sides alternated, host time included
from warpsched import nn as wnn
from warpsched import ops

def prefix_lm(b, h, q, kv):
    return (kv < 300) | (kv <= q)


def documents(b, h, q, kv):  # batch b: documents of 700 + 100 * b keys, attention within a document
    length = 700 + 100 * b
    return q // length == kv // length


NONE = (-1, -1)
CASES = [  # B, H, Hk, Sq, Sk, D, causal, window, dtype, mask_mod, softcap
    (2, 8, 2, 2048, 2048, 128, True, (255, 0), torch.bfloat16, None, None),
    (1, 4, 4, 777, 900, 64, False, (100, 37), torch.bfloat16, None, None),
    (1, 4, 4, 3000, 129, 64, False, (20, -1), torch.bfloat16, None, None),  # queries past every key's window
    (1, 4, 2, 129, 3000, 128, False, (-1, 10), torch.bfloat16, None, None),
    (2, 4, 4, 1000, 1000, 128, True, (511, 0), torch.float16, None, None),
    (1, 8, 8, 4096, 4096, 64, True, (1023, 0), torch.bfloat16, None, None),
    (2, 4, 2, 1100, 1100, 128, False, NONE, torch.bfloat16, prefix_lm, None),
    (2, 4, 4, 2000, 2000, 64, True, NONE, torch.bfloat16, documents, None),
    (1, 4, 4, 700, 900, 64, False, NONE, torch.bfloat16, None, 30.0),
    (2, 8, 2, 2048, 2048, 128, True, (511, 0), torch.bfloat16, None, 50.0),
    (1, 4, 4, 1500, 1500, 128, True, NONE, torch.float16, prefix_lm, 20.0),
    # head dim 256 (with WS_BWD_DEFAULTS=split_queries=1,own_first=1: the query split's window, mask and cap)
    (1, 4, 2, 700, 900, 256, True, (200, 0), torch.bfloat16, None, None),
    (1, 2, 2, 600, 600, 256, False, NONE, torch.bfloat16, prefix_lm, 30.0),
]


def keep_mask(B, H, Sq, Sk, causal, window, mask_mod, device):
    bi = torch.arange(B, device=device).view(B, 1, 1, 1)
    hi = torch.arange(H, device=device).view(1, H, 1, 1)
    qi = torch.arange(Sq, device=device).view(1, 1, Sq, 1)
    ki = torch.arange(Sk, device=device).view(1, 1, 1, Sk)
    keep = torch.ones(B, H, Sq, Sk, dtype=torch.bool, device=device)
    if causal:
        keep &= ki <= qi
    left, right = window
    if left >= 0:
        keep &= ki >= qi - left
    if right >= 0:
        keep &= ki <= qi + right
    if mask_mod is not None:
        keep &= mask_mod(bi, hi, qi, ki).expand(B, H, Sq, Sk)
    return keep


def reference(q, k, v, dout, keep, scale, softcap=None):
    """fp64 O and dQ, dK, dV through a capped, masked softmax (a query with no key: P = 0)."""
    H, Hk = q.shape[1], k.shape[1]
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    kk, vv = kd.repeat_interleave(H // Hk, 1), vd.repeat_interleave(H // Hk, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", qd, kk) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    m = s.masked_fill(~keep, float("-inf")).amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m).detach()
    e = torch.exp(s - m) * keep
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den == 0, torch.ones_like(den), den)
    o = torch.einsum("bhqk,bhkd->bhqd", p, vv)
    o.backward(dout.double())
    return o.detach(), qd.grad, kd.grad, vd.grad


def rel(a, ref):
    return ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def sdpa_grads(q, k, v, dout, keep):
    H, Hk = q.shape[1], k.shape[1]
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(qq, kk.repeat_interleave(H // Hk, 1),
                                                         vv.repeat_interleave(H // Hk, 1), attn_mask=keep)
    o.backward(dout)
    return [t.nan_to_num(0.0) for t in (o, qq.grad, kk.grad, vv.grad)]


def correctness():
    bad = 0
    print("| B x H/Hk x Sq x Sk | D | causal | window | mask_mod | softcap | dtype | O err | dQ err | dK err | dV err | "
          "SDPA worst | autograd worst | result |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for B, H, Hk, Sq, Sk, D, causal, window, dt, mask_mod, softcap in CASES:
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=dt)
        k = torch.randn(B, Hk, Sk, D, device="cuda", dtype=dt)
        v = torch.randn(B, Hk, Sk, D, device="cuda", dtype=dt)
        dout = torch.randn(B, H, Sq, D, device="cuda", dtype=dt)
        scale = 1 / math.sqrt(D)
        keep = keep_mask(B, H, Sq, Sk, causal, window, mask_mod, q.device)
        masks = dict(window_size=None if window == NONE else window, mask_mod=mask_mod, softcap=softcap)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Sq), float("nan"), device="cuda")
        ops.attention(q, k, v, causal=causal, out=out, lse=lse, **masks)
        from warpsched.kernels.attention import backward_host as bwd
        dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
        dq, dk, dv = bwd.attention_backward(q, k, v, out, dout, lse, causal=causal, dk=dk, dv=dv, **masks)
        ro, rdq, rdk, rdv = reference(q, k, v, dout, keep, scale, softcap)
        errs = [rel(out, ro), rel(dq, rdq), rel(dk, rdk), rel(dv, rdv)]
        theirs = ([rel(a, r) for a, r in zip(sdpa_grads(q, k, v, dout, keep), (ro, rdq, rdk, rdv))]
                  if softcap is None else [float("nan")])
        qa, ka, va = (t.detach().clone().requires_grad_() for t in (q, k, v))
        oa = wnn.scaled_dot_product_attention(qa, ka, va, is_causal=causal, **masks)
        oa.backward(dout)
        auto_out = (oa, qa.grad, ka.grad, va.grad)
        auto = max(rel(a, r) for a, r in zip(auto_out, (ro, rdq, rdk, rdv)))
        bar = 1e-2 if softcap is not None else min(2 * max(theirs) + 2e-3, 2e-2)
        finite = all(bool(t.isfinite().all()) for t in (out, dq, dk, dv) + auto_out)  # max() drops a NaN
        ok = finite and max(errs) <= bar and auto <= bar
        bad += not ok
        name = mask_mod.__name__ if mask_mod else "-"
        print(f"| {B}x{H}/{Hk}x{Sq}x{Sk} | {D} | {causal} | {window} | {name} | {softcap} | {str(dt)[6:]} | "
              + " | ".join(f"{e:.1e}" for e in errs) + f" | {max(theirs):.1e} | {auto:.1e} | "
              f"{'PASS' if ok else 'FAIL'} |", flush=True)
    print(f"correctness: {len(CASES) - bad}/{len(CASES)} PASS", flush=True)
    return bad


def speed(rounds):
    flash_attn_func = fa4("flash_attn_func")
    W = 256
    print("| B x H x S | D | window | warpsched us | FA4 us | ws full causal us | FA4 / ws | full / window |")
    print("|---|---|---|---|---|---|---|---|")
    for B, H, S, D in ((4, 16, 8192, 128), (2, 16, 16384, 64), (1, 16, 32768, 128)):
        x = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
        dout = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)

        def step(o):
            o.backward(dout)
            for t in x:
                t.grad = None

        sides = {"ws": lambda: step(wnn.scaled_dot_product_attention(*x, is_causal=True, window_size=(W - 1, 0))),
                 "full": lambda: step(wnn.scaled_dot_product_attention(*x, is_causal=True))}
        if flash_attn_func is not None:
            xt = [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in x]
            dt_ = dout.transpose(1, 2).contiguous()

            def fa4():
                res = flash_attn_func(*xt, causal=True, window_size=(W - 1, 0))
                (res[0] if isinstance(res, tuple) else res).backward(dt_)
                for t in xt:
                    t.grad = None
            try:
                fa4()
                torch.cuda.synchronize()
                sides["fa4"] = fa4
            except Exception as e:  # noqa: BLE001 - a peer that cannot run this case is reported, not fatal
                print(f"FA4 window backward failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        med = alternate(torch, sides, rounds=rounds, iters=5)
        us = {n: med[n] * 1e3 for n in med}
        fa = us.get("fa4", float("nan"))
        print(f"| {B}x{H}x{S} | {D} | ({W - 1}, 0) causal | {us['ws']:.0f} | {fa:.0f} | {us['full']:.0f} | "
              f"{fa / us['ws']:.3f}x | {us['full'] / us['ws']:.2f}x |", flush=True)


if __name__ == "__main__":
    check_then_time(__doc__, correctness, speed)
