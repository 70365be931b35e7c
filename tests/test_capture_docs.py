"""Every schedule snippet of the TS documentation pages, captured, with its IR shape asserted.

Pages: ts_introduction, ts_resources, ts_schedules, ts_patterns (the seed), ts_pipeline_groups,
ts_pdl, and the accepted/fixed examples of ts_validation. Each snippet is written as the page
writes it; resource classes supply the work methods the snippet calls. Values the pages leave
to the kernel (``num_k_tiles``, ``bx``, ``tx`` ...) are module constants here.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, PipelineGroup,
                       PipelineGroupMode, ScheduleResult, Task, TaskLocalVariable, WorkAttr, WorkQueue,
                       consumer_work, domain_loop, producer_work, schedule, when_false, when_true, work_tile_loop)
from warpsched.model.ir import Section, StepKind as K, Token

num_k_tiles = 8
num_entries = 1000
num_iters = 6
num_rows = 16
subtile_cnt = 4
packet_count = 3
unroll = 2
num_warps = 4
bx, tx, gdimx = 0, 0, 8
threads_per_block = num_warps * 32
H, L, T, P, E = Section.HEAD, Section.LOOP, Section.TAIL, Section.PROLOGUE, Section.EPILOGUE


def shape(result: ScheduleResult):
    """(resource, method, kind, section, guard kinds) per step: the IR in one comparable value."""
    return [(s.resource_name, s.method, s.kind, s.section, s.guard_kinds()) for s in result.steps]


def assert_sources(result: ScheduleResult):
    """Every step points at this file, on the line that makes the call."""
    for s in result.steps:
        assert s.location.file == __file__, s
        assert f".{s.method}(" in s.location.text, (s.method, s.location.text)


def line_of(text: str, after: int = 0) -> int:
    """The line of this file holding ``text`` (the first after line ``after``), not counting asserts."""
    with open(__file__) as fh:
        hits = [i for i, ln in enumerate(fh, 1) if text in ln and "line_of(" not in ln and i > after]
    assert hits, text
    return hits[0]


# ------------------------------------------------------------------ resources the pages use
def cfg(stages=4):
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=stages, producer_group=32, consumer_group=32)


@dataclass(kw_only=True)
class GmemAResource(MemoryResource):
    @consumer_work
    def compute_coords(self, stage_info):
        return 0, 0, 0


@dataclass(kw_only=True)
class SmemAResource(MemoryResource):
    @producer_work
    def tma_load_a(self, stage_info, coord_k, coord_m): ...

    @producer_work
    def produce_tile(self, stage_info): ...

    @consumer_work
    def build_desc(self, stage_info): ...


@dataclass(kw_only=True)
class InputGmemResource(MemoryResource):
    item: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.item = TaskLocalVariable(dtype="Int16", default=0, docs="element")

    @consumer_work(returns=item)
    def get_item(self, stage_info): ...

    @consumer_work
    def load(self, stage_info, *, slot_index: int = 0): ...


@dataclass(kw_only=True)
class OutputGmemResource(MemoryResource):
    @producer_work
    def set_item(self, stage_info, data): ...

    @producer_work
    def store(self, stage_info, *, frag=None, val=None, value=None, slot_index: int = 0): ...


# ================================================================== ts_introduction
@schedule
def load_a_schedule(gmem_a: GmemAResource, smem_a: SmemAResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_a.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)
        smem_a.commit()


def test_introduction_load_a_schedule():
    gmem_a, smem_a = GmemAResource(name="gmem_a"), SmemAResource(name="smem_a", pipeline_config=cfg())
    r = load_a_schedule(gmem_a, smem_a)
    assert isinstance(r, ScheduleResult) and r.name == "load_a_schedule"
    assert shape(r) == [("gmem_a", "compute_coords", K.ConsumerWork, L, ()),
                        ("smem_a", "acquire", K.ProducerAcquire, L, ()),
                        ("smem_a", "tma_load_a", K.ProducerWork, L, ()),
                        ("smem_a", "commit", K.ProducerCommit, L, ())]
    d = r.domain_loop
    assert (d.start, d.end, d.step, d.trip_count, d.is_static) == (0, num_k_tiles, 1, num_k_tiles, True)
    # three unpacked values from an undeclared return: positions 0, 1, 2 of one producing step
    coords = r.steps[0].returns
    assert [t.position for t in coords] == [0, 1, 2] and all(t.producer_index == 0 for t in coords)
    load = r.steps[2]
    assert load.token_args == {"coord_k": coords[0], "coord_m": coords[1]} and load.const_args == {}
    assert r.work_tile_loop is None and r.location.line in (line_of("def load_a_schedule(") - 1, line_of("def load_a_schedule("))
    assert r.steps[0].location.line == line_of("coord_k, coord_m, coord_n = gmem_a.compute_coords()")
    assert_sources(r)
    task = Task(name="load_a", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0, num_warps=1, schedule=r)
    assert task.header == "load_a[0:1)" and task.schedule is r


# ================================================================== ts_resources
@schedule
def item_schedule_fn(input_gmem: InputGmemResource, output_gmem: OutputGmemResource) -> None:
    with domain_loop(bx * threads_per_block + tx, num_entries, gdimx * threads_per_block, unroll=unroll):
        res = input_gmem.get_item()
        output_gmem.set_item(data=res)


def test_resources_task_local_route():
    inp, out = InputGmemResource(name="in"), OutputGmemResource(name="out")
    r = item_schedule_fn(inp, out)
    assert shape(r) == [("in", "get_item", K.ConsumerWork, L, ()), ("out", "set_item", K.ProducerWork, L, ())]
    (tok,) = r.steps[0].returns
    assert isinstance(tok, Token) and tok.slot == "item" and tok.resource_name == "in" and tok.method == "get_item"
    assert r.steps[1].token_args == {"data": tok}
    d = r.domain_loop
    assert (d.start, d.end, d.step, d.unroll) == (0, num_entries, 1024, unroll)
    assert_sources(r)


@dataclass(kw_only=True)
class MmaSmem(MemoryResource):
    desc: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc_a(self, stage_info): ...

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc_b(self, stage_info): ...


@dataclass(kw_only=True)
class TmemCResource(MemoryResource):
    t2r_rmem: object = TaskLocalVariable.uninitialized()

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def init_work_tile_state(self, stage_info):
        del stage_info

    @producer_work
    def mma(self, stage_info, desc_a_base=None, desc_b_base=None, desc_a=None, desc_b=None): ...

    @consumer_work(returns=t2r_rmem)
    def load_subtile(self, stage_info, *, subtile_idx: int): ...


@dataclass(kw_only=True)
class GmemDResource(MemoryResource):
    @producer_work
    def store(self, stage_info, *, t2r_rmem, subtile_idx: int): ...


@schedule
def per_tile_mma_schedule(smem_a, smem_b, tmem_c, wq) -> None:
    with work_tile_loop(wq):
        tmem_c.init_work_tile_state()
        with domain_loop(0, num_k_tiles, 1):
            desc_a_base = smem_a.build_desc_a()
            desc_b_base = smem_b.build_desc_b()
            tmem_c.mma(desc_a_base=desc_a_base,
                       desc_b_base=desc_b_base)


def test_resources_per_work_tile_state():
    a, b, c = MmaSmem(name="smem_a"), MmaSmem(name="smem_b"), TmemCResource(name="tmem_c")
    wq = WorkQueue(name="wq")
    r = per_tile_mma_schedule(a, b, c, wq)
    assert shape(r) == [("tmem_c", "init_work_tile_state", K.ProducerAux, H, ()),
                        ("smem_a", "build_desc_a", K.ConsumerAux, L, ()),
                        ("smem_b", "build_desc_b", K.ConsumerAux, L, ()),
                        ("tmem_c", "mma", K.ProducerWork, L, ())]
    assert r.is_persistent and r.work_tile_loop.work_queue is wq and r.work_tile_loop.skip_if is None
    ta, tb = r.steps[1].returns[0], r.steps[2].returns[0]
    assert (ta.slot, tb.slot) == ("desc", "desc") and ta is not tb
    assert r.steps[3].token_args == {"desc_a_base": ta, "desc_b_base": tb}
    assert_sources(r)


@schedule
def subtile_store_schedule(tmem_c, gmem_d) -> None:
    tmem_c.wait()
    # Same work methods, called once per subtile with a distinct constant.
    for subtile_idx in range(subtile_cnt):
        t2r_rmem = tmem_c.load_subtile(subtile_idx=subtile_idx)
        gmem_d.store(t2r_rmem=t2r_rmem, subtile_idx=subtile_idx)
    tmem_c.release()


def test_resources_compile_time_work_args():
    c, d = TmemCResource(name="tmem_c", pipeline_config=cfg()), GmemDResource(name="gmem_d")
    r = subtile_store_schedule(c, d)
    assert r.domain_loop is None and len(r.steps) == 2 + 2 * subtile_cnt
    assert all(s.section is H for s in r.steps)  # no domain loop: everything is head
    loads = [s for s in r.steps if s.method == "load_subtile"]
    stores = [s for s in r.steps if s.method == "store"]
    assert [s.const_args for s in loads] == [{"subtile_idx": i} for i in range(subtile_cnt)]
    assert [s.call_idx for s in loads] == list(range(subtile_cnt)) == [s.call_idx for s in stores]
    for ld, st in zip(loads, stores):  # each store reads the value of its own load
        assert st.token_args == {"t2r_rmem": ld.returns[0]} and st.const_args == {"subtile_idx": ld.const_args["subtile_idx"]}
    assert r.steps[0].kind is K.ConsumerWait and r.steps[-1].kind is K.ConsumerRelease
    assert_sources(r)


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
    assert d.location.line == line_of("with domain_loop(start, num_entries, step, unroll=unroll):")
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
    assert r.steps[0].guards[0].location.line == line_of("with d.first_iter():", after=line_of("def guarded_schedule"))
    assert_sources(r)


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
    assert_sources(r2)


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
    assert not wq.is_dynamic and r.work_tile_loop.location.line == line_of("def bookkeeping_schedule") + 1
    assert_sources(r)


class DynamicDomainTask(Task):
    def __init__(self, offsets, **kwargs):
        super().__init__(**kwargs)
        self._offsets = offsets

    def get_domain_size(self, tile_coord):
        return self._offsets[tile_coord[0] + 1] - self._offsets[tile_coord[0]]


@dataclass(kw_only=True)
class ValSrc(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=val)
    def load(self, stage_info): ...


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
    assert_sources(r)


class OversubscribedCopyWorkQueue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return work_tile.tile_idx >= 100


@dataclass(kw_only=True)
class CopyResource(MemoryResource):
    @producer_work
    def copy_tile_row(self, stage_info): ...

    @producer_work
    def copy_row(self, stage_info): ...


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
    assert_sources(r)


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
    assert_sources(r)


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
    assert_sources(r)


# ================================================================== ts_patterns (the seed)
@dataclass(kw_only=True)
class SmemPingPongResource(MemoryResource):
    cur: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=cur)
    def read_current(self, stage_info): ...

    @producer_work
    def write_next(self, stage_info, cur): ...

    @consumer_work
    def transform_inplace(self, stage_info): ...


@schedule
def producer_schedule(smem_pp: SmemPingPongResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        smem_pp.acquire()
        cur = smem_pp.read_current()
        smem_pp.write_next(cur=cur)
        smem_pp.commit()


@schedule
def consumer_schedule(smem_pp: SmemPingPongResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        smem_pp.wait()
        smem_pp.transform_inplace()
        smem_pp.release()


def test_patterns_ping_pong():
    pp = SmemPingPongResource(name="smem_pp", pipeline_config=cfg(1))
    p, c = producer_schedule(pp), consumer_schedule(pp)
    assert [s.kind for s in p.steps] == [K.ProducerAcquire, K.ConsumerWork, K.ProducerWork, K.ProducerCommit]
    assert p.steps[2].token_args == {"cur": p.steps[1].returns[0]} and p.steps[1].returns[0].slot == "cur"
    assert [s.kind for s in c.steps] == [K.ConsumerWait, K.ConsumerWork, K.ConsumerRelease]
    assert all(s.resource is pp for s in p.steps + c.steps)
    assert_sources(p)
    assert_sources(c)


@dataclass(kw_only=True)
class DescSmem(MemoryResource):
    desc: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=desc)
    def build_desc(self, stage_info): ...


@dataclass(kw_only=True)
class ProxyResource(MemoryResource):
    @producer_work
    def signal_ready(self, stage_info): ...


@schedule
def sync_schedule(smem_a, smem_b, proxy) -> None:      # wait-only consumer
    with domain_loop(0, num_k_tiles, 1):
        smem_a.wait()
        smem_b.wait()
        proxy.acquire()
        proxy.signal_ready()
        proxy.commit()


@schedule
def split_mma_schedule(proxy, smem_a, smem_b, tmem_c) -> None:  # proxy consumer
    with domain_loop(0, num_k_tiles, 1):
        proxy.wait()
        desc_a = smem_a.build_desc()       # work, no direct wait
        desc_b = smem_b.build_desc()
        tmem_c.mma(desc_a=desc_a, desc_b=desc_b)
        smem_a.release()
        smem_b.release()
        proxy.release()


def test_patterns_split_consumer():
    a, b = DescSmem(name="smem_a", pipeline_config=cfg()), DescSmem(name="smem_b", pipeline_config=cfg())
    proxy, c = ProxyResource(name="proxy", pipeline_config=cfg()), TmemCResource(name="tmem_c")
    s = sync_schedule(a, b, proxy)
    assert shape(s) == [("smem_a", "wait", K.ConsumerWait, L, ()), ("smem_b", "wait", K.ConsumerWait, L, ()),
                        ("proxy", "acquire", K.ProducerAcquire, L, ()),
                        ("proxy", "signal_ready", K.ProducerWork, L, ()),
                        ("proxy", "commit", K.ProducerCommit, L, ())]
    m = split_mma_schedule(proxy, a, b, c)
    assert [(x.resource_name, x.kind) for x in m.steps] == [
        ("proxy", K.ConsumerWait), ("smem_a", K.ConsumerWork), ("smem_b", K.ConsumerWork), ("tmem_c", K.ProducerWork),
        ("smem_a", K.ConsumerRelease), ("smem_b", K.ConsumerRelease), ("proxy", K.ConsumerRelease)]
    assert m.steps[3].token_args == {"desc_a": m.steps[1].returns[0], "desc_b": m.steps[2].returns[0]}
    assert_sources(s)
    assert_sources(m)


@dataclass(kw_only=True)
class ScoresResource(MemoryResource):
    @consumer_work
    def compute_softmax(self, stage_info): ...


@dataclass(kw_only=True)
class ProbsResource(MemoryResource):
    @producer_work
    def store(self, stage_info): ...


NUM_LANES = 2


def test_patterns_interleaved_domain_lanes():
    scores = ScoresResource(name="scores", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=4, producer_group=1, consumer_group=128, interleave_stride=(1, 1, NUM_LANES, NUM_LANES)))
    probs = ProbsResource(name="probs", pipeline_config=PipelineConfig.create_async_umma_pipeline_cfg(
        num_stages=4, producer_group=128, consumer_group=1, interleave_stride=(NUM_LANES, NUM_LANES, 1, 1)))

    def make_softmax_task(lane, warp_idx):
        @schedule
        def softmax_lane(scores, probs):
            with domain_loop(lane, num_k_tiles, NUM_LANES):
                scores.wait()
                scores.compute_softmax()
                probs.acquire()
                probs.store()
                probs.commit()
                scores.release()

        return Task(
            src_resources=[scores],
            dst_resources=[probs],
            warp_idx=warp_idx,
            num_warps=4,  # differs from NUM_LANES: select domain-lane mode
            schedule=softmax_lane(scores, probs),
            name=f"SoftmaxLane{lane}",
        )

    even, odd = make_softmax_task(lane=0, warp_idx=0), make_softmax_task(lane=1, warp_idx=4)
    for lane, task in enumerate((even, odd)):
        d = task.schedule.domain_loop
        assert (d.static_start, d.static_step, d.end) == (lane, NUM_LANES, num_k_tiles)
        assert d.trip_count == len(range(lane, num_k_tiles, NUM_LANES))
        assert [s.kind for s in task.schedule.steps] == [K.ConsumerWait, K.ConsumerWork, K.ProducerAcquire,
                                                        K.ProducerWork, K.ProducerCommit, K.ConsumerRelease]
        assert_sources(task.schedule)
    assert (even.header, odd.header) == ("SoftmaxLane0[0:4)", "SoftmaxLane1[4:8)")
    assert scores.pipeline_config.strides == (1, 1, 2, 2) and probs.pipeline_config.strides == (2, 2, 1, 1)


def test_patterns_interleave_configs():
    c4 = PipelineConfig.create_tma_umma_pipeline_cfg(num_stages=8, num_bytes=4096, producer_group=1,
                                                     consumer_group=1, cta_layout_vmnk=(1, 1, 1, 1),
                                                     interleave_stride=4)
    assert c4.strides == (4, 4, 4, 4) and c4.is_interleaved
    c = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=8, num_bytes=4096, producer_group=1,
                                                     consumer_group=1, cta_layout_vmnk=(1, 1, 1, 1),
                                                     advance_on_wait=True, interleave_stride=(1, 1, 4, 1))
    assert c.strides == (1, 1, 4, 1) and c.advance_on_wait


# ================================================================== ts_pipeline_groups
@dataclass(kw_only=True)
class ReadSmem(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=val)
    def read(self, stage_info): ...

    @producer_work
    def load(self, stage_info): ...


@dataclass(kw_only=True)
class PairOutput(MemoryResource):
    @producer_work
    def store(self, stage_info, val_a, val_b): ...


@schedule
def merge_store_schedule(output, group):
    with domain_loop(0, num_iters, 1):
        group.smem_a.try_wait()
        group.smem_a.wait()
        group.smem_b.try_wait()
        group.smem_b.wait()
        val_a = group.smem_a.read()
        val_b = group.smem_b.read()
        output.store(val_a=val_a, val_b=val_b)
        group.release()          # one collapsed release for both members


@schedule
def fork_load_schedule(group):
    with domain_loop(0, num_k_tiles, 1):
        group.smem_gemm.try_acquire()
        group.smem_gemm.acquire()
        group.smem_act.try_acquire()
        group.smem_act.acquire()
        group.smem_gemm.load()
        group.commit()           # one collapsed commit for both members


@schedule
def fused_mma_schedule(smem_a, smem_b, tmem, ab_group):
    with domain_loop(0, num_k_tiles, 1):
        ab_group.try_wait()         # one collapsed wait for all members
        ab_group.wait()
        tmem.mma()
        ab_group.release()          # one collapsed release for all members


def test_pipeline_groups_merge():
    a, b = ReadSmem(name="smem_a", pipeline_config=cfg()), ReadSmem(name="smem_b", pipeline_config=cfg())
    group = PipelineGroup(name="ab_sync", members=[a, b], mode=PipelineGroupMode.Merge)
    r = merge_store_schedule(PairOutput(name="output"), group)
    members = r.steps[:6]
    assert [(s.resource, s.via_group, s.kind) for s in members] == [
        (a, group, K.ConsumerTryWait), (a, group, K.ConsumerWait), (b, group, K.ConsumerTryWait),
        (b, group, K.ConsumerWait), (a, group, K.ConsumerWork), (b, group, K.ConsumerWork)]
    assert r.steps[6].token_args == {"val_a": r.steps[4].returns[0], "val_b": r.steps[5].returns[0]}
    rel = r.steps[7]
    assert rel.resource is group and rel.is_group_op and rel.kind is K.ConsumerRelease and rel.resource_name == "ab_sync"
    assert r.resources == (a, b, r.steps[6].resource)  # the group op resolves to its members
    assert_sources(r)


def test_pipeline_groups_fork():
    g_res, act = ReadSmem(name="smem_gemm", pipeline_config=cfg()), ReadSmem(name="smem_act", pipeline_config=cfg())
    group = PipelineGroup(name="fork", members=[g_res, act], mode=PipelineGroupMode.Fork)
    r = fork_load_schedule(group)
    assert [(s.resource_name, s.kind) for s in r.steps] == [
        ("smem_gemm", K.ProducerTryAcquire), ("smem_gemm", K.ProducerAcquire), ("smem_act", K.ProducerTryAcquire),
        ("smem_act", K.ProducerAcquire), ("smem_gemm", K.ProducerWork), ("fork", K.ProducerCommit)]
    assert r.steps[-1].is_group_op and all(s.via_group is group for s in r.steps[:5])
    assert_sources(r)


def test_pipeline_groups_fused_merge():
    a, b = ReadSmem(name="smem_a", pipeline_config=cfg()), ReadSmem(name="smem_b", pipeline_config=cfg())
    group = PipelineGroup(name="ab_group", members=[a, b], mode=PipelineGroupMode.FusedMerge)
    r = fused_mma_schedule(a, b, TmemCResource(name="tmem"), group)
    assert [(s.resource_name, s.kind, s.is_group_op) for s in r.steps] == [
        ("ab_group", K.ConsumerTryWait, True), ("ab_group", K.ConsumerWait, True), ("tmem", K.ProducerWork, False),
        ("ab_group", K.ConsumerRelease, True)]
    assert group.num_barriers == 2 * 4
    assert_sources(r)


# ================================================================== ts_pdl
@dataclass(kw_only=True)
class GmemAbResource(MemoryResource):
    @consumer_work
    def compute_coords(self, stage_info):
        return 0, 0, 0


@schedule
def pdl_load_a_schedule(
    gmem_ab: GmemAbResource,
    smem_a: SmemAResource,
    wq: WorkQueue,
    pdl_wait_resource: PdlWaitBarrier,
    pdl_launch_resource: PdlLaunchBarrier,
) -> None:
    pdl_wait_resource.wait_griddep()
    with work_tile_loop(wq):
        with domain_loop(0, num_k_tiles, 1):
            coord_k, coord_m, coord_n = gmem_ab.compute_coords()
            smem_a.try_acquire()
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)
            smem_a.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()
    pdl_launch_resource.launch_griddep()


def test_pdl_walkthrough():
    pw, pl = PdlWaitBarrier(name="pdl_wait"), PdlLaunchBarrier(name="pdl_launch")
    r = pdl_load_a_schedule(GmemAbResource(name="gmem_ab"), SmemAResource(name="smem_a", pipeline_config=cfg()),
                            WorkQueue(name="wq"), pw, pl)
    assert shape(r)[0] == ("pdl_wait", "wait_griddep", K.PdlWait, P, ())
    assert shape(r)[-1] == ("pdl_launch", "launch_griddep", K.PdlLaunch, E, ())
    assert [s.section for s in r.steps[1:-1]] == [L] * 5 + [T] * 4
    assert r.steps[4].token_args == {"coord_k": r.steps[1].returns[0], "coord_m": r.steps[1].returns[1]}
    assert_sources(r)


# ================================================================== ts_validation (accepted / fixed forms)
@schedule
def validation_copy_schedule(src: ValSrc, dst: OutputGmemResource) -> None:
    with domain_loop(0, num_entries, 1):
        value = src.load()
        dst.store(value=value)


@schedule
def validation_load_schedule(gmem_a: GmemAResource, smem_a: SmemAResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_a.compute_coords()
        smem_a.try_acquire()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)
        smem_a.commit()


@schedule
def validation_mma_schedule(smem_a: SmemAResource, tmem_c: TmemCResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        smem_a.wait()
        desc_a = smem_a.build_desc()
        tmem_c.acquire()
        tmem_c.mma(desc_a=desc_a)
        smem_a.release()                  # release after the MMA read
        tmem_c.commit()


@schedule
def validation_skip_copy_schedule(copy_res: CopyResource, wq: WorkQueue) -> None:
    with work_tile_loop(wq, skip_if=OversubscribedCopyWorkQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, num_rows, 1):
            copy_res.copy_row()
        wq.try_wait()                     # tail: runs once per work tile
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def pdl_load_schedule(gmem_ab, smem_a, pdl_wait_resource, pdl_launch_resource) -> None:
    pdl_wait_resource.wait_griddep()
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_ab.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)
        smem_a.commit()
    pdl_launch_resource.launch_griddep()


@dataclass(kw_only=True)
class PacketResource(MemoryResource):
    header: object = TaskLocalVariable.uninitialized()
    payload: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=header)
    def load_header(self, stage_info): ...

    @consumer_work(returns=payload)
    def load_payload(self, stage_info): ...

    @producer_work
    def store_header(self, stage_info, header): ...

    @producer_work
    def store_payload(self, stage_info, payload=None, token=None): ...


@schedule
def named_work_schedule(src: PacketResource, dst: PacketResource) -> None:
    with domain_loop(0, packet_count, 1):
        header = src.load_header()
        payload = src.load_payload()
        dst.store_header(header=header)
        dst.store_payload(payload=payload)


@schedule
def routed_schedule(src: PacketResource, dst: PacketResource) -> None:
    with domain_loop(0, packet_count, 1):
        token = src.load_payload()
        dst.store_payload(token=token)


@dataclass(kw_only=True)
class TmemResource(MemoryResource):
    @producer_work
    def produce_tile(self, stage_info): ...

    @consumer_work
    def consume_tile(self, stage_info): ...


@schedule
def tmem_producer_schedule(tmem_a: TmemResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        tmem_a.acquire()
        tmem_a.produce_tile()
        tmem_a.commit()


@schedule
def tmem_consumer_schedule(tmem_b: TmemResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        tmem_b.wait()
        tmem_b.consume_tile()
        tmem_b.release()


def test_validation_fixed_examples():
    r = validation_copy_schedule(ValSrc(name="src"), OutputGmemResource(name="dst"))
    assert r.steps[1].token_args == {"value": r.steps[0].returns[0]}

    gmem_a, smem_a = GmemAResource(name="gmem_a"), SmemAResource(name="smem_a", pipeline_config=cfg())
    r = validation_load_schedule(gmem_a, smem_a)
    assert [s.kind for s in r.steps] == [K.ConsumerWork, K.ProducerTryAcquire, K.ProducerAcquire, K.ProducerWork,
                                         K.ProducerCommit]

    tmem_c = TmemCResource(name="tmem_c", pipeline_config=cfg())
    r = validation_mma_schedule(smem_a, tmem_c)
    assert [(s.resource_name, s.method) for s in r.steps] == [
        ("smem_a", "wait"), ("smem_a", "build_desc"), ("tmem_c", "acquire"), ("tmem_c", "mma"),
        ("smem_a", "release"), ("tmem_c", "commit")]
    assert r.steps[3].token_args == {"desc_a": r.steps[1].returns[0]}
    assert_sources(r)

    r = validation_skip_copy_schedule(CopyResource(name="copy"), OversubscribedCopyWorkQueue(name="wq"))
    assert shape(r)[0] == ("copy", "copy_row", K.ProducerWork, L, ("skippable",))
    assert [s.section for s in r.steps[1:]] == [T] * 4 and all(not s.guards for s in r.steps[1:])

    r = pdl_load_schedule(GmemAbResource(name="gmem_ab"), smem_a, PdlWaitBarrier(name="w"), PdlLaunchBarrier(name="l"))
    assert (r.steps[0].kind, r.steps[0].section) == (K.PdlWait, H)
    assert (r.steps[-1].kind, r.steps[-1].section) == (K.PdlLaunch, T)

    src, dst = PacketResource(name="src"), PacketResource(name="dst")
    r = named_work_schedule(src, dst)
    assert [s.method for s in r.steps] == ["load_header", "load_payload", "store_header", "store_payload"]
    assert r.steps[2].token_args["header"].slot == "header" and r.steps[3].token_args["payload"].slot == "payload"
    r = routed_schedule(src, dst)
    assert r.steps[1].token_args == {"token": r.steps[0].returns[0]} and r.steps[0].kind is K.ConsumerWork
    assert r.steps[1].kind is K.ProducerWork

    a, b = TmemResource(name="tmem_a", pipeline_config=cfg()), TmemResource(name="tmem_b", pipeline_config=cfg())
    assert [s.kind for s in tmem_producer_schedule(a).steps] == [K.ProducerAcquire, K.ProducerWork, K.ProducerCommit]
    assert [s.kind for s in tmem_consumer_schedule(b).steps] == [K.ConsumerWait, K.ConsumerWork, K.ConsumerRelease]


# Rejected examples of ts_validation that are still capturable: the IR keeps what the checks need.
@schedule
def bad_domain_schedule(src) -> None:
    with domain_loop(0, num_entries, 0):
        src.load()


@schedule
def bad_load_schedule(gmem_a, smem_a) -> None:
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_a.compute_coords()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)   # work before acquire
        smem_a.acquire()
        smem_a.commit()


@schedule
def bad_skip_schedule(copy_res, wq) -> None:
    with work_tile_loop(wq, skip_if=OversubscribedCopyWorkQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, num_rows, 1):
            copy_res.copy_row()
            wq.try_wait()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()


@schedule
def bad_pdl_launch_schedule(pdl_launch_resource) -> None:
    with domain_loop(0, 1, 1):
        pdl_launch_resource.launch_griddep()


def test_validation_rejected_examples_capture_for_the_checks():
    d = bad_domain_schedule(ValSrc(name="src")).domain_loop
    assert d.step == 0 and d.trip_count is None  # the domain-validity check sees the zero step
    smem_a = SmemAResource(name="smem_a", pipeline_config=cfg())
    r = bad_load_schedule(GmemAResource(name="gmem_a"), smem_a)
    assert [s.kind for s in r.steps][1:3] == [K.ProducerWork, K.ProducerAcquire]
    r = bad_skip_schedule(CopyResource(name="copy"), OversubscribedCopyWorkQueue(name="wq"))
    assert all(s.section is L and s.guard_kinds() == ("skippable",) for s in r.steps)
    r = bad_pdl_launch_schedule(PdlLaunchBarrier(name="l"))
    assert shape(r) == [("l", "launch_griddep", K.PdlLaunch, L, ())] and r.domain_loop.trip_count == 1
