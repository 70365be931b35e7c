"""The backward's in-kernel dQ finish (``dq_finish=True``, attention.dq_finish): every Q block of a dense batch
has a key block that adds into it (so every row of dQ is written), the hand-over is SAFE for the grid checker
with CTAs interleaving or starting in order, two planted twins are rejected at the read they break, options
it cannot serve are refused by name, and the kernel compiles with the count (an acq_rel add), the tiles'
copies through the writer's stage and its program SAFE. On the H200: bench/attention_bwd_check.py (variant
``fin``: a NaN-poisoned dQ against fp64, and its speed)."""
from __future__ import annotations

import os
import re
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched import check_grid  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bh  # noqa: E402
from warpsched.kernels.attention import dq_finish as F  # noqa: E402
from warpsched.kernels.attention import dq_order as D  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402


@pytest.mark.parametrize("head_dim,block_m", [(128, 64), (64, 128)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(64, 128), (300, 700), (1000, 333), (129, 2000), (1, 1)])
def test_every_q_block_is_finished_by_exactly_one_step(causal, sq, sk, head_dim, block_m):
    g = ab.FlashAttentionBackwardFinish(head_dim=head_dim, causal=causal, block_m=block_m, tma_stats=True,
                                        flat_dq=True, shared_ds=True)
    g.grid_setup(sq, sk, 4, 2, 2)
    adds = {}
    for u in range(g.num_units):
        for s in range(g.steps_of(u)):
            slot, _, last = D.dq_turn(g, u, s)
            adds.setdefault(slot, []).append(last)
    # one word per (batch, query head, Q block), each reached, and ``last`` its key blocks' count less one
    assert sorted(adds) == list(range(2 * 4 * g.m_blocks))
    assert all(len(lasts) == lasts[0] + 1 and len(set(lasts)) == 1 for lasts in adds.values())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim,block_m", [(128, 64), (64, 128)])
def test_the_hand_over_is_safe_up_to_the_bound(causal, head_dim, block_m):
    g = ab.FlashAttentionBackwardFinish(head_dim=head_dim, causal=causal, block_m=block_m, tma_stats=True,
                                        flat_dq=True, shared_ds=True)
    F._PROVEN.clear()
    for r in F.require_safe(g):
        assert r.verdict == "SAFE", r.report()
        assert r.states > 0 and not r.findings


def _counted_before_the_adds(step, steps, turn):  # this step's count, not deferred, before its adds
    slot, last = turn(step)
    F.finish_calls(slot, last)
    for _ in range(D.PARTS):
        D.DQ_ACCUM.accumulate(slot, atomic=True)


def _one_short(step, steps, turn):  # the Q block's key blocks miscounted by one
    F.step_calls(step, steps, lambda s: (turn(s)[0], max(turn(s)[1] - 1, 0)))


class _Counter:
    """finish_step_calls's flag, accumulator and output on Python ints: the words' counts and the finishes."""

    def __init__(self):
        self.words, self.finished = {}, []

    def add(self, slot, value, acquire=True):
        old = self.words.get(slot, 0)
        self.words[slot] = old + value
        return old

    def read(self, slot):
        self.finished.append(slot)

    def write(self, slot):
        pass

    def when(self, ticket, old, body):
        if ticket == old:
            body()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(300, 700), (1000, 333), (64, 64)])
def test_the_deferred_counts_finish_every_q_block_once(causal, sq, sk):
    """The writer counts a step's Q block one step later and the last step's at once: over every unit (in any
    order) each word reaches its key blocks' count and each Q block is finished exactly once."""
    g = ab.FlashAttentionBackwardFinish(head_dim=128, causal=causal, tma_stats=True, flat_dq=True, shared_ds=True)
    g.grid_setup(sq, sk, 4, 2, 2)
    io = _Counter()
    for u in reversed(range(g.num_units)):
        def turn(s, u=u):
            slot, _, last = D.dq_turn(g, u, s)
            return slot, last
        for step in range(g.steps_of(u)):
            F.finish_step_calls(step, g.steps_of(u), turn, flag=io, acc=io, out=io, when=io.when)
    assert sorted(io.finished) == list(range(2 * 4 * g.m_blocks))


@pytest.mark.parametrize("twin,causal", [(_counted_before_the_adds, True), (_one_short, False)])
def test_planted_twins_are_rejected_at_the_read(twin, causal):
    r = check_grid(F.finish_protocol(ab.FlashAttentionBackward, causal=causal, heads=1, calls=twin))
    assert r.verdict == "REJECTED", r.report()
    assert "reads workspace tile" in r.report() and "dq_finish.py" in r.findings[0].location.file


@pytest.mark.parametrize("options,named", [
    ({"window_size": (64, 0), "causal": True}, "window_size=(64, 0)"),
    ({"deterministic": True}, "deterministic=True"),
    ({"flat_dq": False}, "flat_dq=False"),
    ({"block_m": 80, "dq_stages": 1}, "block_m=80"),
    ({"head_dim": 256}, "head_dim=256"),
    ({"flat_boxes": 4}, "flat_boxes=4"),
])
def test_what_it_cannot_serve_is_refused_by_name(options, named):
    base = dict(bh.default_options(options.get("head_dim", 128)), dq_finish=True)
    base.update(options)
    with pytest.raises(AttentionConfigError) as e:
        ab.FlashAttentionBackward(**base)
    assert "dq_finish=True" in str(e.value) and named in str(e.value)


@pytest.mark.parametrize("head_dim,causal", [(128, True), (64, False)])
def test_the_kernel_counts_and_finishes_through_the_writers_stage(head_dim, causal):
    options = dict(bh.default_options(head_dim), dq_finish=True, grid3d=False)  # dq_finish counts units linearly
    ptx = bh.compile_for_cpu(head_dim=head_dim, causal=causal, **options).artifacts.PTX
    # lane 0's counts: the previous step's Q block and, at the last step, this one's (each with its finish:
    # two 64 x 64 fp32 tiles, 16 bytes a copy, 32 a lane)
    assert ptx.count("atom.global.acq_rel.add.u32") == 2
    assert ptx.count("cp.async.ca.shared.global") == 2 * 64
    assert re.search(r"cp\.async\.bulk\.wait_group\s+2;", ptx)  # the previous step's adds, not this one's
    assert re.search(r"cp\.async\.wait_group\s+0;", ptx)
    from warpsched.verify.verdicts import VERDICTS

    fingerprint = VERDICTS.looked_up[-1]  # the program the trace checked: the writer's finish work in it
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **options)
    program = ab.build(g, verbose=False, exhaustive_deadlock_race_check=False)
    assert fingerprint == program.fingerprint
    plain = ab.build(ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **bh.default_options(head_dim)),
                     verbose=False, exhaustive_deadlock_race_check=False)
    assert program.fingerprint != plain.fingerprint  # the finish is a work of the program, not hidden from it
