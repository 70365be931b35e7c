"""The sync plan (protocol/plan.py): every protocol decision, made once. Unit tests of the plan's
answers, and cross-checks that the exhaustive checker executes exactly the plan's barriers and
counters (the lowering's side is pinned by the PTX counts of tests/test_lowering_*.py)."""
from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402

from test_checker_builders import Buf, Group, async_cfg, program, task, tma_cfg  # noqa: E402
import warpsched  # noqa: E402
from warpsched import (AsyncLoad, PipelineConfig, PipelineGroup, PipelineGroupMode, SignalingThreads,  # noqa: E402
                       domain_loop, schedule)
from warpsched.examples import interleaved, leader_routed, split_consumer, tma_copy  # noqa: E402
from warpsched.model.ir import StepKind as K  # noqa: E402
from warpsched.protocol.barriers import PROTOCOLS, protocol_of  # noqa: E402
from warpsched.protocol.plan import (EMPTY, FULL, Arming, LaneMode, SyncPlan, counter_plan,  # noqa: E402
                                     tx_per_arming_warp)
from warpsched.verify.checker.model import compile_program  # noqa: E402


def _quiet(build, **kw):
    kw.setdefault("verbose", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        return build(**kw)


def _task(tm, name):
    return next(t for t in tm.tasks if t.name == name)


def _res(tm, name):
    return next(r for r in tm.program.resources if getattr(r, "name", None) == name)


# ------------------------------------------------------------------ counters
def test_counter_plan_one_counter_per_side_unless_advance_on_split():
    cfg = async_cfg()
    assert counter_plan(cfg, [K.ProducerAcquire, K.ProducerCommit]) == {"p": (K.ProducerCommit,)}
    assert counter_plan(cfg, [K.ConsumerWait]) == {"c": (K.ConsumerWait,)}
    assert counter_plan(async_cfg(advance_on_wait=True), [K.ConsumerWait, K.ConsumerRelease]) == {
        "wait": (K.ConsumerWait,), "rel": (K.ConsumerRelease,)}


def test_dense_side_reads_one_counter_advanced_by_its_close():
    tm = _quiet(tma_copy.build)
    plan = SyncPlan(tm.program)
    smem = _res(tm, "Smem")
    sp = plan.side(_task(tm, "LoadTask"), smem, "producer")
    (c,) = sp.counters
    assert (c.name, c.advanced_by, c.stride, c.lane_mode) == ("p", K.ProducerCommit, 1, LaneMode.NONE)
    assert sp.counter_for(K.ProducerAcquire) is c and sp.counter_for(K.ProducerCommit) is c
    assert not sp.open_advances and sp.advances(K.ProducerAcquire) is None and sp.advances(K.ProducerCommit) is c
    assert plan.side(_task(tm, "LoadTask"), smem, "consumer") is None


def test_split_consumer_wait_only_task_advances_on_wait_and_the_release_task_on_release():
    tm = _quiet(split_consumer.build)
    plan = SyncPlan(tm.program)
    smem_a = _res(tm, "smem_a")
    waiter = plan.side(_task(tm, "SyncTask"), smem_a, "consumer")
    assert [(c.name, c.advanced_by) for c in waiter.counters] == [("c", K.ConsumerWait)]
    assert waiter.open_advances and waiter.bracket_opens and not waiter.bracket_closes
    releaser = plan.side(_task(tm, "MmaTask"), smem_a, "consumer")
    assert [(c.name, c.advanced_by) for c in releaser.counters] == [("c", K.ConsumerRelease)]
    assert not releaser.bracket_opens and releaser.bracket_closes


def test_per_role_strides_and_lanes():
    tm = _quiet(interleaved.build, variant="per_role")
    plan = SyncPlan(tm.program)
    tiles = _res(tm, "tiles")
    wait = plan.side(_task(tm, "WaitTask"), tiles, "consumer")
    (c,) = wait.counters  # wait-only: one counter, advanced by the wait, stride 4, warp i owns lane i
    assert (c.advanced_by, c.stride, c.lane_mode) == (K.ConsumerWait, 4, LaneMode.WARP)
    assert [c.first_stage(w) for w in range(4)] == [0, 1, 2, 3]
    assert plan.splits_by_warp(_task(tm, "WaitTask")) and not plan.splits_by_warp(_task(tm, "ReleaseTask"))
    rel = plan.side(_task(tm, "ReleaseTask"), tiles, "consumer")
    assert [(c.advanced_by, c.stride, c.lane_mode) for c in rel.counters] == [(K.ConsumerRelease, 1, LaneMode.NONE)]


def test_domain_lane_siblings_own_the_lane_of_their_domain_start():
    tm = _quiet(interleaved.build, variant="domain_lane")
    plan = SyncPlan(tm.program)
    lanes = {}
    for t in tm.tasks:
        for sp in plan.sides_of(t):
            for c in sp.counters:
                if c.lane_mode is LaneMode.DOMAIN:
                    lanes.setdefault(t.name, set()).add((c.stride, c.first_stage()))
    assert sorted(lanes.values(), key=sorted) == [{(2, 0)}, {(2, 1)}], lanes


# ------------------------------------------------------------------ arming and arrivals
def test_tma_arms_at_acquire_and_splits_the_bytes_over_the_arming_warps():
    cfg = tma_cfg(nbytes=4096)
    assert tx_per_arming_warp(cfg, 4) == 1024  # All: every warp arms its share
    leader = tma_cfg(nbytes=4096, producer_signaling_threads=SignalingThreads.TaskWarpLeader)
    assert tx_per_arming_warp(leader, 4) == 4096  # the leader arms the whole stage
    warp_lane = tma_cfg(stages=4, nbytes=4096, interleave_stride=4)
    assert tx_per_arming_warp(warp_lane, 4) == 4096  # each warp arms its own lane's stage whole

    tm = _quiet(leader_routed.build)
    plan = SyncPlan(tm.program)
    res = next(r for r in tm.program.pipelined_resources)
    pp = plan.pipeline(res)
    assert pp.arming is Arming.AT_ACQUIRE and pp.full.tx_bytes == pp.config.num_bytes
    prod = plan.side(_task(tm, "LoadTask"), res, "producer")
    assert prod.arms_at is K.ProducerAcquire and prod.arm_tx_bytes == pp.config.num_bytes and prod.leader_only
    assert prod.arrivals() == 1  # TaskWarpLeader: one elected thread of one warp
    assert [prod.arrivals(w) for w in range(4)] == [1, 0, 0, 0]  # a per-warp operation: only warp 0 signals


def test_async_producer_arrives_at_commit_with_thread_counts():
    a = Buf(name="a", pipeline_config=async_cfg(prod=64, cons=32))

    @schedule
    def fill(a):
        with domain_loop(0, 4, 1):
            a.acquire()
            a.fill()
            a.commit()

    t = task("P", fill(a), dst=[a], warps=2)
    plan = SyncPlan(program([t]))
    pp = plan.pipeline(a)
    assert pp.arming is Arming.AT_COMMIT and (pp.full.init, pp.empty.init) == (64, 32)
    sp = plan.side(t, a, "producer")
    assert sp.arms_at is K.ProducerCommit and sp.arm_tx_bytes == 0 and sp.arrivals() == 64


# ------------------------------------------------------------------ groups
def _group(mode, cfg):
    a = Buf(name="a", pipeline_config=cfg())
    b = Buf(name="b", pipeline_config=cfg())
    return a, b, PipelineGroup(name="ab", members=[a, b], mode=mode)


@pytest.mark.parametrize("mode,positions,inits,txs", [
    (PipelineGroupMode.Merge, [("a", FULL, 0), ("b", FULL, 1), ("ab", EMPTY, 2)], [1, 1, 1], [1024, 1024, 0]),
    (PipelineGroupMode.Fork, [("ab", FULL, 0), ("a", EMPTY, 1), ("b", EMPTY, 2)], [1, 1, 1], [1024, 0, 0]),
    (PipelineGroupMode.FusedMerge, [("ab", FULL, 0), ("ab", EMPTY, 1)], [2, 1], [2048, 0]),
])
def test_group_layouts(mode, positions, inits, txs):
    a, b, grp = _group(mode, tma_cfg)

    @schedule
    def touch(g):
        g.a.acquire()

    plan = SyncPlan(program([task("T", touch(grp), dst=[a, b])]))
    gp = plan.group(grp)
    assert [(x.owner.name, x.kind, x.position) for x in gp.arrays] == positions
    assert [x.init for x in gp.arrays] == inits and [x.tx_bytes for x in gp.arrays] == txs
    assert sum(x.num_stages for x in gp.arrays) == grp.num_barriers  # the storage the allocators reserve
    shared = [x for x in gp.arrays if x.owner is grp]
    for m in (a, b):
        mine = {plan.pipeline(m).full.kind: plan.pipeline(m).full, EMPTY: plan.pipeline(m).empty}
        assert all(mine[x.kind] is x for x in shared)  # members use the group's shared array
    fork = mode is PipelineGroupMode.Fork
    assert gp.fork_arms_once is fork and gp.fork_tx_bytes == (1024 if fork else 0)  # once, not summed
    assert plan.pipeline(a).arming is (Arming.BY_GROUP_COMMIT if fork else Arming.AT_ACQUIRE)


def test_async_load_members_arrive_as_cp_async_in_groups_too():
    """The protocol entry decides the op: an AsyncLoad member's full barrier is a cp.async one
    (the group lowering used to take the op from its own table, where AsyncAsync was AsyncThread)."""
    def cfg():
        return PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=Group(32),
                                                              consumer_group=Group(32), async_producer_op=AsyncLoad)
    a, b, grp = _group(PipelineGroupMode.Merge, cfg)

    @schedule
    def touch(g):
        g.a.acquire()

    plan = SyncPlan(program([task("T", touch(grp), dst=[a, b])]))
    assert [x.op for x in plan.group(grp).arrays] == ["AsyncLoad", "AsyncLoad", "AsyncThread"]
    assert protocol_of(a.pipeline_config).cutlass_class == "PipelineCpAsync"


