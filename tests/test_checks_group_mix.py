"""A Merge group that mixes a TMA-fed member with a thread-fed one (CUTLASS's 07_01 merge copy).

One consumer task releases both members through ``group.release()``. The AsyncAsync member's
consumer_group counts threads (128 for 4 warps), the TmaAsync member's counts warps (4); the
collapsed empty barrier takes the non-TMA member's group and the release arrives with every
thread (protocol.barriers.collapsed_lead_index), whatever the members' order.
"""
from __future__ import annotations

import pytest

from warpsched import PipelineConfig, PipelineGroup, PipelineGroupMode, Task, domain_loop, schedule
from warpsched.model.ir import StepKind
from warpsched.model.program import Program
from warpsched.protocol.plan import CONSUMER, SyncPlan
from warpsched.verify.checker import run_checker

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

K = 4


def mix_program(order="ab", a_consumers=128, b_consumers=4, c_consumers=None):
    """LoadA (1 warp, thread stores) and LoadB (1 warp, TMA) fill their members; Store (4 warps)
    waits on both and releases the group once. ``c_consumers``: add a second AsyncAsync member."""
    gmem, out = Gmem(name="gmem"), Gmem(name="out")
    a_cfg = PipelineConfig.create_async_async_pipeline_cfg(  # @a_cfg
        num_stages=4, producer_group=cg(32), consumer_group=cg(a_consumers), cta_layout_vmnk=(1, 1, 1, 1))
    b_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=4, num_bytes=256, producer_group=cg(1),
                                                         consumer_group=cg(b_consumers), cta_layout_vmnk=(1, 1, 1, 1))
    smem_a = Buf(name="smem_a", pipeline_config=a_cfg)
    smem_b = Buf(name="smem_b", pipeline_config=b_cfg)
    members = [smem_a, smem_b] if order == "ab" else [smem_b, smem_a]
    smem_c = None
    if c_consumers is not None:
        smem_c = Buf(name="smem_c", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
            num_stages=4, producer_group=cg(32), consumer_group=cg(c_consumers), cta_layout_vmnk=(1, 1, 1, 1)))
        members.append(smem_c)
    ab = PipelineGroup(name="ab_sync", members=members, mode=PipelineGroupMode.Merge)  # @mix_group

    @schedule
    def load(g, smem):
        with domain_loop(0, K, 1):
            c = g.compute_coords()
            smem.try_acquire()
            smem.acquire()
            smem.tma_load_a(coord_k=c)
            smem.commit()

    @schedule
    def store(a, b, o, group):
        with domain_loop(0, K, 1):
            a.try_wait()
            a.wait()
            b.try_wait()
            b.wait()
            a.consume_tile()
            b.consume_tile()
            o.store()
            group.release()

    @schedule
    def store3(a, b, c, o, group):
        with domain_loop(0, K, 1):
            a.wait()
            b.wait()
            c.wait()
            a.consume_tile()
            b.consume_tile()
            c.consume_tile()
            o.store()
            group.release()

    tasks = [Task(name="LoadA", src_resources=[gmem], dst_resources=[smem_a], warp_idx=4, num_warps=1,
                  schedule=load(gmem, ab.smem_a)),
             Task(name="LoadB", src_resources=[gmem], dst_resources=[smem_b], warp_idx=5, num_warps=1,
                  schedule=load(gmem, ab.smem_b))]
    graph = {smem_a: [gmem], smem_b: [gmem]}
    if smem_c is None:
        tasks.append(Task(name="Store", src_resources=[smem_a, smem_b], dst_resources=[out], warp_idx=0, num_warps=4,
                          schedule=store(ab.smem_a, ab.smem_b, out, ab)))
        graph[out] = [smem_a, smem_b]
    else:
        tasks.append(Task(name="LoadC", src_resources=[gmem], dst_resources=[smem_c], warp_idx=6, num_warps=1,
                          schedule=load(gmem, ab.smem_c)))
        tasks.append(Task(name="Store", src_resources=[smem_a, smem_b, smem_c], dst_resources=[out], warp_idx=0,
                          num_warps=4, schedule=store3(ab.smem_a, ab.smem_b, ab.smem_c, out, ab)))
        graph[smem_c] = [gmem]
        graph[out] = [smem_a, smem_b, smem_c]
    return tasks, graph, ab


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_merge_of_async_and_tma_members_is_safe_in_either_order(order):
    tasks, graph, group = mix_program(order)
    m = accepted(tasks, graph, exhaustive_deadlock_race_check=True)
    assert m.result.checker.verdict == "SAFE"
    # the plan the checker executes and the lowering emits: the AsyncAsync member leads
    plan = SyncPlan(m.program)
    gp = plan.group(group)
    assert gp.lead_plan.resource.name == "smem_a"
    assert gp.empty.init == 128 and gp.empty.op == "AsyncThread"
    store = next(t for t in tasks if t.name == "Store")
    sp = plan.side(store, group, CONSUMER)
    assert sp.arrivals() == 128 and StepKind.ConsumerRelease in sp.verbs
    # the TMA member still waits on its own full barrier (armed with its bytes) and shares the empty one
    b_plan = plan.pipeline(group.smem_b)
    assert b_plan.full.tx_bytes == 256 and b_plan.empty is gp.empty


