"""The attention forward's sliding window (``window_size=(left, right)``, attention.masks): the K/V
tiles a unit visits cover every key its rows see and start and end with the window; the window
leaves the program (and its proof) as it is; bad windows are refused naming the fix; the kernel
compiles for sm_90a. On the H200: bench/attention_mask_check.py (correctness against an fp64
reference, time against FlashAttention-4's window)."""
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
from warpsched.kernels.attention import host  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402


def _visible(r, sq, sk, left, right):
    """The keys query r sees (None: unbounded)."""
    lo = 0 if left is None else max(0, r - left)
    hi = sk - 1 if right is None else min(sk - 1, r + right)
    return range(lo, hi + 1)


CASES = [(1000, 1000, 255, 0, True), (4096, 4096, 255, None, True), (777, 777, 100, 37, False),
         (300, 2000, 64, 64, False), (2000, 300, 128, 0, True), (129, 5000, None, 10, False),
         (5000, 129, 20, None, False), (1, 1, 0, 0, False), (513, 513, 0, 0, True),
         (65, 300, None, 10, False)]  # the last Q block (one query) ends before the 2nd key block's window


@pytest.mark.parametrize("block_n,wgs,hd", [(128, 2, 128), (64, 3, 64), (64, 2, 256)])
@pytest.mark.parametrize("sq,sk,left,right,causal", CASES + [
    tuple(random.Random(seed).choice(v) for v in ([1, 63, 64, 65, 700, 3000],) * 2 + ([None, 0, 1, 127, 300],) * 2
          + ([False],)) for seed in range(6)])
