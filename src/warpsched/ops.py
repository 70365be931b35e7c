"""Torch-facing operators backed by warpsched kernels.

The kernels live in ``warpsched.kernels`` and import cutlass (CuTe DSL) and torch only when an
operator is first called, so ``import warpsched`` stays light. Each kernel is a warpsched program
whose schedule the checker proves while the kernel is traced; ``warpsched.ops.verdicts()``
returns the checker's verdict per compiled variant.
"""
from __future__ import annotations

from .errors import user_facing


@user_facing
def attention(q, k, v, causal=False, scale=None, *, out=None, lse=None, return_lse=False, mask_mod=None,
              softcap=None, window_size=None, num_splits=None, pack_gqa=None):
    """Scaled dot-product attention forward on Hopper (sm_90a), as
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)``.

    ``q``: (B, H, S_q, D); ``k``, ``v``: (B, H_kv, S_k, D) with H a multiple of H_kv (grouped-query
    attention); bf16 or fp16; D 64, 128 or 256; any S_q, S_k >= 1. ``causal`` masks key j > query i
    (top-left aligned, as SDPA's ``is_causal``). ``scale`` defaults to 1 / sqrt(D). Returns the
    output (B, H, S_q, D) in q's dtype, and with ``return_lse`` also the (B, H, S_q) fp32
    log-sum-exp of the scaled scores. ``out`` / ``lse``: preallocated results.
    ``window_size=(left, right)``: a sliding window, query i sees keys i - left .. i + right (-1 or None:
    unbounded; as flash_attn's, from the diagonal ``causal`` uses), and the kernel visits only the K/V
    tiles the window reaches. ``mask_mod(batch, head, q_idx, kv_idx)``: a user mask traced into the kernel
    (True: attend; combine comparisons with ``&`` / ``|`` / ``~``), applied to every tile the unit visits;
    ``softcap``: scores s become softcap * tanh(s / softcap). The backward takes the same three
    (``attention_backward``; ``warpsched.kernels.attention.masks``).
    ``num_splits``: split-KV, each Q block's keys cut into that many runs on their own CTAs, merged by a
    combine step (fp32 partials); None (default) splits by itself when the launch's Q blocks would leave
    SMs idle over more than 4 K/V tiles (decode: a few query rows over a long K/V); 1: never.
    ``pack_gqa``: a grouped-query decode (H / H_kv * S_q <= 128 query rows per K/V head, no causal mask,
    window or ``mask_mod``, q's heads and rows viewable as one run of rows) runs as its K/V heads, each Q
    block holding the rows of every query head that reads it, so K / V are read once per group
    (``attention.host.gqa_packed``): None (default) or True where that applies, False never.
    Unsupported input raises ``AttentionConfigError`` (a ``ValueError``) naming what to change.
    """
    from warpsched.kernels.attention import host as _attention

    return _attention.attention(q, k, v, causal=causal, scale=scale, out=out, lse=lse, return_lse=return_lse,
                                mask_mod=mask_mod, softcap=softcap, window_size=window_size, num_splits=num_splits,
                                pack_gqa=pack_gqa)


@user_facing
def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k=None, causal=False, scale=None,
                     *, return_lse=False, window_size=None, softcap=None, mask_mod=None, out=None, lse=None):
    """Attention over packed variable-length sequences on Hopper, as ``flash_attn_varlen_func``: ``q``
    (total_q, H, D), ``k`` / ``v`` (total_k, H_kv, D) hold B sequences back to back, sequence b's queries at
    rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and its keys at ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]``
    (int32 tensors of B + 1 offsets on the GPU; empty sequences allowed: rows without keys get O = 0 and
    LSE = +inf). ``max_seqlen_q``: an int, at least the longest query sequence (it sizes the grid; nothing
    is synchronized to find it). Returns out (total_q, H, D), and with ``return_lse`` the (H, total_q) fp32
    LSE. ``causal`` is top-left within each sequence, as ``attention``'s (the same as flash_attn's when a
    sequence has as many queries as keys); ``window_size``, ``softcap`` and ``mask_mod`` as ``attention``'s,
    with q_idx / kv_idx counted from the sequence's start and ``batch`` its index."""
    from warpsched.kernels.attention import varlen as _varlen

    return _varlen.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                    return_lse, window_size, softcap, mask_mod, out, lse)


