"""Deep rings for long K (gemm.host.deep_ring, PersistentGemm(k_tiles_min=...)): small tiles get the ring
their SMEM holds when K is at least that long, and the program declares the K loop's minimum, which
keeps the proof at about a thousand states where an undeclared 18-stage ring outgrows a 500k search
(docs/proofs.md, "Deep rings"); shorter K keeps the 8-stage default; misuse is refused naming the fix."""
from __future__ import annotations

import os
import sys
import types

import pytest

pytest.importorskip("cutlass")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass builds an MMA)
from _fake_tensor import FakeTensor  # noqa: E402

import cutlass  # noqa: E402

from warpsched.kernels.gemm import host as gemm_host  # noqa: E402
from warpsched.kernels.gemm.config import MAX_AUTO_STAGES, GemmConfigError  # noqa: E402
from warpsched.kernels.gemm.kernel import PersistentGemm  # noqa: E402


def test_a_small_tile_gets_its_ring_only_with_a_declared_k_minimum():
    shallow = PersistentGemm(schedule="cooperative", tile_mn=(64, 32))
    assert shallow.ring_fit == 18 and shallow.ab_stage == MAX_AUTO_STAGES == 8 and shallow.k_tiles_min == 1
    deep = PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=18)
    assert deep.ab_stage == 18
    assert PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=12).ab_stage == 12
    assert PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=100).ab_stage == 18  # SMEM's cap


def test_the_deep_ring_is_proven_for_every_long_k_in_few_states():
    r = gemm_host.build(PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=18), verbose=False,
                        progress=False, cache_verdict=False).result.checker
    assert r.verdict == "SAFE" and r.states < 5000, (r.verdict, r.states)
    assert "every k_tiles >= 18" in r.text


@pytest.mark.parametrize("bad, words", [(0, "an int >= 1"), (True, "an int >= 1"), (2.5, "an int >= 1")])
def test_a_bad_k_minimum_is_refused(bad, words):
    with pytest.raises(GemmConfigError, match=words):
        PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=bad)


def test_a_k_split_cannot_declare_a_k_minimum():
    with pytest.raises(GemmConfigError, match="leave k_tiles_min at 1"):
        PersistentGemm(schedule="cooperative", tile_mn=(64, 32), split_k=True, k_tiles_min=4)


@pytest.fixture
def plan(monkeypatch):
    from warpsched.kernels import _host
    from warpsched.kernels.gemm import launch

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(float32="float32", int32="int32"))
    monkeypatch.setattr(launch, "compiled_ffi", lambda a_dtype, c_dtype, **options: None)  # no compile here
    monkeypatch.setattr(_host, "num_sms", lambda: 132)
    monkeypatch.setattr(_host, "_FFI", [True])  # the launch path's choice, made without importing tvm_ffi
    return gemm_host.plan


@pytest.mark.parametrize("K, depth", [(18 * 64, 18), (17 * 64, 16), (17 * 64 + 1, 18), (16 * 64, 16),
                                      (15 * 64, 12), (12 * 64, 12), (11 * 64, None), (64, None), (100_000, 18)])
def test_the_host_takes_the_deepest_ring_k_fills(plan, K, depth):
    """64x32 holds 18 stages: K of 18+ tiles gets 18, of 16-17 tiles 16, of 12-15 tiles 12, shorter K the
    8-stage kernel (proven for every K)."""
    a, b, c = FakeTensor((64, K)), FakeTensor((4096, K)), FakeTensor((64, 4096))
    p = plan(a, b, c, "cooperative", 1, tile_mn=(64, 32))
    assert p.options.get("k_tiles_min") == depth, p.options


def test_deep_ring_depths():
    from warpsched.kernels.gemm.host import deep_ring_depths

    assert deep_ring_depths(18) == [12, 16, 18] and deep_ring_depths(13) == [12, 13]
    assert deep_ring_depths(9) == [9] and deep_ring_depths(8) == [] and deep_ring_depths(4) == []


def test_a_named_depth_or_a_k_split_keeps_its_ring(plan):
    a, b, c = FakeTensor((64, 100_000)), FakeTensor((4096, 100_000)), FakeTensor((64, 4096))
    assert "k_tiles_min" not in plan(a, b, c, "cooperative", 1, tile_mn=(64, 32), ab_stages=9).options
    assert "k_tiles_min" not in plan(a, b, c, "cooperative", 1, tile_mn=(128, 256)).options  # fits 4 stages


def test_a_launch_shorter_than_the_declared_minimum_is_refused(plan):
    a, b, c = FakeTensor((64, 640)), FakeTensor((4096, 640)), FakeTensor((64, 4096))
    with pytest.raises(GemmConfigError, match=r"k_tiles_min=18 with K = 640 \(10 K tiles"):
        plan(a, b, c, "cooperative", 1, tile_mn=(64, 32), k_tiles_min=18)
