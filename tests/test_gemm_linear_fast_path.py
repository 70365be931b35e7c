"""``gemm.ops.linear``: a linear layer's repeated calls launch the plan ``gemm`` kept for the first, with the
weight itself as the kernel's (N, K) operand, and fall back on ``gemm`` (whose errors name the fix) when that
launch refuses its operands. On the CPU: ``gemm`` is a recorder that keeps a plan as ``_gemm_2d`` does; the
kernels and their bits run on the H200 (bench/model_block.py's gradient check and tables)."""
from __future__ import annotations

import types

import pytest

from _fake_tensor import FakeTensor
from warpsched.kernels.gemm import ops as gemm_ops


class Plan:
    ffi = True

    def __init__(self, calls, fail=False):
        self.calls, self.fail = calls, fail

    def launch(self, a, bt, out, alpha=1.0, scales=(), bias=None, residual=None):
        if self.fail:
            raise ValueError("misaligned")
        self.calls.append(("launch", a.shape, bt.shape, bt.stride(), out.shape, alpha, bias))


@pytest.fixture
def host(monkeypatch):
    calls, plans = [], {}

    def gemm(a, b, bias=None, activation=None, **kw):
        calls.append(("gemm", a.shape, b.shape, activation))
        a2 = a.view(-1, a.shape[-1])
        key = gemm_ops._plan_key(a2, b, None, bias, activation, None, None, None, None, None, "auto", True)
        gemm_ops._PLANS[key] = (plans.get("plan") or Plan(calls), (a2.shape[0], b.shape[1]), a.dtype, a.device)
        return FakeTensor(a.shape[:-1] + (b.shape[1],))

    monkeypatch.setattr(gemm_ops, "gemm", gemm)
    monkeypatch.setattr(gemm_ops, "_PLANS", {})
    monkeypatch.setattr(gemm_ops, "_LINEAR", {})
    monkeypatch.setattr(gemm_ops, "_torch", lambda: types.SimpleNamespace(
        empty=lambda shape, device, dtype: FakeTensor(shape, dtype)))
    return calls, plans


def test_the_second_call_launches_the_kept_plan_on_the_weight_itself(host):
    calls, _ = host
    x, w = FakeTensor((2, 8, 64)), FakeTensor((128, 64))
    assert gemm_ops.linear(x, w).shape == (2, 8, 128)
    y = gemm_ops.linear(x, w)
    assert y.shape == (2, 8, 128)
    # one gemm (with w.t(), as ops.gemm takes it), then the plan with the (N, K) weight as it is: no transposes
    assert calls == [("gemm", (2, 8, 64), (64, 128), None), ("launch", (16, 64), (128, 64), (64, 1), (16, 128), 1.0,
                                                                None)]


def test_a_new_shape_or_activation_goes_through_gemm_first(host):
    calls, _ = host
    w = FakeTensor((128, 64))
    for x, act in ((FakeTensor((16, 64)), None), (FakeTensor((24, 64)), None), (FakeTensor((24, 64)), "relu"),
                   (FakeTensor((24, 64)), "relu")):
        gemm_ops.linear(x, w, activation=act)
    assert [c[0] for c in calls] == ["gemm", "gemm", "gemm", "launch"]


def test_a_transposed_weight_view_is_a_weight_like_any_other(host):
    """dX = dY W of a backward pass: ``linear(dy, w.t())``, W read row-major as gemm's b."""
    calls, _ = host
    dy, w = FakeTensor((16, 128)), FakeTensor((128, 64))
    gemm_ops.linear(dy, w.t())
    gemm_ops.linear(dy, w.t())
    assert calls[0] == ("gemm", (16, 128), (128, 64), None)
    assert calls[1] == ("launch", (16, 128), (64, 128), (1, 64), (16, 64), 1.0, None)


def test_a_launch_that_refuses_its_operands_goes_back_to_gemm(host):
    calls, plans = host
    plans["plan"] = Plan(calls, fail=True)
    x, w = FakeTensor((16, 64)), FakeTensor((128, 64))
    gemm_ops.linear(x, w)
    gemm_ops.linear(x, w)  # the kept plan raises: gemm's own path runs (and names the fix, were it a user error)
    assert [c[0] for c in calls] == ["gemm", "gemm"]


