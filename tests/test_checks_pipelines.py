"""Pipeline configuration checks: thread counts and bytes (exact expected values),
leader-routed completions, CTA layout consistency, malformed fields."""
from __future__ import annotations

import pytest

from warpsched import PipelineConfig, SignalingThreads, Task, ValidationError, domain_loop, schedule
from warpsched.protocol.barriers import expected_group_size, expected_num_bytes

from test_checks_support import Buf, Gmem, accepted, cg, expect, find, line, rejected

K = 4
NUM_EPILOGUE_WARPS = 4


# ------------------------------------------------------------------ the doc's TmemC example
def tmem_program(cfg, store_warps=NUM_EPILOGUE_WARPS):
    smem = Buf(name="smem_a", pipeline_config=PipelineConfig.create_tma_umma_pipeline_cfg(
        num_stages=2, num_bytes=4096, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1)))
    gmem, tmem_c, gmem_d = Gmem(name="gmem_ab"), Buf(name="TmemC", pipeline_config=cfg), Gmem(name="gmem_d")

    @schedule
    def load(gmem, smem):
        with domain_loop(0, K, 1):
            c = gmem.compute_coords()
            smem.acquire()
            smem.tma_load_a(coord_k=c)
            smem.commit()

    @schedule
    def mma(smem, tmem_c):
        tmem_c.acquire()
        with domain_loop(0, K, 1):
            smem.wait()
            d = smem.aux_desc()
            tmem_c.mma(desc_a=d)
            smem.release()
        tmem_c.commit()

    @schedule
    def store(tmem_c, gmem_d):
        tmem_c.wait()
        v = tmem_c.read()
        gmem_d.store(value=v)
        tmem_c.release()

    tasks = [Task(name="StoreTask", warp_idx=0, num_warps=store_warps, src_resources=[tmem_c],
                  dst_resources=[gmem_d], schedule=store(tmem_c, gmem_d)),
             Task(name="LoadTask", warp_idx=4, num_warps=1, src_resources=[gmem], dst_resources=[smem],
                  schedule=load(gmem, smem)),
             Task(name="MmaTask", warp_idx=5, num_warps=1, src_resources=[smem], dst_resources=[tmem_c],
                  schedule=mma(smem, tmem_c))]
    return tasks, {smem: [gmem], tmem_c: [smem], gmem_d: [tmem_c]}


def test_consumer_group_sized_for_the_store_task_doc_pair():
    wrong = PipelineConfig.create_umma_async_pipeline_cfg(  # @tmem_wrong
        num_stages=2, producer_group=cg(1), consumer_group=cg(2 * 32), cta_layout_vmnk=(1, 1, 1, 1))
    f = rejected(*tmem_program(wrong))
    hit = expect(f, "pipeline thread counts and bytes", "StoreTask", "TmemC", line("tmem_wrong"))
    want = expected_group_size(wrong, "consumer", NUM_EPILOGUE_WARPS)
    assert want.arrivals == NUM_EPILOGUE_WARPS * 32
    assert hit.expected == f"consumer_group size 128 = {want.derivation}"
    assert "4 signaling warp(s) x 32 threads" in hit.expected
    right = PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=2, producer_group=cg(1), consumer_group=cg(NUM_EPILOGUE_WARPS * 32),
        cta_layout_vmnk=(1, 1, 1, 1))
    accepted(*tmem_program(right))


def test_wrong_pipeline_type_for_tmem_is_rejected_doc():
    """create_tma_umma_pipeline_cfg for TmemC declares tcgen05 commits as the consumer: one per signaling
    warp (cutlass elects one thread per warp; the docs' single-warp MMA task makes that one commit)."""
    wrong = PipelineConfig.create_tma_umma_pipeline_cfg(  # @tmem_tma
        num_stages=2, num_bytes=0, producer_group=cg(1), consumer_group=cg(NUM_EPILOGUE_WARPS * 32),
        cta_layout_vmnk=(1, 1, 1, 1))
    f = rejected(*tmem_program(wrong))
    hit = expect(f, "pipeline thread counts and bytes", "StoreTask", "TmemC", line("tmem_tma"))
    assert hit.expected.startswith(f"consumer_group size {NUM_EPILOGUE_WARPS} = {NUM_EPILOGUE_WARPS} signaling warp(s) "
                                   "x 1 tcgen05.commit")


