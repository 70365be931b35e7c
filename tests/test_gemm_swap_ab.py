"""Swap-AB GEMM (``ops.gemm(..., config={"swap_ab": True, ...})``) on the CPU: out^T = W x^T, the weight's
rows on WGMMA's M and the tokens on N, written as a column-major C (``PersistentGemm(c_major="m")``). The
kernel compiles for sm_90a with transposed stmatrix stores and the same barrier program (so the shipped
proof covers it); ops.gemm hands the host the swapped operands; what it cannot run is refused naming the
fix; the autotuner tries the swap-AB tiles for M <= 64 where a swapped kernel can run the call. On the H200
bench/gemm_floor.py --candidates --swap checks them against fp64 and times them (docs/gemm.md, "The GEMM
floor")."""
from __future__ import annotations

import os
import sys
import types

import pytest

from _fake_tensor import FakeTensor as T
from warpsched.kernels.gemm import ops as ops_gemm

cutlass = pytest.importorskip("cutlass")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
from warpsched.kernels.gemm import host as gh  # noqa: E402
from warpsched.kernels.gemm.config import GemmConfigError  # noqa: E402
from warpsched.kernels.gemm.kernel import PersistentGemm  # noqa: E402

TILE = dict(schedule="cooperative", tile_mn=(64, 32))


@pytest.fixture
def no_torch(monkeypatch):
    """ops.gemm imports torch on its first call for a key; out is given here, so nothing of torch is used
    (the CI machine has no torch)."""
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))


def test_column_major_c_compiles_with_transposed_stores():
    col = gh.compile_for_cpu(c_major="m", **TILE).artifacts.PTX
    row = gh.compile_for_cpu(**TILE).artifacts.PTX
    assert "stmatrix.sync.aligned.m8n8.x4.trans" in col and ".trans" not in row.split("stmatrix", 1)[-1][:40]
    assert col.count("cp.async.bulk.tensor") == row.count("cp.async.bulk.tensor")  # the same TMA loads and store


def test_column_major_c_is_the_same_program():
    quiet = dict(verbose=False, exhaustive_deadlock_race_check=False)
    plain = gh.build(PersistentGemm(**TILE), **quiet)
    swapped = gh.build(PersistentGemm(c_major="m", **TILE), **quiet)
    assert swapped.fingerprint == plain.fingerprint  # the shipped proof is the swapped kernel's proof


@pytest.mark.parametrize("options,needle", [
    (dict(c_major="k"), "c_major='k'"),
    (dict(c_major="m", split_k=True), "drop the split"),
    (dict(c_major="m", bias="c"), "fused epilogue: bias c"),
    (dict(schedule="cooperative", c_major="m", stream_k=True), "drop the split"),
])
def test_what_a_column_major_c_refuses(options, needle):
    with pytest.raises(GemmConfigError, match=needle):
        PersistentGemm(**{**TILE, **options})


def test_ops_gemm_hands_the_host_the_swapped_operands(monkeypatch, no_torch):
    """a (16, 128) tokens, b = w.t() of a (256, 128) weight: the host plans A = w (256, 128), B = a and C =
    out.t() (256, 16) column-major, one launch, no K split; the kept plan launches the same way."""
    planned, launched = [], []

    class Plan:
        ffi = True

        def launch(self, a, b, c, *rest):
            launched.append((a.shape, b.shape, c.shape, c.stride()))

    def plan(a, b, c, **kw):
        planned.append((a.shape, b.shape, c.shape, c.stride(), kw))
        return Plan()

    monkeypatch.setattr(gh, "plan", plan)
    a, b, out = T((16, 128)), T((128, 256), strides=(1, 128)), T((16, 256))
    cfg = dict(TILE, swap_ab=True)
    assert ops_gemm.gemm(a, b, out, config=cfg) is out
    assert ops_gemm.gemm(a, b, out, config=cfg) is out  # the kept plan
    assert planned == [((256, 128), (16, 128), (256, 16), (1, 256),
                        dict(device_scale=False, schedule="cooperative", tile_mn=(64, 32), split_k=1))]
    assert launched == [((256, 128), (16, 128), (256, 16), (1, 256))] * 2


