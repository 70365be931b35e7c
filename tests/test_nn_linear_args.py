"""warpsched.nn's shape handling on the CPU: any token count reaches the GEMM as operands it takes
(the dW GEMM contracts over the tokens, so an unaligned count is zero-padded to a multiple of 8),
and a layer with unaligned in_features / out_features is refused naming the padding.

This machine has no torch: ``nn/functional.py`` is loaded on its own (not through
``warpsched.nn``, whose other modules need the real torch) against a stand-in torch module with
just what it reads, and the GEMM is a recorder that runs the real ``gemm_ops.check`` on what it
gets. The numbers (zero rows adding nothing) are checked on the H200 by
bench/gemm_epilogue_check.py (token counts 300 and 17); ``test_with_torch`` runs where torch is
installed."""
from __future__ import annotations

import os
import re
import sys
import types

import pytest

from _fake_tensor import FakeTensor, _row_major
from _module_file import exec_module_file
from warpsched.kernels.gemm import ops as gemm_ops

FUNCTIONAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "warpsched", "nn",
                          "functional.py")


class Tok(FakeTensor):
    """A FakeTensor with the few tensor methods linear's backward calls."""

    requires_grad = False

    def t(self):
        return Tok(self.shape[::-1], self.dtype, self.stride()[::-1])

    def view(self, *shape):
        v = super().view(*shape)
        return Tok(v.shape, v.dtype, v.stride())

    reshape = view

    def is_contiguous(self):
        return self.stride() == _row_major(self.shape)


@pytest.fixture
def nnf(monkeypatch):
    """nn/functional.py against a stand-in torch; returns (module, gemm calls, pad calls)."""
    pads, calls = [], []

    def pad(t, widths):
        assert tuple(widths[:3]) == (0, 0, 0) and widths[3] > 0, widths  # zero rows appended, nothing else
        pads.append((t.shape, widths[3]))
        return Tok((t.shape[0] + widths[3], t.shape[1]), t.dtype)  # a new row-major tensor, as torch's pad

    fn = types.SimpleNamespace(relu=None, gelu=None, silu=None, pad=pad)
    torch = types.ModuleType("torch")
    torch.nn = types.SimpleNamespace(functional=fn)
    torch.autograd = types.SimpleNamespace(Function=type("Function", (), {}))
    torch.bfloat16, torch.float16, torch.float32 = "torch.bfloat16", "torch.float16", "torch.float32"
    torch.is_grad_enabled = lambda: True
    torch.Tensor = type("Tensor", (), {})  # Tok is not one: linear calls the op, the recorder below
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False, assume_constant_result=lambda f: f)

    def gemm(a, b, out=None, **kw):
        M, N, K, _ = gemm_ops.check(a, b, out)  # the operands must pass ops.gemm's own checks
        calls.append((a.shape, a.stride(), b.shape, b.stride()))
        return Tok((M, N))

    def linear(x, weight, bias, activation):  # torch.ops.warpsched.linear: gemm(x, weight.t()) on the short path
        return gemm(x, weight.t(), bias=bias, activation=activation)

    torch.ops = types.SimpleNamespace(warpsched=types.SimpleNamespace(linear=linear))  # the custom op linear calls
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "warpsched.torch_ops", types.ModuleType("warpsched.torch_ops"))
    # the real eager-or-op rule, on the stand-in torch
    exec_module_file("warpsched.nn._eager", os.path.join(os.path.dirname(FUNCTIONAL), "_eager.py"), monkeypatch)
    # not registered in sys.modules: the real package stays unimported
    functional = exec_module_file("warpsched.nn.functional", FUNCTIONAL)
    functional._native_off = True  # no native build under the stand-in torch (a failed build is kept per process)
    return functional, calls, pads