def test_a_left_out_group_is_derived_from_the_tasks_that_signal():
    """consumer_group / producer_group may be left out: the sync plan derives the size from the
    tasks whose operations arrive (here the 4-warp store task: 128 thread arrivals), and the
    checker runs on it (a declared group is still checked, above)."""
    from warpsched.protocol.plan import SyncPlan

    cfg = PipelineConfig.create_umma_async_pipeline_cfg(  # @no_group
        num_stages=2, producer_group=None, consumer_group=None, cta_layout_vmnk=(1, 1, 1, 1))
    tasks, graph = tmem_program(cfg)
    m = accepted(tasks, graph, exhaustive_deadlock_race_check=True)
    assert m.result.checker.verdict == "SAFE"
    tmem_c = next(r for r in graph if r.name == "TmemC")
    pp = SyncPlan(m.program).pipeline(tmem_c)
    assert (pp.full.init, pp.empty.init) == (1, NUM_EPILOGUE_WARPS * 32)


def test_a_left_out_group_over_disagreeing_lanes_is_a_finding():
    """Interleaved lanes signal their own stages: a derived size needs one count on every lane."""
    cfg = PipelineConfig.create_async_async_pipeline_cfg(  # @lanes_group
        num_stages=2, producer_group=cg(32), consumer_group=None, interleave_stride=(1, 1, 2, 2))
    smem, gmem = Buf(name="smem", pipeline_config=cfg), Gmem(name="gmem")

    @schedule
    def fill(smem):
        with domain_loop(0, K, 1):
            smem.acquire()
            smem.produce_tile()
            smem.commit()

    def drain(lane):
        @schedule
        def lane_sched(smem, gmem):
            with domain_loop(lane, K, 2):
                smem.wait()
                v = smem.read()
                smem.release()
                gmem.store(value=v)
        return lane_sched(smem, gmem)

    tasks = [Task(name="Fill", warp_idx=0, num_warps=1, dst_resources=[smem], schedule=fill(smem)),
             Task(name="Lane0", warp_idx=1, num_warps=1, src_resources=[smem], dst_resources=[gmem],
                  schedule=drain(0)),
             Task(name="Lane1", warp_idx=2, num_warps=3, src_resources=[smem], dst_resources=[gmem],
                  schedule=drain(1))]
    hit = expect(rejected(tasks, {gmem: [smem]}), "pipeline thread counts and bytes", "Lane0", "smem",
                 line("lanes_group"))
    assert "left out" in hit.message and "32, 96" in hit.message


# ------------------------------------------------------------------ bytes
def tma_async_program(cfg, producer_warps=1, consumer_warps=1):
    gmem, smem, out = Gmem(name="gmem"), Buf(name="smem", pipeline_config=cfg), Gmem(name="out")

    @schedule
    def load(gmem, smem):
        with domain_loop(0, K, 1):
            c = gmem.compute_coords()
            smem.acquire()
            smem.tma_load_a(coord_k=c)
            smem.commit()

    @schedule
    def drain(smem, out):
        with domain_loop(0, K, 1):
            smem.wait()
            v = smem.read()
            out.store(value=v)
            smem.release()

    tasks = [Task(name="load", src_resources=[gmem], dst_resources=[smem], warp_idx=0, num_warps=producer_warps,
                  schedule=load(gmem, smem)),
             Task(name="drain", src_resources=[smem], dst_resources=[out], warp_idx=producer_warps,
                  num_warps=consumer_warps, schedule=drain(smem, out))]
    return tasks, {smem: [gmem], out: [smem]}


def test_tma_pipeline_needs_transaction_bytes():
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @zero_bytes
        num_stages=2, num_bytes=0, producer_group=cg(1), consumer_group=cg(1))
    expect(rejected(*tma_async_program(cfg)), "pipeline thread counts and bytes", None, "smem", line("zero_bytes"))
    good = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=8192, producer_group=cg(1),
                                                       consumer_group=cg(1))
    accepted(*tma_async_program(good))


