"""Split-KV in the attention forward (``split_kv=True``, attention.split_kv): a Q block's runs cover
its K/V tiles once, in order, each run at least one tile; partials go to their own batch rows; the
program (and its proof) is the unsplit register-store kernel's; the kernel compiles for sm_90a with
fp32 stores; the host's split choice and its refusals. On the H200: bench/attention_decode.py
(correctness of the combined O / LSE against fp64, time against FlashAttention-4 and SDPA)."""
from __future__ import annotations

import os
import re
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host, split_kv  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402


def _kernel(causal=False, window=None, hd=128, wgs=2, block_n=128):
    options = host.split_options(dict(host.tuned_options(hd, causal), wgs=wgs, block_n=block_n))
    return att.FlashAttention(head_dim=hd, causal=causal, window_size=window, **options)


@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (False, (300, 40)), (True, (255, 0))])
@pytest.mark.parametrize("sq,sk,splits", [(1, 8192, 4), (16, 1000, 3), (300, 5000, 7), (130, 129, 5), (64, 64, 2),
                                          (1, 100000, 128), (500, 3000, 24)])
def test_a_blocks_runs_cover_its_tiles_once_in_order(causal, window, sq, sk, splits):
    g, ref = _kernel(causal, window), _kernel(causal, window)
    g.grid_setup(sq, sk, 4, 2, 3, splits)
    ref.split_kv = False
    ref.grid_setup(sq, sk, 4, 2, 3)
    assert g.num_units == splits * ref.num_units
    last_tile = -(-sk // g.block_n) - 1
    for base in range(ref.num_units):
        want = list(range(ref.kv_first_tile(base), ref.kv_first_tile(base) + ref.kv_tiles_of(base)))
        got = []
        for s in range(splits):
            u = s * ref.num_units + base
            assert g.unit_coords(u) == ref.unit_coords(base) and g.split_of(u) == s
            assert g.out_batch(u) == s * 3 + ref.unit_coords(base)[2]
            first, count = g.kv_first_tile(u), g.kv_tiles_of(u)
            assert count >= 1  # the checker proves every count >= 1
            tiles = list(range(first, first + count))
            if first > want[-1]:  # a run past the block's tiles: one tile, beyond every key it sees
                assert count == 1 and (first > last_tile or causal or window is not None)
                continue
            got += tiles
        assert got == want, (base, got[:4], want[:4])


@pytest.mark.parametrize("shape,want", [
    ((1, 32, 1, 8192, 128, 128), 4),  # 32 blocks: 4 runs fill 128 of 132 SMs
    ((1, 8, 16, 32768, 128, 128), 16),  # 8 blocks, 256 tiles: 16 runs of 16
    ((1, 8, 1, 512, 128, 128), 1),  # 4 K/V tiles: never split
    ((8, 32, 1, 8192, 128, 128), 1),  # 256 blocks fill the SMs
    ((1, 1, 1, 700, 192, 128), 6),  # 6 tiles, 132 SMs: one tile a run
    ((1, 2, 1, 1280, 128, 128), 10),  # 66 runs wanted, 10 tiles
    ((1, 4, 1, 128 * 50, 128, 128), 25),  # 33 wanted: runs of 2 tiles, so 25 (none empty)
])
def test_the_host_splits_when_blocks_leave_sms_idle(shape, want):
    assert split_kv.choose_splits(*shape, sms=132) == want


def test_a_callers_split_count_is_checked_and_trimmed():
    assert split_kv.check_splits(None, 8192, 128) is None
    assert split_kv.check_splits(64, 1000, 128) == 8  # 8 tiles: one each
    assert split_kv.check_splits(3, 1280, 128) == 3  # 10 tiles: 4 + 4 + 2
    for bad in (0, 129, 2.0, True, "4"):
        with pytest.raises(AttentionConfigError, match="num_splits="):
            split_kv.check_splits(bad, 1000, 128)


def test_split_kv_refuses_the_tma_store_epilogue():
    with pytest.raises(AttentionConfigError, match="tma_store_o=False"):
        att.FlashAttention(split_kv=True, **host.TUNED)


def test_split_kv_leaves_the_program_and_its_proof_as_they_are():
    """The runs change which tiles a unit loads and where its rows go, not the schedules: the split
    program is the tuned one with the register-store epilogue, whose proof ships in the manifest."""
    for hd, causal in ((128, False), (64, True)):
        plain = dict(host.tuned_options(hd, causal), tma_store_o=False, o_buffer=False)
        a = att.build(att.FlashAttention(head_dim=hd, causal=causal, **plain), verbose=False,
                      exhaustive_deadlock_race_check=False)
        b = att.build(_kernel(causal, hd=hd, wgs=plain.get("wgs", 2)), verbose=False,
                      exhaustive_deadlock_race_check=False)
        assert a.fingerprint == b.fingerprint  # shipped.py lists the split forms: test_proof_manifest


def test_the_split_kernel_compiles_for_sm90a_with_fp32_partials():
    c = host.compile_for_cpu(head_dim=128, **host.split_options(host.tuned_options(128, False)))
    stores = set(re.findall(r"st\.global[.\w]*", c.artifacts.PTX))
    assert stores and all(s.endswith("b32") for s in stores), stores  # O / sum and LSE in fp32
    assert "cp.async.bulk.tensor" in c.artifacts.PTX  # Q / K / V still come by TMA


def test_the_combine_kernel_compiles_for_sm90a():
    """One CTA per row: the runs' LSEs read, +inf runs skipped, exp2 weights, O in the output dtype."""
    import cutlass

    for dtype, store in ((cutlass.BFloat16, "cvt.rn.bf16.f32"), (cutlass.Float16, "cvt.rn.f16.f32")):
        ptx = split_kv.compiled_combine(dtype, 128, arch="sm_90a").artifacts.PTX
        assert store in ptx and "ex2.approx" in ptx and "0f7F800000" in ptx  # +inf: an empty run's mark

