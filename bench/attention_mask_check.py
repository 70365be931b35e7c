"""H200: warpsched's attention forward with a sliding ``window_size``, a user ``mask_mod`` and a ``softcap``
(kernels/attention/masks.py):
correctness against an fp64 reference, then time against FlashAttention-4's window / softcap and torch SDPA
with the same boolean mask.

    python3 bench/attention_mask_check.py [--rounds 3]

Correctness: fresh random inputs per case, O and the LSE poisoned with NaN, the reference computed in fp64
from the same mask evaluated on index tensors (every mask below is written with & / | / ~ only, so the one
function runs both in torch and traced into the kernel), max |O - ref| / max |ref| against torch SDPA's error
with the same mask (the bar: within 2x SDPA's + 1e-3) and the LSE's max abs error; rows with no visible key
must give O = 0. Masks: a sliding window, a sliding window with causal=True, a prefix-LM (bidirectional prefix
of 300), a document mask (per batch: documents of 700 keys; b enters the mask), a head-dependent window, and
softcap 30 with and without a mask. Time (``_eager.alternate``, forward, TFLOP/s on the visible pairs):
warpsched ``window_size=(255, 0)`` (and the same window as a ``mask_mod``) vs FA4 ``window_size=(255, 0)`` and
SDPA with the boolean mask; warpsched softcap vs FA4 ``softcap=30``.
"""
from __future__ import annotations

import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from _eager import alternate, check_then_time, fa4  # noqa: E402
from warpsched import ops  # noqa: E402

W = 256


def window(b, h, q, kv):
    return (kv <= q) & (q - kv < W)


def bidirectional_window(b, h, q, kv):
    return (kv - q < W) & (q - kv < W)


def prefix_lm(b, h, q, kv):
    return (kv < 300) | (kv <= q)


