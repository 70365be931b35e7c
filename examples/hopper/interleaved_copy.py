"""Interleaved pipeline lanes, both modes of the scheduling-patterns page, as a row copy.

x, y: [n, 32] fp32; one pipeline stage holds one row; AsyncAsync, 4 stages.

mode="warp"  (interleave_stride=2, warp-lane): ProducerTask and ConsumerTask have 2 warps each;
             warp w owns lane w (stages w, w+2) and handles rows 2*i + w.
mode="domain" (interleave_stride=(1, 1, 2, 2), domain-lane): one dense producer warp fills row i into
             stage i % 4; two 1-warp sibling consumer tasks run domain_loop(lane, n, 2) and read
             their lane's stages (lane, lane + 2).
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

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, consumer_work, domain_loop, producer_work, schedule, threads,
                       trip_count)

STAGES = 4
WIDTH = 32


@dataclass(kw_only=True)
class Rows(MemoryResource):
    x: Any = None
    y: Any = None
    n: Any = 0
    lanes_per_iter: Any = 1  # rows per iteration (2 in warp-lane mode: one per warp)
    allocator: Any = None
    alloc: Any = None
    val: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.val = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    def get_smem_requirements(self):
        return [self.alloc]

    def _row(self, stage_info):
        w = cute.arch.make_warp_uniform(cute.arch.warp_idx()) % self.lanes_per_iter
        return stage_info.loop_offset * self.lanes_per_iter + w

    def _smem(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, STAGES)))

    @producer_work
    @cute.jit
    def fill(self, stage_info: StageInfo):
        row, lane = self._row(stage_info), cute.arch.lane_idx()
        x, smem = self.x, self._smem()
        v = cutlass.Float32(0.0)
        if row < self.n:
            v = x[row, lane]
        smem[lane, stage_info.stage_idx] = v

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo):
        return self._smem()[cute.arch.lane_idx(), stage_info.stage_idx]


@dataclass(kw_only=True)
class Out(MemoryResource):
    rows: Any = None

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, v):
        row, lane = self.rows._row(stage_info), cute.arch.lane_idx()
        y = self.rows.y
        if row < self.rows.n:
            y[row, lane] = v


@schedule
def produce(rows, start, end, step):
    with domain_loop(start, end, step):
        rows.acquire()
        rows.fill()
        rows.commit()


@schedule
def consume(rows, out, start, end, step):
    with domain_loop(start, end, step):
        rows.wait()
        v = rows.read()
        rows.release()
        out.store(v=v)


def build(x=None, y=None, n=None, mode="warp", verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: ``n`` None) and the kernel (``n`` = rows of x).
    Warp-lane mode runs ceil(n / 2) iterations (two rows each, one per warp)."""
    warp_lane = mode == "warp"
    cfg = PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=STAGES, producer_group=threads(32), consumer_group=threads(32),
        interleave_stride=2 if warp_lane else (1, 1, 2, 2))
    allocator = SmemAllocator()
    rows = Rows(name="Rows", pipeline_config=cfg, x=x, y=y, n=n, lanes_per_iter=2 if warp_lane else 1,
                allocator=allocator, alloc=SmemAllocation("rows", dtype=cutlass.Float32, count=WIDTH * STAGES))
    out = Out(name="Out", rows=rows)
    allocator.add_resource(rows)
    allocator.compute_layout()
    if warp_lane:
        iters = trip_count("row_pairs", None if n is None else (n + 1) // 2)
        tasks = [Task(name="ProducerTask", dst_resources=[rows], warp_idx=0, num_warps=2,
                      schedule=produce(rows, 0, iters, 1)),
                 Task(name="ConsumerTask", src_resources=[rows], dst_resources=[out], warp_idx=2, num_warps=2,
                      schedule=consume(rows, out, 0, iters, 1))]
    else:
        rows_n = trip_count("rows", n)
        tasks = [Task(name="ProducerTask", dst_resources=[rows], warp_idx=0, num_warps=1,
                      schedule=produce(rows, 0, rows_n, 1))]
        tasks += [Task(name=f"ConsumerLane{lane}", src_resources=[rows], dst_resources=[out], warp_idx=1 + lane,
                       num_warps=1, schedule=consume(rows, out, lane, rows_n, 2)) for lane in range(2)]
    return TaskManager(tasks=tasks, resource_dependency_graph={out: [rows]}, smem_allocator=allocator,
                       verbose=verbose, **manager_options)


class InterleavedCopy:
    def __init__(self, mode):
        self.mode = mode

    @cute.jit
    def __call__(self, mx: cute.Tensor, my: cute.Tensor, stream):
        self.kernel(mx, my).launch(grid=[1, 1, 1], block=[4 * 32 if self.mode == "warp" else 3 * 32, 1, 1],
                                   stream=stream)

    @cute.kernel
    def kernel(self, mx: cute.Tensor, my: cute.Tensor):
        mgr = build(mx, my, n=cute.size(mx, mode=[0]), mode=self.mode, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def copy(x, y, mode="warp"):
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if mode not in _CACHE:
        _CACHE[mode] = cute.compile(InterleavedCopy(mode), mx, my, stream, options=_common.PTX_OPTIONS)
    _CACHE[mode](mx, my, stream)


def compile_for_cpu(arch="sm_90a", mode="warp"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16)
    return cute.compile(InterleavedCopy(mode), x, y, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    for m in ("warp", "domain"):
        print(m, _common.count_ptx(compile_for_cpu(mode=m).artifacts.PTX))
        build(mode=m, verbose=False)
