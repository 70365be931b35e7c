"""Persistent schedules: skipped tiles, work queues, and the GEMM shapes of the benchmark."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench"))  # checker_scaling

from test_checker_builders import Buf, Queue, async_cfg, program, task  # noqa: E402
from warpsched import (PdlLaunchBarrier, PdlWaitBarrier, domain_loop, schedule, trip_count,  # noqa: E402
                       work_tile_loop)
from warpsched.verify.checker import run_checker  # noqa: E402


def _wq_tail(q):
    q.try_wait()
    q.wait()
    q.get_and_advance_work_tile()
    q.release()


def _skip(consumer_outside_skippable=True):
    wq = Queue(name="WorkQueue")
    buf = Buf(name="Tile", pipeline_config=async_cfg(stages=2))

    @schedule
    def prod(b, q):
        with work_tile_loop(q, skip_if=Queue.skip_work_tile_if) as w:
            with w.skippable():
                with domain_loop(0, 4, 1):
                    b.acquire()
                    b.fill()
                    b.commit()
            _wq_tail(q)

    @schedule
    def cons(b, q):
        with work_tile_loop(q, skip_if=Queue.skip_work_tile_if) as w:
            if consumer_outside_skippable:
                with domain_loop(0, 4, 1):
                    b.wait()  # also runs on skipped tiles, where nothing was produced
                    b.read()
                    b.release()
            else:
                with w.skippable():
                    with domain_loop(0, 4, 1):
                        b.wait()
                        b.read()
                        b.release()
            _wq_tail(q)

    return program([task("Producer", prod(buf, wq), src=[wq], dst=[buf]),
                    task("Consumer", cons(buf, wq), src=[buf, wq], warp=1)]), cons


def test_bug_only_on_a_skipped_tile():
    prog, cons = _skip(True)
    res = run_checker(prog)
    assert res.verdict == "UNSAFE", res.report()
    f = next(f for f in res.findings if "deadlock" in f.message)
    assert f.task == "Consumer" and f.resource == "Tile"
    assert "next tile (skipped)" in f.detail  # the counterexample takes a skipped tile
    import inspect

    lines, start = inspect.getsourcelines(cons.fn)
    assert f.location.line == start + next(i for i, t in enumerate(lines) if "also runs on skipped" in t)


def test_skippable_on_both_sides_is_safe():
    res = run_checker(_skip(False)[0])
    assert res.verdict == "SAFE", res.report()
    assert "work tiles" in res.report()


def _pdl_skip(wait_in_skippable=True):
    wq = Queue(name="WorkQueue")
    pw = PdlWaitBarrier(name="PdlWait")
    pl = PdlLaunchBarrier(name="PdlLaunch")

    @schedule
    def sched(w, lnch, q):
        if not wait_in_skippable:
            w.wait_griddep()
        with work_tile_loop(q, skip_if=Queue.skip_work_tile_if) as t:
            with t.skippable():
                if wait_in_skippable:
                    w.wait_griddep()  # hidden in skipped work
            _wq_tail(q)
        lnch.launch_griddep()

    return program([task("Main", sched(pw, pl, wq), src=[pw, wq], dst=[pl])])


def test_pdl_wait_hidden_in_skipped_work_does_not_justify_the_launch():
    res = run_checker(_pdl_skip(True))
    assert res.verdict == "UNSAFE", res.report()
    f = next(f for f in res.findings if "PDL" in f.message)
    assert "next tile (skipped)" in f.detail and f.task == "Main"


def test_pdl_wait_before_the_tile_loop_is_safe():
    res = run_checker(_pdl_skip(False))
    assert res.verdict == "SAFE", res.report()


def test_benchmark_gemm_shapes_are_safe_for_every_k():
    from checker_scaling import build_program

    for variant, S in (("a", 2), ("a", 8), ("b", 2)):
        res = run_checker(build_program(variant, S, trip_count("K")))
        assert res.verdict == "SAFE", res.report()
        assert "every K >= 1" in res.report()
        # an exact K is proven exactly; far from its end the loop is lifted by whole periods,
        # so the state count stops growing with K
        exact = [run_checker(build_program(variant, S, k)) for k in (4, 64, 128)]
        assert all(r.verdict == "SAFE" for r in exact), [r.report() for r in exact]
        assert "exactly 128" in exact[2].report()
        assert exact[1].states == exact[2].states


def test_gemm_example_safe_and_k_independent():
    from warpsched.examples import gemm

    prog = gemm.build(verbose=False, exhaustive_deadlock_race_check=False).program
    res = run_checker(prog)
    assert res.verdict == "SAFE", res.report()
    assert "exactly" in res.report()
