"""Ping-pong on the H200: one SMEM slot transformed in place by two tasks, declared as a
self-edge, exactly the seed's schedules.

    Producer (warp 0):  for k in range(n_iters):
                            slot.acquire()
                            cur = slot.read_current()      # x[row] at k == 0, else the slot
                            slot.write_next(cur=cur)       # slot = f_k(cur) = 0.5 * cur + k / 8
                            slot.commit()
    Consumer (warp 1):  for k in range(n_iters):
                            slot.wait()
                            slot.transform_inplace()       # slot = g(slot) = 1 - 0.75 * slot; y[row] = slot
                            slot.release()

One CTA per row of x: [rows, 32] fp32 (one element per lane); the slot is one 32-float stage.
kind="async_async": threads write the slot, commit = 32 thread arrivals.
kind="tma_async":  write_next stores f_k(cur) to a GMEM scratch row, fences the proxies and
                   TMA-loads it back into the slot; acquire armed the 128 transaction bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    from ._path import _common
except ImportError:
    from _path import _common  # type: ignore

import cutlass
import cutlass.cute as cute

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, consumer_work, domain_loop, producer_work, schedule, threads,
                       trip_count)

WIDTH = 32
SLOT_BYTES = WIDTH * 4


def f_ref(v, k):
    return 0.5 * v + k / 8.0


def g_ref(v):
    return 1.0 - 0.75 * v


@dataclass(kw_only=True)
class SmemPingPong(MemoryResource):
    x: Any = None
    y: Any = None
    scratch: Any = None  # tma_async: TMA tensor of the GMEM scratch rows
    atom: Any = None
    allocator: Any = None
    alloc: Any = None
    cur: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.cur = TaskLocalVariable(dtype=cutlass.Float32, default=0.0, docs="this lane's element of the slot")

    def get_smem_requirements(self):
        return [self.alloc]

    def _slot(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout(WIDTH))

    @producer_work(returns=cur)
    @cute.jit
    def read_current(self, stage_info: StageInfo):
        row, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        v = self._slot()[lane]
        if stage_info.loop_offset == 0:
            v = self.x[row, lane]
        return v

    @producer_work
    @cute.jit
    def write_next(self, stage_info: StageInfo, cur):
        lane = cute.arch.lane_idx()
        nv = cur * cutlass.Float32(0.5) + cutlass.Float32(stage_info.loop_offset) * cutlass.Float32(0.125)
        if cutlass.const_expr(self.atom is None):
            self._slot()[lane] = nv
        else:
            row, _, _ = cute.arch.block_idx()
            self.scratch_plain[row, lane] = nv
            cute.arch.fence_proxy("async.global")  # generic GMEM writes -> the TMA's reads
            cute.arch.fence_proxy("async.shared", space="cta")  # consumer's generic slot writes -> TMA write
            cute.arch.sync_warp()
            # the whole warp calls the TMA copy: it elects one thread itself (elect.sync over the
            # full warp), so wrapping it in `if lane == 0` would hang
            s = cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((1, WIDTH), stride=(WIDTH, 1)))
            g = cute.local_tile(self.scratch, (1, WIDTH), (None, None))
            t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1),
                                                         cute.group_modes(s, 0, 2), cute.group_modes(g, 0, 2))
            stage_info.tma_copy(self.atom, t_g[(None, row, 0)], t_s)

    @consumer_work
    @cute.jit
    def transform_inplace(self, stage_info: StageInfo):
        row, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        slot = self._slot()
        nv = cutlass.Float32(1.0) - cutlass.Float32(0.75) * slot[lane]
        slot[lane] = nv
        self.y[row, lane] = nv


@schedule
def producer_schedule(smem_pp, n_iters):
    with domain_loop(0, n_iters, 1):
        smem_pp.acquire()
        cur = smem_pp.read_current()
        smem_pp.write_next(cur=cur)
        smem_pp.commit()


@schedule
def consumer_schedule(smem_pp, n_iters):
    with domain_loop(0, n_iters, 1):
        smem_pp.wait()
        smem_pp.transform_inplace()
        smem_pp.release()


def make_config(kind):
    if kind == "tma_async":
        return PipelineConfig.create_tma_async_pipeline_cfg(num_stages=1, num_bytes=SLOT_BYTES,
                                                           producer_group=threads(1), consumer_group=threads(1))
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(32),
                                                         consumer_group=threads(32))


def build(x=None, y=None, scratch=None, scratch_plain=None, atom=None, n_iters=None, kind="async_async", verbose=True,
          **manager_options):
    """The program, for ``warpsched check`` (CPU: ``n_iters`` None) and the kernel (its Int32 argument)."""
    n_iters = trip_count("n_iters", n_iters)
    allocator = SmemAllocator()
    smem_pp = SmemPingPong(name="SmemPP", pipeline_config=make_config(kind), x=x, y=y, scratch=scratch, atom=atom,
                           allocator=allocator,
                           alloc=SmemAllocation("slot", dtype=cutlass.Float32, count=WIDTH, alignment=128))
    smem_pp.scratch_plain = scratch_plain
    allocator.add_resource(smem_pp)
    allocator.compute_layout()
    producer_task = Task(name="Producer", dst_resources=[smem_pp], warp_idx=0, num_warps=1,
                         schedule=producer_schedule(smem_pp, n_iters))
    consumer_task = Task(name="Consumer", src_resources=[smem_pp], warp_idx=1, num_warps=1,
                         schedule=consumer_schedule(smem_pp, n_iters))
    return TaskManager(tasks=[producer_task, consumer_task], resource_dependency_graph={smem_pp: [smem_pp]},
                       smem_allocator=allocator, verbose=verbose, **manager_options)


class PingPong:
    def __init__(self, kind):
        self.kind = kind

    @cute.jit
    def __call__(self, mx: cute.Tensor, my: cute.Tensor, mscratch: cute.Tensor, n_iters: cutlass.Int32, stream):
        atom, tma_s = None, None
        if cutlass.const_expr(self.kind == "tma_async"):
            atom, tma_s = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mscratch,
                cute.make_layout((1, WIDTH), stride=(WIDTH, 1)), (1, WIDTH))
        rows = cute.size(mx, mode=[0])
        self.kernel(mx, my, mscratch, tma_s, atom, n_iters).launch(grid=[rows, 1, 1], block=[64, 1, 1],
                                                                  stream=stream)

    @cute.kernel
    def kernel(self, mx: cute.Tensor, my: cute.Tensor, mscratch: cute.Tensor, tma_s, atom, n_iters: cutlass.Int32):
        mgr = build(mx, my, scratch=tma_s, scratch_plain=mscratch, atom=atom, n_iters=n_iters, kind=self.kind,
                    verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def run(x, y, n_iters, kind="async_async"):
    """x, y: [rows, 32] fp32 on the GPU; y = the slot after n_iters rounds of g(f_k(.))."""
    import torch

    scratch = torch.empty_like(x)
    mx, my, ms = (_common.to_cute(t, 1) for t in (x, y, scratch))
    stream = _common.current_stream()
    if kind not in _CACHE:
        _CACHE[kind] = cute.compile(PingPong(kind), mx, my, ms, cutlass.Int32(n_iters), stream,
                                    options=_common.PTX_OPTIONS)
    _CACHE[kind](mx, my, ms, cutlass.Int32(n_iters), stream)


def reference(x, n_iters):
    v = x.clone()
    for k in range(n_iters):
        v = g_ref(f_ref(v, k))
    return v


def compile_for_cpu(arch="sm_90a", kind="async_async"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    x, y, s = (make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(3))
    return cute.compile(PingPong(kind), x, y, s, cutlass.Int32(6), make_fake_stream(),
                        options=_common.ptx_options(arch))


if __name__ == "__main__":
    for k in ("async_async", "tma_async"):
        print(k, _common.count_ptx(compile_for_cpu(kind=k).artifacts.PTX))
