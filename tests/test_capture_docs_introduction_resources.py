"""Schedule snippets of the ts_introduction and ts_resources pages, captured, with the IR shape asserted.

Each snippet is written as the page writes it; resource classes (here and in ``_capture_docs_support``)
supply the work methods the snippet calls. Values the pages leave to the kernel (``num_k_tiles``, ``bx``,
``tx`` ...) are the support module's constants. Line expectations look up this file, where the schedules live.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, ScheduleResult, Task, TaskLocalVariable, WorkAttr, WorkQueue, consumer_work,
                       domain_loop, schedule, work_tile_loop)
from warpsched.model.ir import StepKind as K, Token

from _capture_docs_support import (H, L, GmemAResource, GmemDResource, InputGmemResource, OutputGmemResource,
                                   SmemAResource, TmemCResource, assert_sources, bx, cfg, gdimx, line_of, num_entries,
                                   num_k_tiles, shape, subtile_cnt, threads_per_block, tx, unroll)


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
    assert r.work_tile_loop is None
    assert r.location.line in (line_of(__file__, "def load_a_schedule(") - 1, line_of(__file__, "def load_a_schedule("))
    assert r.steps[0].location.line == line_of(__file__, "coord_k, coord_m, coord_n = gmem_a.compute_coords()")
    assert_sources(r, __file__)
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
    assert_sources(r, __file__)


@dataclass(kw_only=True)
class MmaSmem(MemoryResource):
    desc: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc_a(self, stage_info): ...

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc_b(self, stage_info): ...


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
    assert_sources(r, __file__)


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
    assert_sources(r, __file__)