def test_every_type_carries_its_facts_on_the_protocol_entry():
    for t, p in PROTOCOLS.items():
        assert p.ptype is t and t.value.startswith(p.producer_engine.capitalize()[:3])
        assert p.producer_op in ("AsyncThread", "TmaLoad", "TCGen05Mma", "ClcLoad")
        assert p.consumer_op in ("AsyncThread", "TCGen05Mma")
        assert p.consumer_async_release == (p.consumer_engine == "umma")


# ------------------------------------------------------------------ the checker executes the plan
@pytest.mark.parametrize("build,kw", [(tma_copy.build, {}), (split_consumer.build, {}),
                                      (interleaved.build, {"variant": "per_role"}),
                                      (interleaved.build, {"variant": "domain_lane"}),
                                      (leader_routed.build, {})])
def test_checker_barriers_and_cursors_are_the_plans(build, kw):
    tm = _quiet(build, **kw)
    plan = SyncPlan(tm.program)
    comp = compile_program(tm.program)
    arrays = {}
    for r in tm.program.pipelined_resources:
        for x in (plan.pipeline(r).full, plan.pipeline(r).empty):
            arrays[(id(x.owner), x.kind)] = x
    assert comp.barriers
    for b in comp.barriers:
        x = arrays[(id(b.owner), b.kind)]
        assert (b.init, b.tx) == (x.init, x.tx_bytes), b.label
    for ex in comp.executors:
        want = [(id(sp.target), sp.side, c.name, c.stride, c.first_stage(ex.lane_warp) % c.num_stages)
                for sp in plan.sides_of(ex.task) for c in sp.counters]
        got = [(id(c.owner), c.side, c.which, c.stride, c.lane) for c in ex.cursors]
        assert got == want, ex.name