@user_facing
def attention_paged(q, k_cache, v_cache, page_table, cache_seqlens, causal=False, scale=None, *, num_splits=None,
                    return_lse=False, window_size=None, softcap=None, mask_mod=None, pack_gqa=None):
    """Attention over a paged K/V cache on Hopper, as flash_attn's ``page_table`` / ``seqused_k``: ``q`` (B, H,
    S_q, D) in SDPA's layout, ``k_cache`` / ``v_cache`` (pages, page_size, H_kv, D), ``page_table`` (B, pages
    per sequence) int32, the cache page holding each run of page_size keys of sequence b, ``cache_seqlens``
    (B,) int32, the keys of each sequence. ``page_size`` must be the kernel's K/V tile: 128 keys (64 at head
    dim 256; ``warpsched.kernels.attention.paged.page_size_for``). Decode shapes split the keys as
    ``attention``'s ``num_splits`` does. Returns out (B, H, S_q, D), with ``return_lse`` also the LSE;
    ``causal`` / ``window_size`` / ``softcap`` / ``mask_mod`` / ``pack_gqa`` as ``attention``'s (positions from
    the sequence's first key)."""
    from warpsched.kernels.attention import paged as _paged

    return _paged.attention_paged(q, k_cache, v_cache, page_table, cache_seqlens, causal, scale, num_splits,
                                  return_lse, window_size, softcap, mask_mod, pack_gqa)


@user_facing
def attention_varlen_backward(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              causal=False, scale=None, *, window_size=None, softcap=None, mask_mod=None, dlse=None):
    """The gradients (dq, dk, dv) of ``out = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, ...)`` for
    the upstream ``dout``, given the forward's (H, total_q) ``lse`` (``return_lse=True``); dq has q's and dk /
    dv k's (total, heads, D) shape (GQA: summed over each K/V head's query heads). D 64, 128 or 256;
    ``max_seqlen_q`` / ``max_seqlen_k`` ints at least the longest sequences (they size the grid). The kernel is
    the backward's program (``attention_backward``) reading each sequence's rows in place. ``dlse`` (H, total_q):
    the upstream gradient of the LSE too, where a caller used it, as ``attention_backward``'s."""
    from warpsched.kernels.attention import varlen as _varlen

    return _varlen.attention_varlen_backward(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                             max_seqlen_k, causal, scale, window_size, softcap, mask_mod, dlse=dlse)


@user_facing
def attention_backward(q, k, v, out, dout, lse, causal=False, scale=None, *, window_size=None, mask_mod=None,
                       softcap=None, deterministic=False, dlse=None):
    """The gradients (dq, dk, dv) of ``out = attention(q, k, v, causal, scale)`` for the upstream gradient
    ``dout``, given the forward's ``lse`` (``attention(..., return_lse=True)``), on Hopper (sm_90a).

    Shapes as ``attention``; D in (64, 128, 256); dk / dv have k's shape (summed over the query heads that share
    a K/V head: grouped-query attention). dQ is accumulated in fp32 and returned in q's dtype. The kernel is
    a warpsched program proven SAFE for every sequence length (``warpsched.kernels.attention.backward``).
    ``window_size``, ``mask_mod``, ``softcap``: the forward's (``attention``); with a window a key block
    visits only the Q blocks that see it; P is recomputed with the mask and the cap, and dS goes through
    the cap's derivative. ``deterministic=True``: the key blocks add into each Q block's dQ in key-block
    order (a GMEM turn per Q block, ``warpsched.kernels.attention.dq_order``, proven free of hangs and
    unordered adds by the grid checker), so dq is bitwise the same from run to run; else fp32 reduce-adds
    in whatever order the CTAs reach them. ``dlse`` (B, H, S_q): the upstream gradient of the forward's LSE,
    where the caller used the LSE itself (flash_attn's ``return_lse``); it joins delta = rowsum(dO * O), since
    d LSE_i / d s_ij = P_ij.
    Unsupported input raises ``AttentionConfigError`` naming what to change.
    """
    from warpsched.kernels.attention import backward_host as _bwd

    return _bwd.attention_backward(q, k, v, out, dout, lse, causal=causal, scale=scale, window_size=window_size,
                                   mask_mod=mask_mod, softcap=softcap, deterministic=deterministic, dlse=dlse)


