"""Co-residency at launch (issue 29): a grid whose CTAs wait for each other through GMEM flags
(serial split-K, stream-K) must fit on the device at once, or the waiting CTAs hold the SMs their
writers need. The host sizes that grid to the device it launches on and refuses a ``max_ctas`` the
device cannot hold (``kernels/gemm/residency.py``); on the CPU with a stand-in torch, as
test_gemm_host_workspace.py."""
from __future__ import annotations

import sys
import types

import pytest

from _fake_tensor import FakeTensor
from warpsched.kernels.gemm.residency import CoResidencyError, DeviceOccupancy, mps_percent, resident_bound

H200 = DeviceOccupancy("NVIDIA H200", sms=132, smem_per_sm=228 * 1024, threads_per_sm=2048)


def test_occupancy_counts_smem_threads_and_mps():
    assert H200.ctas_per_sm(225 * 1024, 384) == 1  # a GEMM that fills shared memory: one per SM
    assert H200.ctas_per_sm(100 * 1024, 384) == 2  # 2 x (100 KB + the 1 KB the hardware keeps) fit in 228 KB
    assert H200.ctas_per_sm(16 * 1024, 384) == 5  # threads bound it: 5 x 384 <= 2048
    assert H200.ctas_per_sm(228 * 1024, 128) == 0  # never fits (no reserve left)
    half = DeviceOccupancy("NVIDIA H200", 132, 228 * 1024, 2048, mps_percent=50)
    assert half.usable_sms == 66 and half.ctas_at_once(225 * 1024, 384) == 66
    assert resident_bound(H200, 100 * 1024, 384, cluster_size=2) == 264  # whole clusters of 2
    assert resident_bound(H200, 100 * 1024, 384, cluster_size=2, active_clusters=100) == 200  # the driver's cap


@pytest.mark.parametrize("raw,pct", [("", None), ("50", 50), ("37.5", 37), ("100", None), ("abc", None), ("0", None)])
def test_mps_percentage_is_read_from_the_environment(monkeypatch, raw, pct):
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", raw)
    assert mps_percent() == pct


@pytest.fixture
def host(monkeypatch):
    pytest.importorskip("cutlass")
    from warpsched.kernels import _host
    from warpsched.kernels.gemm import host as gemm_host
    from warpsched.kernels.gemm import launch as gemm_launch
    from warpsched.kernels.gemm import residency

    fake_torch = types.SimpleNamespace(float32="float32", int32="int32",
                                       zeros=lambda *s, **k: types.SimpleNamespace(**k),
                                       empty=lambda *s, **k: types.SimpleNamespace(**k))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    compiles = []
    monkeypatch.setattr(gemm_launch, "compiled_ffi", lambda a, c, **options: compiles.append(options) or (lambda *x: 0))
    monkeypatch.setattr(_host, "_FFI", [True])
    monkeypatch.setattr(gemm_host, "max_ctas", lambda cluster_mn=(1, 1): 132)
    monkeypatch.setattr(gemm_host, "_WORKSPACE", {})
    device = {"occ": H200}
    monkeypatch.setattr(residency, "device_occupancy", lambda dev=None: device["occ"])
    return types.SimpleNamespace(plan=gemm_host.plan, compiles=compiles, device=device)


def _shapes():
    return FakeTensor((1024, 4096)), FakeTensor((14336, 4096)), FakeTensor((1024, 14336))


@pytest.mark.parametrize("split_k,reduce", [("stream", "host"), (4, "serial")])
def test_the_grid_is_sized_to_the_device_it_launches_on(host, split_k, reduce):
    """One CTA per SM on the H200; on an MPS client with half the threads, or a 114-SM device, the
    grid shrinks to what it holds at once, and the bound is in the compile options (the compile key),
    so a kernel compiled for one device is never launched with another's grid."""
    a, b, c = _shapes()
    host.plan(a, b, c, "cooperative", split_k, reduce)
    host.device["occ"] = DeviceOccupancy("an MPS client", 132, 228 * 1024, 2048, mps_percent=50)
    host.plan(a, b, c, "cooperative", split_k, reduce)
    host.device["occ"] = DeviceOccupancy("NVIDIA H100 PCIe", 114, 228 * 1024, 2048)
    host.plan(a, b, c, "cooperative", split_k, reduce)
    assert [o["max_ctas"] for o in host.compiles] == [132, 66, 114]


@pytest.mark.parametrize("split_k,reduce,what", [("stream", "host", "split_k='stream'"),
                                                 (4, "serial", "split_k=4, split_reduce='serial'")])
def test_a_grid_the_device_cannot_hold_is_refused(host, split_k, reduce, what):
    a, b, c = _shapes()
    host.device["occ"] = DeviceOccupancy("an MPS client", 132, 228 * 1024, 2048, mps_percent=50)
    with pytest.raises(CoResidencyError) as e:
        host.plan(a, b, c, "cooperative", split_k, reduce, max_ctas=132)
    msg = str(e.value)
    assert f"gemm with {what}, max_ctas=132: its 132 CTAs wait for each other" in msg
    assert "an MPS client holds 66 of these CTAs at once: 66 of its 132 SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50)" in msg
    assert "pass max_ctas <= 66" in msg and "split_reduce='parallel' / 'atomic'" in msg
    assert isinstance(e.value, ValueError) and not host.compiles  # refused before anything compiles
    host.plan(a, b, c, "cooperative", split_k, reduce, max_ctas=66)
    assert host.compiles[-1]["max_ctas"] == 66


def test_a_small_grid_fits_even_with_a_large_bound(host):
    """Only the CTAs a launch has must fit: 2 tiles x 2 shares of serial split-K is 4 CTAs."""
    host.device["occ"] = DeviceOccupancy("an MPS client", 132, 228 * 1024, 2048, mps_percent=10)
    a, b, c = FakeTensor((128, 4096)), FakeTensor((512, 4096)), FakeTensor((128, 512))
    host.plan(a, b, c, "cooperative", 2, "serial", max_ctas=132)
    assert host.compiles[-1]["max_ctas"] == 132


def test_kernels_without_waits_keep_their_grid(host):
    """Parallel and atomic split-K and the plain GEMM never wait for another CTA: no bound added."""
    host.device["occ"] = DeviceOccupancy("an MPS client", 132, 228 * 1024, 2048, mps_percent=10)
    a, b, c = _shapes()
    for split_k, reduce in ((1, "host"), (4, "parallel"), (4, "atomic"), (4, "host")):
        host.plan(a, b, c, "cooperative", split_k, reduce, max_ctas=132)
    assert all(o["max_ctas"] == 132 for o in host.compiles)