def test_tma_async_consumer_arrives_once_per_warp():
    # TS and CUTLASS accept the per-warp count (4) or the same warps in threads (128).
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @per_warp
        num_stages=2, num_bytes=8192, producer_group=cg(1), consumer_group=cg(32))
    hit = expect(rejected(*tma_async_program(cfg, consumer_warps=4)), "pipeline thread counts and bytes", "drain",
                 "smem", line("per_warp"))
    assert hit.expected.startswith("consumer_group size 4 = 4 signaling warp(s) x 1 elected thread")
    assert "(or 128, the same warps counted in threads)" in hit.expected
    for size in (4, 4 * 32):
        good = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=8192, producer_group=cg(1),
                                                           consumer_group=cg(size))
        accepted(*tma_async_program(good, consumer_warps=4))


def test_two_consumer_tasks_are_named_together_with_their_summed_count():
    # The summed count used to be attributed to the first task alone ("task 'drain' (2 warp(s))
    # makes 6 ...", found by tools/diff_fuzz.py): the message names both tasks now.
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @broadcast_group
        num_stages=2, num_bytes=8192, producer_group=cg(1), consumer_group=cg(2))
    tasks, graph = tma_async_program(cfg, consumer_warps=2)
    out2 = Gmem(name="out2")
    smem = tasks[0].dst_resources[0]

    @schedule
    def drain2(smem, out2):
        with domain_loop(0, K, 1):
            smem.wait()
            v = smem.read()
            out2.store(value=v)
            smem.release()

    tasks.append(Task(name="drain2", src_resources=[smem], dst_resources=[out2], warp_idx=3, num_warps=4,
                      schedule=drain2(smem, out2)))
    graph[out2] = [smem]
    hit = expect(rejected(tasks, graph), "pipeline thread counts and bytes", "drain", "smem", line("broadcast_group"))
    assert "tasks 'drain' (2 warp(s)) and 'drain2' (4 warp(s)) together make 6 consumer arrival(s)" in hit.message
    assert hit.expected.startswith("consumer_group size 6 = drain: ")
    good = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=8192, producer_group=cg(1),
                                                       consumer_group=cg(6))
    tasks, graph = tma_async_program(good, consumer_warps=2)
    smem = tasks[0].dst_resources[0]
    tasks.append(Task(name="drain2", src_resources=[smem], dst_resources=[out2], warp_idx=3, num_warps=4,
                      schedule=drain2(smem, out2)))
    graph[out2] = [smem]
    accepted(tasks, graph)


def test_thread_count_declaration_arms_one_arrival_per_warp():
    from warpsched.protocol.barriers import barrier_init

    for size in (4, 128):
        cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=8192, producer_group=cg(1),
                                                          consumer_group=cg(size))
        assert barrier_init(cfg).empty_arrivals == 4


# ------------------------------------------------------------------ leader-routed completions (seed)
def test_leader_routed_bytes_aggregate_exact_value_in_the_error():
    per = 2048
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @leader_wrong
        num_stages=2, num_bytes=per, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1),
        producer_signaling_threads=SignalingThreads.TaskWarpLeader, num_bytes_per_warp_per_cta=per)
    f = rejected(*tma_async_program(cfg, producer_warps=4))
    hit = expect(f, "leader-routed producer completions", "load", "smem", line("leader_wrong"))
    total, how = expected_num_bytes(cfg, 4)
    assert total == 8192
    assert hit.expected == f"num_bytes=8192: {how}"
    assert "2048 x 4 producing warp(s) x 1 producing CTA(s) = 8192" in hit.expected
    good = PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=2, num_bytes=4 * per, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1),
        producer_signaling_threads=SignalingThreads.TaskWarpLeader, num_bytes_per_warp_per_cta=per)
    accepted(*tma_async_program(good, producer_warps=4))


def test_cta_leader_counts_the_cluster():
    per = 1024
    cfg = PipelineConfig.create_tma_umma_pipeline_cfg(  # @cta_leader
        num_stages=2, num_bytes=per, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 2, 1, 1),
        producer_signaling_threads=SignalingThreads.CtaLeader | SignalingThreads.TaskWarpLeader,
        num_bytes_per_warp_per_cta=per)
    tasks, graph = tma_async_program(cfg, producer_warps=2)
    f = rejected(tasks, graph)
    hit = expect(f, "leader-routed producer completions", "load", "smem", line("cta_leader"))
    assert "= 4096" in hit.expected and "2 producing CTA(s)" in hit.expected


