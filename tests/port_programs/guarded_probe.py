"""Every other row through a 4-stage thread pipeline, with try_ probes where the reference TS puts
no constraint on them: the producer's ``try_acquire()`` sits outside the ``every(2)`` block that
holds its ``acquire()``, the consumer's ``try_wait()`` sits in the head, before the loop.

warpsched accepts both (the first probe feeds the acquire whenever it runs, the second is reported
as a wasted probe: its result is not carried into the loop). Pipeline: AsyncAsync, 1 producer warp
(each thread stores one element), 1 consumer warp.
"""
from dataclasses import dataclass, field
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from cutlass.experimental.task_scheduling.memory import SmemAllocation, SmemAllocator
from cutlass.experimental.task_scheduling.resources import (MemoryResource, PipelineConfig, StageInfo,
                                                            TaskLocalVariable, WorkAttr, consumer_work,
                                                            producer_work)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

STAGES = 4
WIDTH = 32


@dataclass(kw_only=True)
class Rows(MemoryResource):
    src: cute.Tensor
    value: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.value = TaskLocalVariable(dtype=cutlass.Float32, default=cutlass.Float32(0), docs="one element")

    @consumer_work(returns=value)
    @cute.jit
    def get(self, stage_info: StageInfo) -> cutlass.Float32:
        lane = cute.arch.lane_idx()
        return self.src[stage_info.loop_offset, lane]


@dataclass
class Slots(MemoryResource):
    buf: Any = field(init=False, default=None)
    value: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    alloc: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.value = TaskLocalVariable(dtype=cutlass.Float32, default=cutlass.Float32(0), docs="one element")
        self.alloc = SmemAllocation("slots", dtype=cutlass.Float32, count=STAGES * WIDTH)
        self.buf = cutlass.Array(cutlass.inttoptr(0, mem_space=3, dtype=cutlass.Float32), dtype=cutlass.Float32,
                                 shape=(STAGES * WIDTH,), addrspace=3)

    def get_smem_requirements(self):
        return [self.alloc]

    @cute.jit
    def _bind(self, stage_info: StageInfo) -> None:
        self.buf = cutlass.Array(stage_info.context.smem_base.data_ptr() + self.alloc.offset, dtype=cutlass.Float32,
                                 shape=(STAGES * WIDTH,), addrspace=3)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_writer(self, stage_info: StageInfo) -> None:
        self._bind(stage_info)

    @consumer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_reader(self, stage_info: StageInfo) -> None:
        self._bind(stage_info)

    @producer_work
    @cute.jit
    def put(self, stage_info: StageInfo, *, value: cutlass.Float32) -> None:
        self.buf[stage_info.stage_idx * WIDTH + cute.arch.lane_idx()] = value

    @consumer_work(returns=value)
    @cute.jit
    def take(self, stage_info: StageInfo) -> cutlass.Float32:
        return self.buf[stage_info.stage_idx * WIDTH + cute.arch.lane_idx()]


@dataclass(kw_only=True)
class Out(MemoryResource):
    dst: cute.Tensor

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, *, value: cutlass.Float32) -> None:
        self.dst[stage_info.loop_offset, cute.arch.lane_idx()] = value


@cute.kernel
def probe_kernel(x: cute.Tensor, y: cute.Tensor, rows: cutlass.Int32):
    cfg = PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32), cta_layout_vmnk=(1, 1, 1, 1))
    src, slots, out = Rows(name="Rows", src=x), Slots(name="Slots", pipeline_config=cfg), Out(name="Out", dst=y)
    smem = SmemAllocator()
    smem.add_resource(slots)
    smem.compute_layout()

    @schedule
    def produce(src: Rows, slots: Slots) -> None:
        slots.bind_writer()
        with domain_loop(0, rows, 1, unroll=1) as d:
            slots.try_acquire()  # unguarded probe, guarded acquire
            with d.every(2):
                slots.acquire()
                v = src.get()
                slots.put(value=v)
                slots.commit()

    @schedule
    def consume(slots: Slots, out: Out) -> None:
        slots.bind_reader()
        slots.try_wait()  # in the head: a wasted probe (warning), never reused by a loop wait
        with domain_loop(0, rows, 1, unroll=1) as d:
            with d.every(2):
                slots.wait()
                v = slots.take()
                slots.release()
                out.store(value=v)

    tasks = [Task([src], [slots], 0, 1, schedule=produce(src, slots), name="Producer"),
             Task([slots], [out], 1, 1, schedule=consume(slots, out), name="Consumer")]
    manager = TaskManager(tasks=tasks, resource_dependency_graph={slots: [src], out: [slots]}, smem_allocator=smem)
    manager.setup_resources_and_tasks()
    manager.run()


@cute.jit
def probe_host(x: cute.Tensor, y: cute.Tensor, rows: cutlass.Int32):
    probe_kernel(x, y, rows).launch(grid=(1, 1, 1), block=(64, 1, 1))


def cpu_build():
    from cutlass.cute.runtime import make_fake_tensor

    x = make_fake_tensor(cutlass.Float32, (64, WIDTH), (WIDTH, 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (64, WIDTH), (WIDTH, 1), assumed_align=16)
    return probe_host, (x, y, cutlass.Int32(64)), "sm_90a"