def _torch_ops_with_stand_in_torch(monkeypatch):
    """``warpsched.torch_ops`` executed against a stand-in torch (library registration as no-ops): its op bodies are
    plain Python, the module they live in registers them with torch."""
    import os
    import sys

    from _module_file import exec_module_file

    class Lib:
        def __init__(self, *a):
            pass

        def define(self, *a):
            pass

        def impl(self, *a):
            pass
    stand_in = types.SimpleNamespace(
        library=types.SimpleNamespace(Library=Lib, register_fake=lambda name, lib=None: (lambda f: f)),
        float8_e4m3fn="torch.float8_e4m3fn", float8_e5m2="torch.float8_e5m2", bfloat16="torch.bfloat16",
        float32="torch.float32", are_deterministic_algorithms_enabled=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "warpsched", "torch_ops.py")
    return exec_module_file("warpsched.torch_ops", path)


def test_the_compiled_graphs_linear_calls_take_the_short_path(host, monkeypatch):
    """torch.compile's graph calls ``torch.ops.warpsched.gemm(x, w.t())`` for a linear layer: its second call with a
    key launches the kept plan on the weight, as eager ``linear`` does; an fp8 scale, a residual, alpha or an
    out dtype go to gemm every time."""
    calls, _ = host
    tops = _torch_ops_with_stand_in_torch(monkeypatch)
    x, w = FakeTensor((1, 16, 64)), FakeTensor((128, 64))
    for _ in range(2):
        tops.gemm(x, w.t())
    assert [c[0] for c in calls] == ["gemm", "launch"]
    assert calls[1][2:4] == ((128, 64), (64, 1))  # the (N, K) weight as it is
    calls.clear()
    for _ in range(2):
        tops.gemm(x, w.t(), alpha=2.0)
        tops.gemm(x, w.t(), residual=FakeTensor((1, 16, 128)))
    assert [c[0] for c in calls] == ["gemm"] * 4


def test_the_linear_op_runs_the_short_path_and_its_fake_has_the_layers_shape(host, monkeypatch):
    """``torch.ops.warpsched.linear(x, weight, bias, activation)``, what ``nn.functional.linear`` calls under a tracer:
    its first call with a key goes through gemm (with ``weight.t()``), later ones launch the kept plan; its fake gives
    (..., N), (..., N / 2) for swiglu."""
    calls, _ = host
    tops = _torch_ops_with_stand_in_torch(monkeypatch)
    x, w = FakeTensor((2, 8, 64)), FakeTensor((128, 64))
    tops.linear(x, w, None, None)
    tops.linear(x, w, None, None)
    assert [c[0] for c in calls] == ["gemm", "launch"] and calls[0][2] == (64, 128)

    class Made(FakeTensor):
        def new_empty(self, shape):
            return FakeTensor(shape)
    assert tops._linear_fake(Made((2, 8, 64)), w, None, None).shape == (2, 8, 128)
    assert tops._linear_fake(Made((2, 8, 64)), w, None, "swiglu").shape == (2, 8, 64)


def test_the_attention_ops_call_the_kernels_hosts_with_the_ops_arguments(monkeypatch):
    """``attention_fwd`` / ``attention_bwd`` go straight to the forward's and the backward's hosts (no
    ``warpsched.ops`` layer): the LSE asked for, no out tensors (so the host keeps its plan), the window as a pair
    or None, deterministic from torch's flag."""
    fwd = pytest.importorskip("warpsched.kernels.attention.host")  # imports cutlass
    from warpsched.kernels.attention import backward_host as bwd

    tops = _torch_ops_with_stand_in_torch(monkeypatch)
    seen = []
    monkeypatch.setattr(fwd, "attention", lambda *a, **k: seen.append(("fwd", a, k)) or ("o", "lse"))
    monkeypatch.setattr(bwd, "attention_backward", lambda *a, **k: seen.append(("bwd", a, k)) or ("dq", "dk", "dv"))
    assert tops.attention_fwd("q", "k", "v", True) == ("o", "lse")
    assert tops.attention_fwd("q", "k", "v", False, 0.5, 8, 0, 30.0) == ("o", "lse")
    assert tops.attention_bwd("q", "k", "v", "o", "do", "lse", True, None, -1, 4) == ("dq", "dk", "dv")
    assert seen[0] == ("fwd", ("q", "k", "v", True, None, None, None, True, None, None, None), {})
    assert seen[1] == ("fwd", ("q", "k", "v", False, 0.5, None, None, True, None, 30.0, (8, 0)), {})
    assert seen[2] == ("bwd", ("q", "k", "v", "o", "do", "lse"), dict(causal=True, scale=None, window_size=(-1, 4),
                                                                      softcap=None, deterministic=False, dlse=None))
    # flash_attn_func's backward with the LSE's gradient and deterministic=True (what the op carries on)
    tops.attention_bwd("q", "k", "v", "o", "do", "lse", False, None, -1, -1, None, "dlse", True)
    assert seen[3][2] == dict(causal=False, scale=None, window_size=None, softcap=None, deterministic=True,
                              dlse="dlse")