def test_a_units_tiles_cover_its_window_and_no_more(block_n, wgs, hd, sq, sk, left, right, causal):
    g = att.FlashAttention(head_dim=hd, block_n=block_n, wgs=wgs, causal=causal, window_size=(left, right))
    if causal:
        right = 0
    g.grid_setup(sq, sk, 2, 1, 1)
    for u in range(g.num_units):
        q_block = g.unit_coords(u)[0]
        first, count = g.kv_first_tile(u), g.kv_tiles_of(u)
        assert count >= 1  # the checker proves every count >= 1
        rows = range(q_block * g.block_m, min(sq, (q_block + 1) * g.block_m))
        tiles = {k // block_n for r in rows for k in _visible(r, sq, sk, left, right)}
        assert tiles <= set(range(first, first + count)), (u, first, count, sorted(tiles)[:3])
        # no tile before the first one a row needs, none after the last one a row of the whole block
        # (past S_q too, as causal's count: the last block's rows are not cut at S_q) needs
        block = range(q_block * g.block_m, (q_block + 1) * g.block_m)
        reach = {k // block_n for r in block for k in _visible(r, sq, sk, left, right)}
        if tiles:
            assert first == min(tiles) and first + count - 1 == max(reach), (u, first, count, min(tiles), max(reach))
        else:  # rows past every key: one fully masked tile inside the keys
            assert count == 1 and 0 <= first < -(-sk // block_n)


@pytest.mark.parametrize("window, causal, words", [
    ((255, 5), True, "pass window_size=(left, 0)"),
    ((-2, 0), False, "not a key count >= 0"),
    (255, False, "expected (left, right)"),
    ((1.5, 0), False, "not a key count >= 0"),
    ((True, 0), False, "not a key count >= 0"),
])
def test_bad_windows_are_refused_naming_the_fix(window, causal, words):
    with pytest.raises(AttentionConfigError, match="window_size=") as e:
        att.FlashAttention(causal=causal, window_size=window)
    assert words in str(e.value)


def test_a_window_needs_the_loop_that_starts_with_it():
    with pytest.raises(AttentionConfigError, match="unit_overlap"):
        att.FlashAttention(causal=True, window_size=(255, 0), unit_overlap=True, **host.TUNED)


def test_no_window_is_the_plain_kernel():
    for causal, window in ((False, None), (False, (-1, -1)), (True, (None, 0)), (True, (-1, 0))):
        g = att.FlashAttention(causal=causal, window_size=window)
        assert (g.window_left, g.window_right) == (None, None)


def test_the_window_leaves_the_program_and_its_proof_as_they_are():
    """Which tile a step loads and how many steps a unit runs change; the schedules do not, so the
    checked program is the tuned causal one (proven for every K/V count >= 1) and ops.attention's first
    windowed call finds its proof in the shipped manifest."""
    plain = att.build(att.FlashAttention(causal=True, **host.tuned_options(128, True)), verbose=False,
                      exhaustive_deadlock_race_check=False)
    windowed = att.build(att.FlashAttention(causal=True, window_size=(255, 0), **host.tuned_options(128, True)),
                         verbose=False, exhaustive_deadlock_race_check=False)
    assert windowed.fingerprint == plain.fingerprint


def test_the_windowed_kernel_compiles_for_sm90a():
    c = host.compile_for_cpu(head_dim=128, causal=False, window_size=(100, 37), **host.tuned_options(128, False))
    assert ".entry" in c.artifacts.PTX


# ------------------------------------------------------------------ the backward
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bwd_host  # noqa: E402


@pytest.mark.parametrize("head_dim,block_m", [(64, 64), (64, 128), (256, 64)])
@pytest.mark.parametrize("sq,sk,left,right,causal", CASES)
def test_a_key_blocks_steps_are_the_q_blocks_that_see_it(sq, sk, left, right, causal, head_dim, block_m):
    """Backward: a key block's steps walk, per query head of its group, exactly the Q blocks with a query
    whose window holds one of its keys (none: no step, dK = dV = 0); 128-key blocks, 64 at head dim 256."""
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, window_size=(left, right), block_m=block_m,
                                  tma_stats=True)
    if causal:
        right = 0
    g.grid_setup(seqlen_q=sq, seqlen_k=sk, heads=4, kv_heads=2, batches=1)
    for unit in range(g.num_units):
        n_block, kv_head, batch = g.unit_coords(unit)
        keys = range(n_block * g.block_n, min(sk, (n_block + 1) * g.block_n))
        blocks = sorted({r // g.block_m for r in range(sq) if set(_visible(r, sq, sk, left, right)) & set(keys)})
        steps = [g.step_coords(unit, s) for s in range(g.steps_of(unit))]
        want = [(kv_head * 2 + h, m, batch) for h in range(2) for m in blocks]
        # the Q blocks form a range: the first and last that see a key, every one between them too
        assert steps == want, (unit, steps[:3], want[:3])


def test_the_backward_window_leaves_its_program_as_it_is():
    plain = ab.build(ab.FlashAttentionBackward(head_dim=128, causal=True, shared_ds=True), verbose=False,
                     exhaustive_deadlock_race_check=False)
    windowed = ab.build(ab.FlashAttentionBackward(head_dim=128, causal=True, shared_ds=True, window_size=(255, 0)),
                        verbose=False, exhaustive_deadlock_race_check=False)
    assert windowed.fingerprint == plain.fingerprint


def test_the_windowed_backward_compiles_for_sm90a():
    c = bwd_host.compile_for_cpu(head_dim=64, causal=False, window_size=(100, 37))
    assert ".entry" in c.artifacts.PTX


def test_the_kernels_record_their_window():
    import dataclasses

    f = att.FlashAttention(causal=True, window_size=(255, 0), **host.tuned_options(128, True)).config
    b = ab.FlashAttentionBackward(head_dim=64, window_size=(100, 37)).config
    assert (f.kernel, f.causal, f.window_left, f.window_right) == ("forward", True, 255, 0)
    assert (b.kernel, b.window_left, b.window_right, b.block_m) == ("backward", 100, 37, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.window_left = 1


def test_the_backward_records_its_switches_by_name_and_value():
    """``AttentionConfig.options``: the switches that are on, in one fixed order (``config.switches_on``), a counted
    one with its value and only when it differs from its default."""
    b = ab.FlashAttentionBackward(head_dim=128, **bwd_host.default_options(128)).config
    assert b.options == ("shared_ds", "overlap_scores", "overlap_dq", "tma_stats", "tma_store_dkv", "dq_stages=2",
                         "flat_dq", "early_stats", "mask_first")
    c = ab.FlashAttentionBackward(head_dim=64, causal=True, tma_stats=True, flat_dq=True, flat_boxes=4, lpt=True,
                                  lpt_heads=8).config
    assert c.options == ("overlap_scores", "tma_stats", "flat_dq", "flat_boxes=4", "lpt", "lpt_heads=8")
    assert ab.FlashAttentionBackward(head_dim=64).config.options == ()
