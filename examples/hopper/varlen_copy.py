"""Variable-length copy: a dynamic domain per work tile (one tile = one segment).

    VarlenTask (warps 0-3), a Task subclass providing get_domain_size(tile_coord):
        with work_tile_loop(wq):
            with domain_loop(tx, VarlenTask.get_domain_size, THREADS):
                copy.copy_element()             # element `loop_offset` of segment `work_tile`
            wq.try_wait(); wq.wait(); wq.get_and_advance_work_tile(); wq.release()

Segment s spans offsets[s] .. offsets[s+1] of a flat fp32 vector. Host: ``copy(x, y, lengths)``.
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

THREADS = 128


class VarlenTask(Task):
    """Supplies the per-tile (per-segment) domain size."""

    def __init__(self, offsets=None, **kw):
        super().__init__(**kw)
        self._offsets = offsets

    @cute.jit
    def get_domain_size(self, tile_coord):
        return self._offsets[tile_coord[0] + 1] - self._offsets[tile_coord[0]]


@dataclass(kw_only=True)
class Segments(MemoryResource):
    src: Any = None
    dst: Any = None
    offsets: Any = None

    @producer_work
    @cute.jit
    def copy_element(self, stage_info: StageInfo):
        seg, _, _ = stage_info.work_tile.tile_idx
        i = self.offsets[seg] + stage_info.loop_offset
        self.dst[i] = self.src[i]


@schedule
def varlen_schedule(seg, wq, start):
    with work_tile_loop(wq):
        with domain_loop(start, VarlenTask.get_domain_size, THREADS):
            seg.copy_element()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def build(src=None, dst=None, offsets=None, num_segments=None, start=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: runtime values None) and the kernel. ``start`` is the
    thread's first element of each segment; the segment length comes from the task's provider."""
    start = trip_count("thread", start, min=0)
    seg = Segments(name="Segments", src=src, dst=dst, offsets=offsets)
    wq = WorkQueue(name="WorkQueue", tile_scheduler_config=TileSchedulerConfig(num_tiles=num_segments))
    task = VarlenTask(offsets=offsets, name="VarlenTask", src_resources=[wq], dst_resources=[seg], warp_idx=0,
                      num_warps=THREADS // 32, schedule=varlen_schedule(seg, wq, start))
    return TaskManager(tasks=[task], resource_dependency_graph={seg: [wq]}, verbose=verbose, **manager_options)


@cute.kernel
def varlen_kernel(mx: cute.Tensor, my: cute.Tensor, offs: cute.Tensor):
    tx, _, _ = cute.arch.thread_idx()
    mgr = build(mx, my, offs, num_segments=cute.size(offs, mode=[0]) - 1, start=tx, verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def varlen_host(mx: cute.Tensor, my: cute.Tensor, offs: cute.Tensor, grid: cutlass.Int32, stream):
    varlen_kernel(mx, my, offs).launch(grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)


_CACHE = {}


def copy(x, y, lengths, grid=None):
    """y[:] = x, segment by segment (lengths may be 0)."""
    import torch

    offsets = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=x.device)
    grid = grid or max(1, min(len(lengths), 64))
    mx, my, mo = _common.to_cute(x, 0), _common.to_cute(y, 0), _common.to_cute(offsets, 0)
    stream = _common.current_stream()
    if "f" not in _CACHE:
        _CACHE["f"] = cute.compile(varlen_host, mx, my, mo, cutlass.Int32(grid), stream, options=_common.PTX_OPTIONS)
    _CACHE["f"](mx, my, mo, cutlass.Int32(grid), stream)


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n, s = cute.sym_int32(), cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (n,), (1,), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (n,), (1,), assumed_align=16)
    o = make_fake_tensor(cutlass.Int32, (s,), (1,), assumed_align=16)
    return cute.compile(varlen_host, x, y, o, cutlass.Int32(8), make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
