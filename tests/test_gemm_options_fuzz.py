"""Fuzzed kernel options for the persistent GEMM: whatever combination a caller (or the autotuner's cache)
passes, ``PersistentGemm`` is built or refuses with a GemmConfigError (a ValueError) naming an option, never
another exception from inside warpsched. Nothing is traced, so this runs without a GPU."""
from __future__ import annotations

import random

import pytest

cutlass = pytest.importorskip("cutlass")

from warpsched.kernels.gemm.config import GemmConfigError  # noqa: E402
from warpsched.kernels.gemm.kernel import PersistentGemm  # noqa: E402

CHOICES = {
    "schedule": ["cooperative", "pingpong", "pingpong_shared", "coop", None],
    "tile_mn": [(64, 32), (64, 64), (128, 256), (256, 128), (128, 176), (64, 48), (32, 32), (128,), 64, "64x32"],
    "split_k": [False, True],
    "split_reduce": ["host", "serial", "parallel", "atomic", "tree"],
    "stream_k": [False, True],
    "cluster_mn": [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (3, 1), (4,), 4, "2x1", None],
    "block_k": [None, 32, 64, 128, 256, 100, "64"],
    "ab_stages": [None, 1, 2, 4, 9, 40, "4", 2.5],
    "pdl": [False, True],
    "skip": [False, True],
    "epi_n": [16, 32, 64, 48, 0, None],
    "group": [1, 8, 16, 0, "8"],
    "raster": ["m", "n", "z"],
    "a_major": ["k", "m", "x"],
    "b_major": ["k", "n", "x"],
    "c_major": ["n", "m", "k"],
    "bias": [None, "c", "f32", "bf16"],
    "activation": [None, "relu", "gelu", "swiglu", "nope"],
    "residual": [False, True],
    "batched": [False, True],
    "k_tiles_min": [1, 12, 0],
    "ab_dtype": [cutlass.BFloat16, cutlass.Float16, cutlass.Float8E4M3FN],
    "c_dtype": [cutlass.BFloat16, cutlass.Float32],
}


@pytest.mark.parametrize("seed", range(20))
def test_random_options_build_or_get_a_named_error(seed):
    r = random.Random(seed)
    built = refused = 0
    for _ in range(40):
        opts = {k: r.choice(v) for k, v in CHOICES.items() if r.random() < 0.35}
        try:
            PersistentGemm(**opts)
            built += 1
        except GemmConfigError as e:
            refused += 1
            assert str(e).strip(), opts
    assert built + refused == 40
