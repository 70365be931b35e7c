"""CLC dynamic persistent copy (Blackwell, compiles for sm_100a; cannot run on the H200).

A WorkQueue with a ClcFetchAsync pipeline hands out tiles through Cluster Launch Control: a
scheduler warp cancels not-yet-started CTAs and passes their tiles on; every task ends each tile
with the standard queue epilogue.

    SchedTask (warp 4):   with work_tile_loop(wq):
                              wq.try_acquire(); wq.acquire()       # lane 0 arms 16 bytes
                              wq.fetch_work_tile()                 # clusterlaunchcontrol.try_cancel
                              wq.commit()
                              wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()
    CopyTask (warps 0-3): with work_tile_loop(wq):
                              with domain_loop(0, rows, 1): copy.copy_tile_row()
                              wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()

x, y: [rows, cols] fp32, 128-column tiles, grid = one CTA per tile.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

try:
    from ..hopper import _common
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hopper"))
    import _common  # type: ignore

import cutlass
import cutlass.cute as cute

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskManager, WorkQueue, domain_loop,
                       producer_work, schedule, threads, trip_count, work_tile_loop)

TILE = 128
COPY_WARPS = 4
STAGES = 2


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
        src, dst, row = self.src, self.dst, stage_info.loop_offset
        if col < cute.size(src, mode=[1]):
            dst[row, col] = src[row, col]


@schedule
def sched_schedule(wq):
    with work_tile_loop(wq):
        wq.try_acquire()
        wq.acquire()
        wq.fetch_work_tile()
        wq.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def copy_schedule(copy, wq, rows):
    with work_tile_loop(wq):
        with domain_loop(0, rows, 1):
            copy.copy_tile_row()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def build(src=None, dst=None, rows=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: ``rows`` None) and the kernel (rows of x)."""
    rows = trip_count("rows", rows)
    cfg = PipelineConfig.create_clc_fetch_async_pipeline_cfg(
        num_stages=STAGES, producer_group=threads(1),
        consumer_group=threads((COPY_WARPS + 1) * 32),  # every thread of both tasks releases a response
        cta_layout_vmnk=(1, 1, 1, 1))
    wq = WorkQueue(name="ClcQueue", pipeline_config=cfg)
    copy = CopyColumns(name="Copy", src=src, dst=dst)
    tasks = [Task(name="CopyTask", src_resources=[wq], dst_resources=[copy], warp_idx=0, num_warps=COPY_WARPS,
                  schedule=copy_schedule(copy, wq, rows)),
             Task(name="SchedTask", src_resources=[wq], dst_resources=[wq], warp_idx=COPY_WARPS, num_warps=1,
                  schedule=sched_schedule(wq))]
    return TaskManager(tasks=tasks, resource_dependency_graph={copy: [wq]}, verbose=verbose, **manager_options)


@cute.kernel
def clc_copy_kernel(mx: cute.Tensor, my: cute.Tensor):
    mgr = build(mx, my, rows=cute.size(mx, mode=[0]), verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def clc_copy_host(mx: cute.Tensor, my: cute.Tensor, stream):
    tiles = cute.ceil_div(cute.size(mx, mode=[1]), TILE)
    clc_copy_kernel(mx, my).launch(grid=[tiles, 1, 1], block=[(COPY_WARPS + 1) * 32, 1, 1], stream=stream)


def compile_for_cpu(arch="sm_100a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    M, N = cute.sym_int32(), cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    return cute.compile(clc_copy_host, x, y, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    ptx = compile_for_cpu().artifacts.PTX
    print(_common.count_ptx(ptx, _common.PTX_PATTERNS + ["clusterlaunchcontrol"]))
