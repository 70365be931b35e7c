"""Schedule snippets of the ts_patterns (the seed), ts_pipeline_groups and ts_pdl pages, captured, IR shape asserted.

Each snippet is written as the page writes it; resource classes (here and in ``_capture_docs_support``)
supply the work methods the snippet calls. Values the pages leave to the kernel (``num_k_tiles`` ...) are the
support module's constants. Line expectations look up this file, where the schedules live.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, PipelineGroup,
                       PipelineGroupMode, Task, TaskLocalVariable, WorkQueue, consumer_work, domain_loop, producer_work,
                       schedule, work_tile_loop)
from warpsched.model.ir import StepKind as K

from _capture_docs_support import (E, L, P, T, GmemAbResource, SmemAResource, TmemCResource, assert_sources, cfg,
                                   num_iters, num_k_tiles, shape)


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
    assert_sources(p, __file__)
    assert_sources(c, __file__)


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
    assert_sources(s, __file__)
    assert_sources(m, __file__)


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
        assert_sources(task.schedule, __file__)
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
    assert_sources(r, __file__)


def test_pipeline_groups_fork():
    g_res, act = ReadSmem(name="smem_gemm", pipeline_config=cfg()), ReadSmem(name="smem_act", pipeline_config=cfg())
    group = PipelineGroup(name="fork", members=[g_res, act], mode=PipelineGroupMode.Fork)
    r = fork_load_schedule(group)
    assert [(s.resource_name, s.kind) for s in r.steps] == [
        ("smem_gemm", K.ProducerTryAcquire), ("smem_gemm", K.ProducerAcquire), ("smem_act", K.ProducerTryAcquire),
        ("smem_act", K.ProducerAcquire), ("smem_gemm", K.ProducerWork), ("fork", K.ProducerCommit)]
    assert r.steps[-1].is_group_op and all(s.via_group is group for s in r.steps[:5])
    assert_sources(r, __file__)


def test_pipeline_groups_fused_merge():
    a, b = ReadSmem(name="smem_a", pipeline_config=cfg()), ReadSmem(name="smem_b", pipeline_config=cfg())
    group = PipelineGroup(name="ab_group", members=[a, b], mode=PipelineGroupMode.FusedMerge)
    r = fused_mma_schedule(a, b, TmemCResource(name="tmem"), group)
    assert [(s.resource_name, s.kind, s.is_group_op) for s in r.steps] == [
        ("ab_group", K.ConsumerTryWait, True), ("ab_group", K.ConsumerWait, True), ("tmem", K.ProducerWork, False),
        ("ab_group", K.ConsumerRelease, True)]
    assert group.num_barriers == 2 * 4
    assert_sources(r, __file__)


# ================================================================== ts_pdl
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
    assert_sources(r, __file__)
