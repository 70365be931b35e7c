"""TMA strip copy: a 1-warp TMA producer fills a 2-stage SMEM ring, 4 warps drain it to GMEM.

Reference-TS surface used: a ``@dataclass`` resource with its own ``__init__(..., **kwargs)``
calling ``super().__init__``; ``SmemAllocation(name, size_bytes)``; ``SmemAllocator.add_resource``
/ ``compute_layout``; auxiliary work that views ``stage_info.context.smem_base.data_ptr() +
offset`` as a ``cutlass.Array``; ``stage_info.barrier`` handed to a TMA copy; ``stage_info.stage_idx``;
``create_tma_async_pipeline_cfg``; ``try_acquire`` / ``try_wait``; a padding task and
``num_registers``; ``debug_print=``.
"""
from dataclasses import dataclass, field
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.experimental.cuda as cuda
import cutlass.pipeline as pipeline
from cutlass.experimental import primitives as prims

from cutlass.experimental.task_scheduling.memory import SmemAllocation, SmemAllocator
from cutlass.experimental.task_scheduling.resources import (MemoryResource, PipelineConfig, StageInfo,
                                                            TaskLocalVariable, WorkAttr, consumer_work,
                                                            producer_work)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

STRIP = 64  # columns per CTA
ROWS_PER_STAGE = 2
STAGES = 2
STAGE_ELEMS = STRIP * ROWS_PER_STAGE
CONSUMER_WARPS = 4


@dataclass
class RowCursor(MemoryResource):
    """No storage: hands the producer the first row of each stage."""

    row: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.row = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0), docs="first row of the stage")

    @consumer_work(returns=row)
    @cute.jit
    def next_row(self, stage_info: StageInfo) -> cutlass.Int32:
        return stage_info.loop_offset


@dataclass
class StripRing(MemoryResource):
    desc: Any = field(init=False, default=None)
    ring: Any = field(init=False, default=None)
    element: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    _bytes: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, desc, **kwargs) -> None:
        super().__init__(**kwargs)
        self.desc = desc
        self.element = TaskLocalVariable(dtype=cutlass.Float16, default=cutlass.Float16(0), docs="one element")
        self._bytes = SmemAllocation("strip_ring", STAGES * STAGE_ELEMS * 2, alignment=128)
        self.ring = cutlass.Array(cutlass.inttoptr(0, mem_space=3, dtype=cutlass.Float16), dtype=cutlass.Float16,
                                  shape=(STAGES * STAGE_ELEMS,), addrspace=3)

    def get_smem_requirements(self):
        return [self._bytes]

    @cute.jit
    def _view(self, stage_info: StageInfo) -> None:
        self.ring = cutlass.Array(stage_info.context.smem_base.data_ptr() + self._bytes.offset,
                                  dtype=cutlass.Float16, shape=(STAGES * STAGE_ELEMS,), addrspace=3)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_producer(self, stage_info: StageInfo) -> None:
        self._view(stage_info)

    @consumer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_consumer(self, stage_info: StageInfo) -> None:
        self._view(stage_info)

    @producer_work
    @cute.jit
    def load(self, stage_info: StageInfo, *, row: cutlass.Int32) -> None:
        if prims.elect_sync():
            bx, _, _ = cute.arch.block_idx()
            prims.cp_async_bulk_tensor_shared_cta_global(self.ring.subview(stage_info.stage_idx * STAGE_ELEMS),
                                                         self.desc, (bx * STRIP, row), stage_info.barrier)

    @consumer_work(returns=element)
    @cute.jit
    def read(self, stage_info: StageInfo) -> cutlass.Float16:
        tx, _, _ = cute.arch.thread_idx()
        return self.ring[stage_info.stage_idx * STAGE_ELEMS + tx]


@dataclass
class Destination(MemoryResource):
    out: Any = field(init=False, default=None)

    def __init__(self, out, **kwargs) -> None:
        super().__init__(**kwargs)
        self.out = out

    @producer_work
    @cute.jit
    def write(self, stage_info: StageInfo, *, element: cutlass.Float16) -> None:
        tx, _, _ = cute.arch.thread_idx()
        bx, _, _ = cute.arch.block_idx()
        self.out[stage_info.loop_offset + tx // STRIP, bx * STRIP + tx % STRIP] = element


@cute.kernel
def strip_kernel(rows: cutlass.Int32, desc: cutlass.GridConstant[cuda.TensorMap], out: cute.Tensor):
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=STAGES, num_bytes=STAGE_ELEMS * 2,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_WARPS * 32))
    cursor = RowCursor(name="RowCursor")
    ring = StripRing(desc.get_ptr(), name="StripRing", pipeline_config=cfg)
    dst = Destination(out, name="Destination")
    smem = SmemAllocator()
    smem.add_resource(ring)
    smem.compute_layout()

    @schedule
    def produce(cursor: RowCursor, ring: StripRing) -> None:
        ring.bind_producer()
        with domain_loop(0, rows, ROWS_PER_STAGE, unroll=1):
            row = cursor.next_row()
            ring.try_acquire()
            ring.acquire()
            ring.load(row=row)
            ring.commit()

    @schedule
    def drain(ring: StripRing, dst: Destination) -> None:
        ring.bind_consumer()
        with domain_loop(0, rows, ROWS_PER_STAGE, unroll=1):
            ring.try_wait()
            ring.wait()
            v = ring.read()
            ring.release()
            dst.write(element=v)

    @schedule
    def idle() -> None:
        with domain_loop(0, rows, ROWS_PER_STAGE, unroll=1):
            pass

    tasks = [Task(src_resources=[ring], dst_resources=[dst], warp_idx=0, num_warps=CONSUMER_WARPS,
                  schedule=drain(ring, dst), num_registers=168, name="Drain", debug_print=False),
             Task(src_resources=[cursor], dst_resources=[ring], warp_idx=4, num_warps=1,
                  schedule=produce(cursor, ring), num_registers=56, name="Produce", debug_print=False),
             Task(src_resources=[], dst_resources=[], warp_idx=5, num_warps=3, schedule=idle(),
                  num_registers=56, name="Idle")]
    manager = TaskManager(tasks=tasks, resource_dependency_graph={ring: [cursor], dst: [ring]}, smem_allocator=smem)
    manager.setup_resources_and_tasks()
    manager.run()


@cute.jit
def strip_host(rows: cutlass.Int32, a: cute.Tensor, b: cute.Tensor):
    desc = cuda.create_tensor_map_tiled_from_view(a, box_dims=(STRIP, ROWS_PER_STAGE), swizzle=cuda.TensorMapSwizzle.none)
    strip_kernel(rows, desc, b).launch(grid=(cute.ceil_div(a.shape[1], STRIP), 1, 1), block=(256, 1, 1))


def cpu_build():
    from cutlass.cute.runtime import make_fake_tensor

    a = make_fake_tensor(cutlass.Float16, (256, 512), (512, 1), assumed_align=16)
    b = make_fake_tensor(cutlass.Float16, (256, 512), (512, 1), assumed_align=16)
    return strip_host, (cutlass.Int32(256), a, b), "sm_90a"
