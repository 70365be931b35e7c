"""Dynamic persistent copy on Hopper: a WorkQueue whose tiles come from an atomic counter.

The program is Blackwell's CLC copy (examples/blackwell/clc_copy.py): a scheduler warp fetches the next tile
into a 2-stage ``ClcFetchAsync`` ring and every task ends each tile with the queue epilogue. With
``TileSchedulerConfig(num_tiles=..., counter=...)`` the fetch is an atomic add on a global word (zero before
the launch), a shared store of the tile into the stage and the fetching thread's release arrival on the stage's
full barrier (lower/tile_queues.py; the CLC hardware instead completes 16 armed transaction bytes): a small
grid takes the tiles in order, each CTA the next one when it is free.

    SchedTask (warp 4):   with work_tile_loop(wq):
                              wq.acquire(); wq.fetch_work_tile(); wq.commit()     # atom.add + st.shared + arrive
                              wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()
    CopyTask (warps 0-3): with work_tile_loop(wq):
                              with domain_loop(0, rows, 1): copy.add_tile_row()  # y += x, once per tile
                              wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()

x, y: [rows, cols] fp32, 128-column tiles; ``copy(x, y, ctas)`` adds x into y with ``ctas`` CTAs (y == x after
one launch on a zero y only if every tile ran exactly once).
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

from warpsched import (LAUNCH_COUNTER, MemoryResource, PipelineConfig, StageInfo, Task, TaskManager,
                       TileSchedulerConfig, WorkQueue, domain_loop, producer_work, schedule, threads, trip_count,
                       work_tile_loop)

TILE = 128
COPY_WARPS = 4
STAGES = 2


@dataclass(kw_only=True)
class AddColumns(MemoryResource):
    src: Any = None
    dst: Any = None

    @producer_work
    @cute.jit
    def add_tile_row(self, stage_info: StageInfo):
        tx, _, _ = cute.arch.thread_idx()
        tile_x, _, _ = stage_info.work_tile.tile_idx
        col = tile_x * TILE + tx
        src, dst, row = self.src, self.dst, stage_info.loop_offset
        if col < cute.size(src, mode=[1]):
            dst[row, col] = dst[row, col] + src[row, col]


@schedule
def sched_schedule(wq):
    with work_tile_loop(wq):
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
            copy.add_tile_row()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def build(src=None, dst=None, counter=None, tiles=None, rows=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: ``rows`` None) and the kernel (rows of x, the tile count and
    the counter word)."""
    rows = trip_count("rows", rows)
    cfg = PipelineConfig.create_clc_fetch_async_pipeline_cfg(
        num_stages=STAGES, producer_group=threads(1),
        consumer_group=threads((COPY_WARPS + 1) * 32),  # every thread of both tasks releases a response
        cta_layout_vmnk=(1, 1, 1, 1))
    wq = WorkQueue(name="CounterQueue", pipeline_config=cfg,
                   tile_scheduler_config=TileSchedulerConfig(
                       num_tiles=tiles, counter=LAUNCH_COUNTER if counter is None else counter))
    copy = AddColumns(name="Add", src=src, dst=dst)
    tasks = [Task(name="CopyTask", src_resources=[wq], dst_resources=[copy], warp_idx=0, num_warps=COPY_WARPS,
                  schedule=copy_schedule(copy, wq, rows)),
             Task(name="SchedTask", src_resources=[wq], dst_resources=[wq], warp_idx=COPY_WARPS, num_warps=1,
                  schedule=sched_schedule(wq))]
    return TaskManager(tasks=tasks, resource_dependency_graph={copy: [wq]}, verbose=verbose, **manager_options)


@cute.kernel
def dynamic_copy_kernel(mx: cute.Tensor, my: cute.Tensor, mcounter: cute.Tensor):
    tiles = cute.ceil_div(cute.size(mx, mode=[1]), TILE)
    mgr = build(mx, my, mcounter, tiles, rows=cute.size(mx, mode=[0]), verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def dynamic_copy_host(mx: cute.Tensor, my: cute.Tensor, mcounter: cute.Tensor, ctas: cutlass.Int32, stream):
    # a cluster launch (of one CTA): the queue's cluster-scoped barrier ops address the cluster's shared memory
    dynamic_copy_kernel(mx, my, mcounter).launch(grid=[ctas, 1, 1], block=[(COPY_WARPS + 1) * 32, 1, 1],
                                                 cluster=[1, 1, 1], stream=stream)


def _fakes():
    from cutlass.cute.runtime import make_fake_tensor

    M, N = cute.sym_int32(), cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    counter = make_fake_tensor(cutlass.Int32, (1,), (1,), assumed_align=4)
    return x, y, counter


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream

    return cute.compile(dynamic_copy_host, *_fakes(), cutlass.Int32(1), make_fake_stream(),
                        options=_common.ptx_options(arch))


_CACHE = {}


def copy(x, y, ctas):
    """y += x (torch fp32 CUDA tensors, 2-D, row-major) over ``ctas`` persistent CTAs (at most the tile count)."""
    import torch

    counter = torch.zeros(1, dtype=torch.int32, device=x.device)  # zero before each launch
    tiles = -(-x.shape[1] // TILE)
    mx, my, mc = _common.to_cute(x, 1), _common.to_cute(y, 1), _common.to_cute(counter)
    stream = _common.current_stream()
    grid = cutlass.Int32(max(1, min(ctas, tiles)))
    if "f" not in _CACHE:
        _CACHE["f"] = cute.compile(dynamic_copy_host, mx, my, mc, grid, stream, options=_common.PTX_OPTIONS)
    _CACHE["f"](mx, my, mc, grid, stream)
    return counter


if __name__ == "__main__":
    print(_common.count_ptx(compile_for_cpu().artifacts.PTX,
                            _common.PTX_PATTERNS + ["mbarrier.arrive.release", "atom.global"]))
