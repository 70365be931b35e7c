"""``scaled_dot_product_attention`` with autograd on warpsched's attention kernels (imports torch).

Forward: ``torch.ops.warpsched.attention_fwd`` (O and the log-sum-exp, which is saved); backward:
``torch.ops.warpsched.attention_bwd`` (dQ, dK, dV from Q, K, V, O, dO and the LSE). Both are torch
custom ops with fake implementations, so a model that calls this traces under ``torch.compile``
without a graph break.
"""
from __future__ import annotations

import torch

from .. import torch_ops  # noqa: F401 - registers torch.ops.warpsched.*


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, left, right):
        out, lse = torch.ops.warpsched.attention_fwd(q, k, v, causal, scale, left, right)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.window = causal, scale, (left, right)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        # dout as autograd hands it: the backward's host copies it only when TMA cannot read it as it is
        dq, dk, dv = torch.ops.warpsched.attention_bwd(q, k, v, out, dout, lse, ctx.causal, ctx.scale, *ctx.window)
        return dq, dk, dv, None, None, None, None


def scaled_dot_product_attention(q, k, v, is_causal=False, scale=None, window_size=None):
    """softmax(q k^T * scale) v as ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=is_causal, scale=scale, enable_gqa=True)``, with gradients for q, k and v.

    q (B, H, S_q, D), k / v (B, H_kv, S_k, D), H a multiple of H_kv; bf16 or fp16; D 64 or 128 (the
    forward also takes 256, the backward does not yet); causal is top-left aligned, as SDPA's.
    ``window_size=(left, right)``: a sliding window, query i sees keys i - left .. i + right (-1 or None:
    unbounded; ``warpsched.ops.attention``), forward and backward visiting only the tiles it reaches.
    No attention mask or dropout (use torch's SDPA for those)."""
    left, right = (-1, -1) if window_size is None else (-1 if w is None else w for w in window_size)
    return _Attention.apply(q, k, v, bool(is_causal), scale, left, right)
