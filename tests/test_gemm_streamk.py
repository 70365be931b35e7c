"""Stream-K partition (warpsched.kernels.gemm_streamk) in pure Python: over many (tiles, K tiles,
CTAs), every (tile, k) iteration is covered exactly once, a tile has at most two shares, the
share count every unit derives locally (K tiles < k_tiles: shared) is the true one, every CTA has
at least one unit, and the work per CTA differs by at most one tile's K iterations plus one."""
from __future__ import annotations

import itertools

import pytest

from warpsched.kernels.gemm_streamk import StreamKPlan, ctas_for


def _check(tiles, k_tiles, max_ctas):
    ctas = ctas_for(tiles, max_ctas)
    plan = StreamKPlan(tiles, k_tiles, ctas)
    cover = {}  # (tile, k) -> how many units ran it
    shares = {}  # tile -> [(K tiles of the unit, slot)]
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
            shares.setdefault(tile, []).append((count, slot))
            done += count
        work.append(done)
    assert cover == {(t, k): 1 for t in range(tiles) for k in range(k_tiles)}
    for tile, units in shares.items():
        assert len(units) <= 2, (tiles, k_tiles, ctas, tile, units)
        for count, slot in units:  # the kernel's rule: fewer than k_tiles K tiles -> 2 arrivals
            assert (2 if count < k_tiles else 1) == len(units)
        if len(units) == 2:  # both shares count on one workspace slot, owned by this tile alone
            assert units[0][1] == units[1][1] and 0 <= units[0][1] < 2 * ctas
            assert tile >= plan.dp_tiles and units[0][1] == tile - plan.dp_tiles
    if plan.sk_tiles:
        assert max(work) - min(work) <= 1  # balanced: every CTA the same iterations, up to rounding
        assert plan.sk_tiles == tiles % ctas + ctas and plan.dp_tiles % ctas == 0
    else:
        assert tiles % ctas == 0 and all(w == tiles // ctas * k_tiles for w in work)
    return plan


@pytest.mark.parametrize("max_ctas", [1, 2, 3, 7, 16, 132])
def test_partition_covers_every_iteration_once_with_at_most_two_shares(max_ctas):
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


def test_fewer_tiles_than_ctas_is_data_parallel():
    plan = StreamKPlan(100, 64, ctas_for(100, 132))
    assert plan.ctas == 100 and plan.sk_tiles == 0 and [plan.unit(b, 0) for b in (0, 99)] == [(0, 0, 64, 0),
                                                                                              (99, 0, 64, 0)]
