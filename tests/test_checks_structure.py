"""Structure checks: captured domains, stage roles, the dependency graph, coverage,
named work dispatch, task declarations; and how TaskManager reports findings."""
from __future__ import annotations

import warnings

import pytest

import warpsched
from warpsched import PipelineConfig, ScheduleError, Task, TaskManager, domain_loop, schedule

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, manager, rejected

K = 4


def tma_cfg(**kw):
    return PipelineConfig.create_tma_umma_pipeline_cfg(num_stages=2, num_bytes=1024, producer_group=cg(1),
                                                      consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1), **kw)


def make_load():
    gmem_a, smem_a = Gmem(name="gmem_a"), Buf(name="smem_a", pipeline_config=tma_cfg())

    @schedule
    def load_schedule(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            coords = gmem_a.compute_coords()
            smem_a.try_acquire()
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=coords)
            smem_a.commit()

    load_task = Task(name="load_a", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0,  # @load_task
                     num_warps=1, schedule=load_schedule(gmem_a, smem_a))
    return gmem_a, smem_a, load_task


def make_mma(smem_a):
    tmem_c = Buf(name="tmem_c")

    @schedule
    def mma_schedule(smem_a, tmem_c):
        with domain_loop(0, K, 1):
            smem_a.wait()
            desc = smem_a.build_desc()
            tmem_c.mma(desc_a=desc)
            smem_a.release()

    return tmem_c, Task(name="mma", src_resources=[smem_a], dst_resources=[tmem_c], warp_idx=1, num_warps=1,
                        schedule=mma_schedule(smem_a, tmem_c))


# ------------------------------------------------------------------ captured domain validity
def test_zero_step_domain_rejected_and_unit_step_accepted():
    src = Gmem(name="src")
    out = Gmem(name="out")

    @schedule
    def bad_domain_schedule(src, out):
        with domain_loop(0, K, 0):  # @zero_step
            v = src.load()
            out.store(value=v)

    @schedule
    def good_domain_schedule(src, out):
        with domain_loop(0, K, 1):
            v = src.load()
            out.store(value=v)

    def build(sched):
        return [Task(name="copy", src_resources=[src], dst_resources=[out], schedule=sched(src, out))], {out: [src]}

    f = rejected(*build(bad_domain_schedule))
    expect(f, "captured domain validity", "copy", None, line("zero_step"))
    accepted(*build(good_domain_schedule))


class DynamicTask(Task):
    def get_domain_size(self, tile_coord):
        return 4


class Other:
    def get_domain_size(self, tile_coord):
        return 4


def test_dynamic_domain_needs_a_task_method_provider():
    src, out = Gmem(name="src"), Gmem(name="out")

    def build(provider):
        @schedule
        def dyn(src, out):
            with domain_loop(0, provider, 1):  # @dyn_loop
                v = src.load()
                out.store(value=v)

        return ([DynamicTask(name="dyn", src_resources=[src], dst_resources=[out], schedule=dyn(src, out))],
                {out: [src]})

    f = rejected(*build(Other.get_domain_size))
    expect(f, "captured domain validity", "dyn", None, line("dyn_loop"))
    accepted(*build(DynamicTask.get_domain_size))


def test_uncalled_schedule_function_is_rejected():
    gmem_a, smem_a, load_task = make_load()
    uncalled = schedule(lambda g, s: None)
    bad = Task(name="nosched", src_resources=[gmem_a], dst_resources=[smem_a], schedule=uncalled)  # @nosched
    f = rejected([bad], {smem_a: [gmem_a]})
    hit = expect(f, "captured domain validity", "nosched", None, line("nosched"))
    assert "call the @schedule function" in hit.fix
    tmem_c, mma_task = make_mma(smem_a)  # the load alone leaves every commit unconsumed
    accepted([load_task, mma_task], {smem_a: [gmem_a], tmem_c: [smem_a]})


# ------------------------------------------------------------------ resource stage roles
def test_producer_ops_on_a_source_resource_rejected_doc_pair():
    smem_a = Buf(name="smem_a", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=cg(32), consumer_group=cg(32)))
    out = Gmem(name="out")

    @schedule
    def bad_role_schedule(smem_a):
        with domain_loop(0, K, 1):
            smem_a.acquire()  # @bad_role_acquire
            smem_a.produce_tile()  # @bad_role_work
            smem_a.commit()

    @schedule
    def consume(smem_a, out):
        with domain_loop(0, K, 1):
            smem_a.wait()
            v = smem_a.read()
            out.store(value=v)
            smem_a.release()

    reader = Task(name="reader", src_resources=[smem_a], dst_resources=[out], warp_idx=1,
                  schedule=consume(smem_a, out))
    bad_task = Task(name="bad_role", src_resources=[smem_a], dst_resources=[], warp_idx=0,
                    schedule=bad_role_schedule(smem_a))
    f = rejected([bad_task, reader], {out: [smem_a]})
    expect(f, "resource stage roles", "bad_role", "smem_a", line("bad_role_acquire"))
    expect(f, "resource stage roles", "bad_role", "smem_a", line("bad_role_work"))
    fixed = Task(name="bad_role", src_resources=[], dst_resources=[smem_a], warp_idx=0,
                 schedule=bad_role_schedule(smem_a))
    accepted([fixed, reader], {out: [smem_a]})


# ------------------------------------------------------------------ graph
# Graph findings point at the TaskManager(...) call, so these tests construct it inline.
Q = dict(verbose=False, exhaustive_deadlock_race_check=False)


