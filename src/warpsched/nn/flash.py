"""flash_attn.cute's interface on warpsched's attention kernels (imports torch): ``flash_attn_func`` and
``flash_attn_varlen_func`` with FlashAttention-4's arguments, layouts and return values, so a model written
against ``flash_attn.cute`` changes its import and nothing else::

    from warpsched.nn.flash import flash_attn_func          # was: from flash_attn.cute import flash_attn_func
    out, lse = flash_attn_func(q, k, v, causal=True)        # q (B, S_q, H, D), k / v (B, S_k, H_kv, D)

What it maps, and why:

- **Layout.** flash_attn's tensors are (B, S, H, D); warpsched's kernels take (B, H, S, D) views of them
  (no copy: a transpose), and O comes back in q's (B, S, H, D) order.
- **Causal alignment.** flash_attn aligns the causal diagonal (and a window) bottom-right: with S_q queries
  over S_k keys, query i sees keys up to i + S_k - S_q. warpsched's kernels align it top-left, so a call with
  S_q != S_k runs as the window shifted by S_k - S_q; keys no query sees (a sliding window over a long cache)
  are left out of the call (views, their dK and dV zero). Where queries would see no key at all (S_q > S_k with
  causal) the call is refused, naming the case.
  Varlen batches align per sequence: warpsched's kernels and flash_attn's agree where each sequence has as many
  queries as keys, which is checked (free when ``cu_seqlens_q is cu_seqlens_k``, one comparison on the device
  and a host sync otherwise; under a tracer only the first); a batch where they differ is refused with causal or
  a window.
- **Eager and compiled.** Without a ``mask_mod`` the calls are torch ops: eager ``flash_attn_func`` with a
  gradient is a C++ autograd node (``warpsched.native``), and under ``torch.compile`` both functions trace to
  warpsched's custom ops (``torch.ops.warpsched.attention_*``) without a graph break.
- **Return value.** ``(out, lse)``, as FlashAttention-4: lse (B, H, S_q) fp32 (varlen: (H, total_q)), or None
  when neither ``return_lse`` nor a gradient asked for it. A gradient that reaches the LSE (a loss that uses
  it) flows back through ``warpsched.ops.attention_backward(dlse=...)`` (varlen: ``attention_varlen_backward``'s).
- **Hints and the rest.** ``num_splits`` and ``pack_gqa`` are speed hints: warpsched decides both itself (the
  results are the same). ``deterministic`` is the backward's deterministic dQ. Arguments warpsched has no
  kernel for (``qv``, ``learnable_sink``, ``score_mod``, block sparsity, gathered KV, ``seqused_q``) are refused
  by name when given a value other than their default.
"""
from __future__ import annotations

import operator

import torch

from .. import ops
from .. import torch_ops  # registers torch.ops.warpsched.*
from ..kernels.attention.masks import AttentionConfigError
from ._eager import eager
from .attention import _run, _sides, _varlen_backward, _varlen_forward
from .functional import _native_ready

# FlashAttention-4 arguments without a warpsched kernel: refused unless left at their defaults
_UNSUPPORTED = ("qv", "gather_kv_indices", "learnable_sink", "score_mod", "score_mod_bwd", "aux_tensors",
                "aux_scalars", "block_sparse_tensors", "block_sparse_tensors_bwd", "seqused_q", "min_seqlen_k",
                "scheduler_metadata", "seqlen_k_per_split")
_IGNORED = ("gather_bwd_recompute_p", "gather_bwd_token_chunk", "disable_scheduler_metadata")  # no effect here


def _refuse_unsupported(fn, extra):
    for name, value in extra.items():
        if name in _IGNORED:
            continue
        if name in _UNSUPPORTED:
            if value is None or value is False:
                continue
            raise AttentionConfigError(f"{fn}({name}=...): warpsched has no kernel for flash_attn's {name}; leave it "
                                       "at its default (None), or call flash_attn.cute for this case")
        raise TypeError(f"{fn}() got an unexpected keyword argument {name!r}")


