"""Grid-stride scale-and-copy: one task, no pipeline, a runtime field read under a runtime ``if``.

Reference-TS surface used: MemoryResource dataclass fields annotated with CuTe types (runtime
``cutlass.Int32`` and ``cutlass.Float32``, compile-time ``cutlass.Constexpr``), a TaskLocalVariable
routed from consumer work to producer work, ``domain_loop`` with runtime bounds and ``unroll=``.
"""
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute

from cutlass.experimental.task_scheduling.resources import (MemoryResource, StageInfo, TaskLocalVariable,
                                                            consumer_work, producer_work)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

WARPS = 4


@dataclass(kw_only=True)
class Source(MemoryResource):
    values: cute.Tensor
    length: cutlass.Int32
    scale: cutlass.Float32
    lanes: cutlass.Constexpr[int]
    picked: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.picked = TaskLocalVariable(dtype=cutlass.Float32, default=cutlass.Float32(0.0),
                                        docs="scaled element of this iteration")

    @consumer_work(returns=picked)
    @cute.jit
    def pick(self, stage_info: StageInfo) -> cutlass.Float32:
        i = stage_info.loop_offset
        v = cutlass.Float32(0.0)
        if i < self.length:  # a runtime field compared under a runtime if
            v = self.values[i] * self.scale
        return v


@dataclass(kw_only=True)
class Sink(MemoryResource):
    out: cute.Tensor
    length: cutlass.Int32

    @producer_work
    @cute.jit
    def put(self, stage_info: StageInfo, picked: cutlass.Float32) -> None:
        i = stage_info.loop_offset
        if i < self.length:  # the DSL carries `self` through this if: every field must flatten
            self.out[i] = picked


@cute.kernel
def scale_kernel(length: cutlass.Int32, scale: cutlass.Float32, x: cute.Tensor, y: cute.Tensor):
    src = Source(name="Source", values=x, length=length, scale=scale, lanes=WARPS * 32)
    dst = Sink(name="Sink", out=y, length=length)
    tx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    gx, _, _ = cute.arch.grid_dim()

    @schedule
    def body(src: Source, dst: Sink) -> None:
        with domain_loop(bx * WARPS * 32 + tx, length, gx * WARPS * 32, unroll=2):
            v = src.pick()
            dst.put(picked=v)

    task = Task(name="ScaleTask", src_resources=[src], dst_resources=[dst], warp_idx=0, num_warps=WARPS,
                schedule=body(src, dst), debug_print=False)
    manager = TaskManager(tasks=[task], resource_dependency_graph={dst: [src]})
    manager.setup_resources_and_tasks()
    manager.run()


@cute.jit
def scale_host(length: cutlass.Int32, scale: cutlass.Float32, x: cute.Tensor, y: cute.Tensor, blocks: cutlass.Int32):
    scale_kernel(length, scale, x, y).launch(grid=(blocks, 1, 1), block=(WARPS * 32, 1, 1))


def cpu_build():
    """(host function, fake arguments, arch) for a CPU compile."""
    from cutlass.cute.runtime import make_fake_tensor

    n = cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (n,), (1,), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (n,), (1,), assumed_align=16)
    return scale_host, (cutlass.Int32(1000), cutlass.Float32(2.0), x, y, cutlass.Int32(8)), "sm_90a"
