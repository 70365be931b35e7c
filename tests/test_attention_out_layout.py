"""Attention's O takes q's memory order when q is a (B, S, H, D) tensor seen as (B, H, S, D), as SDPA's flash
and cuDNN backends return theirs, so a model's ``O.transpose(1, 2).reshape(B, S, H * D)`` is a view and not
a copy; the custom op's fake implementation (what torch.compile plans with) gives the same strides as the
host. The host's allocation runs on the H200 (bench/model_block.py, bench/attention_check.py)."""
from __future__ import annotations

import pytest

from warpsched.kernels.attention import out_in_q_order


class Strided:
    """Just what ``out_in_q_order`` reads of a tensor: its shape, its strides and a transposed view."""

    def __init__(self, shape, strides):
        self.shape, self.strides = tuple(shape), tuple(strides)

    def stride(self, i):
        return self.strides[i]

    def transpose(self, i, j):
        shape, strides = list(self.shape), list(self.strides)
        shape[i], shape[j] = shape[j], shape[i]
        strides[i], strides[j] = strides[j], strides[i]
        return Strided(shape, strides)


def bshd_view(B, S, H, D):
    return Strided((B, S, H, D), (S * H * D, H * D, D, 1)).transpose(1, 2)


def test_a_projection_output_seen_as_heads_keeps_its_order():
    assert out_in_q_order(bshd_view(2, 16, 32, 128))
    assert out_in_q_order(bshd_view(1, 2048, 8, 64))
    # q sliced from a fused QKV output (48 heads' worth of columns a row), then seen as heads
    assert out_in_q_order(Strided((2, 16, 32, 128), (16 * 48 * 128, 48 * 128, 128, 1)).transpose(1, 2))


def test_contiguous_and_degenerate_q_get_a_contiguous_o():
    assert not out_in_q_order(Strided((2, 32, 16, 128), (32 * 16 * 128, 16 * 128, 128, 1)))
    assert not out_in_q_order(bshd_view(2, 1, 32, 128))   # one query: both orders are the same memory
    assert not out_in_q_order(bshd_view(2, 16, 1, 128))   # one head: likewise
    # a q that is neither (B, H, S, D) nor (B, S, H, D) in memory, e.g. heads outermost
    assert not out_in_q_order(Strided((2, 4, 16, 64), (64, 2 * 16 * 64, 2 * 64, 1)))


def test_the_fake_implementation_gives_the_hosts_strides():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from warpsched import torch_ops

    with FakeTensorMode():
        qkv = torch.empty(2, 16, 48, 128, dtype=torch.bfloat16)
        q, k, v = (t.transpose(1, 2) for t in qkv.split([32, 8, 8], dim=2))
        out, lse = torch_ops._attention_fwd_fake(q, k, v, causal=True)
        assert out.shape == q.shape and lse.shape == (2, 32, 16)
        assert out.transpose(1, 2).is_contiguous()  # (B, S, H, D) memory: the model's reshape is a view
        out_c, _ = torch_ops._attention_fwd_fake(q.contiguous(), k.contiguous(), v.contiguous())
        assert out_c.is_contiguous()
