"""Fuzzed ``config`` dicts through ``ops.gemm`` on the CPU: whatever a caller (or a stale autotune cache)
passes, including swap-AB with splits, clusters and epilogues, the call plans for real (``gemm.host.plan``:
the split count, the workspace, the kernel options) and either gets a kernel ``PersistentGemm`` accepts or
a named ``ValueError`` (``GemmArgumentError`` / ``GemmConfigError``), never another exception from inside
warpsched. The compile is replaced by building the kernel object (nothing is traced), and torch by a
stand-in that allocates nothing, so this runs without a GPU or torch."""
from __future__ import annotations

import random
import sys
import types

import pytest

pytest.importorskip("cutlass")

from _fake_tensor import FakeTensor as T  # noqa: E402
from warpsched.kernels import _host  # noqa: E402
from warpsched.kernels.gemm import host as gh  # noqa: E402
from warpsched.kernels.gemm import launch  # noqa: E402
from warpsched.kernels.gemm import ops as ops_gemm  # noqa: E402
from warpsched.kernels.gemm.config import GemmConfigError  # noqa: E402
from warpsched.kernels.gemm.kernel import PersistentGemm  # noqa: E402
from warpsched.kernels.gemm.ops import GemmArgumentError  # noqa: E402

CHOICES = {
    "schedule": ["cooperative", "pingpong", "pingpong_shared", "nope"],
    "tile_mn": [(64, 32), (64, 64), (128, 32), (128, 256), (256, 128), (64, 48), [64, 32], (128,)],
    "split_k": [1, 2, 3, "auto", "stream", 0, 100000, "x"],
    "split_reduce": ["host", "serial", "parallel", "atomic", "tree"],
    "swap_ab": [True, False],
    "cluster_mn": [(1, 1), (2, 1), (1, 2), (4, 1), (1, 4), (2, 2), (3, 1), [4, 1], (4,), 4, "2x1"],
    "block_k": [None, 64, 128, 100],
    "ab_stages": [None, 4, 9, 40],
    "pdl": [False, True],
    "raster": ["m", "n", "z"],
    "group": [1, 8, 0],
}
SHAPES = [(16, 256, 512), (1, 4096, 4096), (64, 1000, 1000), (300, 512, 1024)]


@pytest.fixture
def planner(monkeypatch):
    torch = types.ModuleType("torch")
    torch.empty = torch.zeros = lambda *shape, **k: T(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple)
                                                      else shape, "torch.float32")
    torch.float32, torch.int32 = "torch.float32", "torch.int32"
    monkeypatch.setitem(sys.modules, "torch", torch)
    built = []

    def compiled_ffi(a_dtype, c_dtype, **options):  # the kernel the compile would build, validated
        built.append(launch._kernel(a_dtype, c_dtype, options))
        return lambda *args: None

    monkeypatch.setattr(launch, "compiled_ffi", compiled_ffi)
    monkeypatch.setattr(launch.GemmPlan, "__call__", lambda self, *a, **k: None)  # no launch (nor host reduce)
    monkeypatch.setattr(launch.GemmPlan, "_direct", lambda self, *a, **k: None)
    monkeypatch.setattr(launch, "max_ctas", lambda cluster_mn=(1, 1): 132)
    monkeypatch.setattr(gh, "max_ctas", lambda cluster_mn=(1, 1): 132)
    monkeypatch.setattr(_host, "_FFI", [True])
    monkeypatch.setattr(_host, "num_sms", lambda: 132)
    monkeypatch.setattr(ops_gemm, "_PLANS", {})
    from warpsched.kernels.gemm import residency

    monkeypatch.setattr(residency, "device_occupancy", lambda device=None: residency.DeviceOccupancy(
        "NVIDIA H200", sms=132, smem_per_sm=228 * 1024, threads_per_sm=2048))
    return built


@pytest.mark.parametrize("seed", range(12))
def test_random_configs_plan_or_get_a_named_error(planner, seed):
    r = random.Random(seed)
    planned = refused = 0
    for _ in range(25):
        cfg = {k: r.choice(v) for k, v in CHOICES.items() if r.random() < 0.4}
        M, N, K = r.choice(SHAPES)
        bias = T((N,)) if r.random() < 0.2 else None
        act = r.choice([None, None, "relu", "swiglu"])
        try:
            ops_gemm.gemm(T((M, K)), T((K, N), strides=(1, K)), T((M, N // 2 if act == "swiglu" else N)), config=cfg,
                          bias=bias, activation=act)
            planned += 1
        except (GemmArgumentError, GemmConfigError) as e:  # named, with the fix
            assert str(e).strip(), cfg
            refused += 1
    assert planned + refused == 25
    assert all(isinstance(k, PersistentGemm) for k in planner)


def test_swapped_configs_that_run(planner):
    """The swap-AB configurations the tuner and bench/gemm_floor try all plan (whole tiles and the in-kernel
    split), with a column-major C."""
    from warpsched.kernels.gemm import autotune

    cfgs = [dict(c) for c in autotune.SWAP_AB] + [
        dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, swap_ab=True, split_k="auto",
             split_reduce="parallel")]
    for cfg in cfgs:
        ops_gemm.gemm(T((16, 4096)), T((4096, 4096), strides=(1, 4096)), T((16, 4096)), config=cfg)
    assert len(planner) == len(cfgs) and all(k.c_major == "m" for k in planner)
    assert planner[-1].split_k and planner[-1].split_reduce == "parallel"