@user_facing
def gemm(a, b, out=None, *, bias=None, activation=None, residual=None, alpha=None, scale_a=None, scale_b=None,
         out_dtype=None, config="auto", cache=None):
    """out = act(alpha * (a @ b) + bias) + residual on Hopper: bf16 / fp16 (out the same dtype), or
    fp8 e4m3 / e5m2 with per-tensor ``scale_a`` / ``scale_b`` (floats, or one-element tensors read on
    the device: no host sync, CUDA graphs replay their current values) and a bf16 (default) or fp16
    ``out_dtype``; layouts as ``torch._scaled_mm``: ``a`` (M, K) row-major, or (..., K) (its rows, as
    a view), ``b`` (K, N) column-major (``w.t()`` of an (N, K) weight); batched: ``a`` (L, M, K) and
    ``b`` (L, K, N) (each product K-major), one launch.

    The fused epilogue runs in the kernel before the TMA store (docs/gemm.md "Fused epilogues"):
    ``alpha`` a float output scale (fp8: times the scales), ``bias`` (N,) in the output dtype or fp32,
    ``activation`` "relu", "relu2", "gelu" (erf), "gelu_tanh", "silu" or "swiglu" (b holds gate and up
    interleaved in blocks of 8 columns: ``interleave_gate_up``; out has N / 2 columns), ``residual``
    a tensor of the output's shape and dtype, added last.

    The persistent warp-specialized GEMM (``warpsched.kernels.gemm_*``), autotuned per (shape, dtypes,
    device) with the choice cached on disk (``config="auto"``; or "default", or a configuration dict).
    The first call for a shape checks, tunes and compiles; later calls launch through TVM FFI within a
    few microseconds of ``torch.matmul`` (docs/torch.md). Unsupported input raises
    ``GemmArgumentError`` (a ``ValueError``) naming the fix. See ``warpsched.kernels.gemm.ops.gemm``."""
    if getattr(a, "dim", None) is not None and getattr(b, "dim", None) is not None and a.dim() == 3 and b.dim() == 3:
        from warpsched.kernels.gemm.batched import gemm_batched

        return gemm_batched(a, b, out, bias=bias, activation=activation, residual=residual, alpha=alpha,
                            scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, config=config, cache=cache)
    from warpsched.kernels.gemm import ops as _gemm

    return _gemm.gemm(a, b, out, bias=bias, activation=activation, residual=residual, alpha=alpha, scale_a=scale_a,
                      scale_b=scale_b, out_dtype=out_dtype, config=config, cache=cache)


@user_facing
def interleave_gate_up(w_gate, w_up, bias_gate=None, bias_up=None):
    """SwiGLU's weight for ``gemm(x, w.t(), activation="swiglu")``: the (I, K) gate and up weights
    interleaved in blocks of 8 rows as one (2 I, K) weight (and their biases as one (2 I,) bias, or
    None). Returns (w, bias). ``gemm`` then returns silu(x W_g^T + b_g) * (x W_u^T + b_u), (..., I)."""
    from warpsched.kernels.gemm import ops as _gemm

    return _gemm.interleave_gate_up(w_gate, w_up, bias_gate, bias_up)


def verdicts():
    """{(dtype, head_dim, causal, options): checker verdict} for every attention kernel compiled so far."""
    import sys

    mod = sys.modules.get("warpsched.kernels.attention.host")
    return dict(mod.VERDICT_OF) if mod is not None else {}