def test_ops_gemm_refuses_a_swapped_epilogue(monkeypatch, no_torch):
    monkeypatch.setattr(gh, "plan", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(ops_gemm.GemmArgumentError, match="swap_ab=True with a fused epilogue"):
        ops_gemm.gemm(T((16, 128)), T((128, 256), strides=(1, 128)), T((16, 256)), bias=T((256,)),
                      config=dict(TILE, swap_ab=True))


@pytest.mark.parametrize("M,kw,swap", [
    (16, {}, True), (64, {}, True),
    (65, {}, False),  # past the M <= 64 candidates
    (16, {"bias": T((256,))}, False),  # a fused epilogue: the swapped kernel writes plain tiles
    (16, {"alpha": 2.0}, False),
])
def test_auto_tries_swap_ab_only_where_it_can_run(monkeypatch, no_torch, M, kw, swap):
    """config="auto": a plain 16-bit GEMM with M <= 64 tunes the swap-AB tiles too, under a key of its own
    (so an epilogue's lookup of the same shape never gets a swapped winner); an epilogue or a larger M
    tunes without them, under the plain key."""
    torch = sys.modules["torch"]
    torch.cuda = types.SimpleNamespace(get_device_name=lambda d: "NVIDIA H200", current_device=lambda: 0,
                                       get_device_properties=lambda d: types.SimpleNamespace(multi_processor_count=132))
    torch.empty = lambda *shape, **k: T(shape)
    tuned = []

    timed = []

    def autotune(key, cands, bench, cache):
        tuned.append((key, cands))
        for c in cands:  # each candidate's timing launch, as the tuner runs it
            bench(c)
        return dict(cands[0]), {}

    def host_gemm(a, b, c, **kw):  # the host takes no swap_ab: a swapped candidate arrives swapped
        assert "swap_ab" not in kw
        timed.append((a.shape, b.shape, c.shape, c.stride()))

    monkeypatch.setattr(ops_gemm, "_time_ms", lambda launch: launch() or 1.0)
    monkeypatch.setattr(gh, "gemm", host_gemm)
    monkeypatch.setattr(ops_gemm._tune, "autotune", autotune)
    monkeypatch.setattr(ops_gemm._tune, "TuneCache", lambda: None)
    monkeypatch.setattr(gh, "plan", lambda *a, **k: types.SimpleNamespace(ffi=True, target="c", launch=lambda *a: None))
    ops_gemm.gemm(T((M, 128)), T((128, 256), strides=(1, 128)), T((M, 256)), **kw)
    (key, cands), = tuned
    swapped = [c for c in cands if c.get("swap_ab")]
    assert key.endswith("|swap-ab") is swap
    # two token tiles: also over a 1x2 cluster; one: multicast to four weight tiles, and with PDL
    pair = list(ops_gemm._tune.SWAP_AB_PAIR if M > 32 else ops_gemm._tune.SWAP_AB_SHARED)
    assert (swapped == [dict(c) for c in ops_gemm._tune.SWAP_AB] + pair) if swap else not swapped
    assert timed.count(((256, 128), (M, 128), (256, M), (1, 256))) == len(swapped)  # W on M, tokens on N, C^T
    assert timed.count(((M, 128), (256, 128), (M, 256), (256, 1))) == len(cands) - len(swapped)


def test_column_major_c_with_an_in_kernel_split_is_the_split_program():
    """c_major="m" with split_reduce="parallel": the same barrier program (and grid hand-over) as the
    row-major split kernel, so the row-major kernel's proof covers it; compiled, C stored transposed."""
    quiet = dict(verbose=False, exhaustive_deadlock_race_check=False)
    split = dict(TILE, split_k=True, split_reduce="parallel")
    assert gh.build(PersistentGemm(c_major="m", **split), **quiet).fingerprint == \
        gh.build(PersistentGemm(**split), **quiet).fingerprint
    ptx = gh.compile_for_cpu(c_major="m", **split).artifacts.PTX
    assert "stmatrix.sync.aligned.m8n8.x4.trans" in ptx
    assert "ld.acquire.gpu" in ptx or "ld.global.acquire.gpu" in ptx  # the per-tile flag the last share waits on