def test_leader_without_per_warp_bytes_and_opaque_layout():
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @no_per
        num_stages=2, num_bytes=8192, producer_group=cg(1), consumer_group=cg(1),
        producer_signaling_threads=SignalingThreads.TaskWarpLeader)
    expect(rejected(*tma_async_program(cfg, producer_warps=4)), "leader-routed producer completions", "load", "smem",
           line("no_per"))

    class Opaque:
        shape = None

    with pytest.raises(ValidationError) as e:  # the factory refuses it: no resource exists yet
        PipelineConfig.create_tma_async_pipeline_cfg(  # @opaque
            num_stages=2, num_bytes=8192, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=Opaque(),
            producer_signaling_threads=SignalingThreads.TaskWarpLeader, num_bytes_per_warp_per_cta=2048)
    hit = expect(e.value.findings, "leader-routed producer completions", None, None, line("opaque"))
    assert "inspect" in hit.message


# ------------------------------------------------------------------ CTA layout consistency
def test_pipelines_disagreeing_on_the_cluster_shape():
    def program(shape):
        cfgs = [PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=cg(32),
                                                               consumer_group=cg(32), cta_layout_vmnk=(1, 1, 1, 1))
                for _ in range(2)]
        odd = PipelineConfig.create_async_async_pipeline_cfg(  # @odd_layout
            num_stages=2, producer_group=cg(32), consumer_group=cg(32), cta_layout_vmnk=shape)
        src = Gmem(name="src")
        bufs = [Buf(name=f"b{i}", pipeline_config=c) for i, c in enumerate(cfgs + [odd])]
        out = Gmem(name="out")

        @schedule
        def chain(src, b0, b1, b2, out):
            with domain_loop(0, K, 1):
                v = src.load()
                for b in (b0, b1, b2):
                    b.acquire()
                    b.produce_tile(value=v)
                    b.commit()
                for b in (b0, b1, b2):
                    b.wait()
                    v = b.read()
                    b.release()
                out.store(value=v)

        t = Task(name="chain", src_resources=[src] + bufs, dst_resources=bufs + [out],
                 schedule=chain(src, *bufs, out))
        return [t], {bufs[0]: [src], bufs[1]: [src], bufs[2]: [src], out: bufs}

    f = rejected(*program((2, 1, 1, 1)))
    hit = expect(f, "cta layout consistency", None, "b2", line("odd_layout"))
    assert "(1, 1, 1, 1)" in hit.expected
    accepted(*program((1, 1, 1, 1)))
    accepted(*program(None))  # unset means a single CTA


def test_umma_pipeline_requires_a_layout():
    cfg = PipelineConfig.create_umma_async_pipeline_cfg(  # @no_layout
        num_stages=2, producer_group=cg(1), consumer_group=cg(128))
    expect(rejected(*tmem_program(cfg)), "cta layout consistency", None, "TmemC", line("no_layout"))


# ------------------------------------------------------------------ malformed fields
def test_malformed_fields_are_refused_by_the_factory_with_every_finding():
    """Validated once, when built: every malformed field is a finding at the factory call's line (no
    crash, nothing deferred), and no PipelineConfig with such fields ever reaches a program."""
    with pytest.raises(ValidationError) as e:
        PipelineConfig.create_tma_async_pipeline_cfg(  # @garbage
            num_stages=-2, num_bytes="lots", producer_group=None, consumer_group=cg(1), interleave_stride=(1, 2),
            producer_signaling_threads=SignalingThreads.All | SignalingThreads.CtaLeader, cta_layout_vmnk=(1, 0),
            consumer_wait_signaling_threads="both")
    f = e.value.findings
    for check in ("pipeline configuration", "pipeline thread counts and bytes", "interleaved pipelines",
                  "cta layout consistency", "split-consumer signaling"):
        find(f, check, resource=None, line_no=line("garbage"))
    assert all(x.fix and x.expected and "is invalid" in x.message for x in f)
    assert "TmaAsync pipeline: num_stages=-2 is invalid" in e.value.findings[0].message
    assert str(e.value).startswith("warpsched rejected a pipeline configuration: 6 findings")


