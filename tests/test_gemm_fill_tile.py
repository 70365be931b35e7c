"""The wave-filling tile (``autotune.fill_tile``): for a shape of few tiles, the cooperative 128-row tile whose
width leaves the fewest SMs idle. The floor's worst shapes (docs/gemm.md, "The GEMM floor") ran 72-96 tiles of
128x256 on 132 SMs; their fill tiles make one wave of 120-128. Shipped proven; not an autotune candidate until
``bench/gemm_floor.py --fill`` has checked and timed it on the GPU."""
from __future__ import annotations

import re

import pytest

from warpsched.kernels import shipped
from warpsched.kernels.gemm import autotune
from warpsched.kernels.gemm.kernel import PersistentGemm


def _tiles(M, N, bn):
    return -(-M // 128) * -(-N // bn)


@pytest.mark.parametrize("M, N, width, tiles", [(1000, 2056, 144, 120), (1000, 3000, 192, 128), (1500, 1500, 144, 132)])
def test_a_few_tile_shape_gets_the_width_that_fills_one_wave(M, N, width, tiles):
    cfg = autotune.fill_tile(M, N)
    assert cfg["tile_mn"] == (128, width) and _tiles(M, N, width) == tiles <= autotune.SMS
    assert cfg.get("epi_n", 32) == (16 if width % 32 else 32)  # the epilogue's columns divide the tile
    assert cfg not in autotune.candidates(M, N, 4096)  # not before the GPU has checked it
    # every fixed width of the list takes two waves or leaves more than a third of the SMs idle here
    for bn in (128, 256):
        t = _tiles(M, N, bn)
        assert t > autotune.SMS or t < 0.75 * autotune.SMS


@pytest.mark.parametrize("M, N", [(1000, 1000), (1000, 4096), (2048, 2048), (512, 2048)])
def test_where_a_listed_tile_already_fills_the_wave_the_fill_tile_is_that_one(M, N):
    assert autotune.fill_tile(M, N) in autotune.candidates(M, N, 4096)


def test_every_fill_width_is_a_valid_kernel_and_ships_proven():
    options = [opts for fp8, opts in shipped._gemm_option_sets() if not fp8]
    for bn in autotune.FILL_TILE_N:
        kern = PersistentGemm(**{k: v for k, v in autotune.fill_config(bn).items() if k != "split_k"})
        assert kern.tile_mn == (128, bn)
        assert any(o.get("tile_mn") == (128, bn) and o.get("schedule") == "cooperative" for o in options)


def test_the_144_wide_tile_compiles_to_144_wide_wgmmas(monkeypatch):
    from warpsched.kernels.gemm import host

    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    ptx = host.compile_for_cpu(schedule="cooperative", tile_mn=(128, 144), split_k=False, epi_n=16).artifacts.PTX
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)) == {"m64n144k16"}
