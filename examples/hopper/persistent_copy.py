"""Persistent copy over a static WorkQueue, with over-launched tiles that are skipped.

    CopyTask (warps 0-3):
        with work_tile_loop(wq, skip_if=OverlaunchedQueue.skip_work_tile_if) as wtwl:
            with wtwl.skippable(), domain_loop(0, rows, 1):
                copy.copy_tile_row()              # row `loop_offset` of tile column `work_tile`
            wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()

The queue hands tile t = blockIdx.x, blockIdx.x + gridDim.x, ... < launched tiles; tiles past
the logical tile count only run the queue bookkeeping. Host: ``copy(x, y, overlaunch_tiles=)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    from . import _common
except ImportError:
    import _common  # type: ignore

import cutlass
import cutlass.cute as cute

from warpsched import (MemoryResource, StageInfo, Task, TaskManager, TileSchedulerConfig, WorkQueue, domain_loop,
                       producer_work, schedule, trip_count, work_tile_loop)

TILE = 128  # columns per tile: one per thread
THREADS = TILE


@dataclass(kw_only=True, eq=False)
class OverlaunchedQueue(WorkQueue):
    logical_tiles: Any = 0

    @cute.jit
    def skip_work_tile_if(self, work_tile) -> cutlass.Boolean:
        tile_x, _, _ = work_tile.tile_idx
        return tile_x >= self.logical_tiles


@dataclass(kw_only=True)
class CopyColumns(MemoryResource):
    src: Any = None
    dst: Any = None

    @producer_work
    @cute.jit
    def copy_tile_row(self, stage_info: StageInfo):
        tx, _, _ = cute.arch.thread_idx()
        tile_x, _, _ = stage_info.work_tile.tile_idx
        col = tile_x * TILE + tx
        src, dst, row = self.src, self.dst, stage_info.loop_offset  # locals: the `if` must not carry self
        if col < cute.size(src, mode=[1]):
            dst[row, col] = src[row, col]


@schedule
def copy_schedule(copy, wq, rows):
    with work_tile_loop(wq, skip_if=OverlaunchedQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, rows, 1):
            copy.copy_tile_row()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def build(src=None, dst=None, rows=None, logical_tiles=None, launch_tiles=None, verbose=True,
          **manager_options):
    """The program, for ``warpsched check`` (CPU: runtime values None) and the kernel. The tile
    counts only matter at run time: the checker covers every number of tiles per CTA (>= 1)."""
    rows = trip_count("rows", rows)
    copy = CopyColumns(name="Copy", src=src, dst=dst)
    wq = OverlaunchedQueue(name="WorkQueue", logical_tiles=logical_tiles,
                           tile_scheduler_config=TileSchedulerConfig(num_tiles=launch_tiles))
    task = Task(name="CopyTask", src_resources=[wq], dst_resources=[copy], warp_idx=0, num_warps=THREADS // 32,
                schedule=copy_schedule(copy, wq, rows))
    return TaskManager(tasks=[task], resource_dependency_graph={copy: [wq]}, verbose=verbose, **manager_options)


@cute.kernel
def copy_kernel(mx: cute.Tensor, my: cute.Tensor, launch_tiles: cutlass.Int32):
    rows = cute.size(mx, mode=[0])
    logical = cute.ceil_div(cute.size(mx, mode=[1]), TILE)
    mgr = build(mx, my, rows=rows, logical_tiles=logical, launch_tiles=launch_tiles, verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def copy_host(mx: cute.Tensor, my: cute.Tensor, launch_tiles: cutlass.Int32, grid: cutlass.Int32, stream):
    copy_kernel(mx, my, launch_tiles).launch(grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)


_CACHE = {}


def copy(x, y, overlaunch_tiles=4, grid=None):
    """y[:] = x (fp32 2D): ceil(cols/128) logical tiles + overlaunch_tiles skipped ones, persistent CTAs."""
    logical = -(-x.shape[1] // TILE)
    launch = logical + overlaunch_tiles
    grid = grid or max(1, min(launch, (launch + 2) // 3))  # about three tiles per CTA
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if "f" not in _CACHE:
        _CACHE["f"] = cute.compile(copy_host, mx, my, cutlass.Int32(launch), cutlass.Int32(grid), stream,
                                   options=_common.PTX_OPTIONS)
    _CACHE["f"](mx, my, cutlass.Int32(launch), cutlass.Int32(grid), stream)


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    M, N = cute.sym_int32(), cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    return cute.compile(copy_host, x, y, cutlass.Int32(12), cutlass.Int32(4), make_fake_stream(),
                        options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
