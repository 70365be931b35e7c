"""Trip counts as the kernel knows them (issue: one program, exact trip counts, no false alarms).

Each class of correct program that the old "every N >= 1, independently per end value"
abstraction rejected is accepted here, and a twin whose real trip count is wrong is rejected
with a counterexample that names the trip counts it ran with."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import Buf, Group, Queue, async_cfg, program, task  # noqa: E402
from warpsched import PipelineConfig, domain_loop, schedule, trip_count, work_tile_loop  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402


def _errors(res, word="deadlock"):
    assert res.verdict == "UNSAFE", res.report()
    return [f for f in res.findings if f.severity == "error" and word in f.message]


def _counts(res):
    return [ln for f in _errors(res) for ln in f.detail.splitlines() if ln.startswith("trip counts")]


# ------------------------------------------------------------------ head/loop producer overlap
def _prefetch(prod_end, cons_end, stages=2):
    """The producer prefetches one tile in its head and loops ``prod_end`` times; the consumer
    loops ``cons_end`` times (the TS validation page's head/loop overlap)."""
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=stages))

    @schedule
    def prod(b):
        b.acquire()
        b.fill()
        b.commit()
        with domain_loop(0, prod_end, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, cons_end, 1):
            b.wait()
            b.read()
            b.release()

    return program([task("Producer", prod(buf), dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)])


def test_head_prefetch_with_k_plus_one_consumer_is_safe_for_every_k():
    K = trip_count("K")
    res = run_checker(_prefetch(K, K + 1))
    assert res.verdict == "SAFE", res.report()
    assert "every K >= 1" in res.report()


def test_head_prefetch_with_exact_counts_is_safe():
    res = run_checker(_prefetch(8, 9))
    assert res.verdict == "SAFE", res.report()
    assert "Producer: 8, Consumer: 9" in res.report()


def test_consumer_looping_k_plus_two_is_rejected_with_its_trip_counts():
    K = trip_count("K")
    res = run_checker(_prefetch(K, K + 2))
    counts = _counts(res)
    assert counts, res.report()
    # the consumer waits for a tile that is never produced: one more than the producer's K + 1
    assert any("(K)" in c and "Consumer" in c for c in counts), counts
    exact = run_checker(_prefetch(8, 10))
    assert any("Consumer: 10 iteration(s)" in c for c in _counts(exact)), _counts(exact)


def test_minimum_is_a_declared_fact():
    """A consumer that drains two tiles after the loop is only correct when K >= 2 ... here the
    producer loops K times and the consumer K - 1 times plus one tail read: fine for K >= 1; a
    consumer that loops K - 2 times and reads two in its tail needs K >= 2."""
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=2))
    K = trip_count("K", min=2)

    def build(k):
        @schedule
        def prod(b):
            with domain_loop(0, k, 1):
                b.acquire()
                b.fill()
                b.commit()

        @schedule
        def cons(b):
            with domain_loop(0, k - 2, 1):
                b.wait()
                b.read()
                b.release()
            for _ in range(2):
                b.wait()
                b.read()
                b.release()

        return program([task("Producer", prod(buf), dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)])

    assert run_checker(build(K)).verdict == "SAFE"
    res = run_checker(build(trip_count("K")))  # K = 1 is possible: the consumer waits twice
    assert _counts(res), res.report()


# ------------------------------------------------------------------ persistent domain lanes
def _domain_lane_persistent(k, tile_count=None):
    """A persistent kernel: one producer warp fills K stages per work tile; two 4-warp consumer
    warpgroups take alternate stages (domain lanes 0 and 1, interleave stride 2)."""
    wq = Queue(name="WorkQueue")
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=4, producer_group=Group(32),
                                                         consumer_group=Group(128), interleave_stride=(1, 1, 2, 2))
    buf = Buf(name="Tiles", pipeline_config=cfg)

    def tail(q):
        q.wait()
        q.get_and_advance_work_tile()
        q.release()

    @schedule
    def prod(b, q):
        with work_tile_loop(q, tile_count=tile_count):
            with domain_loop(0, k, 1):
                b.acquire()
                b.fill()
                b.commit()
            tail(q)

    def lane(i):
        @schedule
        def cons(b, q):
            with work_tile_loop(q, tile_count=tile_count):
                with domain_loop(i, k, 2):
                    b.wait()
                    b.read()
                    b.release()
                tail(q)
        return cons

    return program([task("Producer", prod(buf, wq), src=[wq], dst=[buf]),
                    task("Lane0", lane(0)(buf, wq), src=[buf, wq], warp=4, warps=4),
                    task("Lane1", lane(1)(buf, wq), src=[buf, wq], warp=8, warps=4)])


def test_domain_lanes_with_an_even_k_per_tile_are_safe():
    res = run_checker(_domain_lane_persistent(trip_count("K", divisibility=2)))
    assert res.verdict == "SAFE", res.report()
    assert "every K >= 1, K % 2 == 0" in res.report()
    assert run_checker(_domain_lane_persistent(6)).verdict == "SAFE"


def test_domain_lanes_with_an_odd_k_are_rejected_naming_k_and_tiles():
    res = run_checker(_domain_lane_persistent(trip_count("K")))
    errs = [f for f in res.findings if f.severity == "error"]
    assert res.verdict == "UNSAFE" and errs, res.report()
    detail = "\n".join(f.detail for f in errs)
    assert "trip counts in this counterexample" in detail and "work tiles entered" in detail, detail
    assert run_checker(_domain_lane_persistent(5)).verdict == "UNSAFE"