def documents(b, h, q, kv):  # batch b: documents of 700 + 100 * b keys, attention within a document
    length = 700 + 100 * b
    return (q // length == kv // length) & (kv <= q)


def head_window(b, h, q, kv):  # head h: a window of 128 * (h + 1)
    return (kv <= q) & (q - kv < 128 * (h + 1))


CASES = [  # name, mask_mod, causal, softcap, window_size, B, H, Hk, Sq, Sk, D
    ("window", window, False, None, None, 2, 4, 4, 1000, 1000, 128),
    ("window+causal", window, True, None, None, 1, 8, 2, 2048, 2048, 64),
    ("bidirectional window", bidirectional_window, False, None, None, 1, 4, 4, 777, 777, 128),
    ("prefix-LM", prefix_lm, False, None, None, 2, 4, 2, 513, 513, 64),
    ("documents", documents, False, None, None, 3, 2, 2, 2000, 2000, 128),
    ("head window", head_window, False, None, None, 1, 4, 4, 1024, 1024, 128),
    ("softcap", None, False, 30.0, None, 2, 4, 4, 700, 900, 128),
    ("softcap+causal+window", window, True, 30.0, None, 1, 4, 4, 1500, 1500, 64),
    # window_size: the kernel visits only the K/V tiles the window reaches
    ("window_size causal", None, True, None, (255, 0), 2, 4, 4, 1000, 1000, 128),
    ("window_size both sides, Sq != Sk", None, False, None, (100, 37), 1, 4, 2, 777, 900, 64),
    ("window_size left, rows past the keys", None, False, None, (20, -1), 1, 2, 2, 3000, 129, 128),
    ("window_size right, long keys", None, False, None, (-1, 10), 1, 2, 2, 129, 5000, 128),
    ("window_size+softcap+causal", None, True, 30.0, (511, 0), 1, 4, 4, 3000, 3000, 64),
    ("window_size hd256", None, True, None, (255, 0), 1, 4, 4, 1500, 1500, 256),
    ("window_size+mask_mod", prefix_lm, False, None, (64, 64), 2, 4, 2, 1100, 1100, 128),
]


def reference(q, k, v, mask_mod, causal, softcap, scale, window_size=None):
    """fp64 O and LSE with the mask evaluated on index tensors (the same function as the kernel's)."""
    B, H, Sq, D = q.shape
    Hk, Sk = k.shape[1], k.shape[2]
    kk = k.double().repeat_interleave(H // Hk, 1)
    vv = v.double().repeat_interleave(H // Hk, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q.double(), kk) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    bi = torch.arange(B, device=q.device).view(B, 1, 1, 1)
    hi = torch.arange(H, device=q.device).view(1, H, 1, 1)
    qi = torch.arange(Sq, device=q.device).view(1, 1, Sq, 1)
    ki = torch.arange(Sk, device=q.device).view(1, 1, 1, Sk)
    keep = torch.ones(B, H, Sq, Sk, dtype=torch.bool, device=q.device)
    if mask_mod is not None:
        keep = keep & mask_mod(bi, hi, qi, ki).expand(B, H, Sq, Sk)
    if causal:
        keep = keep & (ki <= qi)
    if window_size is not None:
        left, right = window_size
        if left >= 0:
            keep = keep & (ki >= qi - left)
        if right >= 0:
            keep = keep & (ki <= qi + right)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("bhqk,bhkd->bhqd", p, vv), lse, keep


def correctness():
    bad = 0
    print("| case | B x H/Hk x Sq x Sk | D | O err | SDPA O err | LSE max abs err | empty rows O = 0 | result |")
    print("|---|---|---|---|---|---|---|---|")
    for name, mask_mod, causal, softcap, window_size, B, H, Hk, Sq, Sk, D in CASES:
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, Hk, Sk, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, Hk, Sk, D, device="cuda", dtype=torch.bfloat16)
        scale = 1 / math.sqrt(D)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Sq), float("nan"), device="cuda")
        ops.attention(q, k, v, causal=causal, out=out, lse=lse, mask_mod=mask_mod, softcap=softcap,
                      window_size=window_size)
        ref, ref_lse, keep = reference(q, k, v, mask_mod, causal, softcap, scale, window_size)
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        visible = keep.any(-1)
        lse_err = (lse.double() - ref_lse)[visible].abs().max().item()
        empty_ok = bool((out[~visible] == 0).all()) if (~visible).any() else True
        sdpa_err = float("nan")
        if softcap is None:
            kk, vv = (t.repeat_interleave(H // Hk, 1) for t in (k, v))
            sd = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=keep)
            sdpa_err = ((sd.double() - ref).nan_to_num(0.0).abs().max() / ref.abs().max()).item()
        bar = 2 * (sdpa_err if sdpa_err == sdpa_err else 4e-3) + 1e-3
        ok = err <= bar and lse_err < 1e-2 and empty_ok and not out.isnan().any()
        bad += not ok
        print(f"| {name} | {B}x{H}/{Hk}x{Sq}x{Sk} | {D} | {err:.2e} | {sdpa_err:.1e} | {lse_err:.1e} | {empty_ok} | "
              f"{'PASS' if ok else 'FAIL'} |", flush=True)
    print(f"correctness: {len(CASES) - bad}/{len(CASES)} PASS", flush=True)
    return bad


def speed(rounds):
    flash_attn_func = fa4("flash_attn_func")
    print("| B x H x S | D | what | warpsched us | FA4 us | SDPA (bool mask) us | FA4 / ws | SDPA / ws |")
    print("|---|---|---|---|---|---|---|---|")
    for B, H, S, D in ((4, 16, 4096, 128), (8, 16, 2048, 64), (1, 16, 32768, 128)):
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, S, D) views of the same data
        keep = (window(None, None, torch.arange(S, device="cuda").view(S, 1), torch.arange(S, device="cuda").view(1, S))
                if S <= 8192 else None)  # SDPA's boolean mask at 32k: 1 GB, and its slowest path
        for what, ws, fa, sdpa in (
                ("window 256 (window_size)", lambda: ops.attention(qt, kt, vt, causal=True, window_size=(W - 1, 0)),
                 flash_attn_func and (lambda: flash_attn_func(q, k, v, causal=True, window_size=(W - 1, 0))),
                 keep is not None and (lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                                                 attn_mask=keep))),
                ("window 256 (mask_mod)", lambda: ops.attention(qt, kt, vt, mask_mod=window),
                 flash_attn_func and (lambda: flash_attn_func(q, k, v, causal=True, window_size=(W - 1, 0))),
                 None),
                ("softcap 30", lambda: ops.attention(qt, kt, vt, softcap=30.0),
                 flash_attn_func and (lambda: flash_attn_func(q, k, v, softcap=30.0)), None)):
            sides = {"ws": ws}
            if fa:
                sides["fa4"] = fa
            if sdpa:
                sides["sdpa"] = sdpa
            med = alternate(torch, sides, rounds=rounds, iters=10)
            us = {n: med[n] * 1e3 for n in med}
            print(f"| {B}x{H}x{S} | {D} | {what} | {us['ws']:.0f} | {us.get('fa4', float('nan')):.0f} | "
                  f"{us.get('sdpa', float('nan')):.0f} | {us.get('fa4', float('nan')) / us['ws']:.3f}x | "
                  f"{us.get('sdpa', float('nan')) / us['ws']:.3f}x |", flush=True)


if __name__ == "__main__":
    check_then_time(__doc__, correctness, speed)
