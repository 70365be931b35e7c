"""The attention forward over a paged K/V cache (``ops.attention_paged``, ``FlashAttentionPaged``): each
K/V tile a unit visits is read from the page its sequence's table names, over the keys its cache length
holds (split-KV too); the program (and its proof) is the plain kernel's; the kernel compiles for sm_90a;
bad caches, tables and page sizes are refused naming the fix. On the H200: bench/attention_decode.py
(paged cases against fp64, time against FlashAttention-4's paged forward)."""
from __future__ import annotations

import os
import random
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host, paged  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402


class _Table:
    """A page table as the kernel indexes it: ``table[(b, j)]``."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, bj):
        return self.rows[bj[0]][bj[1]]


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (False, (300, 40))])
@pytest.mark.parametrize("lens", [[1, 700, 0, 128], [5000, 3], [random.Random(s).randrange(0, 3000) for s in range(5)]])
def test_a_unit_reads_its_sequences_pages_over_its_cache_length(splits, causal, window, lens):
    options = host.tuned_options(128, causal)
    if splits > 1:
        options = host.split_options(options)
    g = att.FlashAttentionPaged(head_dim=128, causal=causal, window_size=window, **options)
    per_seq = max(1, -(-max(lens) // g.block_n))
    pool = list(range(len(lens) * per_seq))
    random.Random(1).shuffle(pool)
    rows = [pool[b * per_seq:(b + 1) * per_seq] for b in range(len(lens))]
    g.page_table = _Table(rows)
    g.cache_seqlens, g.pages_per_seq = lens, per_seq
    g.grid_setup(16, per_seq * g.block_n, 4, 2, len(lens), splits)
    for u in range(g.num_units):
        q_block, _, b, _ = g.unit_coords(u)
        assert g.seq_bounds(u)[3] == lens[b]
        first, count = g.kv_first_tile(u), g.kv_tiles_of(u)
        assert count >= 1 and first >= 0
        for tile in range(first, first + count):  # every page a unit reads is its own sequence's
            assert g.physical_tile(u, tile) in rows[b]
        if splits == 1:  # the keys its rows see are within the tiles it visits
            for r in range(q_block * g.block_m, min(16, (q_block + 1) * g.block_m)):
                left, right = (None, 0) if causal else (window or (None, None))
                lo = 0 if left is None else max(0, r - left)
                hi = lens[b] - 1 if right is None else min(lens[b] - 1, r + right)
                assert all(first <= k // g.block_n < first + count for k in range(lo, hi + 1))


def test_paged_keeps_the_program():
    for split in (False, True):
        options = host.tuned_options(128, False)
        if split:
            options = host.split_options(options)
        plain = att.build(att.FlashAttention(**options), verbose=False, exhaustive_deadlock_race_check=False)
        pages = att.build(att.FlashAttentionPaged(**options), verbose=False, exhaustive_deadlock_race_check=False)
        assert pages.fingerprint == plain.fingerprint


def test_the_paged_kernel_compiles_for_sm90a():
    for options in (host.tuned_options(128, False), host.split_options(host.tuned_options(128, False))):
        ptx = paged.compile_for_cpu(head_dim=128, **options).artifacts.PTX
        assert "cp.async.bulk.tensor" in ptx and "ld.global" in ptx  # TMA K / V, the table read per tile


class _Fake:
    def __init__(self, shape, dtype="torch.bfloat16", cuda=True, contiguous=True):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, "cuda" if cuda else "cpu"
        self._contiguous = contiguous

    def is_contiguous(self):
        return self._contiguous


def _args(q=(2, 8, 1, 128), cache=(10, 128, 2, 128), table=(2, 5), lens=(2,), table_dtype="torch.int32",
          contiguous=True):
    return (_Fake(q), _Fake(cache, contiguous=contiguous), _Fake(cache), _Fake(table, table_dtype),
            _Fake(lens, "torch.int32"))


@pytest.mark.parametrize("kw,words", [
    ({}, None),
    ({"cache": (10, 64, 2, 128)}, "allocate the cache with pages of 128"),
    ({"cache": (10, 128, 3, 128)}, "multiple of the key/value heads"),
    ({"table": (3, 5)}, "page_table is (3, 5)"),
    ({"table_dtype": "torch.int64"}, "torch.int32"),
    ({"lens": (3,)}, "cache_seqlens is (3,)"),
    ({"contiguous": False}, "no copy of it is made"),
    ({"cache": (10, 128, 2)}, "(pages, page_size, H_kv, D)"),
])
def test_bad_paged_input_is_refused_naming_the_fix(kw, words):
    if words is None:
        paged.check_args(*_args(**kw))
        return
    with pytest.raises(AttentionConfigError) as e:
        paged.check_args(*_args(**kw))
    assert words in str(e.value)


def test_the_page_size_is_the_kernels_tile():
    assert paged.page_size_for(128) == 128 and paged.page_size_for(64) == 128 and paged.page_size_for(256) == 64
