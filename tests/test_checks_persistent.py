"""WorkQueue placement and the persistent skip predicate."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from warpsched import (PipelineConfig, ScheduleError, Task, WorkQueue, domain_loop, schedule, work_tile_loop)

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

NUM_ROWS = 4


@dataclass(kw_only=True)
class CopyWorkQueue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return False


@dataclass(kw_only=True)
class OtherQueue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return True


class Unrelated:
    def skip_work_tile_if(self, work_tile):
        return True


def copy_program(sched, *, queue_cls=CopyWorkQueue, second=None):
    src, copy_res, wq = Gmem(name="src"), Gmem(name="copy_res"), queue_cls(name="wq")
    tasks = [Task(name="copy", src_resources=[src, wq], dst_resources=[copy_res], warp_idx=0,
                  schedule=sched(src, copy_res, wq))]
    if second is not None:
        tasks.append(Task(name="second", src_resources=[src, wq], warp_idx=1, schedule=second(src, wq)))
    return tasks, {copy_res: [src, wq]}


@schedule
def bad_skip_schedule(src, copy_res, wq):
    with work_tile_loop(wq, skip_if=CopyWorkQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, NUM_ROWS, 1):
            v = src.load()
            copy_res.store(value=v)
            wq.try_wait()  # @bad_try_wait
            wq.wait()
            wq.get_and_advance_work_tile()  # @bad_advance
            wq.release()


@schedule
def copy_schedule(src, copy_res, wq):
    with work_tile_loop(wq, skip_if=CopyWorkQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, NUM_ROWS, 1):
            v = src.load()
            copy_res.store(value=v)
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def test_queue_epilogue_inside_loop_and_skippable_doc_pair():
    f = rejected(*copy_program(bad_skip_schedule))
    hits = [x for x in f if x.check == "workqueue placement" and x.line == line("bad_advance")]
    assert any("main loop" in x.message for x in hits)
    assert any("skippable" in x.message for x in hits)
    expect(f, "workqueue placement", "copy", "wq", line("bad_try_wait"))
    accepted(*copy_program(copy_schedule))


def test_first_iter_guard_outside_the_loop_is_a_capture_error():
    smem_a = Buf(name="smem_a", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=cg(32), consumer_group=cg(32)))

    @schedule
    def bad_guard_schedule(smem_a):
        with domain_loop(0, 4, 1) as d:
            smem_a.acquire()
            smem_a.produce_tile()
            smem_a.commit()
        with d.first_iter():  # @guard_outside
            smem_a.try_acquire()

    with pytest.raises(ScheduleError) as info:
        bad_guard_schedule(smem_a)
    assert info.value.finding.line == line("guard_outside")


def test_all_tasks_persistent_or_none():
    @schedule  # @plain_def
    def plain(src, wq):
        with domain_loop(0, NUM_ROWS, 1):
            src.load()

    f = rejected(*copy_program(copy_schedule, second=plain))
    expect(f, "workqueue placement", "second", None, line("plain_def"))

    @schedule
    def persistent_reader(src, wq):
        with work_tile_loop(wq):
            with domain_loop(0, NUM_ROWS, 1):
                src.load()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()

    accepted(*copy_program(copy_schedule, second=persistent_reader))


def test_persistent_task_must_advance_the_queue_once_per_tile():
    @schedule
    def no_advance(src, copy_res, wq):
        with work_tile_loop(wq):  # @no_advance
            with domain_loop(0, NUM_ROWS, 1):
                v = src.load()
                copy_res.store(value=v)
            wq.wait()
            wq.release()

    @schedule
    def twice(src, copy_res, wq):
        with work_tile_loop(wq):
            with domain_loop(0, NUM_ROWS, 1):
                v = src.load()
                copy_res.store(value=v)
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()
            wq.wait()
            wq.get_and_advance_work_tile()  # @twice
            wq.release()

    expect(rejected(*copy_program(no_advance)), "workqueue placement", "copy", "wq", line("no_advance"))
    expect(rejected(*copy_program(twice)), "workqueue placement", "copy", "wq", line("twice"))


@schedule
def fetcher(src, copy_res, wq):
    """A task that fetches each next tile (commit() right after the fetch) and copies."""
    with work_tile_loop(wq):  # @fetcher
        wq.acquire()
        wq.fetch_work_tile()
        wq.commit()
        v = src.load()
        copy_res.store(value=v)
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def _fetching_copy(sched, dynamic=True):
    """copy_program(sched) whose copy task also produces into its queue (it fetches the tiles); ``dynamic``: the
    queue gets a one-stage ClcFetchAsync pipeline. (tasks, graph, the queue)."""
    tasks, graph = copy_program(sched)
    wq = tasks[0].src_resources[1]
    tasks[0].dst_resources.append(wq)
    if dynamic:
        wq.pipeline_config = PipelineConfig.create_clc_fetch_async_pipeline_cfg(
            num_stages=1, producer_group=cg(1), consumer_group=cg(32), cta_layout_vmnk=(1, 1, 1, 1))
    return tasks, graph, wq


def test_static_queue_has_no_scheduler_task_and_clc_queue_needs_one():
    tasks, graph, _ = _fetching_copy(fetcher, dynamic=False)
    expect(rejected(tasks, graph), "workqueue placement", "copy", "wq", line("fetcher"))
    accepted(*_fetching_copy(fetcher)[:2])


# ------------------------------------------------------------------ skip predicate
def _skip_program(pred):
    @schedule
    def sched(src, copy_res, wq):
        with work_tile_loop(wq, skip_if=pred) as wtwl:  # @skip_loop
            with wtwl.skippable(), domain_loop(0, NUM_ROWS, 1):
                v = src.load()
                copy_res.store(value=v)
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()

    return copy_program(sched)


@pytest.mark.parametrize("pred", [OtherQueue.skip_work_tile_if, Unrelated.skip_work_tile_if, 42,
                                  lambda a, b, c: False])
def test_skip_predicate_must_be_a_method_of_the_loop_queue(pred):
    f = rejected(*_skip_program(pred))
    expect(f, "persistent skip predicate", "copy", "wq", line("skip_loop"))


@pytest.mark.parametrize("pred", [CopyWorkQueue.skip_work_tile_if, WorkQueue.skip_work_tile_if,
                                  lambda tile: False, lambda wq, tile: False])
def test_skip_predicate_accepted_forms(pred):
    accepted(*_skip_program(pred))


def test_a_counter_queue_commits_right_after_its_fetch():
    """A counter queue's fetching thread stores the response and arrives on full[s] in ``fetch_work_tile()``;
    the plan models that arrival at ``commit()``, so nothing may come between the two (checks_persistent)."""
    from warpsched import LAUNCH_COUNTER, TileSchedulerConfig

    @schedule
    def late(src, copy_res, wq):
        with work_tile_loop(wq):
            wq.acquire()
            wq.fetch_work_tile()  # @late_fetch
            v = src.load()
            wq.commit()
            copy_res.store(value=v)
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()

    for sched, counter in ((late, LAUNCH_COUNTER), (fetcher, LAUNCH_COUNTER), (late, None)):
        tasks, graph, wq = _fetching_copy(sched)
        wq.tile_scheduler_config = TileSchedulerConfig(num_tiles=8, counter=counter)
        if sched is late and counter is LAUNCH_COUNTER:
            f = expect(rejected(tasks, graph), "workqueue placement", "copy", "wq", line("late_fetch"))
            assert "commit() directly after fetch_work_tile()" in f.expected
        else:  # the CLC hardware completes armed bytes whenever it writes: a later commit() is fine there
            accepted(tasks, graph)


def test_the_plan_gives_a_counter_queue_a_thread_arrival_and_clc_its_armed_bytes():
    """One plan for the checker and the lowering: a counter queue (``WorkQueue.counter_fed``, also before its
    tensor exists) arrives at commit with no transaction bytes, an arrival its fetch makes (the lowering's commit
    emits nothing); a CLC queue arms 16 bytes at acquire."""
    import importlib
    import os
    import sys

    from warpsched.protocol.plan import Arming

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for arch in ("hopper", "blackwell"):
        if os.path.join(root, "examples", arch) not in sys.path:
            sys.path.insert(0, os.path.join(root, "examples", arch))
    dynamic_copy, clc_copy = importlib.import_module("dynamic_copy"), importlib.import_module("clc_copy")

    plans = {}
    for mod in (dynamic_copy, clc_copy):
        mgr = mod.build(verbose=False)
        wq = next(r for r in mgr.plan.program.resources if isinstance(r, WorkQueue))
        pp = mgr.plan.pipeline(wq)
        plans[mod.__name__] = (wq.counter_fed, pp.arming, pp.protocol.transaction_bytes, pp.arrives_in_fetch,
                               pp.protocol.ptype)
    assert plans["dynamic_copy"][:4] == (True, Arming.AT_COMMIT, False, True)
    assert plans["clc_copy"][:4] == (False, Arming.AT_ACQUIRE, True, False)
    assert plans["dynamic_copy"][4] is plans["clc_copy"][4]  # both ClcFetchAsync
