"""Lowering pieces that need no kernel (counter plans, register budgets, TMEM sizing) and the
programs the lowering refuses, with the error naming the task, the resource and the fix."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskLocalVariable, TaskManager,  # noqa: E402
                       ValidationError, consumer_work, domain_loop, producer_work, schedule)
from warpsched.lower import LoweringError  # noqa: E402
from warpsched.lower.dispatch import group_registers, launch_registers  # noqa: E402
from warpsched.lower.memory import tmem_columns  # noqa: E402
from warpsched.protocol.plan import counter_plan  # noqa: E402
from warpsched.model.ir import StepKind as K  # noqa: E402


def group(n):
    return pipeline.CooperativeGroup(pipeline.Agent.Thread, n)


def _cfg(**kw):
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=4, producer_group=group(32),
                                                          consumer_group=group(32), **kw)


def test_counter_plan_single_and_split():
    assert counter_plan(_cfg(), [K.ProducerAcquire, K.ProducerCommit]) == {"p": (K.ProducerCommit,)}
    assert counter_plan(_cfg(), [K.ProducerAcquire]) == {"p": (K.ProducerAcquire,)}
    assert counter_plan(_cfg(advance_on_acquire=True), [K.ProducerAcquire, K.ProducerCommit]) == {
        "acq": (K.ProducerAcquire,), "cmt": (K.ProducerCommit,)}
    assert counter_plan(_cfg(advance_on_wait=True), [K.ConsumerWait, K.ConsumerRelease]) == {
        "wait": (K.ConsumerWait,), "rel": (K.ConsumerRelease,)}
    assert counter_plan(_cfg(), [K.ConsumerWait]) == {"c": (K.ConsumerWait,)}


def test_register_budget_helpers():
    assert launch_registers(384) == 168
    assert launch_registers(128) == 255
    assert tmem_columns(200) == 256 and tmem_columns(1) == 32
    with pytest.raises(LoweringError):
        tmem_columns(600)


@pytest.mark.parametrize("regs", [(40, 232)])
def test_group_registers_rejects_mixed_warp_group(regs):
    class P:
        tasks = [Task(name="A", warp_idx=0, num_warps=1, num_registers=regs[0]),
                 Task(name="B", warp_idx=1, num_warps=1, num_registers=regs[1])]

    with pytest.raises(LoweringError, match="warp group 0"):
        group_registers(P)


# ---------------------------------------------------------------- refused programs, traced in a kernel
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402


@dataclass(kw_only=True)
class Stage(MemoryResource):
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=None)

    @producer_work
    def put(self, stage_info: StageInfo):
        pass

    @consumer_work(returns=v)
    def get(self, stage_info: StageInfo):
        return (stage_info.stage_idx, stage_info.stage_idx)  # a tuple: no typed default


@dataclass(kw_only=True)
class Sink(MemoryResource):
    @producer_work
    def take(self, stage_info: StageInfo, v):
        pass


@schedule
def prod(stage, n):
    with domain_loop(0, n, 1):
        stage.acquire()
        stage.put()
        stage.commit()


@schedule
def cons(stage, sink, n):
    with domain_loop(0, n, 1):
        stage.wait()
        v = stage.get()
        stage.release()
    sink.take(v=v)  # read after the loop: needs a typed default to be carried out of it


def _program(cfg, n=4, consumer=cons):
    stage, sink = Stage(name="Stage", pipeline_config=cfg), Sink(name="Sink")
    tasks = [Task(name="P", dst_resources=[stage], warp_idx=0, num_warps=1, schedule=prod(stage, n)),
             Task(name="C", src_resources=[stage], dst_resources=[sink], warp_idx=1, num_warps=1,
                  schedule=consumer(stage, sink, n))]
    return TaskManager(tasks=tasks, resource_dependency_graph={sink: [stage]}, verbose=False, skip_validation=True,
                       exhaustive_deadlock_race_check=False)


def _trace(make_cfg):
    @cute.kernel
    def kern():
        mgr = _program(make_cfg())
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host():
        kern().launch(grid=[1, 1, 1], block=[64, 1, 1])

    return cute.compile(host, options=_common.ptx_options())


def _message(excinfo) -> str:
    e, parts = excinfo.value, []
    while e is not None:
        parts.append(str(e))
        e = e.__cause__ or e.__context__
    return "\n".join(parts)


def test_interleave_without_a_lane_is_refused_not_miscompiled():
    """Stride 2 on 1-warp tasks stepping by 1: neither warp-lane nor domain-lane mode."""
    with pytest.raises(Exception) as ei:
        _trace(lambda: _cfg(interleave_stride=2))
    msg = _message(ei)
    assert "domain-lane interleaving (stride 2)" in msg and "Stage" in msg and "task: P" in msg and "fix:" in msg


def test_stride_must_divide_stages():
    """Refused once, by the factory (the lowering reads validated strides and re-checks nothing)."""
    with pytest.raises(ValidationError) as ei:
        PipelineConfig.create_async_async_pipeline_cfg(
            num_stages=3, producer_group=group(32), consumer_group=group(32), interleave_stride=2)
    assert "num_stages=3 is not divisible by the producer_acquire stride 2" in str(ei.value)


def test_unsupported_cluster_pipelines_are_refused():
    """Clusters lower for TmaAsync / AsyncAsync over (1, m, n, 1); other types, CTA pairs (V > 1) and
    CtaLeader releases on a multicast pipeline (every CTA leads its V = 1 group) are refused."""
    with pytest.raises(Exception) as ei:
        _trace(lambda: PipelineConfig.create_tma_umma_pipeline_cfg(
            num_stages=2, num_bytes=1024, producer_group=group(1), consumer_group=group(1),
            cta_layout_vmnk=(1, 2, 1, 1)))
    assert "over a (1, 2, 1, 1) cluster are checked but not lowered yet" in _message(ei)
    from warpsched import SignalingThreads

    with pytest.raises(Exception) as ei:
        _trace(lambda: PipelineConfig.create_tma_async_pipeline_cfg(
            num_stages=2, num_bytes=1024, producer_group=group(1), consumer_group=group(2),
            cta_layout_vmnk=(1, 2, 1, 1), mcast_mode_mn=(True, True),
            consumer_signaling_threads=SignalingThreads.CtaLeader))
    assert "consumer_signaling_threads=CtaLeader on a multicast pipeline over a V=1 cluster" in _message(ei)
    assert "each empty barrier receives 2 releases" in _message(ei)
    with pytest.raises(Exception) as ei:
        _trace(lambda: PipelineConfig.create_tma_async_pipeline_cfg(
            num_stages=2, num_bytes=1024, producer_group=group(1), consumer_group=group(1),
            cta_layout_vmnk=(2, 1, 1, 1)))
    assert "over a (2, 1, 1, 1) cluster are checked but not lowered yet" in _message(ei)
    # a UmmaUmma pair (the lowering's own class is single-CTA) and a TmaUmma pair over (2, 2, 1, 1)
    for make, shape in ((PipelineConfig.create_umma_umma_pipeline_cfg, (2, 1, 1, 1)),
                        (PipelineConfig.create_tma_umma_pipeline_cfg, (2, 2, 1, 1))):
        kw = dict(num_bytes=2048, num_bytes_per_warp_per_cta=1024) if "tma" in make.__name__ else {}
        with pytest.raises(Exception) as ei:
            _trace(lambda: make(num_stages=2, producer_group=group(1), consumer_group=group(1),
                                cta_layout_vmnk=shape, **kw))
        msg = _message(ei)
        assert f"over a {shape} cluster are checked but not lowered yet (CTA pairs are lowered for TmaUmma" in msg


def test_value_escaping_a_loop_without_typed_default_is_refused():
    with pytest.raises(Exception) as ei:
        _trace(lambda: _cfg())
    msg = _message(ei)
    assert "produced inside a runtime loop or guard" in msg and "task: C" in msg and "TaskLocalVariable" in msg


def _dynamic_copy_refusal(with_counter, with_tiles):
    """The message of compiling examples/hopper/dynamic_copy.py's kernel with its counter tensor or not
    (``LAUNCH_COUNTER`` then) and its tile count or not."""
    import dynamic_copy
    from cutlass.cute.runtime import make_fake_stream

    @cute.kernel
    def kern(mx: cute.Tensor, my: cute.Tensor, mc: cute.Tensor):
        tiles = cute.size(mx, mode=[1]) // dynamic_copy.TILE if with_tiles else None
        mgr = dynamic_copy.build(mx, my, mc if with_counter else None, tiles, rows=cute.size(mx, mode=[0]),
                                 verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host(mx: cute.Tensor, my: cute.Tensor, mc: cute.Tensor, stream):
        kern(mx, my, mc).launch(grid=[1, 1, 1], block=[160, 1, 1], cluster=[1, 1, 1], stream=stream)

    with pytest.raises(Exception) as ei:
        cute.compile(host, *dynamic_copy._fakes(), make_fake_stream(), options=_common.ptx_options())
    return _message(ei)


def test_a_counter_queue_without_a_tile_count_is_refused():
    """TileSchedulerConfig(counter=...) hands out tiles up to num_tiles: without it the lowering names the queue."""
    msg = _dynamic_copy_refusal(with_counter=True, with_tiles=False)
    assert "atomic counter needs the tile count" in msg and "CounterQueue" in msg and "num_tiles=" in msg


def test_a_counter_queue_traced_without_its_tensor_is_refused():
    """``LAUNCH_COUNTER`` stands for the counter where a program is only checked; a kernel traced with it names
    the queue and asks for the tensor."""
    msg = _dynamic_copy_refusal(with_counter=False, with_tiles=True)
    assert "needs the counter's tensor" in msg and "CounterQueue" in msg and "LAUNCH_COUNTER" in msg
