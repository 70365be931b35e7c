"""Persistent ragged copy: each work tile is one segment of a packed vector, copied into one row of
a padded matrix; empty segments are skipped.

Reference-TS surface used: ``TileSchedulerConfig.create_static_persistent_tile_scheduler_params``
over ``cutlass.utils.PersistentTileSchedulerParams``; a ``WorkQueue`` subclass with
``skip_work_tile_if`` passed unbound to ``work_tile_loop(skip_if=...)`` and ``skippable()``; a
``Task`` subclass whose ``get_domain`` is the domain's end (``domain_loop(tx, Task.get_domain,
step)``); ``stage_info.work_tile.tile_idx``, ``stage_info.loop_end``; the queue epilogue
``try_wait`` / ``wait`` / ``get_and_advance_work_tile`` / ``release``.
"""
from dataclasses import dataclass, field
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils

from cutlass.experimental.task_scheduling.resources import (MemoryResource, StageInfo, TaskLocalVariable,
                                                            TileSchedulerConfig, WorkQueue, consumer_work,
                                                            producer_work)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule, work_tile_loop
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

WARPS = 2


class SegmentTask(Task):
    def __init__(self, offsets, **kwargs):
        super().__init__(**kwargs)
        self.offsets = offsets

    @cute.jit
    def get_domain(self, tile_coord):
        return self.offsets[tile_coord[0] + 1] - self.offsets[tile_coord[0]]


@dataclass(kw_only=True)
class NonEmptySegments(WorkQueue):
    offsets: Any = field(init=False, default=None)

    def __init__(self, offsets, **kwargs) -> None:
        super().__init__(**kwargs)
        self.offsets = offsets

    @cute.jit
    def skip_work_tile_if(self, work_tile) -> cutlass.Boolean:
        seg, _, _ = work_tile.tile_idx
        return self.offsets[seg + 1] == self.offsets[seg]


@dataclass(kw_only=True)
class Packed(MemoryResource):
    data: cute.Tensor
    offsets: cute.Tensor
    value: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.value = TaskLocalVariable(dtype=cutlass.Float32, default=cutlass.Float32(0), docs="packed element")

    @consumer_work(returns=value)
    @cute.jit
    def fetch(self, stage_info: StageInfo) -> cutlass.Float32:
        seg, _, _ = stage_info.work_tile.tile_idx
        v = cutlass.Float32(0)
        if stage_info.loop_offset < stage_info.loop_end:
            v = self.data[self.offsets[seg] + stage_info.loop_offset]
        return v


@dataclass(kw_only=True)
class Padded(MemoryResource):
    rows: cute.Tensor

    @producer_work
    @cute.jit
    def place(self, stage_info: StageInfo, *, value: cutlass.Float32) -> None:
        seg, _, _ = stage_info.work_tile.tile_idx
        self.rows[seg, stage_info.loop_offset] = value


@cute.kernel
def ragged_kernel(data: cute.Tensor, offsets: cute.Tensor, rows: cute.Tensor, params: object):
    tx, _, _ = cute.arch.thread_idx()
    packed = Packed(name="Packed", data=data, offsets=offsets)
    padded = Padded(name="Padded", rows=rows)
    wq = NonEmptySegments(offsets, name="Segments",
                          tile_scheduler_config=TileSchedulerConfig.create_static_persistent_tile_scheduler_params(
                              tile_scheduler_params=params))

    @schedule
    def body(packed: Packed, padded: Padded, wq: NonEmptySegments) -> None:
        with work_tile_loop(wq, skip_if=NonEmptySegments.skip_work_tile_if) as tiles:
            with tiles.skippable(), domain_loop(tx, SegmentTask.get_domain, WARPS * 32):
                v = packed.fetch()
                padded.place(value=v)
            wq.try_wait()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()

    task = SegmentTask(offsets, name="RaggedTask", src_resources=[packed, wq], dst_resources=[padded], warp_idx=0,
                       num_warps=WARPS, schedule=body(packed, padded, wq))
    manager = TaskManager(tasks=[task], resource_dependency_graph={padded: [packed, wq]})
    manager.setup_resources_and_tasks()
    manager.run()


@cute.jit
def ragged_host(data: cute.Tensor, offsets: cute.Tensor, rows: cute.Tensor, segments: int,
                max_ctas: cutlass.Constexpr):
    params = utils.PersistentTileSchedulerParams((segments, 1, 1), (1, 1, 1))
    grid = utils.StaticPersistentTileScheduler.get_grid_shape(params, max_ctas)
    ragged_kernel(data, offsets, rows, params).launch(grid=grid, block=(WARPS * 32, 1, 1))


def cpu_build():
    from cutlass.cute.runtime import make_fake_tensor

    data = make_fake_tensor(cutlass.Float32, (4096,), (1,), assumed_align=16)
    offsets = make_fake_tensor(cutlass.Int32, (17,), (1,), assumed_align=16)
    rows = make_fake_tensor(cutlass.Float32, (16, 512), (512, 1), assumed_align=16)
    return ragged_host, (data, offsets, rows, 16, 132), "sm_90a"
