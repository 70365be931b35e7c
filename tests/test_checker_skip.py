"""``resource.skip()``: a consumer passes a stage another consumer owns (no barrier operation).

Two consumers split a ring's stages (even / odd K iterations), each waiting for and releasing
its own and skipping the other's; the ring's consumer group is one task's arrivals. Proven for
every K; the twin that skips by the wrong count and the static misuses are rejected."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import Buf, async_cfg, program, task  # noqa: E402
from warpsched import domain_loop, schedule, trip_count  # noqa: E402
from warpsched.protocol.plan import SyncPlan  # noqa: E402
from warpsched.verify import checks_bracketing  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402


def _split(extra_skip=False, skip_open=False, stages=2):
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=stages))
    K = trip_count("K")

    @schedule
    def prod(b):
        with domain_loop(0, K, 1):
            b.acquire()
            b.fill()
            b.commit()

    def consumer(mine):
        @schedule
        def cons(b):
            with domain_loop(0, K, 1) as d:
                with d.every(2, start=mine):
                    b.wait()
                    b.read()
                    if skip_open and mine == 0:
                        b.skip()  # the misuse: the waited stage is still held
                    b.release()
                with d.every(2, start=1 - mine):
                    b.skip()
                    if extra_skip and mine == 1:
                        b.skip()  # the twin: one stage too many
        return cons(buf)

    tasks = [task("Producer", prod(buf), dst=[buf]), task("Even", consumer(0), src=[buf], warp=1),
             task("Odd", consumer(1), src=[buf], warp=2)]
    return program(tasks)


def test_split_ring_is_safe_for_every_k():
    res = run_checker(_split())
    assert res.verdict == "SAFE", res.report()
    assert "every K >= 1" in res.report()


def test_skip_moves_every_counter_of_the_consumer_side():
    p = _split()
    sp = SyncPlan(p).side(p.tasks[1], p.tasks[1].src_resources[0], "consumer")
    assert sp.skip_counters == sp.counters and sp.skip_counters


def test_skipping_one_stage_too_many_is_rejected():
    res = run_checker(_split(extra_skip=True))
    assert res.verdict == "UNSAFE", res.report()


def test_skip_with_the_waited_stage_unreleased_is_a_static_finding():
    found = [f.message for f in checks_bracketing.check(_split(skip_open=True))]
    assert any("Ring.skip() while the stage waited at" in m for m in found), found


def _unguarded(pair: bool, stages=2, n=4):
    """Skips with no guard around them (the explorer's fast-forward over local steps must still run
    them: a skip moves the task's position). ``pair``: two consumers split each iteration's two
    stages (valid); else the sole consumer skips every other stage (it waits for a stage nobody
    fills again: a deadlock)."""
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=stages))

    @schedule
    def prod(b):
        with domain_loop(0, n, 1):
            for _ in range(2 if pair else 1):
                b.acquire()
                b.fill()
                b.commit()

    def consumer(first):
        @schedule
        def cons(b):
            with domain_loop(0, n, 1):
                if not first:
                    b.skip()
                b.wait()
                b.read()
                b.release()
                if first and pair:
                    b.skip()
        return cons(buf)

    tasks = [task("Producer", prod(buf), dst=[buf]), task("First", consumer(True), src=[buf], warp=1)]
    if pair:
        tasks.append(task("Second", consumer(False), src=[buf], warp=2))
    else:
        tasks[1] = task("Skipper", consumer(False), src=[buf], warp=1)
    return program(tasks)


def test_unguarded_skip_pair_is_safe():
    for n in (4, trip_count("K")):
        res = run_checker(_unguarded(pair=True, n=n))
        assert res.verdict == "SAFE", res.report()


def test_unguarded_skip_of_the_only_consumer_deadlocks():
    """Regression: an unguarded skip was passed over like a no-op by the fast-forward over local
    steps, so this program (a consumer waiting on every other stage of a ring only it consumes)
    was proven SAFE."""
    for stages, n in ((2, 4), (4, 4), (4, 2), (2, trip_count("K"))):
        res = run_checker(_unguarded(pair=False, stages=stages, n=n))
        assert res.verdict == "UNSAFE", (stages, n, res.report())
        assert "deadlock" in res.report()


# ------------------------------------------------------------ skip(count=K): a whole loop at once
def _handoff(count=lambda K: K, stages=3, turn_wait=True):
    """Owner consumes the producer's K stages of a tile, then hands over (Turn); Skipper skips
    those K at once and consumes the one stage after them (Owner skips that one)."""
    ring = Buf(name="Ring", pipeline_config=async_cfg(stages=stages))
    turn = Buf(name="Turn", pipeline_config=async_cfg(stages=1))
    K = trip_count("K")

    @schedule
    def prod(b):
        with domain_loop(0, K, 1):
            b.acquire()
            b.fill()
            b.commit()
        b.acquire()
        b.fill()
        b.commit()

    @schedule
    def owner(b, t):
        with domain_loop(0, K, 1):
            b.wait()
            b.read()
            b.release()
        t.acquire()
        t.fill()
        t.commit()
        b.skip()

    @schedule
    def skipper(b, t):
        if turn_wait:
            t.wait()
            t.read()
            t.release()
        b.skip(count=count(K))
        b.wait()
        b.read()
        b.release()
        if not turn_wait:
            t.wait()
            t.read()
            t.release()

    tasks = [task("Producer", prod(ring), dst=[ring]), task("Owner", owner(ring, turn), src=[ring], dst=[turn], warp=1),
             task("Skipper", skipper(ring, turn), src=[ring, turn], warp=2)]
    return program(tasks)


def test_bulk_skip_is_safe_for_every_k():
    res = run_checker(_handoff())
    assert res.verdict == "SAFE", res.report()
    assert "every K >= 1" in res.report()


@pytest.mark.parametrize("count", [lambda K: K + 1, lambda K: K - 1, lambda K: 1])
def test_bulk_skip_by_the_wrong_count_is_rejected(count):
    res = run_checker(_handoff(count=count))
    assert res.verdict == "UNSAFE", res.report()


def test_bulk_skip_before_the_owner_is_done_is_rejected():
    """Without the Turn wait the skipper may wait on a stage whose barrier is two phases behind."""
    res = run_checker(_handoff(turn_wait=False, stages=2))
    assert res.verdict == "UNSAFE", res.report()


def test_bulk_skip_inside_the_loop_is_a_static_finding():
    buf = Buf(name="Ring", pipeline_config=async_cfg())
    K = trip_count("K")

    @schedule
    def cons(b):
        with domain_loop(0, K, 1):
            b.wait()
            b.read()
            b.release()
            b.skip(count=K)

    p = program([task("Consumer", cons(buf), src=[buf], warp=1)])
    found = [f.message for f in checks_bracketing.check(p)]
    assert any("Ring.skip(count=K) inside the domain loop" in m for m in found), found
