"""The seed's patterns: ping-pong resources, split-consumer signaling, and the head/loop
producer overlap warning."""
from __future__ import annotations

import warnings

import pytest

import warpsched
from warpsched import PipelineConfig, SignalingThreads, Task, domain_loop, schedule

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, manager, rejected

K = 4


# ------------------------------------------------------------------ ping-pong (seed)
@schedule
def producer_schedule(smem_pp):
    with domain_loop(0, K, 1):
        smem_pp.acquire()  # @pp_acquire
        cur = smem_pp.read_current()
        smem_pp.write_next(cur=cur)
        smem_pp.commit()


@schedule
def consumer_schedule(smem_pp):
    with domain_loop(0, K, 1):
        smem_pp.wait()
        smem_pp.transform_inplace()
        smem_pp.release()


def pingpong(cfg, sides=("producer", "consumer")):
    smem_pp = Buf(name="smem_pp", pipeline_config=cfg)
    tasks = []
    if "producer" in sides:
        tasks.append(Task(name="producer", dst_resources=[smem_pp], warp_idx=0, schedule=producer_schedule(smem_pp)))
    if "consumer" in sides:
        tasks.append(Task(name="consumer", src_resources=[smem_pp], warp_idx=1, schedule=consumer_schedule(smem_pp)))
    return tasks, {smem_pp: [smem_pp]}


def test_ping_pong_seed_example_accepted():
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=cg(32), consumer_group=cg(32))
    accepted(*pingpong(cfg))


def test_ping_pong_needs_a_pipeline_config():
    f = rejected(*pingpong(None))
    hit = expect(f, "ping-pong resources", None, "smem_pp", line("pp_acquire"))
    assert "no pipeline_config" in hit.message


@pytest.mark.parametrize("factory", ["tma_umma", "async_umma", "umma_umma"])
def test_ping_pong_rejects_mma_consumer_types(factory):
    kw = dict(num_bytes=1024) if factory == "tma_umma" else {}
    cfg = getattr(PipelineConfig, f"create_{factory}_pipeline_cfg")(  # @pp_mma_cfg
        num_stages=1, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1), **kw)
    f = rejected(*pingpong(cfg))
    hit = expect(f, "ping-pong resources", None, "smem_pp", line("pp_mma_cfg"))
    assert "MMA consumer" in hit.message


@pytest.mark.parametrize("factory", ["async_async", "tma_async", "umma_async"])
def test_ping_pong_accepts_synchronous_consumer_types(factory):
    kw = dict(num_bytes=1024) if factory == "tma_async" else {}
    producer = 32 if factory == "async_async" else 1
    consumer = 1 if factory == "tma_async" else 32
    cfg = getattr(PipelineConfig, f"create_{factory}_pipeline_cfg")(
        num_stages=1, producer_group=cg(producer), consumer_group=cg(consumer), cta_layout_vmnk=(1, 1, 1, 1), **kw)
    f = [x for x in manager(*pingpong(cfg), skip_validation=True).result.findings if x.check == "ping-pong resources"]
    assert f == []


def test_ping_pong_needs_both_sides():
    cfg = PipelineConfig.create_async_async_pipeline_cfg(  # @pp_one_side
        num_stages=1, producer_group=cg(32), consumer_group=cg(32))
    f = rejected(*pingpong(cfg, sides=("producer",)))
    hit = expect(f, "ping-pong resources", None, "smem_pp", line("pp_one_side"))
    assert "never consumed" in hit.message


# ------------------------------------------------------------------ split-consumer signaling (seed)
def split_program(wait_signaling, split=True):
    def cfg():
        return PipelineConfig.create_tma_umma_pipeline_cfg(  # @split_cfg
            num_stages=2, num_bytes=1024, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1),
            consumer_signaling_threads=SignalingThreads.CtaLeader, consumer_wait_signaling_threads=wait_signaling)

    gmem_a, smem_a = Gmem(name="gmem_a"), Buf(name="smem_a", pipeline_config=cfg())
    proxy = Buf(name="proxy", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=cg(32), consumer_group=cg(32)))
    tmem_c = Buf(name="tmem_c")

    @schedule
    def load(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            c = gmem_a.compute_coords()
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    @schedule
    def sync_schedule(smem_a, proxy):
        with domain_loop(0, K, 1):
            smem_a.wait()
            proxy.acquire()
            proxy.signal_ready()
            proxy.commit()
            if not split:
                smem_a.release()

    @schedule
    def mma_schedule(proxy, smem_a, tmem_c):
        with domain_loop(0, K, 1):
            proxy.wait()
            desc_a = smem_a.build_desc()
            tmem_c.mma(desc_a=desc_a)
            if split:
                smem_a.release()
            proxy.release()

    tasks = [Task(name="load", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0,
                  schedule=load(gmem_a, smem_a)),
             Task(name="sync", src_resources=[smem_a], dst_resources=[proxy], warp_idx=1,
                  schedule=sync_schedule(smem_a, proxy)),
             Task(name="mma", src_resources=[proxy, smem_a], dst_resources=[tmem_c], warp_idx=2,
                  schedule=mma_schedule(proxy, smem_a, tmem_c))]
    return tasks, {smem_a: [gmem_a], proxy: [smem_a], tmem_c: [proxy]}


def test_split_consumer_wait_signaling_override_seed():
    accepted(*split_program(SignalingThreads.All))
    accepted(*split_program(None))


def test_wait_signaling_override_must_differ():
    f = rejected(*split_program(SignalingThreads.CtaLeader))
    hit = expect(f, "split-consumer signaling", None, "smem_a", line("split_cfg"))
    assert "equals consumer_signaling_threads" in hit.message


def test_wait_signaling_override_only_with_the_pattern():
    f = rejected(*split_program(SignalingThreads.All, split=False))
    hit = expect(f, "split-consumer signaling", None, "smem_a", line("split_cfg"))
    assert "no split consumer" in hit.message


# ------------------------------------------------------------------ head/loop producer overlap (warning)
def overlap_program(in_head):
    src, smem, out = Gmem(name="src"), Buf(name="smem", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=cg(32), consumer_group=cg(32))), Gmem(name="out")

    @schedule
    def fill(src, smem):
        v = src.load()
        if in_head:
            smem.acquire()
            smem.produce_tile(value=v)  # @head_produce
            smem.commit()
        with domain_loop(0, K, 1):
            smem.acquire()
            smem.produce_tile(value=v)
            smem.commit()

    @schedule
    def drain(smem, out):
        with domain_loop(0, K + (1 if in_head else 0), 1):
            smem.wait()
            x = smem.read()
            out.store(value=x)
            smem.release()

    return ([Task(name="fill", src_resources=[src], dst_resources=[smem], schedule=fill(src, smem)),
             Task(name="drain", src_resources=[smem], dst_resources=[out], warp_idx=1, schedule=drain(smem, out))],
            {smem: [src], out: [smem]})


def test_head_and_loop_producer_overlap_is_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = manager(*overlap_program(True))
    assert m.result.accepted
    hit = expect(m.result.findings, "head/loop producer overlap", "fill", "smem", line("head_produce"),
                 severity="warning")
    assert "loop_offset = 0" in hit.message
    assert any(issubclass(w.category, warpsched.ValidationWarning) and "head/loop" in str(w.message) for w in caught)
    m = accepted(*overlap_program(False))
    assert m.result.findings == []