def _program(tasks, graph):
    return Program(tasks=list(tasks), graph=dict(graph))


def test_merge_mix_lead_sized_for_the_tma_warps_is_rejected():
    """Rejected twin: the AsyncAsync member declares the TMA member's warp count (4) for its
    consumer_group; the collapsed release makes 128 thread arrivals on a barrier of 4."""
    tasks, graph, _ = mix_program(a_consumers=4)
    f = rejected(tasks, graph)
    hit = expect(f, "pipeline thread counts and bytes", "Store", "smem_a", line("a_cfg"))
    assert "128" in hit.expected and "threads(128)" in hit.fix
    # and the exhaustive checker, run on its own, executes the over-arrival the lowering would emit
    tasks, graph, _ = mix_program(a_consumers=4)
    res = run_checker(_program(tasks, graph))
    assert res.verdict == "UNSAFE" and any("over-arrival" in x.message or "arriv" in x.message
                                           for x in res.findings), res.report()


def test_merge_mix_non_tma_members_must_agree():
    """Two non-TMA members size the shared empty barrier: they must agree; the TMA member's
    per-warp group is not compared."""
    tasks, graph, _ = mix_program(c_consumers=128)
    accepted(tasks, graph, exhaustive_deadlock_race_check=True)
    tasks, graph, _ = mix_program(c_consumers=64)
    f = rejected(tasks, graph)
    hit = expect(f, "pipeline group consistency", None, "ab_sync", line("mix_group"))
    assert "smem_c.consumer_group size 64 differs from smem_a's 128" in hit.message
    assert "non-TMA" in hit.expected


def views_program(release_members: bool):
    """07_01's consumer with the member views passed as schedule arguments (``ab_sync.smem_a``),
    the group neither passed to the consumer nor registered with an allocator."""
    gmem, out = Gmem(name="gmem"), Gmem(name="out")
    cfg = lambda: PipelineConfig.create_async_async_pipeline_cfg(  # noqa: E731
        num_stages=2, producer_group=cg(32), consumer_group=cg(128), cta_layout_vmnk=(1, 1, 1, 1))
    smem_a, smem_b = Buf(name="smem_a", pipeline_config=cfg()), Buf(name="smem_b", pipeline_config=cfg())
    ab = PipelineGroup(name="ab_sync", members=[smem_a, smem_b], mode=PipelineGroupMode.Merge)

    @schedule
    def load(g, smem):
        with domain_loop(0, K, 1):
            v = g.load()
            smem.acquire()
            smem.produce_tile(value=v)
            smem.commit()

    @schedule
    def store_members(a, b, o):
        with domain_loop(0, K, 1):
            a.wait()
            b.wait()
            o.store()
            a.release()  # @view_release
            b.release()

    @schedule
    def store_group(a, b, o, group):
        with domain_loop(0, K, 1):
            a.wait()
            b.wait()
            o.store()
            group.release()

    store = (store_members(ab.smem_a, ab.smem_b, out) if release_members
             else store_group(ab.smem_a, ab.smem_b, out, ab))
    tasks = [Task(name="LoadA", src_resources=[gmem], dst_resources=[smem_a], warp_idx=4, schedule=load(gmem, ab.smem_a)),
             Task(name="LoadB", src_resources=[gmem], dst_resources=[smem_b], warp_idx=5, schedule=load(gmem, ab.smem_b)),
             Task(name="Store", src_resources=[smem_a, smem_b], dst_resources=[out], warp_idx=0, num_warps=4,
                  schedule=store)]
    return tasks, {smem_a: [gmem], smem_b: [gmem], out: [smem_a, smem_b]}, ab


def test_member_views_passed_as_arguments_cannot_be_released_one_by_one():
    """The Merge hard rule holds when the views reach the schedule as arguments: rejected at the
    first member release; the group-release twin is accepted (SAFE). The group is alive when the
    TaskManager is built (a kernel's local variable), as in CUTLASS's 07_01."""
    tasks, graph, group = views_program(release_members=True)
    f = rejected(tasks, graph)
    hit = expect(f, "pipeline group consistency", "Store", "smem_a", line("view_release"))
    assert "ab_sync.release()" in hit.expected and "Merge group 'ab_sync'" in hit.message
    assert group.name == "ab_sync"
    tasks, graph, group = views_program(release_members=False)
    m = accepted(tasks, graph, exhaustive_deadlock_race_check=True)
    assert m.result.checker.verdict == "SAFE" and m.program.pipeline_groups == [group]