@pytest.mark.parametrize("tokens,padded", [(300, 304), (17, 24), (1, 8), (7, 8)])
def test_dw_pads_unaligned_token_counts(nnf, tokens, padded):
    """dW = dY^T X contracts over the tokens: dY and X get zero rows up to a multiple of 8, and the
    GEMM reads the padded dY^T column-major and X row-major, as ops.gemm accepts them."""
    f, calls, pads = nnf
    dy, x = Tok((tokens, 1024)), Tok((tokens, 512))
    dw = f.weight_grad(dy, x)
    assert dw.shape == (1024, 512)
    assert pads == [((tokens, 1024), padded - tokens), ((tokens, 512), padded - tokens)]
    assert calls == [((1024, padded), (1, 1024), (padded, 512), (512, 1))]


def test_unpadded_dw_operands_are_refused_before_tuning(nnf):
    """The rejected twin: the operands the backward passed before (K = 300 tokens) fail ops.gemm's
    check with the fix in the message, not the autotuner's 'no configuration ran'."""
    with pytest.raises(gemm_ops.GemmArgumentError, match=r"K = 300 .*pad K to a multiple of 8 \(304\)"):
        gemm_ops.check(Tok((300, 1024)).t(), Tok((300, 512)))


@pytest.mark.parametrize("tokens", [256, 0])
def test_aligned_token_counts_are_not_copied(nnf, tokens):
    f, calls, pads = nnf
    f.weight_grad(Tok((tokens, 1024)), Tok((tokens, 512)))
    assert pads == [] and calls == [((1024, tokens), (1, 1024), (tokens, 512), (512, 1))]


def test_backward_runs_dx_unpadded_and_dw_padded(nnf):
    """The whole backward for x (3, 100, 512) and W (1024, 512), no activation: dX = dY W with
    M = 300 tokens (free), dW on 304 padded tokens."""
    f, calls, pads = nnf
    x, w, dy = Tok((3, 100, 512)), Tok((1024, 512)), Tok((3, 100, 1024))
    ctx = types.SimpleNamespace(saved_tensors=(x, w, None), activation=None, has_bias=False,
                                needs_input_grad=(True, True, False, False))
    dx, dw, db, _ = f._LinearFunction.backward(ctx, dy)
    assert dx.shape == (3, 100, 512) and dw.shape == (1024, 512) and db is None
    assert calls == [((300, 1024), (1024, 1), (1024, 512), (512, 1)),  # dX: W read row-major
                     ((1024, 304), (1, 1024), (304, 512), (512, 1))]  # dW: padded dY^T, padded X
    assert [p[1] for p in pads] == [4, 4]


@pytest.mark.parametrize("in_f,out_f,needle", [
    (500, 1024, r"in_features = 500 is not a multiple of 8.*in_features = 504 \(add zero columns to the weight"),
    (512, 1001, r"out_features = 1001 is not a multiple of 8.*out_features = 1008 .*first 1001 features"),
])
def test_unaligned_features_are_refused(nnf, in_f, out_f, needle):
    f, calls, _ = nnf
    with pytest.raises(gemm_ops.GemmArgumentError, match="warpsched.nn.Linear: " + needle):
        f.check_features(in_f, out_f)
    with pytest.raises(gemm_ops.GemmArgumentError, match="warpsched.nn.functional.linear: " + needle):
        f.linear(Tok((17, in_f)), Tok((out_f, in_f)))
    assert calls == []  # refused before any GEMM
    f.check_features(512, 1024)  # the aligned twin


@pytest.mark.parametrize("in_f,out_f,name", [(2.5, 8, "in_features = 2.5"), (8, "8", "out_features = '8'"),
                                             (True, 8, "in_features = True"), (0, 8, "in_features = 0"),
                                             (8, (8,), "out_features = (8,)")])
def test_features_that_are_not_positive_ints_are_refused(nnf, in_f, out_f, name):
    f, calls, _ = nnf
    with pytest.raises(gemm_ops.GemmArgumentError, match=rf"warpsched.nn.Linear: {re.escape(name)}: expected a positive int"):
        f.check_features(in_f, out_f)


