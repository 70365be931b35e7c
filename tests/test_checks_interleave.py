"""Interleaved pipelines: every rule of the seed (divisibility, asymmetric strides,
warp-lane vs domain-lane task shapes, matching strides, per-type support)."""
from __future__ import annotations

import pytest

from warpsched import PipelineConfig, Task, ValidationError, domain_loop, schedule

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

K = 8


def dense_program(cfg, consumer_warps=4, consumer_step=1, producer_warps=1):
    """A TMA producer task feeding one consumer task."""
    gmem, smem, out = Gmem(name="gmem"), Buf(name="smem", pipeline_config=cfg), Gmem(name="out")

    @schedule
    def load(gmem, smem):
        with domain_loop(0, K, 1):  # @load_loop
            c = gmem.compute_coords()
            smem.acquire()
            smem.tma_load_a(coord_k=c)
            smem.commit()

    @schedule
    def consume(smem, out):
        with domain_loop(0, K, consumer_step):  # @consume_loop
            smem.wait()
            v = smem.read()
            out.store(value=v)
            smem.release()

    tasks = [Task(name="load", src_resources=[gmem], dst_resources=[smem], warp_idx=0, num_warps=producer_warps,
                  schedule=load(gmem, smem)),
             Task(name="consume", src_resources=[smem], dst_resources=[out], warp_idx=4, num_warps=consumer_warps,
                  schedule=consume(smem, out))]
    return tasks, {smem: [gmem], out: [smem]}


def seed_cfg(num_stages=8, **kw):
    return PipelineConfig.create_tma_umma_pipeline_cfg(  # @seed_cfg
        num_stages=num_stages, num_bytes=4096, producer_group=cg(1), consumer_group=cg(1),
        cta_layout_vmnk=(1, 1, 1, 1), **kw)


def test_warp_lane_seed_example_and_divisibility():
    """The seed: TmaUmma, num_stages=8, interleave_stride=4; 4-warp tasks own lanes 0..3 (an int stride
    interleaves every role, so the producer task has 4 warps too)."""
    accepted(*dense_program(seed_cfg(interleave_stride=4), producer_warps=4))
    accepted(*dense_program(seed_cfg(interleave_stride=(1, 1, 4, 4))))  # consumer side only: a dense producer
    f = rejected(*dense_program(seed_cfg(interleave_stride=4)))  # a 1-warp producer cannot own 4 lanes
    expect(f, "interleaved pipelines", "load", "smem", line("load_loop"))
    with pytest.raises(ValidationError) as e:  # refused by the factory, at its call
        seed_cfg(num_stages=6, interleave_stride=(1, 1, 4, 4))
    hit = expect(e.value.findings, "interleaved pipelines", None, None, line("seed_cfg"))
    assert "num_stages=6 is not divisible" in hit.message


def test_interleaved_role_needs_warp_lane_or_domain_lane_shape():
    f = rejected(*dense_program(seed_cfg(interleave_stride=(1, 1, 4, 4)), consumer_warps=2))
    hit = expect(f, "interleaved pipelines", "consume", "smem", line("consume_loop"))
    assert "num_warps == 4" in hit.expected


def test_per_role_tuple_with_separate_wait_and_release_tasks_seed():
    def program(advance_on_wait=True, same_task=False):
        cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @asym_cfg
            num_stages=8, num_bytes=4096, producer_group=cg(1), consumer_group=cg(1),
            cta_layout_vmnk=(1, 1, 1, 1), advance_on_wait=advance_on_wait, interleave_stride=(1, 1, 4, 1))
        gmem, smem, out = Gmem(name="gmem"), Buf(name="smem", pipeline_config=cfg), Gmem(name="out")

        @schedule
        def load(gmem, smem):
            with domain_loop(0, K, 1):
                c = gmem.compute_coords()
                smem.acquire()
                smem.tma_load_a(coord_k=c)
                smem.commit()

        @schedule
        def waiter(smem, out):
            with domain_loop(0, K, 1):
                smem.wait()
                v = smem.read()
                out.store(value=v)
                if same_task:
                    smem.release()

        @schedule
        def releaser(smem):
            with domain_loop(0, K, 1):
                smem.release()

        tasks = [Task(name="load", src_resources=[gmem], dst_resources=[smem], warp_idx=0, schedule=load(gmem, smem)),
                 Task(name="wait4", src_resources=[smem], dst_resources=[out], warp_idx=1, num_warps=4,
                      schedule=waiter(smem, out))]
        if not same_task:
            tasks.append(Task(name="release1", src_resources=[smem], warp_idx=5, num_warps=1,
                              schedule=releaser(smem)))
        return tasks, {smem: [gmem], out: [smem]}

    accepted(*program())
    f = rejected(*program(advance_on_wait=False))
    hit = expect(f, "interleaved pipelines", None, "smem", line("asym_cfg"))
    assert "advance_on_wait=True" in hit.expected
    f = rejected(*program(same_task=True))
    assert any(x.check == "interleaved pipelines" and x.task == "wait4" and "both wait" in x.message for x in f)


