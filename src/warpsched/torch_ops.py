"""warpsched's kernels as torch operators: ``import warpsched.torch_ops`` registers

- ``torch.ops.warpsched.gemm(a, b, scale_a=None, scale_b=None, out_dtype=None, bias=None, activation=None,
  residual=None, alpha=None)``: ``warpsched.ops.gemm`` (a (M, K) row-major, b (K, N) column-major, or a
  batched (L, M, K) x (L, K, N); fp8 with per-tensor scales; the fused epilogue);
- ``torch.ops.warpsched.linear(x, weight, bias, activation)``: a linear layer, act(x @ weight.T + bias) for a (N, K)
  weight (what ``warpsched.nn.functional.linear`` runs under torch.compile; every argument required);
- ``torch.ops.warpsched.attention_fwd(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1,
  softcap=None) -> (out, lse)``: ``warpsched.ops.attention`` with its log-sum-exp (-1: no window bound
  on that side);
- ``torch.ops.warpsched.attention_bwd(q, k, v, out, dout, lse, causal=False, scale=None, window_left=-1,
  window_right=-1, softcap=None, dlse=None, deterministic=False) -> (dq, dk, dv)``:
  ``warpsched.ops.attention_backward`` (``dlse``: the LSE's own gradient; dQ in a fixed order with
  ``deterministic`` or torch's deterministic mode).

- ``torch.ops.warpsched.attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
  causal=False, scale=None, window_left=-1, window_right=-1, softcap=None) -> (out, lse)`` and
  ``attention_varlen_bwd(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
  -> (dq, dk, dv)``: ``warpsched.ops.attention_varlen`` / ``attention_varlen_backward`` (packed sequences; what
  ``nn.flash.flash_attn_varlen_func`` and ``nn.attention_varlen`` call under a tracer).

Each has a fake (meta) implementation, so ``torch.compile(fullgraph=True)`` traces a model that calls
them without a graph break, and CUDA-graph capture works (fp8 scales are read on the device). The
ops are functional (they return new tensors); the kernels are the ones ``warpsched.ops`` runs, so a
compiled model computes the same bits as the eager one. They are defined with ``torch.library.Library``
and a CUDA kernel registration (what ``torch.library.custom_op`` wraps), which keeps the dispatcher's
cost per call low. Importing this module imports torch.
"""
from __future__ import annotations

import torch

from . import ops
from .kernels.attention import empty_out  # pure Python
from .kernels.gemm import ops as _gemm_ops  # no cutlass until a kernel is built

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_LIB = torch.library.Library("warpsched", "DEF")  # noqa: TOR901 - the op namespace is ours
_LIB.define("gemm(Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None, ScalarType? out_dtype=None, "
            "Tensor? bias=None, str? activation=None, Tensor? residual=None, float? alpha=None) -> Tensor")
# a linear layer's GEMM, what warpsched.nn.functional.linear calls under a tracer: no defaults, so a compiled graph
# passes its arguments positionally (the dispatcher parses each keyword argument: ~1 us apiece on a CPU)
_LIB.define("linear(Tensor x, Tensor weight, Tensor? bias, str? activation) -> Tensor")
_LIB.define("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, int window_left=-1, "
            "int window_right=-1, float? softcap=None) -> (Tensor, Tensor)")
_LIB.define("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, bool causal=False, "
            "float? scale=None, int window_left=-1, int window_right=-1, float? softcap=None, Tensor? dlse=None, "
            "bool deterministic=False) -> (Tensor, Tensor, Tensor)")
_LIB.define("attention_varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
            "int max_seqlen_q, int max_seqlen_k, bool causal=False, float? scale=None, int window_left=-1, "
            "int window_right=-1, float? softcap=None) -> (Tensor, Tensor)")
_LIB.define("attention_varlen_bwd(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, "
            "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, bool causal=False, "
            "float? scale=None, int window_left=-1, int window_right=-1, float? softcap=None, Tensor? dlse=None) "
            "-> (Tensor, Tensor, Tensor)")


def gemm(a, b, scale_a=None, scale_b=None, out_dtype=None, bias=None, activation=None, residual=None, alpha=None):
    """act(alpha * (a @ b) + bias) + residual on warpsched's persistent GEMM (see ``warpsched.ops.gemm``)."""
    # a compiled graph calls this once per GEMM: a linear layer's (2-D b, at most a bias and an activation)
    # through gemm.ops.linear's short path, b being its weight transposed; others straight to the GEMM's host
    # (batched through ops.gemm)
    if (b.dim() == 2 and scale_a is None and scale_b is None and out_dtype is None and residual is None
            and alpha is None):
        return linear(a, b.t(), bias, activation)
    run = ops.gemm if a.dim() == 3 and b.dim() == 3 else _gemm_ops.gemm
    return run(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, bias=bias, activation=activation,
               residual=residual, alpha=alpha)