def test_tile_count_is_a_declared_fact():
    one = run_checker(_domain_lane_persistent(5, tile_count=1))  # an odd K is harmless on one tile
    assert one.verdict == "SAFE", one.report()
    assert "exactly 1 tile(s)" in one.report()
    many = run_checker(_domain_lane_persistent(5, tile_count=trip_count("tiles")))
    assert many.verdict == "UNSAFE"


# ------------------------------------------------------------------ exact counts stay exact at scale
def test_large_exact_count_is_proven_without_growing_state():
    a, b = (run_checker(_prefetch(k, k + 1, stages=4)) for k in (200, 1000))
    assert a.verdict == b.verdict == "SAFE"
    assert a.states == b.states
    bad = run_checker(_prefetch(1000, 1002, stages=4))
    assert any("Consumer: 1002 iteration(s)" in c for c in _counts(bad)), _counts(bad)


# ------------------------------------------------------------------ run_checker robustness
def test_program_without_scheduled_tasks():
    res = run_checker(program([]))
    assert res.verdict == "SAFE" and res.states == 0


def test_not_modelled_warnings_of_every_part_are_kept(monkeypatch):
    from warpsched.verify.checker import model as checker_model

    orig = checker_model._Builder.build

    def build(self):
        comp = orig(self)
        for ex in comp.executors:
            comp.problems.append(f"planted note for {ex.name}")
        return comp

    monkeypatch.setattr(checker_model._Builder, "build", build)
    a, b = Buf(name="A", pipeline_config=async_cfg()), Buf(name="B", pipeline_config=async_cfg())

    def pair(buf, w):
        @schedule
        def p(x):
            with domain_loop(0, 2, 1):
                x.acquire()
                x.fill()
                x.commit()

        @schedule
        def c(x):
            with domain_loop(0, 2, 1):
                x.wait()
                x.read()
                x.release()
        return [task(f"P{buf.name}", p(buf), dst=[buf], warp=w), task(f"C{buf.name}", c(buf), src=[buf], warp=w + 1)]

    res = run_checker(program(pair(a, 0) + pair(b, 2)))
    notes = [f.message for f in res.findings if "planted note" in f.message]
    assert any("PA" in n for n in notes) and any("PB" in n for n in notes), notes


# ------------------------------------------------------------------ grid-stride loops
def _grid_stride(count=None):
    """Runtime start and step (a grid-stride loop): the count is not the end's."""
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=2))
    first, tiles, grid = trip_count("first", min=0), trip_count("tiles"), trip_count("grid")

    @schedule
    def prod(b):
        with domain_loop(first, tiles, grid, count=count):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(first, tiles, grid, count=count):
            b.wait()
            b.read()
            b.release()

    return program([task("Producer", prod(buf), dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)])


def test_grid_stride_loop_counts_from_zero_unless_declared():
    res = run_checker(_grid_stride())
    assert res.verdict == "SAFE", res.report()
    assert "grid-stride loop [Producer, Consumer]: every count >= 0" in res.report()
    per_cta = trip_count("tiles_per_cta", min=1)
    declared = run_checker(_grid_stride(count=per_cta))
    assert declared.verdict == "SAFE" and "every tiles_per_cta >= 1" in declared.report(), declared.report()
    assert run_checker(_grid_stride(count=3)).verdict == "SAFE"


def test_trip_count_arithmetic_beyond_offsets_is_a_clear_error():
    import pytest

    K = trip_count("K")
    assert repr(K + 2) == "K + 2" and repr(K - 1) == "K - 1" and (K + 2).root is K
    for bad in (lambda: K * 2, lambda: 2 * K, lambda: K // 4, lambda: 5 - K, lambda: -K):
        with pytest.raises(TypeError, match="supports only \\+ and - of an int"):
            bad()
    with pytest.raises(TypeError, match="divisibility an int >= 1"):
        trip_count("K", divisibility=0)


def test_an_offset_trip_count_is_named_with_its_offset_and_call():
    """A consumer that loops K - 1 times where K are produced: the counterexample names 'K - 1' and
    the domain_loop's file:line, not just the symbol (issue 27's hidden off-by-one)."""
    K = trip_count("K")
    res = run_checker(_prefetch(K - 1, K - 1))  # the producer makes K stages (1 + K - 1), the consumer K - 1
    lines = [ln for f in res.findings for ln in (f.detail or "").splitlines() if ln.startswith("trip counts")]
    assert res.verdict == "UNSAFE" and lines, res.report()
    assert any("Consumer" in ln and "(K - 1, domain_loop at" in ln and "test_checker_tripcounts.py" in ln
               for ln in lines), lines


def test_a_cross_task_deadlock_names_every_blocked_task():
    """Two tasks each waiting for the other (each consumes first what the other produces): the
    finding's first line, all that -q prints, names both."""
    from test_checker_builders import Buf, async_cfg

    x, y = Buf(name="X", pipeline_config=async_cfg()), Buf(name="Y", pipeline_config=async_cfg())

    @schedule
    def first(a, b):
        with domain_loop(0, 2, 1):
            a.wait()
            a.read()
            a.release()
            b.acquire()
            b.fill()
            b.commit()

    res = run_checker(program([task("Ping", first(x, y), src=[x], dst=[y]),
                               task("Pong", first(y, x), src=[y], dst=[x], warp=1)]))
    msg = next(f.message for f in res.findings if f.severity == "error" and "deadlock" in f.message)
    assert "Ping blocked in ConsumerWait on X.full" in msg and "Pong blocked in ConsumerWait on Y.full" in msg, msg