def test_resource_missing_from_graph_doc_pair():
    gmem_a, smem_a, load_task = make_load()
    _tmem, mma_task = make_mma(smem_a)
    f = rejected([load_task, mma_task], {})
    expect(f, "every resource in the graph", "load_a", "gmem_a", line("load_task"))
    assert "does not appear in resource_dependency_graph" in str(f[0].message) or any(
        "does not appear" in x.message for x in f)
    accepted([load_task, mma_task], {smem_a: [gmem_a], _tmem: [smem_a]})


def test_edge_with_no_backing_task_doc_pair():
    gmem_a, smem_a, load_task = make_load()
    tmem_c, mma_task = make_mma(smem_a)
    gmem_x = Gmem(name="gmem_x")
    # mma reads smem_a and writes tmem_c, but nothing reads gmem_x and writes tmem_c
    with pytest.raises(warpsched.ValidationError) as info:
        TaskManager(tasks=[load_task, mma_task], resource_dependency_graph={smem_a: [gmem_a], tmem_c: [smem_a, gmem_x]}, **Q)  # @graph_call
    f = info.value.findings
    expect(f, "dependency graph realizable", None, "gmem_x", line("graph_call"))
    # the doc's case: the edge is declared but the only task realizing it is missing
    with pytest.raises(warpsched.ValidationError) as info:
        TaskManager(tasks=[mma_task], resource_dependency_graph={smem_a: [gmem_a], tmem_c: [smem_a]}, **Q)  # @graph_call2
    f = info.value.findings
    expect(f, "dependency graph realizable", None, "gmem_a", line("graph_call2"))
    accepted([load_task, mma_task], {smem_a: [gmem_a], tmem_c: [smem_a]})


def test_edge_backed_by_two_different_tasks_is_not_realized():
    gmem_a, smem_a, load_task = make_load()
    tmem_c, mma_task = make_mma(smem_a)
    # tmem_c <- gmem_a: load reads gmem_a, mma writes tmem_c, but no task does both
    with pytest.raises(warpsched.ValidationError) as info:
        TaskManager(tasks=[load_task, mma_task], resource_dependency_graph={smem_a: [gmem_a], tmem_c: [smem_a, gmem_a]}, **Q)  # @split_edge
    f = info.value.findings
    expect(f, "dependency graph realizable", None, "tmem_c", line("split_edge"))


def test_graph_value_not_a_list_is_reported_not_crashed():
    gmem_a, smem_a, load_task = make_load()
    with pytest.raises(warpsched.ValidationError) as info:
        TaskManager(tasks=[load_task], resource_dependency_graph={smem_a: gmem_a, gmem_a: 5}, **Q)  # @bad_graph
    f = info.value.findings
    expect(f, "dependency graph realizable", None, "smem_a", line("bad_graph"))


# ------------------------------------------------------------------ coverage
def test_declared_but_unused_resource_rejected():
    gmem_a, smem_a, load_task = make_load()
    extra = Gmem(name="extra")
    load_task.src_resources.append(extra)
    f = rejected([load_task], {smem_a: [gmem_a, extra]})
    expect(f, "schedule resource coverage", "load_a", "extra", line("load_task"))
    load_task.src_resources.remove(extra)
    tmem_c, mma_task = make_mma(smem_a)
    accepted([load_task, mma_task], {smem_a: [gmem_a], tmem_c: [smem_a]})


# ------------------------------------------------------------------ named work dispatch (capture time)
def test_named_work_dispatch_rejects_a_helper_label_and_accepts_work_methods():
    src, dst = Gmem(name="src"), Gmem(name="dst")

    @schedule
    def bad(src, dst):
        with domain_loop(0, K, 1):
            src.helper()  # @helper_call

    with pytest.raises(ScheduleError) as info:
        bad(src, dst)
    f = info.value.finding
    assert f.check == "named work dispatch" and f.resource == "src" and f.line == line("helper_call")

    @schedule
    def named_work_schedule(src, dst):
        with domain_loop(0, K, 1):
            header = src.load_header()
            payload = src.load()
            dst.store_header(header=header)
            dst.store(value=payload)

    s = named_work_schedule(src, dst)
    assert [x.method for x in s.steps] == ["load_header", "load", "store_header", "store"]
    accepted([Task(name="copy", src_resources=[src], dst_resources=[dst], schedule=s)], {dst: [src]})


# ------------------------------------------------------------------ task declaration
def test_overlapping_warp_ranges_rejected():
    gmem_a, smem_a, load_task = make_load()
    tmem_c, mma_task = make_mma(smem_a)
    mma_task.warp_idx = 0
    f = rejected([load_task, mma_task], {smem_a: [gmem_a], tmem_c: [smem_a]})
    hit = [x for x in f if x.check == "task declaration" and "overlap" in x.message]
    assert hit and hit[0].task in ("load_a", "mma") and hit[0].expected.startswith("warp_idx >= 1")
    mma_task.warp_idx = 1
    accepted([load_task, mma_task], {smem_a: [gmem_a], tmem_c: [smem_a]})


# ------------------------------------------------------------------ manager behaviour
def test_validation_error_lists_all_findings_and_skip_validation_warns():
    gmem_a, smem_a, load_task = make_load()
    extra = Gmem(name="extra")
    load_task.src_resources.append(extra)
    tasks, graph = [load_task], {}
    f = rejected(tasks, graph)
    checks = {x.check for x in f}
    assert {"every resource in the graph", "schedule resource coverage"} <= checks
    assert len(f) >= 3
    with pytest.raises(warpsched.ValidationError) as info:
        manager(tasks, graph)
    text = str(info.value)
    for i in range(1, len(f) + 1):
        assert f"\n{i}. [" in text
    assert "test_checks_structure.py" in text and "fix:" in text and "expected:" in text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = manager(tasks, graph, skip_validation=True)
    assert not m.result.accepted
    got = [w for w in caught if issubclass(w.category, warpsched.ValidationWarning)]
    assert len(got) == len(f)
