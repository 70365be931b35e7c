"""``d.if_empty()``: calls after a domain loop that run only when it ran no iteration.

The pattern it exists for (docs/checker.md, "if_empty"): a consumer waits for a second operand inside the loop's
first iteration, so that iteration's first GEMM starts before that operand lands, and waits for it after the loop
when there was no iteration; every trip count >= 0 then waits exactly once. The checker proves that for every
count (0 included), the per-task checks see the zero-trip execution, and each way of getting it wrong is named."""
from __future__ import annotations

import pytest

from warpsched import PipelineConfig, ScheduleError, Task, ValidationError, domain_loop, schedule, trip_count
from warpsched.model.iteration import loop_ran_none
from warpsched.model.ir import Guard
from warpsched.verify.checks_traces import runs

from test_checks_support import Buf, Gmem, cg, manager


def _tma(stages):
    return PipelineConfig.create_tma_async_pipeline_cfg(num_stages=stages, num_bytes=1024, producer_group=cg(1),
                                                       consumer_group=cg(1))


@schedule
def load(k, v, q, steps):
    k.acquire()
    k.tma_load_a()
    k.commit()
    v.acquire()
    v.tma_load_a()
    v.commit()
    with domain_loop(0, steps, 1):
        q.acquire()
        q.tma_load_a()
        q.commit()


def _consumer(after_loop):
    """The math task: K waited for before the loop, V inside the first step (so that step's first GEMM starts
    before V lands). ``after_loop``: "if_empty" (V waited for after a loop that ran no step: the pattern),
    "nothing" (planted: at 0 steps V is released without a wait) or "unguarded" (planted: a second wait for V
    after a loop that ran)."""
    @schedule
    def consume(k, v, q, out, steps):
        k.wait()
        with domain_loop(0, steps, 1) as d:
            q.wait()
            out.store(value=q.read())  # the first GEMM's operands: K and this step's stage
            with d.first_iter():
                v.wait()  # V for the second GEMM, waited for where the first iteration needs it
            out.store(value=v.read())
            q.release()
        if after_loop == "if_empty":
            with d.if_empty():
                v.wait()  # no iteration: V's load still completes its barrier before the buffers are reused
        elif after_loop == "unguarded":
            v.wait()
        out.store(value=k.read())
        k.release()
        v.release()
    return consume


consume, consume_without_if_empty, consume_waiting_twice = (_consumer(m) for m in ("if_empty", "nothing", "unguarded"))


def _program(consumer, steps, **kw):
    k, v, q = Buf(name="smem_k", pipeline_config=_tma(1)), Buf(name="smem_v", pipeline_config=_tma(1)), \
        Buf(name="smem_q", pipeline_config=_tma(2))
    out = Gmem(name="out")
    tasks = [Task(name="load", src_resources=[], dst_resources=[k, v, q], warp_idx=0, num_warps=1,
                  schedule=load(k, v, q, steps)),
             Task(name="math", src_resources=[k, v, q], dst_resources=[out], warp_idx=1, num_warps=1,
                  schedule=consumer(k, v, q, out, steps))]
    return manager(tasks, {k: [], v: [], q: [], out: [k, v, q]}, **kw)


def test_every_trip_count_from_zero_waits_once_and_is_proven_safe():
    m = _program(consume, trip_count("steps", min=0), exhaustive_deadlock_race_check=True)
    assert m.result.errors == []
    assert m.result.checker.verdict == "SAFE"


@pytest.mark.parametrize("steps, safe", [(0, True), (3, True)])
def test_compile_time_trip_counts_fold_the_guard(steps, safe):
    """A compile-time count decides the block: it runs at 0 (the guard dropped) and never at 3."""
    m = _program(consume, steps, exhaustive_deadlock_race_check=True)
    assert m.result.errors == [] and m.result.checker.verdict == "SAFE"


def test_without_if_empty_the_zero_trip_release_is_named():
    with pytest.raises(ValidationError) as e:
        _program(consume_without_if_empty, trip_count("steps", min=0), exhaustive_deadlock_race_check=True)
    assert "smem_v" in str(e.value), str(e.value)


def test_an_unguarded_second_wait_is_rejected():
    with pytest.raises(ValidationError) as e:
        _program(consume_waiting_twice, trip_count("steps", min=0), exhaustive_deadlock_race_check=True)
    assert "smem_v" in str(e.value), str(e.value)


# ------------------------------------------------------------------ where it may stand
def _capture(body):
    k, v, q, out = Buf(name="k", pipeline_config=_tma(1)), Buf(name="v", pipeline_config=_tma(1)), \
        Buf(name="q", pipeline_config=_tma(2)), Gmem(name="out")
    return schedule(body)(k, v, q, out, 4)


def test_inside_the_loop_it_is_refused_with_the_guard_to_use():
    def body(k, v, q, out, steps):
        with domain_loop(0, steps, 1) as d:
            q.wait()
            with d.if_empty():
                v.wait()
            q.release()
    with pytest.raises(ScheduleError) as e:
        _capture(body)
    assert "inside its domain_loop" in str(e.value) and "first_iter" in str(e.value)


def test_a_loop_without_calls_is_refused():
    def body(k, v, q, out, steps):
        with domain_loop(0, steps, 1) as d:
            pass
        with d.if_empty():
            v.wait()
    with pytest.raises(ScheduleError) as e:
        _capture(body)
    assert "no calls in its body" in str(e.value)


def test_the_per_task_checks_run_its_block_at_zero_iterations_only():
    g = Guard("loop_empty")
    assert runs(g, None, 0, {}, False) and not runs(g, None, 3, {}, False) and not runs(g, 0, 1, {}, False)
    assert g.describe() == "if_empty()" and g.tag == "0"


@pytest.mark.parametrize("start, end, step, empty", [(0, 0, 1, True), (0, 3, 1, False), (5, 5, 2, True),
                                                     (4, 0, -1, False), (0, 4, -1, True), (7, 3, 1, True)])
def test_the_lowering_condition_on_int_bounds(start, end, step, empty):
    assert loop_ran_none(start, end, step) is empty
    assert empty == (len(range(start, end, step)) == 0)


def test_the_per_task_checks_unroll_the_zero_trip_execution_where_a_block_reads_it():
    from warpsched.verify.checks_traces import _trip_counts

    steps = trip_count("steps", min=0)
    k, v, q, out = Buf(name="k", pipeline_config=_tma(1)), Buf(name="v", pipeline_config=_tma(1)), \
        Buf(name="q", pipeline_config=_tma(2)), Gmem(name="out")
    assert 0 in _trip_counts(consume(k, v, q, out, steps))  # its if_empty() block runs there
    assert 0 not in _trip_counts(load(k, v, q, steps))  # no block reads the count: 1, 2, 3 and one long


def test_the_printed_schedule_walks_past_the_block_after_a_loop_that_ran():
    """The printout's walk (head, one iteration, tail) shows the if_empty() block with its tag and gives it no
    credit: the wait there does not run after an iteration, so the table is not cut short as blocked."""
    from warpsched.report.printout import schedule_table

    m = _program(consume, trip_count("steps", min=0))
    table = schedule_table(m.program)
    assert "is blocked" not in table and "0 - if_empty()" in table
    assert any("T0" in line and "ConsWai" in line for line in table.splitlines()), table
