"""Drop-in torch modules on warpsched's kernels (imports torch): ``warpsched.nn.Linear`` and
``warpsched.nn.functional.linear``, with autograd through warpsched's GEMM in both directions, and
``warpsched.nn.scaled_dot_product_attention`` and ``warpsched.nn.attention_varlen`` (packed sequences), with
autograd through warpsched's attention kernels; ``warpsched.nn.flash`` has flash_attn.cute's ``flash_attn_func`` /
``flash_attn_varlen_func`` interface on the same kernels (imported on its own)."""
from __future__ import annotations

import torch

from . import functional
from .attention import attention_varlen, scaled_dot_product_attention

__all__ = ["Linear", "attention_varlen", "functional", "scaled_dot_product_attention"]


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` (same parameters, same ``state_dict``) whose forward and backward run on
    warpsched's persistent GEMM: y = x W^T + b, dX = dY W, dW = dY^T X (bf16 / fp16 weights and
    inputs; ``activation``: None, "relu", "relu2", "gelu", "gelu_tanh" or "silu", fused into the GEMM's
    epilogue with the bias: see ``functional``). in_features and out_features must be multiples of 8
    (refused here, naming the padding, ``GemmArgumentError``); any number of tokens runs."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, activation=None):
        functional.check_activation(activation)
        if activation == "swiglu":
            raise ValueError("warpsched.nn.Linear(activation='swiglu'): a Linear's out_features are its output's; "
                             "SwiGLU halves them and needs the gate and up weights interleaved: call "
                             "warpsched.nn.functional.linear(x, w, activation='swiglu') with "
                             "w = warpsched.ops.interleave_gate_up(w_gate, w_up)[0]")
        functional.check_features(in_features, out_features)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias, activation=self.activation)

    def extra_repr(self):
        return super().extra_repr() + (f", activation={self.activation!r}" if self.activation else "")