def test_any_token_count_runs_the_forward(nnf):
    """17 tokens: the forward's M, which the GEMM takes as it is."""
    f, calls, pads = nnf
    y = f.linear(Tok((17, 512)), Tok((1024, 512)))
    assert y.shape == (17, 1024) and pads == [] and calls == [((17, 512), (512, 1), (512, 1024), (1, 512))]


def test_with_torch():
    """Where torch is installed: Linear refuses unaligned features when built, and pad_tokens
    appends zero rows and keeps the values (CPU tensors; no GEMM runs)."""
    torch = pytest.importorskip("torch")
    import warpsched.nn as wnn

    with pytest.raises(gemm_ops.GemmArgumentError, match="in_features = 500"):
        wnn.Linear(500, 1024)
    x = torch.randn(17, 16)
    p = wnn.functional.pad_tokens(x)
    assert p.shape == (24, 16) and torch.equal(p[:17], x) and not p[17:].any()
    assert wnn.functional.pad_tokens(p) is p


@pytest.mark.parametrize("compiling", [False, True])
def test_eager_calls_the_host_and_a_tracer_gets_the_op(nnf, monkeypatch, compiling):
    """A plain tensor in eager mode goes to warpsched's GEMM host directly (no round trip through the
    dispatcher to a Python op); under torch.compile (or a tracer's tensor subclass) linear calls the
    custom op, which the tracer sees as one opaque node."""
    f, calls, _ = nnf
    direct = []
    monkeypatch.setattr(f.torch, "Tensor", Tok)  # Tok is now a plain tensor
    monkeypatch.setattr(f.torch.compiler, "is_compiling", lambda: compiling)
    monkeypatch.setattr(f, "_gemm_ops", types.SimpleNamespace(  # the host's short path for linear layers
        linear=lambda x, w, bias=None, activation=None: direct.append((x.shape, w.shape)) or Tok((x.shape[0],
                                                                                                  w.shape[0]))))
    y = f.linear(Tok((17, 512)), Tok((1024, 512)))
    assert y.shape == (17, 1024)
    assert (direct, len(calls)) == (([], 1) if compiling else ([((17, 512), (1024, 512))], 0))
    monkeypatch.setattr(f.torch, "Tensor", type("Tensor", (), {}))  # a subclass instance: the op, even eager
    monkeypatch.setattr(f.torch.compiler, "is_compiling", lambda: False)
    f.linear(Tok((17, 512)), Tok((1024, 512)))
    assert len(calls) == (2 if compiling else 1)


@pytest.mark.parametrize("x,w,kw,err,needle", [
    (Tok((17, 512)), Tok((512,)), {}, gemm_ops.GemmArgumentError, r"weight \(512,\) must be 2-D \(out_features, in_"),
    (Tok((17, 512)), Tok((2, 1024, 512)), {}, gemm_ops.GemmArgumentError, "must be 2-D"),
    (Tok((17, 512)), Tok((1024, 512)), {"activation": "tanh"}, ValueError, r"activation='tanh': expected one of"),
    (Tok((17, 512), "torch.float32"), Tok((1024, 512)), {}, TypeError, "both must be torch.bfloat16 or torch.float16"),
    ([[1.0] * 512] * 17, Tok((1024, 512)), {}, TypeError, "x is a list; pass a torch.Tensor"),
    (Tok((17, 512)), "w", {}, TypeError, "weight is a str; pass a torch.Tensor"),
    (Tok((17, 512)), Tok((1024, 512)), {"bias": 0.5}, TypeError, r"bias is a float; pass a torch.Tensor or None \(as torch.nn.functional.linear\)"),
])
def test_bad_arguments_are_named_before_any_gemm(nnf, x, w, kw, err, needle):
    f, calls, _ = nnf
    with pytest.raises(err, match=needle):
        f.linear(x, w, **kw)
    assert calls == []


