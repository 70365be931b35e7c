"""Planted-bug base: a persistent row pipeline over a static WorkQueue with over-launched (skipped)
tiles (H200, warpsched lowering; examples/hopper/persistent_copy.py plus an SMEM ring).

    ProducerTask (warp 0):  with work_tile_loop(wq, skip_if=...) as w:
                                with w.skippable(), domain_loop(0, rows, 1):
                                    ring.acquire(); ring.fill(); ring.commit()      # row r of tile t -> SMEM
                                wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()
    ConsumerTask (warp 1):  the same loops:  ring.wait(); v = ring.read(); ring.release(); out.store(v=v)

Tile t covers 32 columns; tiles past ceil(cols / 32) are skipped. y = x for [rows, cols] fp32. The
planted bug (cases.py) takes the consumer's loop out of skippable(): on a skipped tile it waits for
rows nobody produces.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "hopper"))
import _common  # noqa: E402

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,  # noqa: E402
                       TaskLocalVariable, TaskManager, TileSchedulerConfig, WorkQueue, consumer_work, domain_loop,
                       producer_work, schedule, threads, trip_count, work_tile_loop)

TILE = 32  # columns per tile: one per lane
STAGES = 2


@dataclass(kw_only=True, eq=False)
class OverlaunchedQueue(WorkQueue):
    logical_tiles: Any = 0

    @cute.jit
    def skip_work_tile_if(self, work_tile) -> cutlass.Boolean:
        tile_x, _, _ = work_tile.tile_idx
        return tile_x >= self.logical_tiles


def _col(stage_info):
    tile_x, _, _ = stage_info.work_tile.tile_idx
    return tile_x * TILE + cute.arch.lane_idx()


@dataclass(kw_only=True)
class Ring(MemoryResource):
    x: Any = None
    allocator: Any = None
    alloc: Any = None
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    def get_smem_requirements(self):
        return [self.alloc]

    def _smem(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((TILE, STAGES)))

    @producer_work
    @cute.jit
    def fill(self, stage_info: StageInfo):
        col, row, x = _col(stage_info), stage_info.loop_offset, self.x
        v = cutlass.Float32(0.0)
        if col < cute.size(x, mode=[1]):
            v = x[row, col]
        self._smem()[cute.arch.lane_idx(), stage_info.stage_idx] = v

    @consumer_work(returns=v)
    def read(self, stage_info: StageInfo):
        return self._smem()[cute.arch.lane_idx(), stage_info.stage_idx]


@dataclass(kw_only=True)
class Out(MemoryResource):
    y: Any = None

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, v):
        col, row, y = _col(stage_info), stage_info.loop_offset, self.y
        if col < cute.size(y, mode=[1]):
            y[row, col] = v


@schedule
def producer_schedule(ring, wq, rows):
    with work_tile_loop(wq, skip_if=OverlaunchedQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, rows, 1):
            ring.acquire()
            ring.fill()
            ring.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def consumer_schedule(ring, out, wq, rows):
    with work_tile_loop(wq, skip_if=OverlaunchedQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, rows, 1):  # @skip_consumer_loop
            ring.wait()
            v = ring.read()
            ring.release()
            out.store(v=v)
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def build(x=None, y=None, rows=None, logical_tiles=None, launch_tiles=None, verbose=True, **manager_options):
    """CPU: runtime values None (every row count, every number of tiles per CTA); the kernel passes them."""
    rows = trip_count("rows", rows)
    allocator = SmemAllocator()
    ring = Ring(name="Ring", x=x, allocator=allocator, alloc=SmemAllocation("ring", dtype=cutlass.Float32,
                                                                            count=TILE * STAGES, alignment=128),
                pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
                    num_stages=STAGES, producer_group=threads(32), consumer_group=threads(32)))
    allocator.add_resource(ring)
    allocator.compute_layout()
    out = Out(name="Out", y=y)
    wq = OverlaunchedQueue(name="WorkQueue", logical_tiles=logical_tiles,
                           tile_scheduler_config=TileSchedulerConfig(num_tiles=launch_tiles))
    tasks = [Task(name="ProducerTask", src_resources=[wq], dst_resources=[ring], warp_idx=0, num_warps=1,
                  schedule=producer_schedule(ring, wq, rows)),
             Task(name="ConsumerTask", src_resources=[ring, wq], dst_resources=[out], warp_idx=1, num_warps=1,
                  schedule=consumer_schedule(ring, out, wq, rows))]
    return TaskManager(tasks=tasks, resource_dependency_graph={ring: [wq], out: [ring, wq]},
                       smem_allocator=allocator, verbose=verbose, **manager_options)


@cute.kernel
def skip_kernel(mx: cute.Tensor, my: cute.Tensor, launch_tiles: cutlass.Int32):
    rows = cute.size(mx, mode=[0])
    logical = cute.ceil_div(cute.size(mx, mode=[1]), TILE)
    mgr = build(mx, my, rows=rows, logical_tiles=logical, launch_tiles=launch_tiles, verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def skip_host(mx: cute.Tensor, my: cute.Tensor, launch_tiles: cutlass.Int32, grid: cutlass.Int32, stream):
    skip_kernel(mx, my, launch_tiles).launch(grid=[grid, 1, 1], block=[64, 1, 1], stream=stream)


_CACHE = {}


def run(x, y, overlaunch_tiles=2, grid=2):
    logical = -(-x.shape[1] // TILE)
    launch = logical + overlaunch_tiles
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if "f" not in _CACHE:
        _CACHE["f"] = cute.compile(skip_host, mx, my, cutlass.Int32(launch), cutlass.Int32(grid), stream,
                                   options=_common.PTX_OPTIONS)
    _CACHE["f"](mx, my, cutlass.Int32(launch), cutlass.Int32(grid), stream)


def reference(x):
    return x.clone()


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    M, N = cute.sym_int32(), cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    return cute.compile(skip_host, x, y, cutlass.Int32(4), cutlass.Int32(2), make_fake_stream(),
                        options=_common.ptx_options(arch))
