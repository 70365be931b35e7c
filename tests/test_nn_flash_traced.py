"""``warpsched.nn.flash`` under a tracer (torch.compile's), on the CPU with fake CUDA tensors (torch-only): the
forward and the backward are warpsched's torch ops (the native ones where ``warpsched.native`` is built, else the
custom ops), so a compiled model that calls ``flash_attn_func`` traces them without a graph break; a backward with
the LSE's gradient or ``deterministic=True`` is ``torch.ops.warpsched.attention_bwd``, which takes both. The
compiled call's numbers (bitwise equal to eager) are checked on the H200 by ``bench/flash_interface_check.py``."""
from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from warpsched.nn import flash  # noqa: E402

pytestmark = pytest.mark.usefixtures("cuda_build_torch")  # fake CUDA tensors (conftest.cuda_build_torch)


def _ops(gm):
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


def _traced(dlse=False, deterministic=False, causal=True, window=(None, None)):
    """The ops of flash_attn_func's forward and of its node's backward as make_fx records them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def forward(q, k, v):
        return flash.flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)

    def backward(q, k, v, out, lse, dout, dl):
        ctx = types.SimpleNamespace(saved_tensors=(q, k, v, out, lse), args=dict(
            causal=causal, scale=None, window_size=None, softcap=None, mask_mod=None, deterministic=deterministic))
        return flash._FlashAttention.backward(ctx, dout, dl if dlse else None)

    with FakeTensorMode():
        q = torch.empty(2, 128, 4, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(2, 128, 2, 64, device="cuda", dtype=torch.bfloat16)
        qh, kh = q.transpose(1, 2), k.transpose(1, 2)
        lse = torch.empty(2, 4, 128, device="cuda", dtype=torch.float32)
        fwd = make_fx(forward)(q, k, k)
        bwd = make_fx(backward)(qh, kh, kh, torch.empty_like(qh), lse, torch.empty_like(qh), torch.empty_like(lse))
    return _ops(fwd), _ops(bwd)


def _one_of(ops, name):
    return {f"warpsched_native.{name}.default", f"warpsched.{name}.default"} & ops


def test_a_traced_flash_call_is_warpsched_ops():
    forward, backward = _traced()
    assert _one_of(forward, "attention_fwd"), forward
    assert _one_of(backward, "attention_bwd"), backward


@pytest.mark.parametrize("dlse, deterministic", [(True, False), (False, True)])
def test_the_lse_gradient_and_deterministic_go_through_the_custom_op(dlse, deterministic):
    _, backward = _traced(dlse=dlse, deterministic=deterministic)
    assert "warpsched.attention_bwd.default" in backward, backward


def test_the_custom_op_schema_takes_the_lse_gradient_and_the_deterministic_flag():
    from warpsched import torch_ops  # noqa: F401 (registers the ops)

    schema = torch.ops.warpsched.attention_bwd.default._schema
    names = [a.name for a in schema.arguments]
    assert names[-2:] == ["dlse", "deterministic"]


def _traced_varlen(fn, node):
    """The ops of ``fn(q, k, v, cu)`` (a varlen call's forward) and of its autograd ``node``'s backward (called
    directly: the autograd engine wants a device), as make_fx records them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def backward(q, k, v, out, lse, cu, dout):
        ctx = types.SimpleNamespace(saved_tensors=(q, k, v, out, lse, cu, cu), args=(128, 128, True, None),
                                    masks=dict(window_size=None, softcap=None, mask_mod=None))
        return node.backward(ctx, dout, *([None] if node is flash._FlashVarlen else []))

    with FakeTensorMode():
        q = torch.empty(300, 4, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(300, 2, 64, device="cuda", dtype=torch.bfloat16)
        cu = torch.empty(4, device="cuda", dtype=torch.int32)
        lse = torch.empty(4, 300, device="cuda", dtype=torch.float32)
        fwd = make_fx(lambda q, k, v, cu: fn(q, k, v, cu))(q, k, k, cu)
        bwd = make_fx(backward)(q, k, k, torch.empty_like(q), lse, cu, torch.empty_like(q))
    return _ops(fwd) | _ops(bwd)


def test_a_traced_flash_varlen_call_is_the_varlen_custom_ops():
    ops = _traced_varlen(lambda q, k, v, cu: flash.flash_attn_varlen_func(q, k, v, cu, cu, 128, 128, causal=True)[0],
                         flash._FlashVarlen)
    assert {"warpsched.attention_varlen_fwd.default", "warpsched.attention_varlen_bwd.default"} <= ops, ops


def test_a_traced_nn_attention_varlen_call_is_the_varlen_custom_ops():
    from warpsched import nn as wnn
    from warpsched.nn import attention as nna

    ops = _traced_varlen(lambda q, k, v, cu: wnn.attention_varlen(q, k, v, cu, cu, 128, 128, causal=True),
                         nna._VarlenAttention)
    assert {"warpsched.attention_varlen_fwd.default", "warpsched.attention_varlen_bwd.default"} <= ops, ops
