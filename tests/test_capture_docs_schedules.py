"""Schedule snippets of the ts_schedules page, captured, with their IR shape asserted.

Each snippet is written as the page writes it; resource classes (here and in ``_capture_docs_support``)
supply the work methods the snippet calls. Values the page leaves to the kernel (``num_k_tiles``, ``bx``,
``tx`` ...) are the support module's constants. Line expectations look up this file, where the schedules live.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, Task, TaskLocalVariable, WorkAttr, WorkQueue, consumer_work,
                       domain_loop, producer_work, schedule, when_false, when_true, work_tile_loop)
from warpsched.model.ir import StepKind as K

from _capture_docs_support import (H, L, T, CopyResource, GmemDResource, InputGmemResource, OutputGmemResource,
                                   OversubscribedCopyWorkQueue, TmemCResource, ValSrc, assert_sources, bx, cfg, gdimx,
                                   line_of, num_entries, num_iters, num_k_tiles, num_rows, num_warps, shape,
                                   subtile_cnt, threads_per_block, tx, unroll)


# ================================================================== ts_schedules
@schedule
def empty_schedule_fn(input_gmem, output_gmem) -> None:
    ...   # record resource method calls on the parameters


def test_schedules_declaring_a_schedule():
    inp, out = InputGmemResource(name="in"), OutputGmemResource(name="out")
    r = empty_schedule_fn(inp, out)
    assert r.steps == () and r.domain_loop is None and r.params == (inp, out)


@schedule
def grid_stride_schedule_fn(input_gmem: InputGmemResource, output_gmem: OutputGmemResource) -> None:
    threads_per_block = num_warps * 32
    start = bx * threads_per_block + tx
    step = gdimx * threads_per_block
    with domain_loop(start, num_entries, step, unroll=unroll):
        res = input_gmem.get_item()
        output_gmem.set_item(data=res)


def test_schedules_grid_stride_domain():
    r = grid_stride_schedule_fn(InputGmemResource(name="in"), OutputGmemResource(name="out"))
    d = r.domain_loop
    assert (d.start, d.end, d.step, d.unroll) == (0, num_entries, 1024, unroll) and d.trip_count == 1
    assert d.location.line == line_of(__file__, "with domain_loop(start, num_entries, step, unroll=unroll):")
    assert r.steps[1].token_args["data"] is r.steps[0].returns[0]


@dataclass(kw_only=True)
class GuardSmem(MemoryResource):
    flags: object = TaskLocalVariable.uninitialized()
    a: object = TaskLocalVariable.uninitialized()
    b: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=flags, work_attrs=WorkAttr.AUXILIARY)
    def needs_epilogue(self, stage_info): ...

    @producer_work
    def epilogue(self, stage_info): ...

    @consumer_work(returns=(a, b), work_attrs=WorkAttr.AUXILIARY)
    def two_flags(self, stage_info): ...

    # The page's placeholder name; last, because it shadows the decorator in the class body.
    @producer_work
    def producer_work(self, stage_info): ...


@dataclass(kw_only=True)
class PageOffsets(MemoryResource):
    @consumer_work(work_attrs=WorkAttr.AUXILIARY)
    def advance(self, stage_info): ...


@schedule
def guarded_schedule(smem, page_offsets) -> None:
    with domain_loop(0, num_iters, 1) as d:
        with d.first_iter():
            smem.try_acquire()
        with d.every(4, start=0):
            page_offsets.advance()
        smem.acquire()
        smem.producer_work()
        with d.last_iter():
            smem.commit()


def test_schedules_first_last_every():
    smem, po = GuardSmem(name="smem", pipeline_config=cfg()), PageOffsets(name="page_offsets")
    r = guarded_schedule(smem, po)
    assert shape(r) == [("smem", "try_acquire", K.ProducerTryAcquire, L, ("first_iter",)),
                        ("page_offsets", "advance", K.ConsumerAux, L, ("every",)),
                        ("smem", "acquire", K.ProducerAcquire, L, ()),
                        ("smem", "producer_work", K.ProducerWork, L, ()),
                        ("smem", "commit", K.ProducerCommit, L, ("last_iter",))]
    every = r.steps[1].guards[0]
    assert (every.period, every.start, every.tag) == (4, 0, "N")
    first_iter = line_of(__file__, "with d.first_iter():", after=line_of(__file__, "def guarded_schedule"))
    assert r.steps[0].guards[0].location.line == first_iter
    assert_sources(r, __file__)


@schedule
def conditional_schedule(page_offsets, smem) -> None:
    with domain_loop(0, num_iters, 1) as d:
        smem.acquire()
        needs_epilogue = smem.needs_epilogue()
        with when_true(needs_epilogue):
            smem.epilogue()
        smem.commit()


@schedule
def two_guard_schedule(smem) -> None:
    with domain_loop(0, num_iters, 1):
        smem.acquire()
        a, b = smem.two_flags()
        with when_true(a):
            smem.epilogue()
        with when_false(b, key="shared_b"):
            smem.producer_work()
        smem.commit()


def test_schedules_when_true_and_multiple_results():
    smem = GuardSmem(name="smem", pipeline_config=cfg())
    r = conditional_schedule(PageOffsets(name="po"), smem)
    assert [s.method for s in r.steps] == ["acquire", "needs_epilogue", "epilogue", "commit"]
    g = r.steps[2].guards
    assert len(g) == 1 and g[0].kind == "when_true" and g[0].token is r.steps[1].returns[0]
    assert g[0].key == ("smem", "needs_epilogue", "flags")  # auto-derived (resource, method, result)
    assert r.steps[3].guards == ()

    r2 = two_guard_schedule(smem)
    two = r2.steps[1]
    assert [t.slot for t in two.returns] == ["a", "b"]  # one work step stores both results
    assert r2.steps[2].guards[0].token is two.returns[0] and r2.steps[2].guards[0].key == ("smem", "two_flags", "a")
    assert r2.steps[3].guards[0].kind == "when_false" and r2.steps[3].guards[0].key == "shared_b"
    assert r2.steps[3].guards[0].token is two.returns[1]
    assert_sources(r2, __file__)


@schedule
def bookkeeping_schedule(wq) -> None:
    with work_tile_loop(wq):
        with domain_loop(0, num_k_tiles, 1):
            pass
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def test_schedules_static_persistent_epilogue():
    wq = WorkQueue(name="wq")
    r = bookkeeping_schedule(wq)
    assert shape(r) == [("wq", "try_wait", K.ConsumerTryWait, T, ()), ("wq", "wait", K.ConsumerWait, T, ()),
                        ("wq", "get_and_advance_work_tile", K.QueueAdvance, T, ()),
                        ("wq", "release", K.ConsumerRelease, T, ())]
    assert not wq.is_dynamic and r.work_tile_loop.location.line == line_of(__file__, "def bookkeeping_schedule") + 1
    assert_sources(r, __file__)


class DynamicDomainTask(Task):
    def __init__(self, offsets, **kwargs):
        super().__init__(**kwargs)
        self._offsets = offsets

    def get_domain_size(self, tile_coord):
        return self._offsets[tile_coord[0] + 1] - self._offsets[tile_coord[0]]


@dataclass(kw_only=True)
class ValDst(MemoryResource):
    @producer_work
    def store(self, stage_info, val): ...


@schedule
def main_schedule(src, dst, wq) -> None:
    with work_tile_loop(wq):
        with domain_loop(
            tx,
            DynamicDomainTask.get_domain_size,
            threads_per_block,
        ):
            val = src.load()
            dst.store(val=val)
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def test_schedules_dynamic_domain():
    wq = WorkQueue(name="wq")
    r = main_schedule(ValSrc(name="src"), ValDst(name="dst"), wq)
    d = r.domain_loop
    assert d.end is DynamicDomainTask.get_domain_size and d.dynamic_bounds == ("end",)
    assert not d.is_static and d.trip_count is None and (d.start, d.step) == (tx, threads_per_block)
    assert [s.section for s in r.steps] == [L, L, T, T, T, T]
    assert r.steps[1].token_args == {"val": r.steps[0].returns[0]} and r.steps[0].returns[0].slot == "val"
    assert_sources(r, __file__)


@schedule
def copy_schedule(copy_res: MemoryResource, wq: WorkQueue) -> None:
    with work_tile_loop(
        wq, skip_if=OversubscribedCopyWorkQueue.skip_work_tile_if
    ) as wtwl:
        with wtwl.skippable(), domain_loop(0, num_rows, 1):
            copy_res.copy_tile_row()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def test_schedules_skippable_tiles():
    wq = OversubscribedCopyWorkQueue(name="wq")
    r = copy_schedule(CopyResource(name="copy"), wq)
    w = r.work_tile_loop
    assert w.skip_if is OversubscribedCopyWorkQueue.skip_work_tile_if and w.has_skippable
    assert shape(r)[0] == ("copy", "copy_tile_row", K.ProducerWork, L, ("skippable",))
    assert all(s.section is T and s.guards == () for s in r.steps[1:])  # bookkeeping outside skippable
    assert_sources(r, __file__)


@schedule
def slot_schedule_fn(input_gmem: InputGmemResource, output_gmem: OutputGmemResource) -> None:
    frag0 = input_gmem.load(slot_index=0)
    output_gmem.store(frag=frag0, slot_index=1)
    frag1 = input_gmem.load(slot_index=1)
    output_gmem.store(frag=frag1, slot_index=0)


def test_schedules_forwarding_context():
    r = slot_schedule_fn(InputGmemResource(name="in"), OutputGmemResource(name="out"))
    assert [(s.method, s.const_args, s.call_idx) for s in r.steps] == [
        ("load", {"slot_index": 0}, 0), ("store", {"slot_index": 1}, 0),
        ("load", {"slot_index": 1}, 1), ("store", {"slot_index": 0}, 1)]
    assert r.steps[1].token_args == {"frag": r.steps[0].returns[0]}
    assert r.steps[3].token_args == {"frag": r.steps[2].returns[0]}
    assert r.steps[0].returns[0].slot is None  # undeclared result: still a routed value
    assert_sources(r, __file__)


@schedule
def tail_store_schedule(tmem_c, gmem_d, wq) -> None:
    with work_tile_loop(wq):
        with domain_loop(0, num_k_tiles, 1):
            pass
        for subtile_idx in range(subtile_cnt):
            t2r_rmem = tmem_c.load_subtile(subtile_idx=subtile_idx)
            gmem_d.store(t2r_rmem=t2r_rmem, subtile_idx=subtile_idx)


def test_schedules_trace_time_python_unrolls():
    r = tail_store_schedule(TmemCResource(name="tmem_c"), GmemDResource(name="gmem_d"), WorkQueue(name="wq"))
    assert len(r.steps) == 2 * subtile_cnt and all(s.section is T for s in r.steps)
    assert [s.const_args["subtile_idx"] for s in r.steps] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len({s.location.line for s in r.steps}) == 2  # two call sites, unrolled four times


@schedule
def scheduler_schedule(wq: WorkQueue) -> None:
    with work_tile_loop(wq):
        wq.try_acquire()
        wq.acquire()
        wq.fetch_work_tile()
        wq.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def test_schedules_dynamic_persistent_scheduler_task():
    wq = WorkQueue(name="wq", pipeline_config=PipelineConfig.create_clc_fetch_async_pipeline_cfg(
        num_stages=1, producer_group=1, consumer_group=32, cta_layout_vmnk=(1, 1, 1, 1)))
    r = scheduler_schedule(wq)
    assert wq.is_dynamic
    assert [s.kind for s in r.steps] == [K.ProducerTryAcquire, K.ProducerAcquire, K.QueueFetch, K.ProducerCommit,
                                         K.ConsumerTryWait, K.ConsumerWait, K.QueueAdvance, K.ConsumerRelease]
    # inside the work-tile loop but with no domain loop: the head of each work tile
    assert all(s.section is H for s in r.steps) and r.domain_loop is None
    assert_sources(r, __file__)