# ------------------------------------------------------------------ derived cooperative groups
def test_public_group_helpers():
    from warpsched import threads, warps

    assert threads(96).size == 96 and warps(3).size == 96 and threads().size == 1
    pipeline = pytest.importorskip("cutlass.pipeline")
    g = threads(128)  # with CuTe DSL: the cutlass group itself, usable with cutlass APIs
    assert isinstance(g, pipeline.CooperativeGroup) and g.agent is pipeline.Agent.Thread


@pytest.mark.parametrize("cluster,partners", [((1, 1, 1, 1), 1), ((1, 2, 1, 1), 2), ((1, 2, 2, 1), 3), ((1, 4, 1, 1), 4),
                                              ((1, 1, 4, 1), 4)])
def test_left_out_groups_are_derived_with_the_multicast_partners(cluster, partners):
    """A TMA producer's arming warp and every consumer warp of every CTA that multicasts into this
    one: what wgmma_gemm used to compute as consumer_group(warps x (cm + cn - 1))."""
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=4, num_bytes=4096, advance_on_wait=True,
                                                       cta_layout_vmnk=cluster, mcast_mode_mn=(1, 1))
    smem = Buf(name="smem", pipeline_config=cfg)

    @schedule
    def load(smem):
        with domain_loop(0, 8, 1):
            smem.acquire()
            smem.fill()
            smem.commit()

    @schedule
    def mma(smem):
        with domain_loop(0, 8, 1):
            smem.wait()
            smem.read()
            smem.release()

    prog = program([task("Load", load(smem), dst=[smem], warps=1), task("Mma", mma(smem), src=[smem], warp=4,
                                                                       warps=8)])
    pp = SyncPlan(prog).pipeline(smem)
    assert (pp.full.init, pp.empty.init) == (1, 8 * partners)
    comp = compile_program(prog)
    assert sorted({(b.kind, b.init) for b in comp.barriers}) == [("empty", 8 * partners), ("full", 1)]