def test_swiglu_weight_rows_must_pair_gate_and_up(nnf):
    """SwiGLU's weight is gate and up interleaved in blocks of 8 rows: an N that is a multiple of 8 but not
    of 16 cannot be such a pair of weights, refused before any GEMM, naming interleave_gate_up."""
    f, calls, _ = nnf
    with pytest.raises(gemm_ops.GemmArgumentError, match=r"weight \(1000, 512\) has 1000 rows.*interleave_gate_up"):
        f.linear(Tok((256, 512)), Tok((1000, 512)), activation="swiglu")
    assert calls == []


def test_with_torch_swiglu_matches_separate_gate_and_up(monkeypatch):
    """Where torch is installed (CPU tensors, the GEMM replaced by torch's product with the epilogue in
    fp64, ``epilogue_reference``): linear(x, interleave_gate_up(Wg, Wu), activation='swiglu') equals
    silu(x Wg^T + bg) * (x Wu^T + bu) and its gradients, fused (256 tokens, no gradient), unfused (below SWIGLU_FUSED_FROM)
    and through autograd; nn.Linear refuses swiglu, naming the functional form."""
    torch = pytest.importorskip("torch")
    import warpsched.nn as wnn
    from warpsched import ops

    launched = []

    def linear(x, w, bias=None, activation=None):  # x @ w.T, as functional._linear
        launched.append(activation)
        acc = x.reshape(-1, x.shape[-1]).double() @ w.t().double()
        y = gemm_ops.epilogue_reference(acc, bias=bias, activation=activation).to(x.dtype)
        return y.view(*x.shape[:-1], y.shape[-1])

    monkeypatch.setattr(wnn.functional, "_linear", linear)
    monkeypatch.setattr(wnn.functional, "_check_dtypes", lambda x, w: None)  # fp64 here, for exact references
    g = torch.Generator().manual_seed(0)
    wg, wu = (torch.randn(48, 64, generator=g, dtype=torch.float64) / 8 for _ in range(2))
    bg, bu = (torch.randn(48, generator=g, dtype=torch.float64) for _ in range(2))
    w, b = ops.interleave_gate_up(wg, wu, bg, bu)

    def ref(x):
        return torch.nn.functional.silu(x @ wg.t() + bg) * (x @ wu.t() + bu)

    below = wnn.functional.SWIGLU_FUSED_FROM // 2 * 2 - 2  # an even token count below the fused path's floor
    for tokens, fused in ((256, "swiglu"), (below, None)):
        x = torch.randn(2, tokens // 2, 64, generator=g, dtype=torch.float64)
        launched.clear()
        with torch.no_grad():
            y = wnn.functional.linear(x, w, b, activation="swiglu")
        assert launched == [fused] and y.shape == (2, tokens // 2, 48)
        assert torch.allclose(y, ref(x), atol=1e-12)
    x = torch.randn(3, 5, 64, generator=g, dtype=torch.float64, requires_grad=True)
    w_, b_ = w.clone().requires_grad_(), b.clone().requires_grad_()
    y = wnn.functional.linear(x, w_, b_, activation="swiglu")
    dy = torch.randn_like(y)
    dx, dw, db = torch.autograd.grad(y, [x, w_, b_], dy)
    x2, wg2, wu2, bg2, bu2 = (t.detach().clone().requires_grad_() for t in (x, wg, wu, bg, bu))
    y2 = torch.nn.functional.silu(x2 @ wg2.t() + bg2) * (x2 @ wu2.t() + bu2)
    rx, rwg, rwu, rbg, rbu = torch.autograd.grad(y2, [x2, wg2, wu2, bg2, bu2], dy)
    assert torch.allclose(y, y2, atol=1e-12) and torch.allclose(dx, rx, atol=1e-10)
    assert torch.allclose(dw, ops.interleave_gate_up(rwg, rwu)[0], atol=1e-10)
    assert torch.allclose(db, ops.interleave_gate_up(rwg, rwu, rbg, rbu)[1], atol=1e-5)  # summed in fp32
    with pytest.raises(ValueError, match=r"functional.linear\(x, w, activation='swiglu'\)"):
        wnn.Linear(64, 96, activation="swiglu")