def _bounds(window_size, causal, sq, sk, where):
    """flash_attn's (left, right) window and causal flag, bottom-right aligned (S_q queries over S_k keys), as
    warpsched's top-left ``(causal, (left, right) or None, first key)``: the keys before the first no query sees
    (a window that starts past query 0's top-left diagonal, e.g. a sliding window over a long cache), and the
    caller passes K and V from there on (views; their dK, dV are zero); a bound no query reaches is dropped (one
    token over its cache, causal, sees every key: no mask at all)."""
    shift = sk - sq
    try:
        left, right = (None, None) if window_size is None else window_size
    except (TypeError, ValueError):
        raise AttentionConfigError(f"{where}: window_size={window_size!r}: expected (left, right), -1 or None for an "
                                   "unbounded side") from None
    left, right = _key_count(left, "left", window_size, where), _key_count(right, "right", window_size, where)
    if causal:
        if right not in (None, 0):
            raise AttentionConfigError(f"{where}: window_size={window_size!r} with causal=True: causal ends the "
                                       "window at the query; pass window_size=(left, 0) or causal=False")
        right = 0
    if shift == 0:
        if causal:
            return True, (None if left is None else (left, 0)), 0
        return False, (None if left is None and right is None else (left, right)), 0
    # query i sees keys i + shift - left .. i + shift + right: top-left, i - (left - shift) .. i + (right + shift)
    left = None if left is None else left - shift
    right = None if right is None else right + shift
    start = 0
    if left is not None and left < 0:  # query i's first key is i + (-left): the first -left keys are nobody's
        start = -left
        left, right, sk = 0, (None if right is None else right - start), sk - start
    left = None if left is not None and left >= sq - 1 else left  # the last query's first key is key 0 or before
    right = None if right is not None and right >= sk - 1 else right  # the first query's last key is past S_k - 1
    if (left is not None and left < 0) or (right is not None and right < 0):
        raise AttentionConfigError(
            f"{where}: causal={causal}, window_size={window_size!r} with {sq} queries over {sk} keys: aligned "
            "bottom-right as flash_attn does, some queries would see no key or start past their own diagonal, "
            "which warpsched's kernels (top-left aligned) cannot express; call flash_attn.cute for this case, or "
            "warpsched.ops.attention with its top-left alignment")
    return False, (None if left is None and right is None else (left, right)), start


def _key_count(x, side, window_size, where):
    """One side of a window as an int >= 0, or None (None or -1: unbounded); any integer type (numpy's, a 0-d
    tensor's) is taken, anything else refused."""
    if x is None:
        return None
    try:
        n = None if isinstance(x, bool) else operator.index(x)
    except TypeError:
        n = None
    if n is None or n < -1:
        raise AttentionConfigError(f"{where}: window_size={window_size!r}: the {side} bound is not a key count >= 0 "
                                   "(or -1 / None)")
    return None if n == -1 else n


class _FlashAttention(torch.autograd.Function):
    """O and the LSE of (B, H, S, D) views, with the LSE's gradient taken into the backward. Without a
    ``mask_mod`` the forward and backward are the ops ``nn.scaled_dot_product_attention`` runs (``nn.attention._run``:
    launched from C++ where ``warpsched.native`` is built, the custom ops under a tracer), so an eager call costs
    what that one does and ``torch.compile`` traces the call without a graph break; a backward with the LSE's
    gradient or ``deterministic=True`` goes through ``torch.ops.warpsched.attention_bwd``, which takes both. With
    a ``mask_mod`` (a Python function no op schema carries): ``warpsched.ops``, eager only."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, window, softcap, mask_mod, deterministic):
        if mask_mod is None:
            left, right = _sides(window)
            out, lse = _run("attention_fwd", q)(q, k, v, causal, scale, left, right, softcap)
        else:
            out, lse = ops.attention(q, k, v, causal=causal, scale=scale, return_lse=True, window_size=window,
                                     softcap=softcap, mask_mod=mask_mod)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = dict(causal=causal, scale=scale, window_size=window, softcap=softcap, mask_mod=mask_mod,
                        deterministic=deterministic)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        a = ctx.args
        # deterministic as asked, or as torch's deterministic mode says (as nn.scaled_dot_product_attention)
        exact = bool(a["deterministic"]) or torch.are_deterministic_algorithms_enabled()
        if a["mask_mod"] is not None:
            dq, dk, dv = ops.attention_backward(q, k, v, out, dout, lse, dlse=dlse, **dict(a, deterministic=exact))
        else:
            left, right = _sides(a["window_size"])
            args = (q, k, v, out, dout, lse, a["causal"], a["scale"], left, right, a["softcap"])
            if dlse is None and not a["deterministic"]:  # the op nn.scaled_dot_product_attention's backward runs
                dq, dk, dv = _run("attention_bwd", dout)(*args)
            else:  # the custom op takes both (its host reads torch's deterministic mode too)
                bwd = torch_ops.attention_bwd if eager(dout) else torch.ops.warpsched.attention_bwd
                dq, dk, dv = bwd(*args, dlse=dlse, deterministic=bool(a["deterministic"]))
        return dq, dk, dv, None, None, None, None, None, None


class _FlashVarlen(torch.autograd.Function):
    """O and the (H, total_q) LSE of packed sequences, the LSE's gradient taken into the backward (``varlen.fold_dlse``:
    delta's rows in the pre-pass's per-sequence layout). Under a tracer (no ``mask_mod``): the custom ops
    ``torch.ops.warpsched.attention_varlen_fwd`` / ``_bwd``."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window, softcap, mask_mod):
        out, lse = _varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window, softcap, mask_mod)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.args = (max_q, max_k, causal, scale)
        ctx.masks = dict(window_size=window, softcap=softcap, mask_mod=mask_mod)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        dout = torch.zeros_like(ctx.saved_tensors[3]) if dout is None else dout
        dq, dk, dv = _varlen_backward(ctx, dout, dlse)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None


