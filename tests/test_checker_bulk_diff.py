"""Differential tests of the checker's ``skip(count=K)`` reductions (Engine._pre_idle, an idle
loop run as one step, skip values kept modulo the ring's cycle, lifted exact counts): the verdict
with them must be the unreduced reference search's (``loops.BULK_REDUCTIONS = False``) on small
ping-pong / hand-off programs, valid and broken. A symbolic K has no finite reference: its verdict
is compared with the reference's at K = 1, 2, 3 (SAFE must hold at each; UNSAFE at one of them).
The longer run: ``tools/bulk_diff.py`` (and fuzz_model.py --exhaustive)."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import _bulk_programs as bp  # noqa: E402
from warpsched import domain_loop, schedule, trip_count  # noqa: E402
from warpsched.verify.checker.engine import Engine  # noqa: E402

BASE = dict(shape="pingpong", stages=2, k=2, k_kind="tc", tiles=2, count="K", turn=True, guard_skip=True,
            skip_at="tail", owner_wait=True, owner_release=True, sync_owns=False, extra_consumer_loop=False,
            producer_reads_key=False, step=1)


def test_random_exact_programs_agree_with_the_reference():
    rng = random.Random(7)
    sigs = []
    for _ in range(24):
        cfg = bp.draw(rng, symbolic_ok=False)
        cfg["k"] = min(cfg["k"], 3)  # the reference's state count grows with K
        on, refs = bp.compare(cfg)
        assert bp.disagreement(cfg, on, refs) is None, (cfg, bp.signature(on), [bp.signature(r) for r in refs])
        sigs.append(bp.signature(on)[0])
    assert "SAFE" in sigs and "UNSAFE" in sigs  # both kinds of program were compared


@pytest.mark.parametrize("over,verdict", [
    ({}, "SAFE"), ({"count": "K+1"}, "UNSAFE"), ({"count": "K-1"}, "UNSAFE"), ({"count": "2K"}, "UNSAFE"),
    ({"turn": False}, "UNSAFE"), ({"guard_skip": False}, "UNSAFE"), ({"skip_at": "head"}, "SAFE"),
    ({"owner_release": False}, "UNSAFE"), ({"extra_consumer_loop": True}, "SAFE"),
    ({"producer_reads_key": True, "sync_owns": True}, "SAFE"), ({"shape": "handoff", "count": "K+1"}, "UNSAFE"),
], ids=lambda x: str(x))
def test_symbolic_k_agrees_with_exact_instances(over, verdict):
    """Every K >= 1 (reduced) against K = 1, 2, 3 (unreduced); the twins: a count off by one or
    twice K, no turn, an unguarded skip (the owner skips too), an owner that never releases."""
    cfg = dict(BASE, k_kind="sym", **over)
    on, refs = bp.compare(cfg, ks=(1, 2, 3))
    assert on.verdict == verdict, on.report()
    assert bp.disagreement(cfg, on, refs) is None, (bp.signature(on), [bp.signature(r) for r in refs])


def test_exact_count_far_from_its_end_agrees():
    """K = 20 exact, 2 stages (coupling gap 10): the reduced search lifts the far end by whole
    cycles (and keeps the skip value modulo one), the reference runs every iteration."""
    for count in ("K", "K+1", "k+1"):
        cfg = dict(BASE, k=20, stages=2, tiles=2, count=count)
        on, refs = bp.compare(cfg)
        assert len(refs) == 2  # unreduced, and written as single skips
        for ref in refs:
            assert bp.signature(on) == bp.signature(ref), (bp.signature(on), bp.signature(ref))
        assert on.runs[0][0].exact_lifted or on.verdict == "UNSAFE"  # (UNSAFE: re-run unlifted)


def test_the_reference_runs_without_the_reductions(monkeypatch):
    """The switch is real: the reference never takes the early idle exit, the reduced search does."""
    calls = []
    orig = Engine._pre_idle
    monkeypatch.setattr(Engine, "_pre_idle", lambda self, st, kid: calls.append(1) or orig(self, st, kid))
    prog = bp.build(dict(BASE, tiles=3))
    bp.run(prog, reduced=False)
    assert not calls
    bp.run(prog)
    assert calls


def test_skip_count_run_twice_in_a_tile_is_a_fault_finding():
    """Regression: a skip(count=K) inside the domain loop, checked without the static checks
    (skip_validation), raised a 'fault' violation that explore.note could not count (KeyError)."""
    ring = bp.Buf(name="Ring", pipeline_config=bp.async_cfg(stages=2))
    K = trip_count("K", 2)

    @schedule
    def prod(b):
        with domain_loop(0, K, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, K, 1):
            b.wait()
            b.read()
            b.release()
            b.skip(count=K)

    res = bp.run_checker(bp.program([bp.task("P", prod(ring), dst=[ring]), bp.task("C", cons(ring), src=[ring], warp=1)]))
    assert res.verdict == "UNSAFE"
    f = next(f for f in res.findings if "runs twice in one tile" in f.message)
    assert f.task == "C" and "once per work tile" in f.fix
    assert "1 fault(s)" in res.report()


@pytest.mark.parametrize("where", ["prologue", "epilogue"])
def test_skip_count_outside_the_work_tile_loop_is_a_fault_finding(where):
    """Regression: checked without the static checks, a persistent task's skip(count=K) before or
    after its work-tile loop read the tile record of tile -1 (an IndexError after the loop)."""
    ring, wq = bp.Buf(name="Ring", pipeline_config=bp.async_cfg(stages=2)), bp.Queue(name="WQ")
    K = trip_count("K", 2)

    def tail(q):
        q.try_wait()
        q.wait()
        q.get_and_advance_work_tile()
        q.release()

    @schedule
    def prod(b, q):
        with bp.work_tile_loop(q, tile_count=2):
            with domain_loop(0, K, 1):
                b.acquire()
                b.fill()
                b.commit()
            tail(q)

    @schedule
    def cons(b, q):
        if where == "prologue":
            b.skip(count=K)
        with bp.work_tile_loop(q, tile_count=2):
            with domain_loop(0, K, 1):
                b.wait()
                b.read()
                b.release()
            tail(q)
        if where == "epilogue":
            b.skip(count=K)

    res = bp.run_checker(bp.program([bp.task("P", prod(ring, wq), src=[wq], dst=[ring]),
                                     bp.task("C", cons(ring, wq), src=[ring, wq], warp=1)]))
    assert res.verdict == "UNSAFE"
    assert any("skips count=K outside the work-tile loop" in f.message for f in res.findings), res.report()


def test_skip_count_zero_moves_nothing():
    """Regression: skip(count=0) (an int) was run as a one-stage skip (bulk_const 0 read as 'no
    count'), while the lowering advances nothing: a consumer that skips 0 stages and then reads
    the one stage produced is SAFE, one that skips 1 waits forever."""
    for count, verdict in ((0, "SAFE"), (1, "UNSAFE")):
        ring = bp.Buf(name="Ring", pipeline_config=bp.async_cfg(stages=2))

        @schedule
        def prod(b):
            b.acquire()
            b.fill()
            b.commit()

        @schedule
        def cons(b, count=count):
            b.skip(count=count)
            b.wait()
            b.read()
            b.release()

        res = bp.run_checker(bp.program([bp.task("P", prod(ring), dst=[ring]),
                                         bp.task("C", cons(ring), src=[ring], warp=1)]))
        assert res.verdict == verdict, (count, res.report())
