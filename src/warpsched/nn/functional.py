"""``linear`` with autograd on warpsched's GEMM (imports torch).

Forward y = act(x W^T + bias) with x (..., K) and W (N, K): ``ops.gemm(x, W.t(), bias=bias,
activation=act)``, the bias and the activation fused into the GEMM's epilogue. Backward: dX = dZ W
reads W row-major (an N-major B) and dW = dZ^T X reads dZ^T column-major (an M-major A) and X
row-major (an N-major B): the persistent GEMM takes those 16-bit operands as they are
(``PersistentGemm(a_major=..., b_major=...)``), so no weight or activation is copied. The bias
gradient is dZ summed over the rows (torch).

The activation's gradient dZ = dY * act'(Z):
- relu and relu2 are computed from the saved output Y (relu' = [Y > 0]; relu2' = 2 relu(Z) = 2 sqrt(Y)),
  so the forward stays one fused GEMM;
- gelu, gelu_tanh and silu need Z: when a gradient is needed the forward runs the GEMM with the bias
  fused, keeps Z and applies the activation in torch (what torch.nn.Linear + the activation saves);
  without one (inference, ``torch.no_grad``) the activation is fused too.
"""
from __future__ import annotations

import torch

from .. import ops

ACTIVATIONS = {
    None: None,
    "relu": torch.nn.functional.relu,
    "relu2": lambda y: torch.nn.functional.relu(y).square(),
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}
FROM_OUTPUT = ("relu", "relu2")  # their gradient is a function of the output


def check_activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: expected one of {list(ACTIVATIONS)} (swiglu: "
                         "warpsched.ops.gemm(x, w.t(), activation='swiglu') with ops.interleave_gate_up)")


def _check_dtypes(x, weight):
    if x.dtype != weight.dtype or x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"warpsched linear: x is {x.dtype}, weight {weight.dtype}; both must be torch.bfloat16 "
                        "or torch.float16 (convert the module with .to(torch.bfloat16))")


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        _check_dtypes(x, weight)
        ctx.activation, ctx.has_bias = activation, bias is not None
        if activation is None or activation in FROM_OUTPUT:
            y = ops.gemm(x, weight.t(), bias=bias, activation=activation)
            ctx.save_for_backward(x, weight, y if activation in FROM_OUTPUT else None)
            return y
        z = ops.gemm(x, weight.t(), bias=bias)  # the pre-activation, kept for the activation's gradient
        ctx.save_for_backward(x, weight, z)
        return ACTIVATIONS[activation](z)

    @staticmethod
    def backward(ctx, dy):
        x, weight, saved = ctx.saved_tensors
        N, K = weight.shape
        act = ctx.activation
        if act == "relu":
            dy = dy * (saved > 0)
        elif act == "relu2":
            dy = dy * (2 * saved.float().sqrt()).to(dy.dtype)
        elif act is not None:
            with torch.enable_grad():
                z = saved.detach().requires_grad_()
                (dy,) = torch.autograd.grad(ACTIVATIONS[act](z), z, dy)
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
        return dx, dw, db, None


def linear(x, weight, bias=None, activation=None):
    """``activation(torch.nn.functional.linear(x, weight, bias))`` on warpsched's GEMM, the bias and
    the activation fused into its epilogue, with autograd: x (..., K), weight (N, K), bias (N,) or
    None; bf16 or fp16; ``activation``: None, "relu", "relu2", "gelu" (erf), "gelu_tanh" or "silu"."""
    check_activation(activation)
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))):
        _check_dtypes(x, weight)  # no gradient: one fused GEMM, nothing saved
        return ops.gemm(x, weight.t(), bias=bias, activation=activation)
    return _LinearFunction.apply(x, weight, bias, activation)
