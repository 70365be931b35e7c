"""Your first warpsched kernel: y = 2 * x, rows streamed through a 2-stage SMEM ring.

    LoadTask  (warp 0):  for i in range(rows):
                             v = gmem_x.load()          # x[i, lane]
                             ring.acquire()             # wait until stage i % 2 is empty
                             ring.write(v=v)            # SMEM stage
                             ring.commit()              # the stage is full
    ScaleTask (warp 1):  for i in range(rows):
                             ring.wait()                # wait until stage i % 2 is full
                             v = ring.read()
                             ring.release()             # the stage is empty again
                             gmem_y.store(v=v)          # y[i, lane] = 2 v

Check it on the CPU:   warpsched check examples/hopper/first_kernel.py
Compile it (CPU):      CUTE_DSL_ARCH=sm_90a python examples/hopper/first_kernel.py
Run it (H200):         python -c "import first_kernel as k, torch; ..."   (see docs/first_kernel.md)
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
                       TaskLocalVariable, TaskManager, consumer_work, domain_loop, producer_work, schedule,
                       threads, trip_count)

STAGES = 2
WIDTH = 32  # elements per row = the 32 lanes of one warp


def lane():
    tidx, _, _ = cute.arch.thread_idx()
    return tidx % WIDTH


# ------------------------------------------------------------------ resources: where data lives
@dataclass(kw_only=True)
class GmemX(MemoryResource):
    x: Any = None
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    @consumer_work(returns=v)  # reads data out of this resource; its result is a token
    def load(self, stage_info: StageInfo):
        return self.x[stage_info.loop_offset, lane()]


@dataclass(kw_only=True)
class Ring(MemoryResource):  # a pipelined resource: STAGES slots with full/empty barriers
    allocator: Any = None
    alloc: Any = None
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    def get_smem_requirements(self):
        return [self.alloc]

    def _smem(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, STAGES)))

    @producer_work  # writes data into the stage the producer acquired
    def write(self, stage_info: StageInfo, v):
        self._smem()[lane(), stage_info.stage_idx] = v

    @consumer_work(returns=v)  # reads the stage the consumer waited for
    def read(self, stage_info: StageInfo):
        return self._smem()[lane(), stage_info.stage_idx]


@dataclass(kw_only=True)
class GmemY(MemoryResource):
    y: Any = None

    @producer_work
    def store(self, stage_info: StageInfo, v):
        self.y[stage_info.loop_offset, lane()] = v * cutlass.Float32(2.0)


# ------------------------------------------------------------------ schedules: the order of calls
@schedule
def load_schedule(gmem_x, ring, rows):
    with domain_loop(0, rows):
        v = gmem_x.load()
        ring.acquire()
        ring.write(v=v)
        ring.commit()


@schedule
def scale_schedule(ring, gmem_y, rows):
    with domain_loop(0, rows):
        ring.wait()
        v = ring.read()
        ring.release()
        gmem_y.store(v=v)


# ------------------------------------------------------------------ the program
def build(x=None, y=None, rows=None, verbose=True, **manager_options):
    """One build for both sides: ``warpsched check`` calls it with no tensors (``rows`` is then
    any count >= 1), the kernel with its tensors and the runtime row count."""
    rows = trip_count("rows", rows)
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=STAGES, producer_group=threads(32),
                                                         consumer_group=threads(32))
    allocator = SmemAllocator()
    gmem_x, gmem_y = GmemX(name="GmemX", x=x), GmemY(name="GmemY", y=y)
    ring = Ring(name="Ring", pipeline_config=cfg, allocator=allocator,
                alloc=SmemAllocation("ring", dtype=cutlass.Float32, count=WIDTH * STAGES, alignment=128))
    allocator.add_resource(ring)
    allocator.compute_layout()
    tasks = [Task(name="LoadTask", src_resources=[gmem_x], dst_resources=[ring], warp_idx=0, num_warps=1,
                  schedule=load_schedule(gmem_x, ring, rows)),
             Task(name="ScaleTask", src_resources=[ring], dst_resources=[gmem_y], warp_idx=1, num_warps=1,
                  schedule=scale_schedule(ring, gmem_y, rows))]
    graph = {ring: [gmem_x], gmem_y: [ring]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


# ------------------------------------------------------------------ the kernel and its host side
@cute.kernel
def scale_kernel(mx: cute.Tensor, my: cute.Tensor):
    mgr = build(mx, my, rows=cute.size(mx, mode=[0]), verbose=False)  # checked here, while tracing
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def scale_host(mx: cute.Tensor, my: cute.Tensor, stream):
    scale_kernel(mx, my).launch(grid=[1, 1, 1], block=[64, 1, 1], stream=stream)


_CACHE = {}


def scale(x, y):
    """y = 2 * x for float32 tensors of shape [rows, 32] on the GPU."""
    if x.dtype != y.dtype or x.shape != y.shape or x.dim() != 2 or x.shape[1] != WIDTH:
        raise ValueError(f"scale(x, y) needs two float32 [rows, {WIDTH}] tensors, got {tuple(x.shape)} "
                         f"{x.dtype} and {tuple(y.shape)} {y.dtype}")
    mx, my = _common.to_cute(x, leading_dim=1), _common.to_cute(y, leading_dim=1)  # dynamic rows: one compile
    stream = _common.current_stream()
    if "f" not in _CACHE:
        _CACHE["f"] = cute.compile(scale_host, mx, my, stream, options=_common.PTX_OPTIONS)
    _CACHE["f"](mx, my, stream)


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    rows = cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (rows, WIDTH), (WIDTH, 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (rows, WIDTH), (WIDTH, 1), assumed_align=16)
    return cute.compile(scale_host, x, y, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    print(_common.count_ptx(compile_for_cpu().artifacts.PTX))
