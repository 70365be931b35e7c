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


@pytest.mark.parametrize("mode,splits", [("parallel", 2), ("host", 1)])  # 2 x 64 tiles fill 128 SMs
def test_column_major_c_splits_only_in_the_kernel(host, monkeypatch, mode, splits):
    """A swap-AB GEMM's column-major C (out^T of 16 tokens by a 4096 x 4096 weight: 64 tiles of 64x32 on 132
    SMs): split_k="auto" splits K with an in-kernel reduction (its fp32 workspace tiles do not depend on C's
    layout) and stays whole with the host's (which would sum into a row-major C)."""
    from warpsched.kernels import _host

    monkeypatch.setattr(_host, "num_sms", lambda: 132)
    a, b = FakeTensor((4096, 4096)), FakeTensor((16, 4096))
    c = FakeTensor((4096, 16), strides=(1, 4096))  # out (16, 4096) row-major, seen as out^T
    p = host.gemm_host.plan(a, b, c, "cooperative", "auto", mode, tile_mn=(64, 32), block_k=128)
    assert p.splits == splits and host.compiles[0]["c_major"] == "m"
    assert host.compiles[0].get("split_reduce") == (mode if splits > 1 else None)


@pytest.mark.parametrize("mode", ["serial", "parallel", "atomic"])
def test_tiles_padding_m_n_alike_get_flag_arrays_of_their_own_count(host, mode):
    """128x256 and 128x128 tiles pad 1000 x 3000 to the same 1024 x 3072 workspace, but need 8 x 12 and 8 x 24
    flags: each plan gets an array of its own tile count, whichever is planned first (sharing the first one's
    array, the H200 gave NaN where the second kernel's flags ran past its end)."""
    a, b, c = FakeTensor((1000, 1736)), FakeTensor((3000, 1736)), FakeTensor((1000, 3000))
    for tile, tiles in (((128, 256), 8 * 12), ((128, 128), 8 * 24), ((128, 256), 8 * 12)):
        p = host.gemm_host.plan(a, b, c, "cooperative", 2, mode, tile_mn=tile)
        p(a, b, c, 1.0)
        flags = host.launches[-1][6]
        assert flags.shape == (tiles,) and flags.kind == "zeros"
    assert len([x for x in host.torch.allocs if x.dtype == "int32"]) == 2  # the 128x256 plan's reused
