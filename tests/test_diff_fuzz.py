"""The differential fuzzer (benchmarks/diff_fuzz.py) as a bounded regression test.

warpsched itself never imports the reference TS; the fuzzer in benchmarks/ does, and so does
the one test here that runs it.
"""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import diff_fuzz as D  # noqa: E402
from diff_fuzz_programs import Pipe, Prog, TaskD, generate, unrolled  # noqa: E402


def _copy_program(producer_loop, consumer_loop, stages=2):
    """One AsyncAsync pipeline; each task runs its loop (start, end, step) once per tile."""
    producer = TaskD("Producer", 0, 1, ["in_0"], ["P0"], [("loop", *producer_loop, [
        ("op", "in_0", "load"), ("op", "P0", "acquire"), ("op", "P0", "fill"), ("op", "P0", "commit")])])
    consumer = TaskD("Consumer", 1, 1, ["P0"], ["out_1"], [("loop", *consumer_loop, [
        ("op", "P0", "wait"), ("op", "P0", "read"), ("op", "out_1", "store"), ("op", "P0", "release")])])
    return Prog([Pipe("P0", "AsyncAsync", stages, 32, 32)], [producer, consumer], K=0)


@pytest.mark.parametrize("producer_loop,consumer_loop", [((0, 2, 1), (2, 4, 1)), ((0, 2, 1), (0, 4, 2)),
                                                         ((1, 4, 1), (0, 6, 2))])
def test_equal_trip_counts_with_other_start_or_step_are_safe(producer_loop, consumer_loop):
    # Exact trip counts are len(range(start, end, step)), not the end: 2 == 2 here, so no hang
    # and nothing left unconsumed. (A balance check once read these as a producer/consumer mismatch.)
    out = D.run_side(D.warpsched_lib(), _copy_program(producer_loop, consumer_loop), timeout=60)
    assert out.kind == "accept", out.message


def test_unequal_trip_counts_are_rejected():
    # one iteration more on the consumer: it waits for a tile nobody commits
    out = D.run_side(D.warpsched_lib(), _copy_program((0, 2, 1), (0, 3, 1)), timeout=60)
    assert out.kind == "reject" and "checker:deadlock" in out.checks, out.message


def test_loop_and_unrolled_twin_get_the_same_verdict():
    """A compile-time trip count is exact: writing the loop out must not change the checker's verdict."""
    rng = random.Random(7)
    lib = D.warpsched_lib()
    compared = 0
    for _ in range(30):
        prog = generate(rng)
        twin = unrolled(prog)
        if twin is None:
            continue
        a, b = D.run_side(lib, prog, timeout=60), D.run_side(lib, twin, timeout=60)
        assert a.kind in ("accept", "reject") and b.kind in ("accept", "reject")
        assert not D.twin_conflict(a, b), (prog.describe(), a.message, b.message)
        compared += 1
    assert compared >= 15


def test_both_implementations_run_and_nothing_crashes():
    run = D.fuzz(12, seed=0, timeout=60, twins=False)
    assert sum(run.classes.values()) == 12
    assert not run.crashes, D.report(run, show=0)
    assert run.classes["both accept"] >= 1 and run.classes["both reject"] >= 1
    text = D.report(run, show=1)
    assert "UNCLASSIFIED" not in text and "WARPSCHED BUG" not in text, text