def _wants_grad(*ts):
    return torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in ts)


def _dims(t, n, name, where):
    if not isinstance(t, torch.Tensor) or t.dim() != n:
        got = f"{t.dim()}-d tensor" if isinstance(t, torch.Tensor) else type(t).__name__
        layout = "(B, S, H, D)" if n == 4 else "(total, H, D)"
        raise AttentionConfigError(f"{where}: {name} is a {got}: expected a {n}-d {layout} tensor, flash_attn's layout")


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(None, None), softcap=0.0,
                    num_splits=1, pack_gqa=None, deterministic=False, mask_mod=None, return_lse=False, **flash_kwargs):
    """``flash_attn.cute.flash_attn_func`` on warpsched's kernels: q (B, S_q, H, D), k / v (B, S_k, H_kv, D), H a
    multiple of H_kv, bf16 / fp16, D 64, 128 or 256. Returns ``(out, lse)``: out (B, S_q, H, D), lse (B, H, S_q)
    fp32 or None. Causal and windows bottom-right aligned, as flash_attn's (module docstring); ``softcap`` 0
    means none; ``mask_mod(b, h, q_idx, kv_idx)`` as ``warpsched.ops.attention``'s (positions top-left);
    ``deterministic``: the backward's dQ added in a fixed order."""
    _refuse_unsupported("flash_attn_func", flash_kwargs)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _dims(t, 4, name, "flash_attn_func")
    causal, window, start = _bounds(window_size, bool(causal), q.shape[1], k.shape[1], "flash_attn_func")
    softcap = softcap or None
    if start:  # keys no query sees: left out (views, so their gradients are zeros)
        k, v = k[:, start:], v[:, start:]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    if not _wants_grad(q, k, v):
        hints = num_splits not in (0, 1) or pack_gqa is not None
        if mask_mod is None and not (hints and eager(q)):  # the forward op (native, or traceable: ``_run``)
            out, lse = _run("attention_fwd", q)(qh, kh, vh, causal, softmax_scale, *_sides(window), softcap)
        else:  # a mask_mod, or hints to pass on: the ops' host (eager)
            out, lse = ops.attention(qh, kh, vh, causal=causal, scale=softmax_scale, return_lse=True,
                                     window_size=window, softcap=softcap, mask_mod=mask_mod,
                                     num_splits=None if num_splits in (0, 1) else num_splits, pack_gqa=pack_gqa)
        return out.transpose(1, 2), (lse if return_lse else None)
    if mask_mod is None and eager(q) and getattr(q, "is_cuda", False) and _native_ready():
        # the autograd node in C++ too (warpsched.native): an eager training call's host cost
        out, lse = torch.ops.warpsched_native.attention_lse.default(qh, kh, vh, causal, softmax_scale, *_sides(window),
                                                                   softcap, bool(deterministic))
        return out.transpose(1, 2), lse
    out, lse = _FlashAttention.apply(qh, kh, vh, causal, softmax_scale, window, softcap, mask_mod, bool(deterministic))
    return out.transpose(1, 2), lse


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                           window_size=(None, None), softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False,
                           mask_mod=None, return_lse=False, **flash_kwargs):
    """``flash_attn.cute.flash_attn_varlen_func`` on warpsched's kernels.

    Packed sequences: q (total_q, H, D), k / v (total_k, H_kv, D), int32 ``cu_seqlens_q`` / ``cu_seqlens_k`` (B + 1
    offsets), ``max_seqlen_q`` / ``max_seqlen_k`` ints (they size the grid). Returns ``(out, lse)``: out (total_q,
    H, D), lse (H, total_q) or None. With causal or a window each sequence must have as many queries as keys
    (module docstring). ``deterministic`` is accepted for the interface; the varlen backward adds dQ in the order
    the CTAs reach it.

    A paged K/V cache (inference): q (B, S_q, H, D), k / v (pages, page_size, H_kv, D) caches, ``page_table`` (B,
    pages per sequence) and ``seqused_k`` (B,) int32 (``warpsched.ops.attention_paged``; page_size 128 keys, 64 at
    head dim 256). Causal there needs S_q = 1 (one new token sees its whole cache)."""
    _refuse_unsupported("flash_attn_varlen_func", flash_kwargs)
    softcap = softcap or None
    if page_table is not None:
        return _paged(q, k, v, page_table, seqused_k, softmax_scale, bool(causal), window_size, softcap, num_splits,
                      pack_gqa, mask_mod, return_lse)
    if seqused_k is not None:
        raise AttentionConfigError("flash_attn_varlen_func(seqused_k=...) without a page_table: warpsched reads each "
                                   "sequence's keys from cu_seqlens_k; pass cu_seqlens_k with those lengths")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _dims(t, 3, name, "flash_attn_varlen_func")
    if cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None:
        raise AttentionConfigError("flash_attn_varlen_func: warpsched needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q "
                                   "and max_seqlen_k (the packed batch's offsets and longest lengths)")
    causal, window, _ = _bounds(window_size, bool(causal), 1, 1, "flash_attn_varlen_func")
    if (causal or window is not None) and not _same_lengths(cu_seqlens_q, cu_seqlens_k):
        raise AttentionConfigError(
            "flash_attn_varlen_func: causal or a window over sequences whose query and key counts differ: flash_attn "
            "aligns the diagonal bottom-right in each sequence, warpsched's varlen kernels top-left; they agree only "
            "where every sequence has as many queries as keys (under torch.compile, which cannot compare the offsets "
            "on the device, pass one tensor as both). Call warpsched.ops.attention_varlen (top-left) or "
            "flash_attn.cute for this batch")
    max_q, max_k = (_length(n, name) for n, name in ((max_seqlen_q, "max_seqlen_q"), (max_seqlen_k, "max_seqlen_k")))
    if not _wants_grad(q, k, v):
        out, lse = _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, softmax_scale, window,
                                   softcap, mask_mod)
        return out, (lse if return_lse else None)
    return _FlashVarlen.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, softmax_scale, window,
                              softcap, mask_mod)