def linear(x, weight, bias, activation):
    """act(x @ weight.T + bias) for x (..., K) and a (N, K) weight: ``gemm.ops.linear`` (``gemm(x, weight.t(),
    bias=bias, activation=activation)`` on its short launch path)."""
    return _gemm_ops.linear(x, weight, bias, activation)


def _window(left, right):
    return None if left < 0 and right < 0 else (left, right)


def attention_fwd(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None):
    """softmax(q k^T * scale) v and its (B, H, S_q) fp32 log-sum-exp (``warpsched.ops.attention``'s host)."""
    # straight to the forward's host (imports cutlass: at the first call, not with this module); no out=: it
    # allocates O as the fake does (``empty_out``) and, given none, keeps the call's launch plan, so a later call
    # with the same shapes skips the host checks
    from .kernels.attention import host

    return host.attention(q, k, v, causal, scale, None, None, True, None, softcap, _window(window_left, window_right))


def attention_bwd(q, k, v, out, dout, lse, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None,
                  dlse=None, deterministic=False):
    """(dq, dk, dv) of ``attention_fwd`` (``warpsched.ops.attention_backward``'s host), with ``dlse`` the gradient
    of its LSE output if one reached it; dQ in a fixed order with ``deterministic`` or when torch's
    deterministic mode is on (``torch.use_deterministic_algorithms(True)``)."""
    from .kernels.attention import backward_host  # straight to the backward's host, as attention_fwd

    return backward_host.attention_backward(q, k, v, out, dout, lse, causal=causal, scale=scale,
                                            window_size=_window(window_left, window_right), softcap=softcap,
                                            deterministic=deterministic or torch.are_deterministic_algorithms_enabled(),
                                            dlse=dlse)


def attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, scale=None,
                         window_left=-1, window_right=-1, softcap=None):
    """(out (total_q, H, D), lse (H, total_q)) of packed sequences (``warpsched.ops.attention_varlen``)."""
    return ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                return_lse=True, window_size=_window(window_left, window_right), softcap=softcap)


def attention_varlen_bwd(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         causal=False, scale=None, window_left=-1, window_right=-1, softcap=None, dlse=None):
    """(dq, dk, dv) of ``attention_varlen_fwd`` (``warpsched.ops.attention_varlen_backward``), with ``dlse`` the
    gradient of its LSE output if one reached it."""
    return ops.attention_varlen_backward(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, causal, scale, window_size=_window(window_left, window_right),
                                         softcap=softcap, dlse=dlse)


_LIB.impl("gemm", gemm, "CUDA")
_LIB.impl("linear", linear, "CUDA")
_LIB.impl("attention_fwd", attention_fwd, "CUDA")
_LIB.impl("attention_bwd", attention_bwd, "CUDA")
_LIB.impl("attention_varlen_fwd", attention_varlen_fwd, "CUDA")
_LIB.impl("attention_varlen_bwd", attention_varlen_bwd, "CUDA")


@torch.library.register_fake("warpsched::gemm", lib=_LIB)
def _gemm_fake(a, b, scale_a=None, scale_b=None, out_dtype=None, bias=None, activation=None, residual=None,
               alpha=None):
    dtype = out_dtype or (torch.bfloat16 if a.dtype in _FP8 else a.dtype)
    n = b.shape[-1] // (2 if activation == "swiglu" else 1)
    return a.new_empty((*a.shape[:-1], n), dtype=dtype)


@torch.library.register_fake("warpsched::linear", lib=_LIB)
def _linear_fake(x, weight, bias, activation):
    n = weight.shape[0] // (2 if activation == "swiglu" else 1)
    return x.new_empty((*x.shape[:-1], n))


@torch.library.register_fake("warpsched::attention_fwd", lib=_LIB)
def _attention_fwd_fake(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None):
    B, H, S, _ = q.shape
    return empty_out(q), q.new_empty((B, H, S), dtype=torch.float32)  # O as the host allocates it


@torch.library.register_fake("warpsched::attention_bwd", lib=_LIB)
def _attention_bwd_fake(q, k, v, out, dout, lse, causal=False, scale=None, window_left=-1, window_right=-1,
                        softcap=None, dlse=None, deterministic=False):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@torch.library.register_fake("warpsched::attention_varlen_fwd", lib=_LIB)
def _attention_varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                               scale=None, window_left=-1, window_right=-1, softcap=None):
    total_q, H, D = q.shape
    return q.new_empty((total_q, H, D)), q.new_empty((H, total_q), dtype=torch.float32)


@torch.library.register_fake("warpsched::attention_varlen_bwd", lib=_LIB)
def _attention_varlen_bwd_fake(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               causal=False, scale=None, window_left=-1, window_right=-1, softcap=None, dlse=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


__all__ = ["attention_bwd", "attention_fwd", "attention_varlen_bwd", "attention_varlen_fwd", "gemm", "linear"]
