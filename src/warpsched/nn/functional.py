"""``linear`` with autograd on warpsched's GEMM (imports torch).

Forward y = x W^T (+ bias) with x (..., K) and W (N, K): ``ops.gemm(x, W.t())``, both operands
K-major. Backward: dX = dY W reads W row-major (an N-major B) and dW = dY^T X reads dY^T column-major
(an M-major A) and X row-major (an N-major B): the persistent GEMM takes those 16-bit operands as
they are (``PersistentGemm(a_major=..., b_major=...)``), so no weight or activation is copied. The
bias gradient is dY summed over the rows (torch), and the activation runs after the GEMM in torch
(not yet fused into the GEMM's epilogue).
"""
from __future__ import annotations

import torch

from .. import ops

ACTIVATIONS = {
    None: None,
    "relu": torch.nn.functional.relu,
    "relu2": lambda y: torch.nn.functional.relu(y).square(),
    "gelu": torch.nn.functional.gelu,
    "silu": torch.nn.functional.silu,
}


def check_activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: expected one of {list(ACTIVATIONS)}")


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        if x.dtype != weight.dtype or x.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"warpsched linear: x is {x.dtype}, weight {weight.dtype}; both must be torch.bfloat16 "
                            "or torch.float16 (convert the module with .to(torch.bfloat16))")
        y = ops.gemm(x, weight.t())
        if bias is not None:
            y = y + bias
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        N, K = weight.shape
        dy2 = dy.reshape(-1, N)
        if not dy2.is_contiguous():
            dy2 = dy2.contiguous()  # autograd may hand an expanded gradient (e.g. of a sum)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = ops.gemm(dy2, weight).view(*x.shape)  # (M, N) @ (N, K): W read row-major
        if ctx.needs_input_grad[1]:
            dw = ops.gemm(dy2.t(), x.reshape(-1, K))  # (N, M) @ (M, K): dY^T column-major, X row-major
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0, dtype=torch.float32).to(dy.dtype)
        return dx, dw, db


def linear(x, weight, bias=None, activation=None):
    """``torch.nn.functional.linear(x, weight, bias)`` (then ``activation``) on warpsched's GEMM, with
    autograd: x (..., K), weight (N, K), bias (N,) or None; bf16 or fp16."""
    check_activation(activation)
    y = _LinearFunction.apply(x, weight, bias)
    fn = ACTIVATIONS[activation]
    return y if fn is None else fn(y)
