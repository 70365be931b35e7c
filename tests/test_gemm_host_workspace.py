"""The GEMM host's in-kernel reductions on the CPU (no torch, no GPU: a stand-in torch module and a
recording ``compiled``): the fp32 tile workspace and int32 flags that in-kernel split-K
("serial", "parallel", "atomic") and stream-K allocate, which of them start zeroed, the compile
options and the split count each launch passes, and that a second call reuses the workspace."""
from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("cutlass")

from _fake_tensor import FakeTensor  # noqa: E402


class _Alloc:
    def __init__(self, kind, shape, dtype):
        self.kind, self.shape, self.dtype = kind, tuple(shape), dtype


@pytest.fixture
def host(monkeypatch):
    from warpsched.kernels import _host, gemm_host

    fake_torch = types.SimpleNamespace(float32="float32", int32="int32", allocs=[])

    def alloc(kind):
        def make(*shape, device=None, dtype=None):
            fake_torch.allocs.append(_Alloc(kind, shape, dtype))
            return fake_torch.allocs[-1]
        return make

    fake_torch.zeros, fake_torch.empty = alloc("zeros"), alloc("empty")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    launches, compiles = [], []

    def compiled(ma, mb, mc, a, c, serial_args=(), **options):
        compiles.append(options)
        return lambda *args: launches.append(args)

    monkeypatch.setattr(gemm_host, "compiled", compiled)
    monkeypatch.setattr(gemm_host, "to_cute", lambda t: t)
    monkeypatch.setattr(gemm_host, "max_ctas", lambda: 132)
    monkeypatch.setattr(_host, "to_cute", lambda t, *_: t)
    monkeypatch.setattr(_host, "current_stream", lambda: "stream")
    monkeypatch.setattr(gemm_host, "_WORKSPACE", {})
    return types.SimpleNamespace(gemm_host=gemm_host, torch=fake_torch, launches=launches, compiles=compiles)


def _splits(launch):
    return launch[3].value if hasattr(launch[3], "value") else int(launch[3])


@pytest.mark.parametrize("mode,slabs,zeroed", [("serial", 1, False), ("parallel", 2, False), ("atomic", 1, True)])
def test_in_kernel_split_k_workspace(host, mode, slabs, zeroed):
    import cutlass

    a, b, c = FakeTensor((300, 4096)), FakeTensor((1000, 4096)), FakeTensor((300, 1000))
    rows = 384  # 300 rows in 128-row tiles
    for _ in range(2):
        run = host.gemm_host._serial(a, b, c, "ma", "mb", "stream", cutlass.Float32(1.0), 3, rows, "cooperative",
                                     mode, {"tile_mn": (128, 256)})
    ws, flags = host.torch.allocs  # allocated once for both calls
    assert ws.shape == (slabs * rows, 1024) and ws.kind == ("zeros" if zeroed else "empty") and ws.dtype == "float32"
    assert flags.shape == (3 * 4,) and flags.kind == "zeros" and flags.dtype == "int32"  # one per 128x256 tile
    assert host.compiles[0] == dict(schedule="cooperative", split_k=True, split_reduce=mode, tile_mn=(128, 256))
    run()
    assert len(host.launches) == 3 and all(_splits(x) == 3 and x[-2:] == (ws, flags) for x in host.launches)


def test_stream_k_workspace(host):
    a, b, c = FakeTensor((1024, 4096)), FakeTensor((14336, 4096)), FakeTensor((1024, 14336))
    for _ in range(2):
        run = host.gemm_host._stream_k(a, b, c, 1.0, "cooperative", "host", 64, {"tile_mn": (128, 256)})
    ws, flags = host.torch.allocs
    assert ws.shape == (2 * 132 * 128, 256) and ws.kind == "zeros" and ws.dtype == "float32"  # a tile per slot
    assert flags.shape == (2 * 132,) and flags.kind == "zeros" and flags.dtype == "int32"
    assert host.compiles[0] == dict(schedule="cooperative", stream_k=True, tile_mn=(128, 256))
    run()
    assert len(host.launches) == 3 and all(_splits(x) == 1 and x[-2:] == (ws, flags) for x in host.launches)
