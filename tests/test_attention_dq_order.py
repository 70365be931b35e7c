"""The backward's deterministic dQ (``deterministic=True``, attention.dq_order): a key block's turn on a Q
block is its place among the key blocks whose steps add into it (checked against every unit's steps);
the hand-over is SAFE for the grid checker over every launch up to its bound, with CTAs resident or
starting in order; three planted twins are rejected at the line they change; the kernel compiles with
the acquire / release words and keeps the backward's program. On the H200: bench/attention_bwd_check.py
(bitwise equal dQ over repeated runs, and its cost)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched import check_grid  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bh  # noqa: E402
from warpsched.kernels.attention import dq_order as D  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402

MASKS = [(False, None), (True, None), (False, (100, 37)), (False, (None, 200)), (False, (300, None)),
         (True, (255, None))]


@pytest.mark.parametrize("head_dim,block_m", [(64, 64), (64, 128), (256, 64)])
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("sq,sk", [(64, 128), (300, 700), (1000, 333), (129, 2000), (777, 777)])
def test_a_key_blocks_turn_is_its_place_among_the_key_blocks_of_the_q_block(causal, window, sq, sk, head_dim,
                                                                             block_m):
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, window_size=window, block_m=block_m,
                                  tma_stats=True)
    g.grid_setup(sq, sk, 4, 2, 2)
    adders = {}
    for u in range(g.num_units):
        for s in range(g.steps_of(u)):
            adders.setdefault(g.step_coords(u, s), []).append(g.unit_coords(u)[0])
    slots = set()
    for u in range(g.num_units):
        for s in range(g.steps_of(u)):
            slot, order, last = D.dq_turn(g, u, s)
            blocks = sorted(adders[g.step_coords(u, s)])
            assert (order, last) == (blocks.index(g.unit_coords(u)[0]), len(blocks) - 1)
            slots.add((slot, g.step_coords(u, s)))
    assert len({s for s, _ in slots}) == len(slots)  # one word per (query head, Q block, batch)


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window_size": (100, 37)}, {"causal": True, "seqlen_q": 384},
                                {"heads": 2, "kv_heads": 2}, {"batches": 2, "seqlen_q": 64}])
def test_the_hand_over_is_safe_up_to_the_bound(kw):
    r = check_grid(D.dq_protocol(ab.FlashAttentionBackward, **kw))
    assert r.verdict == "SAFE", r.report()
    assert r.states > 0 and not r.findings


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim,block_m", [(256, 64), (64, 128)])
def test_the_hand_over_is_safe_with_other_blocks(causal, head_dim, block_m):
    """Head dim 256's 64-key blocks, and head dim 64's 128-row Q blocks (its default)."""
    r = check_grid(D.dq_protocol(ab.FlashAttentionBackward, causal=causal, seqlen_q=384, head_dim=head_dim,
                                 block_m=block_m))
    assert r.verdict == "SAFE", r.report()
    assert r.states > 0 and not r.findings


def _twin(calls):
    return check_grid(D.dq_protocol(ab.FlashAttentionBackward, causal=True, seqlen_q=384, calls=calls))


def signal_before_add(slot, order, last, part, flag=D.DQ_TURNS, acc=D.DQ_ACCUM):
    """Planted: the last part hands the turn on before its add (the next key block's add races it)."""
    if part == 0 and order > 0:
        flag.wait(slot, order)
    if part == D.PARTS - 1 and order < last:
        flag.signal(slot, order + 1)
    acc.accumulate(slot)


def wrong_turn(slot, order, last, part, flag=D.DQ_TURNS, acc=D.DQ_ACCUM):
    """Planted: a key block waits for the turn after its own (off by one: nobody hands it that one)."""
    if part == 0 and order > 0:
        flag.wait(slot, order + 1)
    acc.accumulate(slot)
    if part == D.PARTS - 1 and order < last:
        flag.signal(slot, order + 1)


def no_wait(slot, order, last, part, flag=D.DQ_TURNS, acc=D.DQ_ACCUM):
    """Planted: the turn is handed on but never waited for."""
    acc.accumulate(slot)
    if part == D.PARTS - 1 and order < last:
        flag.signal(slot, order + 1)


@pytest.mark.parametrize("twin,words", [(signal_before_add, "accumulat"), (wrong_turn, "wait"),
                                        (no_wait, "accumulat")])
def test_planted_hand_over_bugs_are_rejected_where_they_are(twin, words):
    r = _twin(twin)
    assert r.verdict == "REJECTED", r.report()
    f = r.findings[0]
    assert f.location.file.endswith("test_attention_dq_order.py") and words in f.message.lower(), f.format()


def test_the_deterministic_kernel_compiles_with_its_turn_words():
    ptx = bh.compile_for_cpu(head_dim=128, causal=True, deterministic=True, **bh.default_options(128)).artifacts.PTX
    assert "ld.acquire.gpu" in ptx and "st.release.gpu" in ptx  # the wait and the hand-on
    assert "fence.proxy.async.global" in ptx  # the reduce-add's writes, ordered before the hand-on


def test_deterministic_keeps_the_backwards_program():
    plain = ab.build(ab.FlashAttentionBackward(head_dim=128, causal=True, shared_ds=True), verbose=False,
                     exhaustive_deadlock_race_check=False)
    ordered = ab.build(ab.FlashAttentionBackwardDeterministic(head_dim=128, causal=True, shared_ds=True),
                       verbose=False, exhaustive_deadlock_race_check=False)
    assert ordered.fingerprint == plain.fingerprint


def test_deterministic_varlen_is_refused_naming_the_fix():
    with pytest.raises(AttentionConfigError, match="deterministic=False"):
        ab.FlashAttentionBackward(varlen=True, deterministic=True)
