"""Two consumer tasks that hold one stage at once, each rewriting its own half of it in place.

    LoadTask (warp 0):  for i in range(n):  ring.acquire(); ring.fill(); ring.commit()      # x[i, :] -> the stage
    Half0 (warp 1):     for i in range(n):  ring.wait(); ring.double(half=0); ring.store(half=0); ring.release()
    Half1 (warp 2):     the same with half=1

y = 2 * x for x, y: [n, 64] fp32, row i through a 2-stage ring whose stage is the row: Half h doubles the 32
values of half h where they lie (a ``WorkAttr.WRITES`` consumer work) and stores them from there. The pipeline
orders those writes against the load of the next row into the stage, but not against the other consumer, which
holds the same stage at the same time; so the ring declares what each task touches (``consumer_footprint``:
half h, read and written, by task Half h), and the checker proves no part one task writes is one the other
touches. The work bodies report the half they index (``stage_info.touches``), and the lowering holds each report
to the running task's footprint while the kernel is traced: a half index passed wrong from the schedule
(``double(half=0)`` in both tasks: a race the footprints alone would not show) is refused at that call.
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

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task, TaskManager,
                       WorkAttr, consumer_work, domain_loop, producer_work, schedule, threads, trip_count)

STAGES = 2
HALF = 32  # values per half row = threads per consumer task
WIDTH = 2 * HALF


def _lane():
    tidx, _, _ = cute.arch.thread_idx()
    return tidx % 32


@dataclass(kw_only=True)
class Ring(MemoryResource):
    allocator: Any = None
    alloc: Any = None
    x: Any = None
    y: Any = None

    def get_smem_requirements(self):
        return [self.alloc]

    def _smem(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, STAGES)))

    def consumer_footprint(self, task_name):
        """Task Half h touches half h of the stage, and writes it."""
        return {f"H{task_name[-1]}": "rw"}

    @producer_work
    def fill(self, stage_info: StageInfo):
        for h in range(2):  # the load warp's 32 threads copy the row, half by half
            self._smem()[h * HALF + _lane(), stage_info.stage_idx] = self.x[stage_info.loop_offset, h * HALF + _lane()]

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def double(self, stage_info: StageInfo, *, half: cutlass.Constexpr = 0):
        stage_info.touches(f"H{half}", "w")  # held to this task's consumer_footprint while traced
        s = self._smem()
        s[half * HALF + _lane(), stage_info.stage_idx] = 2.0 * s[half * HALF + _lane(), stage_info.stage_idx]
        stage_info.context.sync_task()  # the task's own named barrier: no id picked by hand

    @consumer_work
    def store(self, stage_info: StageInfo, *, half: cutlass.Constexpr = 0):
        stage_info.touches(f"H{half}")
        self.y[stage_info.loop_offset, half * HALF + _lane()] = self._smem()[half * HALF + _lane(),
                                                                            stage_info.stage_idx]


@schedule
def load_schedule(ring, n):
    with domain_loop(0, n, 1):
        ring.acquire()
        ring.fill()
        ring.commit()


@schedule
def half_schedule(ring, n, half):
    with domain_loop(0, n, 1):
        ring.wait()
        ring.double(half=half)
        ring.store(half=half)
        ring.release()


def build(x=None, y=None, n=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: ``n`` None) and the kernel (``n`` = rows of x)."""
    n = trip_count("rows", n)
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=STAGES, producer_group=threads(32),
                                                         consumer_group=threads(2 * 32))
    allocator = SmemAllocator()
    ring = Ring(name="Ring", pipeline_config=cfg, allocator=allocator, x=x, y=y,
                alloc=SmemAllocation("ring", dtype=cutlass.Float32, count=WIDTH * STAGES, alignment=128))
    allocator.add_resource(ring)
    allocator.compute_layout()
    tasks = [Task(name="LoadTask", dst_resources=[ring], warp_idx=0, num_warps=1, schedule=load_schedule(ring, n))]
    tasks += [Task(name=f"Half{h}", src_resources=[ring], warp_idx=1 + h, num_warps=1,
                   schedule=half_schedule(ring, n, h)) for h in range(2)]
    return TaskManager(tasks=tasks, resource_dependency_graph={ring: []}, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


@cute.kernel
def shared_stage_kernel(mx: cute.Tensor, my: cute.Tensor):
    mgr = build(mx, my, n=cute.size(mx, mode=[0]), verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def shared_stage_host(mx: cute.Tensor, my: cute.Tensor, stream):
    shared_stage_kernel(mx, my).launch(grid=[1, 1, 1], block=[96, 1, 1], stream=stream)


_CACHE = []


def run(x, y):
    """x, y: [n, 64] fp32 on the GPU; y = 2 * x."""
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if not _CACHE:
        _CACHE.append(cute.compile(shared_stage_host, mx, my, stream, options=_common.PTX_OPTIONS))
    _CACHE[0](mx, my, stream)


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    t = [make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(2)]
    return cute.compile(shared_stage_host, *t, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
