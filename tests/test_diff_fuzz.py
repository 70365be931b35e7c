"""The differential fuzzer (tools/diff_fuzz.py) as a bounded regression test.

warpsched itself never imports the reference TS; the fuzzer in tools/ does, and so does
the one test here that runs it.
"""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import diff_fuzz as D  # noqa: E402
from diff_fuzz_programs import Pipe, Prog, TaskD, generate, reformed, unrolled  # noqa: E402


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
    run = D.fuzz(12, seed=2, timeout=60, twins=False)
    assert sum(run.classes.values()) == 12
    assert not run.crashes, D.report(run, show=0)
    assert run.classes["both accept"] >= 1 and run.classes["both reject"] >= 1
    text = D.report(run, show=1)
    assert "UNCLASSIFIED" not in text and "WARPSCHED BUG" not in text, text


# ------------------------------------------------------------------ issue 30: reversed loops, every() guards
def _issue30(stages=2, store_in_phase=False):
    """The issue's program: load commits on zero-based 0, 2, 4 of a 5-iteration reversed loop, store
    waits on 1, 3 (``store_in_phase``: and stores only there, else on every iteration)."""
    load = [("loop", 5, 0, -1, [("op", "in_0", "load"), ("every", 2, 0, [
        ("op", "s0", "acquire"), ("op", "s0", "fill"), ("op", "s0", "commit")])])]
    store_op = ("op", "out_1", "store")
    store = [("loop", 5, 0, -1, [("every", 2, 1, [("op", "s0", "wait"), ("op", "s0", "read")]
                                  + ([store_op] if store_in_phase else [])),
                                 *([] if store_in_phase else [store_op]),
                                 ("every", 2, 1, [("op", "s0", "release")])])]
    return Prog([Pipe("s0", "AsyncAsync", stages, 32, 32)],
                [TaskD("load", 0, 1, ["in_0"], ["s0"], load), TaskD("store", 1, 1, ["s0"], ["out_1"], store)], K=5)


def test_issue30_reversed_program_is_rejected_with_its_five_iterations():
    """Three commits, two waits: the checker's counterexample runs both reversed loops 5 times. As the issue
    wrote it, the store also ran on the iterations without a wait: iteration 0 stores before any stage is ready,
    which work bracketing names first (as it does for the unrolled twin)."""
    out = D.run_side(D.warpsched_lib(), _issue30(store_in_phase=True), timeout=60)
    assert out.kind == "reject" and out.checks == ("checker:never",), out.message
    assert "trip counts in this counterexample: load: 5 iteration(s); store: 5 iteration(s)" in out.message
    out = D.run_side(D.warpsched_lib(), _issue30(), timeout=60)
    assert out.kind == "reject" and out.checks == ("work bracketing",), out.message
    assert "out_1.store() runs before this task has waited on s0" in out.message


@pytest.mark.parametrize("forms", [((5, 0, -1), (0, 5, 1)), ((0, 5, 1), (9, -1, -2)), ((7, 2, -1), (6, 1, -1))])
def test_correct_reversed_programs_are_accepted(forms):
    """Producer and consumer run the same count (5) in other directions / strides: SAFE, and the
    reversed-loop program written out as straight-line code gets the same verdict."""
    prog = _copy_program(*forms)
    out = D.run_side(D.warpsched_lib(), prog, timeout=60)
    assert out.kind == "accept", out.message
    assert D.run_side(D.warpsched_lib(), unrolled(prog), timeout=60).kind == "accept"


def _chain(cons0, prod1, reversed_task):
    """Issue 30's every() chains: T0 -TMA-> s0 -> T1 -TMA-> s1 -> T2, 4 iterations each. T1 waits
    and releases s0 on zero-based iterations >= cons0 of period 2 and fills s1 on those >= prod1;
    T0 and T2 are in phase with them. One task's loop counts down."""
    def loop(i, body):
        return [("loop", 4, 0, -1, body) if i == reversed_task else ("loop", 0, 4, 1, body)]

    s0 = [("op", "s0", "acquire"), ("op", "s0", "fill"), ("op", "s0", "commit")]
    s1 = [("op", "s1", "acquire"), ("op", "s1", "fill"), ("op", "s1", "commit")]
    t0 = loop(0, [("op", "in_0", "load"), ("every", 2, cons0, s0)])
    t1 = loop(1, [("every", 2, cons0, [("op", "s0", "wait"), ("op", "s0", "read")]), ("every", 2, prod1, s1),
                  ("every", 2, cons0, [("op", "s0", "release")])])
    t2 = loop(2, [("every", 2, prod1, [("op", "s1", "wait"), ("op", "s1", "read"), ("op", "out_2", "store"),
                                       ("op", "s1", "release")])])
    pipes = [Pipe("s0", "TmaAsync", 2, 1, 1, num_bytes=1024), Pipe("s1", "TmaAsync", 2, 1, 1, num_bytes=1024)]
    return Prog(pipes, [TaskD("T0", 0, 1, ["in_0"], ["s0"], t0), TaskD("T1", 1, 1, ["s0"], ["s1"], t1),
                        TaskD("T2", 2, 1, ["s1"], ["out_2"], t2)], K=4)


@pytest.mark.parametrize("reversed_task", [0, 1, 2])
def test_every_chains_are_classified(reversed_task):
    """Out of phase (s1's TMA load on iterations where T1 holds no s0 stage) the chain is wrong: the
    graph says s1's hardware producer reads s0, so it reads a stage already handed back (or not yet
    waited). warpsched rejects it where it is written (dma ordering, at s1.fill); NVIDIA's TS accepts
    the loop and rejects the first program's unrolled twin with its own DMA-edge rule, so only its
    reading of the guards differs. In phase, the same chain is SAFE with any loop reversed."""
    lib = D.warpsched_lib()
    for cons0, prod1, where in ((0, 1, "was released"), (1, 0, "is not waited yet")):
        prog = _chain(cons0, prod1, reversed_task)
        out = D.run_side(lib, prog, timeout=60)
        assert out.kind == "reject" and out.checks == ("dma ordering",), out.message
        assert "s1.fill() (TmaAsync producer) reads s0 outside its wait()/release() window" in out.message
        assert where in out.message and "in: task 'T1', resource 's0'" in out.message
        assert D.run_side(lib, unrolled(prog), timeout=60).checks == ("dma ordering",)
    for phase in (0, 1):
        ok = D.run_side(lib, _chain(phase, phase, reversed_task), timeout=60)
        assert ok.kind == "accept", ok.message


def test_loop_forms_never_change_a_verdict():
    """Generated programs (reversed, strided, offset and empty loops among them, every() guards on
    some pipes) checked again with each loop in another form of the same trip count."""
    rng = random.Random(3)
    lib = D.warpsched_lib()
    compared = reversed_seen = 0
    for _ in range(40):
        prog = generate(rng)
        twin = reformed(prog, rng)
        reversed_seen += any(n[0] == "loop" and n[3] < 0 for t in twin.tasks + prog.tasks for n in t.body)
        a, b = D.run_side(lib, prog, timeout=60), D.run_side(lib, twin, timeout=60)
        if "timeout" in (a.kind, b.kind) or "incomplete" in (a.kind, b.kind):
            continue
        assert D.form_key(a) == D.form_key(b), (prog.describe(), twin.describe(), a.message, b.message)
        compared += 1
    assert compared >= 35 and reversed_seen >= 20
