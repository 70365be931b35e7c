"""The GEMM's TVM-FFI compile and its transposed operands, on the CPU (sm_90a, fake operands).

The launch path (``gemm_launch.compiled_ffi``) compiles each configuration once with fake operands
and the caller's stream; transposed 16-bit operands (M-major A, N-major B: what a backward pass
reads) change only the SMEM layouts, the TMA boxes and WGMMA's transpose operands, not the program
the checker proves. Runs on the H200: bench/host_overhead.py, bench/linear_autograd.py."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
pytest.importorskip("tvm_ffi")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hopper"))
import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)


@pytest.fixture
def launch(monkeypatch):
    from warpsched.kernels import _host
    from warpsched.kernels.gemm import launch as gemm_launch

    monkeypatch.setattr(_host, "num_sms", lambda: 132)
    monkeypatch.setattr(_host, "ffi_options", lambda arch=None: _host.ptx_options("sm_90a") + " --enable-tvm-ffi")
    monkeypatch.setattr(gemm_launch, "max_ctas", lambda cluster_mn=(1, 1): 132)
    return gemm_launch


def _wgmma(ptx):
    return [line.split(",")[-4:] for line in ptx.splitlines() if "wgmma.mma_async" in line]


def test_transposed_operands_change_only_the_wgmma_transpose_bits(launch):
    base = launch.compiled_ffi("bfloat16", "bfloat16", schedule="cooperative")
    both = launch.compiled_ffi("bfloat16", "bfloat16", schedule="cooperative", a_major="m", b_major="n")
    a_only = launch.compiled_ffi("bfloat16", "bfloat16", schedule="cooperative", a_major="m")
    # the last two immediates of wgmma.mma_async are the A and B transpose flags (PTX ISA)
    assert {tuple(x.strip(" ;") for x in w[-2:]) for w in _wgmma(base.artifacts.PTX)} == {("0", "0")}
    assert {tuple(x.strip(" ;") for x in w[-2:]) for w in _wgmma(both.artifacts.PTX)} == {("1", "1")}
    assert {tuple(x.strip(" ;") for x in w[-2:]) for w in _wgmma(a_only.artifacts.PTX)} == {("1", "0")}
    assert len(_wgmma(base.artifacts.PTX)) == len(_wgmma(both.artifacts.PTX)) == 8
    for options in ({}, {"a_major": "m", "b_major": "n"}):
        k = launch.key("bfloat16", "bfloat16", dict(schedule="cooperative", **options))
        assert launch.VERDICT_OF[k] == "SAFE"


def test_device_scales_compile_for_fp8_only(launch):
    from warpsched.kernels.gemm.config import GemmConfigError

    def loads(f):
        return sum("ld.global" in line for line in f.artifacts.PTX.splitlines())

    scaled = launch.compiled_ffi("float8_e4m3fn", "bfloat16", schedule="cooperative", device_scale=True)
    plain = launch.compiled_ffi("float8_e4m3fn", "bfloat16", schedule="cooperative")
    assert loads(scaled) == loads(plain) + 2  # scale_a[0] and scale_b[0], read once by the kernel
    with pytest.raises(GemmConfigError, match="only the fp8 kernels"):
        launch.compiled_ffi("bfloat16", "bfloat16", schedule="cooperative", device_scale=True)
    with pytest.raises(GemmConfigError, match="fp8 operands are K-major only"):
        launch.compiled_ffi("float8_e4m3fn", "bfloat16", schedule="cooperative", a_major="m")


def test_production_compiles_keep_no_ptx():
    """What ops.* and the torch ops compile keeps nothing on disk; only the CPU compiles the tests read
    (an ``arch``) keep their PTX."""
    from warpsched.kernels import _host

    assert _host.launch_options() == "" and _host.ffi_options() == "--enable-tvm-ffi"
    assert "--keep-ptx" in _host.ptx_options("sm_90a") and "--gpu-arch sm_90a" in _host.ptx_options("sm_90a")
    assert _host.ffi_options("sm_90a").startswith(_host.ptx_options("sm_90a"))
