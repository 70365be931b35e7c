"""Which path ``warpsched.nn.scaled_dot_product_attention`` takes, on the CPU: a plain tensor in eager
mode calls the kernels' host (``warpsched.torch_ops.attention_fwd``) directly, a tracer (torch.compile,
or a tensor subclass) gets the custom op, and without a gradient to compute the forward runs alone (no
autograd.Function). The numbers and the compiled graph are checked on the H200 by
``bench/attention_bwd_check.py --only autograd`` (bitwise equal to eager, no graph break).

This machine has no torch: ``nn/attention.py`` is loaded on its own against a stand-in torch module with
just what it reads, and stand-ins for ``warpsched.ops`` / ``warpsched.torch_ops`` that record the call."""
from __future__ import annotations

import os
import sys
import types

import pytest

from _module_file import exec_module_file

ATTENTION = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "warpsched", "nn",
                         "attention.py")


class Plain:
    """A stand-in tensor; ``requires_grad`` as given."""

    def __init__(self, requires_grad=False):
        self.requires_grad = requires_grad


class Subclass(Plain):
    """A tracer's tensor (fake / functional tensors are torch.Tensor subclasses)."""


@pytest.fixture
def nna(monkeypatch):
    calls = []
    torch = types.ModuleType("torch")
    torch.Tensor = Plain
    torch.autograd = types.SimpleNamespace(Function=type("Function", (), {}))
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False, assume_constant_result=lambda f: f)
    torch.is_grad_enabled = lambda: True
    torch.ops = types.SimpleNamespace(warpsched=types.SimpleNamespace(
        attention_fwd=lambda *a: calls.append(("op", a[3:])) or ("out-op", "lse")))
    tops = types.ModuleType("warpsched.torch_ops")
    tops.attention_fwd = lambda *a: calls.append(("host", a[3:])) or ("out-host", "lse")
    pkg = types.ModuleType("warpsched")
    pkg.ops, pkg.torch_ops = types.ModuleType("warpsched.ops"), tops
    pkg.__path__ = []
    nn = types.ModuleType("warpsched.nn")
    nn.__path__ = []
    functional = types.ModuleType("warpsched.nn.functional")
    functional._native_ready = lambda: False  # the Python path here (the native one: tests/test_native_attention.py)
    for name, mod in (("torch", torch), ("warpsched", pkg), ("warpsched.ops", pkg.ops),
                      ("warpsched.torch_ops", tops), ("warpsched.nn", nn), ("warpsched.nn.functional", functional)):
        monkeypatch.setitem(sys.modules, name, mod)
    # the real eager-or-op rule, on the stand-in torch
    exec_module_file("warpsched.nn._eager", os.path.join(os.path.dirname(ATTENTION), "_eager.py"), monkeypatch)
    return exec_module_file("warpsched.nn.attention", ATTENTION), torch, calls


def test_inference_runs_the_forward_alone_on_the_host(nna):
    mod, torch, calls = nna
    q, k, v = Plain(), Plain(), Plain()
    assert mod.scaled_dot_product_attention(q, k, v, is_causal=True, window_size=(4, None)) == "out-host"
    assert calls == [("host", (True, None, 4, -1, None))]  # causal, scale, window left / right, softcap


def test_a_tracer_gets_the_custom_op(nna, monkeypatch):
    mod, torch, calls = nna
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert mod.scaled_dot_product_attention(Plain(), Plain(), Plain()) == "out-op"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    assert mod.scaled_dot_product_attention(Subclass(), Plain(), Plain()) == "out-op"
    assert [c[0] for c in calls] == ["op", "op"]


def test_a_gradient_goes_through_autograd(nna, monkeypatch):
    """q requires grad: the autograd.Function runs (its forward saves O and the LSE for the backward)."""
    mod, torch, calls = nna
    applied = []
    monkeypatch.setattr(mod._Attention, "apply", lambda *a: applied.append(a[3:]) or "out-autograd", raising=False)
    assert mod.scaled_dot_product_attention(Plain(True), Plain(), Plain()) == "out-autograd"
    assert applied == [(False, None, -1, -1, None)] and calls == []
    monkeypatch.setattr(torch, "is_grad_enabled", lambda: False)  # under torch.no_grad: the forward alone
    assert mod.scaled_dot_product_attention(Plain(True), Plain(), Plain()) == "out-host"
