"""Stream-K partition (warpsched.kernels.gemm.streamk) in pure Python: over many (tiles, K tiles,
CTAs), every (tile, k) iteration is covered exactly once; a shared tile's shares, numbered locally by
each unit (``StreamKPlan.share``), run 0 (its last K tiles) to ``last`` (its first K tile) in K order;
each share after the first waits for the one before it, which is the next CTA's first stream-K unit
(so no cycle of waits); a tile has at most two shares when the CTAs are no more than the tiles;
every CTA has at least one unit, and the work per CTA differs by at most one. Then the kernel on the
CPU (sm_90a)."""
from __future__ import annotations

import itertools

import pytest

from warpsched.kernels.gemm.streamk import StreamKPlan, ctas_for


def _check(tiles, k_tiles, max_ctas):
    ctas = ctas_for(tiles, k_tiles, max_ctas)
    plan = StreamKPlan(tiles, k_tiles, ctas)
    cover = {}  # (tile, k) -> how many units ran it
    shares = {}  # shared tile -> [(first K tile, share, last, slot, CTA, unit)]
    work = []
    for b in range(ctas):
        n = plan.units(b)
        assert n >= 1
        done = 0
        for j in range(n):
            tile, first, count, slot = plan.unit(b, j)
            assert 0 <= tile < tiles and count >= 1 and 0 <= first and first + count <= k_tiles
            for k in range(first, first + count):
                cover[(tile, k)] = cover.get((tile, k), 0) + 1
            if count < k_tiles:
                shares.setdefault(tile, []).append((first, *plan.share(slot, first, count), slot, b, j))
            done += count
        work.append(done)
    assert cover == {(t, k): 1 for t in range(tiles) for k in range(k_tiles)}
    for tile, units in shares.items():
        units.sort()  # K order: the tile's first K tiles first
        n = len(units)
        assert n >= 2 and (n == 2 or ctas > tiles), (tiles, k_tiles, ctas, tile, units)
        assert [u[1:3] for u in units] == [(n - 1 - i, n - 1) for i in range(n)], (tiles, k_tiles, ctas, units)
        # one workspace slot per shared tile, owned by it alone
        assert len({u[3] for u in units}) == 1 and 0 <= units[0][3] < 2 * ctas
        assert tile >= plan.dp_tiles and units[0][3] == tile - plan.dp_tiles
        for (_, _, _, _, b, j), (_, _, _, _, b_next, j_next) in zip(units, units[1:]):
            # a share waits for the next in K order: the next CTA's first stream-K unit, which
            # waits for nothing before it in its CTA (deadlock freedom)
            assert b_next == b + 1 and j_next == plan.dp_per_cta, (tiles, k_tiles, ctas, units)
        assert units[-1][5] == plan.dp_per_cta  # share 0 (the writer) is its CTA's first stream-K unit
    if plan.sk_tiles:
        assert max(work) - min(work) <= 1  # balanced: every CTA the same iterations, up to rounding
        assert plan.sk_tiles == min(tiles, tiles % ctas + ctas) and plan.dp_tiles % ctas == 0
    else:
        assert tiles % ctas == 0 and all(w == tiles // ctas * k_tiles for w in work)
    return plan


@pytest.mark.parametrize("max_ctas", [1, 2, 3, 7, 16, 132])
def test_partition_covers_every_iteration_once_with_chained_shares(max_ctas):
    for tiles, k_tiles in itertools.product(list(range(1, 40)) + [131, 133, 263, 264, 265, 448, 512],
                                            [1, 2, 3, 5, 8, 64, 65, 224]):
        _check(tiles, k_tiles, max_ctas)


@pytest.mark.parametrize("shape,tile,k_tile", [((1024, 14336, 4096), (128, 256), 64),
                                               ((4096, 4096, 4096), (128, 256), 64),
                                               ((2048, 2048, 2048), (128, 256), 64),
                                               ((256, 14336, 4096), (128, 256), 64),
                                               ((4096, 128256, 4096), (128, 256), 64),
                                               ((3000, 5000, 1000), (128, 256), 64),
                                               ((1, 8, 8), (128, 256), 64)])
def test_sweep_shapes(shape, tile, k_tile):
    M, N, K = shape
    tiles = -(-M // tile[0]) * -(-N // tile[1])
    plan = _check(tiles, -(-K // k_tile), 132)
    if (M, N, K) == (1024, 14336, 4096):  # 448 tiles = 3 waves + 52: the last 184 tiles are stream-K
        assert (plan.dp_tiles, plan.sk_tiles, plan.dp_per_cta) == (264, 184, 2)


def test_fewer_tiles_than_ctas_spreads_their_k_iterations_over_every_cta():
    # 1000 x 2056 x 4104 at 128x256: 72 tiles of 65 K tiles on 132 SMs, 35-36 K tiles per CTA
    plan = StreamKPlan(72, 65, ctas_for(72, 65, 132))
    assert plan.ctas == 132 and plan.sk_tiles == 72 and plan.dp_tiles == 0
    assert {plan.range_of(b)[1] - plan.range_of(b)[0] for b in range(132)} == {35, 36}
    # tile 0: CTA 0 holds its first 35 K tiles (the last share, 1 of 0..1), CTA 1 the other 30
    assert plan.unit(0, 0) == (0, 0, 35, 0) and plan.share(0, 0, 35) == (1, 1)
    assert plan.unit(1, 0) == (0, 35, 30, 0) and plan.share(0, 35, 30) == (0, 1)
    # one K tile per CTA: a tile of 3 K tiles on 3 CTAs is a chain of three shares
    tiny = StreamKPlan(1, 3, ctas_for(1, 3, 132))
    units = [tiny.unit(b, 0) for b in range(tiny.ctas)]
    assert [tiny.share(slot, first, count) for _, first, count, slot in units] == [(2, 2), (1, 2), (0, 2)]


# ------------------------------------------------------------------ the kernel (CPU compile, sm_90a)
# Stream-K cooperative 128x256: the ring, wgmma and TMA of the cooperative kernel; the epilogue of
# a shared tile once (serial_fixup's branches): a share reads the partial so far after its wait
# (acquire loads: before and in the bounded spin; 32 16-byte loads in the accumulators' order, after a
# barrier and a fence) and, unless it is the last, writes the sum (32 16-byte stores) and releases the
# slot's flag after a fence and a barrier; the last resets the flag (relaxed store). No atomics, no zeroing. Then ONE
# store_tile that a whole tile and the reader reach: 16 stmatrix, 16 + 2 epilogue barriers.
STREAM_K = {"mbarrier.init": 8, "mbarrier.arrive": 3, "mbarrier.try_wait": 7, "wgmma.mma_async": 8,
            "wgmma.mma_async.sync.aligned.m64n256k16": 8, "stmatrix": 16, "cp.async.bulk.tensor": 10,
            "red.relaxed.gpu.global.add.v2.f32": 0, "atom.global": 0, "bar.red.or.pred \t%p": 0,
            "ld.acquire.gpu": 2, "st.release.gpu": 1, "st.relaxed.gpu": 1, "fence.acq_rel.gpu": 2,
            "bar.sync \t14, 256;": 18, "ld.global.v4.b32": 32, "st.global.v4.b32": 32, "ld.global.v2.b32": 0, "setmaxnreg": 2}


@pytest.fixture(scope="module")
def gp():
    pytest.importorskip("cutlass")
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    import gemm_persistent

    return gemm_persistent


@pytest.mark.parametrize("ab", ["BFloat16", "Float8E4M3FN"])
def test_stream_k_compiles_and_is_safe_for_every_k_range_and_unit_count(gp, ab):
    import _common
    import cutlass

    from warpsched.verify.verdicts import VERDICTS

    ptx = gp.compile_for_cpu(schedule="cooperative", stream_k=True, ab_dtype=getattr(cutlass, ab)).artifacts.PTX
    traced = VERDICTS.looked_up[-1]
    assert VERDICTS.get(traced).verdict == "SAFE"
    want = dict(STREAM_K)
    if ab != "BFloat16":  # fp8: k32 wgmmas, 4 per 128-deep K tile
        del want["wgmma.mma_async.sync.aligned.m64n256k16"]
    assert _common.count_ptx(ptx, want) == want
    g = gp.PersistentGemm(schedule="cooperative", stream_k=True, ab_dtype=getattr(cutlass, ab))
    assert g.stream_k and not g.serial and g.c_dtype is cutlass.BFloat16 and "stream-K" in g.describe()
    mgr = gp.build(g, verbose=False, progress=False, cache_verdict=False)
    res = mgr.result.checker
    assert res.verdict == "SAFE" and mgr.fingerprint == traced
    report = res.report()
    assert "domain end k_tiles_of [LoadTask, MmaTask]: every count >= 1" in report
    assert "every units_per_cta >= 1" in report
    # the barrier program is the atomic split-K one: stream-K changes which K range a unit runs and the
    # GMEM hand-over of a shared tile (flags the checker does not see), not the barriers
    atomic = gp.PersistentGemm(schedule="cooperative", split_k=True, split_reduce="atomic",
                               ab_dtype=getattr(cutlass, ab))
    assert mgr.fingerprint == gp.build(atomic, verbose=False, exhaustive_deadlock_race_check=False).fingerprint


def test_stream_k_64_row_tile_reduces_on_one_warp_group(gp):
    import _common

    from warpsched.verify.verdicts import VERDICTS

    ptx = gp.compile_for_cpu(schedule="cooperative", stream_k=True, tile_mn=(64, 128), pdl=True).artifacts.PTX
    assert VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"
    want = {"red.relaxed.gpu.global.add.v2.f32": 0, "ld.acquire.gpu": 2, "st.release.gpu": 1, "ld.global.v4.b32": 16,
            "st.global.v4.b32": 16, "bar.sync \t14, 128;": 10, "wgmma.mma_async.sync.aligned.m64n128k16": 8,
            "griddepcontrol.wait": 1, "griddepcontrol.launch_dependents": 1}
    assert _common.count_ptx(ptx, want) == want


@pytest.mark.parametrize("kwargs,needle", [
    (dict(schedule="pingpong", stream_k=True), "stream-K runs on the cooperative schedule"),
    (dict(schedule="cooperative", stream_k=True, split_k=True), "not with split_k"),
    (dict(schedule="cooperative", stream_k=True, split_reduce="serial"), "no split_reduce"),
    (dict(schedule="cooperative", stream_k=True, split_reduce="atomic"), "no split_reduce"),
    (dict(schedule="cooperative", stream_k=True, cluster_mn=(2, 1)), "without a cluster"),
])
def test_stream_k_config_errors(gp, kwargs, needle):
    with pytest.raises(gp.GemmConfigError, match=needle):
        gp.PersistentGemm(**kwargs)


def test_stream_k_is_not_an_autotune_candidate():
    """Slower than the best data-parallel tile on the H200 on few tiles (fewer than SMs, where its tiles have
    two or more shares) and on many (docs/gemm.md, "Stream-K"): the sweep and bench/gemm_floor.py --stream
    run it as named configurations, ops.gemm's tuner does not try it."""
    from warpsched.kernels.gemm import autotune as gemm_autotune

    for M, N, K in [(64, 4096, 4096), (256, 14336, 4096), (1024, 14336, 4096), (4096, 4096, 4096),
                    (1000, 2056, 4104), (1000, 1000, 1000)]:
        for fp8 in (False, True):
            for det in (False, True):
                assert all(c.get("split_k") != "stream" for c in gemm_autotune.candidates(M, N, K, fp8, det))
    assert gemm_autotune.normalize({"split_k": "stream", "tile_mn": [128, 256]}) == {"split_k": "stream",
                                                                                     "tile_mn": (128, 256)}


@pytest.mark.parametrize("options,K,needle", [
    (dict(schedule="pingpong"), 128, "stream-K runs on the cooperative schedule"),
    (dict(split_reduce="serial"), 128, "no split_reduce"),
    (dict(split_reduce="atomic"), 128, "no split_reduce"),
    (dict(cluster_mn=(2, 1)), 128, "without a cluster"),
    (dict(max_ctas=132), 8_000_000, "too long for stream-K's 32-bit partition"),
])
def test_stream_k_host_errors(gp, monkeypatch, options, K, needle):
    """gemm(..., split_k="stream") rejects what stream-K does not run, before touching the GPU."""
    from _fake_tensor import FakeTensor

    from warpsched.kernels.gemm import residency

    h200 = residency.DeviceOccupancy("NVIDIA H200", sms=132, smem_per_sm=228 * 1024, threads_per_sm=2048)
    monkeypatch.setattr(residency, "device_occupancy", lambda device=None: h200)

    a, b, c = FakeTensor((64, K)), FakeTensor((32, K)), FakeTensor((64, 32))
    with pytest.raises(gp.GemmConfigError, match=needle):
        gp.gemm(a, b, c, split_k="stream", **options)
    with pytest.raises(gp.GemmConfigError, match="'auto', 'stream' or an int"):
        gp.gemm(a, b, c, split_k="streamk")


def test_sweep_checks_stream_k_where_tiles_are_shared():
    """bench/gemm_sweep.py: the stream-K configurations exist, are in the tune sets of the
    shapes with many tiles, and its SK_RAGGED shapes do share tiles on the H200's 132 SMs (M = 1,
    ragged M / N / K), except the K < one K tile shape, where every unit is a whole tile."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import gemm_sweep_configs as sweep

    assert set(sweep.STREAM_K) <= set(sweep.CONFIGS) and sweep.FIXED["coop_sk"] in sweep.STREAM_K
    assert all(sweep.CONFIGS[n]["split_k"] == "stream" for n in sweep.STREAM_K)
    for shape in [(1024, 14336, 4096), (4096, 4096, 4096), (256, 128256, 4096), (64, 128256, 4096)]:
        assert "coop128x256sk" in sweep.tune_set(*shape)
    assert "f8coop128x256sk" in sweep.fp8_tune_set(4096, 4096, 4096)
    shared = {}
    for M, N, K in sweep.SK_RAGGED:
        tiles, k_tiles = -(-M // 128) * -(-N // 256), -(-K // 64)
        plan = StreamKPlan(tiles, k_tiles, ctas_for(tiles, k_tiles, 132))
        units = [plan.unit(b, j) for b in range(plan.ctas) for j in range(plan.units(b))]
        shared[(M, N, K)] = sum(count < k_tiles for _, _, count, _ in units)
        assert M % 128 or N % 256 or K % 64  # ragged
    assert shared[(520, 34008, 40)] == 0 and all(v > 0 for s, v in shared.items() if s != (520, 34008, 40))
    assert min(s[0] for s in sweep.SK_RAGGED) == 1
