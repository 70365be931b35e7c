"""The GEMM host's in-kernel reductions on the CPU (no torch, no GPU: a stand-in torch module and a
recording TVM-FFI ``compiled_ffi``): the fp32 tile workspace and int32 flags that in-kernel split-K
("serial", "parallel", "atomic") and stream-K allocate, which of them start zeroed, the compile
options and the split count each launch passes, and that a second call reuses the workspace."""
from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("cutlass")

from _fake_tensor import FakeTensor  # noqa: E402


from warpsched.kernels.gemm.residency import DeviceOccupancy  # noqa: E402

H200 = DeviceOccupancy("NVIDIA H200", sms=132, smem_per_sm=228 * 1024, threads_per_sm=2048)


class _Alloc:
    def __init__(self, kind, shape, dtype):
        self.kind, self.shape, self.dtype = kind, tuple(shape), dtype


@pytest.fixture
def host(monkeypatch):
    from warpsched.kernels import _host
    from warpsched.kernels.gemm import host as gemm_host
    from warpsched.kernels.gemm import launch as gemm_launch
    from warpsched.kernels.gemm import residency

    fake_torch = types.SimpleNamespace(float32="float32", int32="int32", allocs=[])

    def alloc(kind):
        def make(*shape, device=None, dtype=None):
            fake_torch.allocs.append(_Alloc(kind, shape, dtype))
            return fake_torch.allocs[-1]
        return make

    fake_torch.zeros, fake_torch.empty = alloc("zeros"), alloc("empty")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    launches, compiles = [], []

    def compiled_ffi(a_dtype, c_dtype, **options):  # the TVM-FFI launch: torch tensors as they are
        compiles.append(options)
        return lambda *args: launches.append(args)

    monkeypatch.setattr(gemm_launch, "compiled_ffi", compiled_ffi)
    monkeypatch.setattr(_host, "_FFI", [True])
    monkeypatch.setattr(gemm_host, "max_ctas", lambda cluster_mn=(1, 1): 132)
    monkeypatch.setattr(residency, "device_occupancy", lambda device=None: H200)
    monkeypatch.setattr(gemm_host, "_WORKSPACE", {})
    return types.SimpleNamespace(gemm_host=gemm_host, torch=fake_torch, launches=launches, compiles=compiles)


@pytest.mark.parametrize("mode,slabs,zeroed", [("serial", 1, False), ("parallel", 2, False), ("atomic", 1, True)])
def test_in_kernel_split_k_workspace(host, mode, slabs, zeroed):
    a, b, c = FakeTensor((300, 4096)), FakeTensor((1000, 4096)), FakeTensor((300, 1000))
    rows = 384  # 300 rows in 128-row tiles
    plans = [host.gemm_host.plan(a, b, c, "cooperative", 3, mode, tile_mn=(128, 256)) for _ in range(2)]
    ws, flags = host.torch.allocs  # allocated once for both plans
    assert ws.shape == (slabs * rows, 1024) and ws.kind == ("zeros" if zeroed else "empty") and ws.dtype == "float32"
    assert flags.shape == (3 * 4,) and flags.kind == "zeros" and flags.dtype == "int32"  # one per 128x256 tile
    # serial split-K's CTAs wait for each other: its grid bound is in the compile key (co-residency)
    grid = dict(max_ctas=132) if mode == "serial" else {}
    assert host.compiles[0] == dict(schedule="cooperative", split_k=True, split_reduce=mode, tile_mn=(128, 256), **grid)
    for p in plans + plans[:1]:
        p(a, b, c, 1.0)
    assert len(host.launches) == 3 and all(x == (a, b, c, 3, 1.0, ws, flags) for x in host.launches)


def test_stream_k_workspace(host):
    a, b, c = FakeTensor((1024, 4096)), FakeTensor((14336, 4096)), FakeTensor((1024, 14336))
    plans = [host.gemm_host.plan(a, b, c, "cooperative", "stream", "host", tile_mn=(128, 256)) for _ in range(2)]
    ws, flags = host.torch.allocs
    assert ws.shape == (2 * 132 * 128, 256) and ws.kind == "zeros" and ws.dtype == "float32"  # a tile per slot
    assert flags.shape == (2 * 132,) and flags.kind == "zeros" and flags.dtype == "int32"
    assert host.compiles[0] == dict(schedule="cooperative", stream_k=True, tile_mn=(128, 256), max_ctas=132)
    for p in plans + plans[:1]:
        p(a, b, c, 2.0)
    assert len(host.launches) == 3 and all(x == (a, b, c, 1, 2.0, ws, flags) for x in host.launches)


def test_device_scales_follow_the_workspace_or_two_nones(host):
    """fp8 device scales are the kernel's last two arguments: after (workspace, flags), or after two
    Nones where the kernel has neither."""
    a, b = FakeTensor((1024, 4096), "torch.float8_e4m3fn"), FakeTensor((4096, 4096), "torch.float8_e4m3fn")
    c = FakeTensor((1024, 4096))
    p = host.gemm_host.plan(a, b, c, "cooperative", 1, device_scale=True)
    p(a, b, c, 1.0, ("sa", "sb"))
    assert host.launches[-1] == (a, b, c, 1, 1.0, None, None, "sa", "sb")
    assert host.compiles[-1] == dict(schedule="cooperative", device_scale=True)