# ------------------------------------------------------------------ domain-lane (the seed's softmax)
NUM_LANES = 2


def softmax_program(lanes=(0, 1), step=NUM_LANES, scores_stride=(1, 1, NUM_LANES, NUM_LANES),
                    probs_stride=(NUM_LANES, NUM_LANES, 1, 1), scores_type="umma_async"):
    scores_cfg = getattr(PipelineConfig, f"create_{scores_type}_pipeline_cfg")(  # @scores_cfg
        num_stages=4, producer_group=cg(1), consumer_group=cg(128), cta_layout_vmnk=(1, 1, 1, 1),
        interleave_stride=scores_stride)
    probs_cfg = PipelineConfig.create_async_umma_pipeline_cfg(
        num_stages=4, producer_group=cg(128), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1),
        interleave_stride=probs_stride)
    kv, scores, probs = Gmem(name="kv"), Buf(name="scores", pipeline_config=scores_cfg), \
        Buf(name="probs", pipeline_config=probs_cfg)

    @schedule
    def mma(kv, scores, probs):
        with domain_loop(0, K, 1):
            scores.acquire()
            v = kv.load()
            scores.produce_tile(value=v)
            scores.commit()
            probs.wait()
            probs.consume_tile()
            probs.release()

    def make_softmax_task(lane, warp_idx):
        @schedule
        def softmax_lane(scores, probs):
            with domain_loop(lane, K, step):  # @softmax_loop
                scores.wait()
                scores.compute_softmax()
                probs.acquire()
                probs.produce_tile()
                probs.commit()
                scores.release()

        return Task(src_resources=[scores], dst_resources=[probs], warp_idx=warp_idx, num_warps=4,
                    schedule=softmax_lane(scores, probs), name=f"SoftmaxLane{lane}")

    tasks = [make_softmax_task(lane, 4 * i) for i, lane in enumerate(lanes)]
    tasks.append(Task(name="mma", src_resources=[kv, probs], dst_resources=[scores], warp_idx=4 * len(lanes),
                      schedule=mma(kv, scores, probs)))
    return tasks, {scores: [kv], probs: [scores]}


def test_domain_lane_softmax_seed_example_accepted():
    accepted(*softmax_program())


def test_domain_lane_needs_step_equal_to_the_stride():
    f = rejected(*softmax_program(step=1))
    expect(f, "interleaved pipelines", "SoftmaxLane0", "scores", line("softmax_loop"))


def test_domain_lane_needs_every_lane_once():
    f = rejected(*softmax_program(lanes=(0, 0)))
    assert any("both own lane 0" in x.message for x in f)
    assert any("lane(s) [1]" in x.message for x in f)


def test_domain_lane_needs_matching_open_and_close_strides():
    f = rejected(*softmax_program(scores_stride=(1, 1, NUM_LANES, 1)))
    hit = expect(f, "interleaved pipelines", "SoftmaxLane0", "scores", line("softmax_loop"))
    assert "matching" in hit.message


# ------------------------------------------------------------------ per-type support
def test_umma_async_interleaves_only_its_consumer_side():
    f = rejected(*softmax_program(scores_stride=(NUM_LANES, NUM_LANES, NUM_LANES, NUM_LANES)))
    hit = expect(f, "interleaved pipelines", None, "scores", line("scores_cfg"))
    assert "only on its consumer side" in hit.message


def test_async_umma_interleaves_only_its_producer_side():
    f = rejected(*softmax_program(probs_stride=(NUM_LANES, NUM_LANES, NUM_LANES, NUM_LANES)))
    assert any(x.check == "interleaved pipelines" and x.resource == "probs" and "only on its producer side" in x.message
               for x in f)


@pytest.mark.parametrize("factory", ["umma_umma", "clc_fetch_async"])
def test_types_without_interleaving(factory):
    kw = dict(num_bytes=16) if factory == "clc_fetch_async" else {}
    cfg = getattr(PipelineConfig, f"create_{factory}_pipeline_cfg")(  # @no_interleave
        num_stages=4, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1),
        interleave_stride=2, **kw)
    f = rejected(*dense_program(cfg, consumer_warps=2))
    hit = expect(f, "interleaved pipelines", None, "smem", line("no_interleave"))
    assert "do not support interleaving" in hit.message


def test_tma_async_interleaving_is_single_cta_only():
    def cfg(layout):
        return PipelineConfig.create_tma_async_pipeline_cfg(  # @tma_async_cluster
            num_stages=8, num_bytes=4096, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=layout,
            interleave_stride=(1, 1, 4, 4))

    f = rejected(*dense_program(cfg((1, 2, 1, 1))))
    hit = expect(f, "interleaved pipelines", None, "smem", line("tma_async_cluster"))
    assert "single-CTA" in hit.message
    accepted(*dense_program(cfg((1, 1, 1, 1))))