def _length(n, name):
    """A longest-sequence length as an int (any integer type: operator.index), or AttentionConfigError naming it."""
    try:
        value = None if isinstance(n, bool) else operator.index(n)
    except TypeError:
        value = None
    if value is None or value < 0:
        raise AttentionConfigError(f"flash_attn_varlen_func: {name}={n!r}: expected the longest sequence's length, "
                                   "an int >= 0 (it sizes the grid)")
    return value


def _same_lengths(cu_q, cu_k):
    """Whether every sequence has as many queries as keys: the same offsets (one tensor, or equal ones; under a
    tracer, which cannot read a device value, the same tensor only)."""
    if cu_q is cu_k:
        return True
    if not eager(cu_q):
        return False
    try:
        return tuple(cu_q.shape) == tuple(cu_k.shape) and bool(torch.equal(cu_q, cu_k))
    except (AttributeError, TypeError, RuntimeError):
        return False  # not tensors: the kernels' checks name them


def _paged(q, k_cache, v_cache, page_table, seqused_k, scale, causal, window_size, softcap, num_splits, pack_gqa,
           mask_mod, return_lse):
    where = "flash_attn_varlen_func(page_table=...)"
    if seqused_k is None:
        raise AttentionConfigError(f"{where}: seqused_k (B,) int32, each sequence's keys in the cache, is needed")
    _dims(q, 4, "q", where)
    if _wants_grad(q, k_cache, v_cache):
        raise AttentionConfigError(f"{where}: a gradient was asked for; the paged kernel is for inference (run it "
                                   "under torch.no_grad(), or pass packed K/V without a page table)")
    if _bounds(window_size, False, 1, 1, where)[1] is not None:  # a bound on either side (malformed: refused there)
        raise AttentionConfigError(f"{where}: window_size={window_size!r}: a window over a paged cache aligns "
                                   "per sequence; warpsched's paged kernel takes it top-left only: call "
                                   "warpsched.ops.attention_paged")
    if causal and q.shape[1] != 1:
        raise AttentionConfigError(f"{where}: causal with {q.shape[1]} new tokens a sequence: flash_attn aligns the "
                                   "diagonal to each sequence's cache length, which warpsched's paged kernel "
                                   "(top-left) does not; causal runs here with one token a sequence (decode)")
    out, lse = ops.attention_paged(q.transpose(1, 2), k_cache, v_cache, page_table, seqused_k, False, scale,
                                   num_splits=None if num_splits in (0, 1) else num_splits, return_lse=True,
                                   softcap=softcap, mask_mod=mask_mod, pack_gqa=pack_gqa)
    return out.transpose(1, 2), (lse if return_lse else None)
