"""The SwiGLU product and its gradient on the interleaved pre-activation (``kernels.gemm.swiglu``), the forward
and backward ``linear(..., activation="swiglu")`` runs under autograd. Compiled for sm_90a on the CPU: every
global access is 16 bytes (one gate or up run of 8 features) and each thread evaluates one exp and one
reciprocal per feature. Their values are checked on the GPU (``bench/gemm_epilogue_check.py --swiglu-grad``);
here, where torch is installed, the torch fallback's gradient against separate gate / up halves."""
from __future__ import annotations

import re

import cutlass
import pytest

from warpsched.kernels.gemm import swiglu


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", [cutlass.BFloat16, cutlass.Float16])
def test_the_kernels_move_whole_runs_and_evaluate_silu_once_per_feature(monkeypatch, direction, dtype):
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    ptx = swiglu.compiled(direction, dtype, arch="sm_90a").artifacts.PTX
    accesses = re.findall(r"(?:ld|st)\.global[.\w]*", ptx)
    loads = [a for a in accesses if a.startswith("ld")]
    stores = [a for a in accesses if a.startswith("st")]
    assert all(".v4" in a for a in accesses), accesses
    # forward: the gate and up runs in, h's run out; backward: dh, gate and up in, dz's two runs out
    assert (len(loads), len(stores)) == ((2, 1) if direction == "forward" else (3, 2))
    assert len(re.findall(r"ex2\.approx", ptx)) == swiglu.RUN
    assert len(re.findall(r"rcp\.approx", ptx)) == swiglu.RUN


def test_without_the_kernels_the_gradient_is_torchs_on_gate_and_up_halves():
    torch = pytest.importorskip("torch")
    from warpsched.kernels.gemm.ops import swiglu_interleaved

    g = torch.Generator().manual_seed(0)
    T, I = 5, 24
    z = torch.randn(T, 2 * I, generator=g, dtype=torch.float64)
    dh = torch.randn(T, I, generator=g, dtype=torch.float64)
    dz = swiglu.swiglu_backward(dh, z)  # CPU tensors: the torch fallback
    runs = z.view(T, I // 8, 2, 8)
    gate, up = (runs[:, :, k].reshape(T, I).clone().requires_grad_() for k in (0, 1))
    (torch.nn.functional.silu(gate) * up).backward(dh)
    expect = torch.stack([gate.grad.view(T, I // 8, 8), up.grad.view(T, I // 8, 8)], dim=2).view(T, 2 * I)
    assert torch.allclose(dz, expect, atol=1e-12)
    assert torch.allclose(swiglu.swiglu_forward(z), swiglu_interleaved(z))


def test_a_gradient_that_is_not_half_of_z_is_refused_naming_the_shapes():
    torch = pytest.importorskip("torch")
    from warpsched.kernels.gemm.ops import GemmArgumentError

    with pytest.raises(GemmArgumentError, match=r"dh \(4, 16\) must be z \(4, 48\) with half"):
        swiglu.swiglu_backward(torch.zeros(4, 16), torch.zeros(4, 48))


@pytest.mark.parametrize("x, w, words", [
    ((4, 64), (32, 48), r"x \(4, 64\), weight \(32, 48\): expected x \(\.\.\., K\)"),
    ((4, 64), (24, 64), "a multiple of 16"),
    ((4, 64), (32,), "weight \\(32,\\)"),
    (None, (32, 64), "x"),
])
def test_swiglu_keep_refuses_operands_no_layer_has_naming_them(x, w, words):
    torch = pytest.importorskip("torch")
    from warpsched.kernels.gemm import swiglu
    from warpsched.kernels.gemm.ops import GemmArgumentError

    xt = None if x is None else torch.zeros(x, dtype=torch.bfloat16)
    with pytest.raises(GemmArgumentError, match=words):
        swiglu.swiglu_keep(xt, torch.zeros(w, dtype=torch.bfloat16))


def test_swiglu_keep_off_cuda_is_the_gemm_and_the_product():
    """Without the kernels (a CPU tensor here) z is the plain product and h torch's SwiGLU of it."""
    torch = pytest.importorskip("torch")
    from warpsched.kernels.gemm import ops as gemm_ops
    from warpsched.kernels.gemm import swiglu

    calls = []
    real = gemm_ops.linear
    try:
        gemm_ops.linear = lambda x, w, b=None, act=None: calls.append(act) or torch.nn.functional.linear(x, w, b)
        x, w = torch.randn(2, 3, 32), torch.randn(64, 32)
        z, h = swiglu.swiglu_keep(x, w)
    finally:
        gemm_ops.linear = real
    assert calls == [None] and z.shape == (2, 3, 64) and h.shape == (2, 3, 32)
    torch.testing.assert_close(z, torch.nn.functional.linear(x, w))
    torch.testing.assert_close(h, gemm_ops.swiglu_interleaved(z))