@pytest.mark.parametrize("stride,stages,ok", [(2, 4, True), ((2, 2, 1, 1), 2, True), (4, 6, False), (0, 2, False),
                                              ((1, 2), 2, False), ("2", 2, False), (True, 2, False)])
def test_interleave_stride_is_parsed_once_when_built(stride, stages, ok):
    kw = dict(num_stages=stages, producer_group=cg(32), consumer_group=cg(32), interleave_stride=stride)
    if ok:
        cfg = PipelineConfig.create_async_async_pipeline_cfg(**kw)
        assert cfg.strides == (stride,) * 4 if isinstance(stride, int) else stride
        with pytest.raises(AttributeError):  # frozen: what was validated is what every layer reads
            cfg.interleave_stride = 3
    else:
        with pytest.raises(ValidationError, match="interleave"):
            PipelineConfig.create_async_async_pipeline_cfg(**kw)


@pytest.mark.parametrize("layout,partners,wrong", [
    ((1, 2, 1, 1), 2, 2),  # the count of one CTA
    ((1, 4, 1, 1), 4, 4),  # a 4-CTA cluster declared with a pair's count
    ((1, 2, 2, 1), 3, 4),  # 2x2: a pair's count again (3 CTAs multicast into each barrier)
])
def test_multicast_consumer_count_comes_from_the_protocol(layout, partners, wrong):
    """TMA multicast: the consumers of every CTA that multicasts into a barrier release into it (cm + cn - 1
    CTAs); a count declared for another cluster is rejected at the config's line with the right one."""
    def cfg(size):
        return PipelineConfig.create_tma_async_pipeline_cfg(  # @mcast_cfg
            num_stages=2, num_bytes=8192, producer_group=cg(1), consumer_group=cg(size),
            cta_layout_vmnk=layout, mcast_mode_mn=(True, True))

    probe = cfg(1)
    want = expected_group_size(probe, "consumer", 2)
    f = rejected(*tma_async_program(cfg(wrong), consumer_warps=2))
    hit = expect(f, "pipeline thread counts and bytes", "drain", "smem", line("mcast_cfg"))
    assert hit.expected.startswith(f"consumer_group size {want.arrivals} = {want.derivation}")
    assert "signaling CTA(s)" in want.derivation and want.arrivals == 2 * partners
    accepted(*tma_async_program(cfg(want.arrivals), consumer_warps=2))


def test_a_consumer_that_forgets_its_release_is_named_with_the_missing_call():
    """Issue 27: two broadcast consumers, one without release(): the finding names that task, its
    wait's file:line and the missing call (it used to name the releasing task and suggest shrinking
    consumer_group, which would free stages still being read). With the release: accepted."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_checker_builders import Buf, async_cfg, task
    from warpsched import TaskManager, ValidationError, domain_loop, schedule

    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=2, prod=32, cons=64))

    @schedule
    def prod(b):
        with domain_loop(0, 4, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, 4, 1):
            b.wait()
            b.read()
            b.release()

    @schedule
    def cons_forgot(b):
        with domain_loop(0, 4, 1):
            b.wait()  # @forgot_wait
            b.read()

    def build(second):
        return TaskManager(tasks=[task("Producer", prod(buf), dst=[buf]), task("ConsA", cons(buf), src=[buf], warp=1),
                                  task("ConsB", second(buf), src=[buf], warp=2)],
                           resource_dependency_graph={buf: []}, verbose=False, exhaustive_deadlock_race_check=False)

    assert build(cons).result.errors == []
    with pytest.raises(ValidationError) as err:
        build(cons_forgot)
    f = next(x for x in err.value.findings if "never calls Ring.release()" in x.message)
    assert f.task == "ConsB" and "task 'ConsB' waits on Ring" in f.message
    assert f.location.line == line("forgot_wait", __file__) and "add Ring.release() to 'ConsB'" in f.fix
