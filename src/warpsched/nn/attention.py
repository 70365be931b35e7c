"""``scaled_dot_product_attention`` with autograd on warpsched's attention kernels (imports torch).

Forward: ``torch.ops.warpsched.attention_fwd`` (O and the log-sum-exp, which is saved); backward:
``torch.ops.warpsched.attention_bwd`` (dQ, dK, dV from Q, K, V, O, dO and the LSE). Both are torch
custom ops with fake implementations, so a model that calls this traces under ``torch.compile``
without a graph break.
"""
from __future__ import annotations

import torch

from .. import ops
from .. import torch_ops  # registers torch.ops.warpsched.*
from ._eager import eager
from .functional import _native_ready


def _run(name, t):
    """``torch.ops.warpsched_native.<name>`` (launched from C++: ``warpsched.native``, eager and compiled) where it
    is built and on; else ``torch_ops.<name>`` (the kernels' host) for a plain tensor in eager mode, or the custom
    op ``torch.ops.warpsched.<name>`` (``_eager.eager``)."""
    if getattr(t, "is_cuda", False) and _native_ready():
        return getattr(torch.ops.warpsched_native, name).default
    return getattr(torch_ops, name) if eager(t) else getattr(torch.ops.warpsched, name)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, left, right, softcap):
        out, lse = _run("attention_fwd", q)(q, k, v, causal, scale, left, right, softcap)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, scale, left, right, softcap)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        # dout as autograd hands it: the backward's host copies it only when TMA cannot read it as it is
        dq, dk, dv = _run("attention_bwd", dout)(q, k, v, out, dout, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None


class _MaskedAttention(torch.autograd.Function):
    """With a ``mask_mod`` (a Python function traced into the kernels, which a torch op's schema cannot
    carry): ``warpsched.ops`` directly, so eager only."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, window_size, softcap, mask_mod):
        out, lse = ops.attention(q, k, v, causal=causal, scale=scale, return_lse=True, window_size=window_size,
                                 softcap=softcap, mask_mod=mask_mod)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = dict(causal=causal, scale=scale, window_size=window_size, softcap=softcap, mask_mod=mask_mod)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ops.attention_backward(q, k, v, out, dout, lse, **ctx.args,
                                            deterministic=torch.are_deterministic_algorithms_enabled())
        return dq, dk, dv, None, None, None, None, None


class _VarlenAttention(torch.autograd.Function):
    """Packed sequences: ``warpsched.ops`` eagerly (and with a ``mask_mod``), the custom ops
    ``torch.ops.warpsched.attention_varlen_fwd`` / ``_bwd`` under a tracer (``_varlen_forward`` / ``_backward``)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window_size, softcap, mask_mod):
        out, lse = _varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window_size, softcap, mask_mod)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.args = (max_q, max_k, causal, scale)
        ctx.masks = dict(window_size=window_size, softcap=softcap, mask_mod=mask_mod)
        return out

    @staticmethod
    def backward(ctx, dout):
        dq, dk, dv = _varlen_backward(ctx, dout)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None


def _varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window_size, softcap, mask_mod):
    """(O, LSE) of packed sequences: ``warpsched.ops`` eagerly (and with a ``mask_mod``, which no op schema
    carries), the custom op under a tracer."""
    if mask_mod is None and not eager(q):
        return torch.ops.warpsched.attention_varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale,
                                                        *_sides(window_size), softcap)
    return ops.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, return_lse=True,
                                window_size=window_size, softcap=softcap, mask_mod=mask_mod)


def _varlen_backward(ctx, dout, dlse=None):
    """(dq, dk, dv) of a varlen node (``ctx``: what ``_VarlenAttention`` / ``flash._FlashVarlen`` saved: the tensors,
    ``args`` (max_q, max_k, causal, scale) and ``masks``), ``dlse`` the LSE's gradient if one reached it; routed as
    ``_varlen_forward``."""
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    m = ctx.masks
    if m["mask_mod"] is None and not eager(dout):
        return torch.ops.warpsched.attention_varlen_bwd(q, k, v, out, dout, lse, cu_q, cu_k, *ctx.args,
                                                        *_sides(m["window_size"]), m["softcap"], dlse)
    return ops.attention_varlen_backward(q, k, v, out, dout, lse, cu_q, cu_k, *ctx.args, **m, dlse=dlse)


def _sides(window_size):
    """(left, right) of a window for the ops (-1: no bound on that side)."""
    return (-1, -1) if window_size is None else tuple(-1 if w is None else int(w) for w in window_size)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, scale=None,
                     window_size=None, softcap=None, mask_mod=None):
    """Attention over packed variable-length sequences with gradients for q, k and v, as flash_attn's
    ``flash_attn_varlen_func``: q (total_q, H, D), k / v (total_k, H_kv, D), int32 ``cu_seqlens_*`` offsets
    (B + 1) and the longest lengths as ints (``warpsched.ops.attention_varlen``). D 64, 128 or 256.
    Eager calls go to ``warpsched.ops``; under ``torch.compile`` (no ``mask_mod``) the custom ops
    ``torch.ops.warpsched.attention_varlen_fwd`` / ``_bwd``, which trace without a graph break."""
    return _VarlenAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                                  bool(causal), scale, window_size, softcap, mask_mod)


def scaled_dot_product_attention(q, k, v, is_causal=False, scale=None, window_size=None, softcap=None, mask_mod=None):
    """softmax(q k^T * scale) v as ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=is_causal, scale=scale, enable_gqa=True)``, with gradients for q, k and v.

    q (B, H, S_q, D), k / v (B, H_kv, S_k, D), H a multiple of H_kv; bf16 or fp16; D 64, 128 or 256;
    causal is top-left aligned, as SDPA's.
    ``window_size=(left, right)``: a sliding window, query i sees keys i - left .. i + right (-1 or None:
    unbounded; ``warpsched.ops.attention``), forward and backward visiting only the tiles it reaches;
    ``softcap``: scores s become softcap * tanh(s / softcap); ``mask_mod(batch, head, q_idx, kv_idx)``: a
    mask traced into both kernels (eager only: a torch op cannot carry the function). No tensor attention
    mask or dropout (use torch's SDPA for those). Under ``torch.use_deterministic_algorithms(True)`` the
    backward adds dQ in a fixed order (``warpsched.ops.attention_backward(deterministic=True)``)."""
    if mask_mod is not None:
        return _MaskedAttention.apply(q, k, v, bool(is_causal), scale, window_size, softcap, mask_mod)
    left, right = (-1, -1) if window_size is None else (-1 if w is None else w for w in window_size)
    # getattr: what is not a tensor reaches the kernels' checks, which name it
    if not (torch.is_grad_enabled() and (getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False)
                                         or getattr(v, "requires_grad", False))):
        # inference: the forward alone, without autograd's bookkeeping (nothing is saved)
        return _run("attention_fwd", q)(q, k, v, bool(is_causal), scale, left, right, softcap)[0]
    if eager(q) and getattr(q, "is_cuda", False) and _native_ready():  # the autograd node in C++ too (warpsched.native)
        return torch.ops.warpsched_native.attention.default(q, k, v, bool(is_causal), scale, left, right, softcap)
    return _Attention.apply(q, k, v, bool(is_causal), scale, left, right, softcap)
