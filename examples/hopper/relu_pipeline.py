"""AsyncAsync pipeline between two 2-warp tasks, exercising every runtime guard of the lowering.

    ProducerTask (warps 0-1):  pdl.wait_griddep()
                               for i in range(n):
                                   v = src.load()                    # x[i, t]
                                   buf.try_acquire(); buf.acquire()
                                   buf.write(v=v)                    # SMEM stage
                                   buf.commit()                      # TaskWarpLeader: named barrier over the
                                                                     # task, then warp 0's 32 threads arrive
    ConsumerTask (warps 2-3):  for i in range(n) as d:
                                   buf.try_wait(); buf.wait()
                                   x = buf.read(); pos = buf.is_positive(x=x)
                                   buf.release()                     # all 64 threads arrive
                                   when_true(pos):  dst.store(x=x)
                                   when_false(pos): dst.store_zero()
                                   d.every(2, start=1): dst.mark(tag=1)
                                   d.last_iter():       dst.mark(tag=2)
                               launch.launch_griddep()

y = relu(x) and z[i] = 2 on the last row, 1 on odd rows, untouched (0) elsewhere; x, y, z: [n, 64] fp32.
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

from warpsched import (BarrierAllocator, MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig,
                       SignalingThreads, SmemAllocation, SmemAllocator, StageInfo, Task, TaskLocalVariable,
                       TaskManager, WorkAttr, consumer_work, domain_loop, producer_work, schedule, threads,
                       trip_count, when_false, when_true)

STAGES = 2
WIDTH = 64  # elements per row = threads per task


def _lane64():
    tidx, _, _ = cute.arch.thread_idx()
    return tidx % WIDTH


@dataclass(kw_only=True)
class Src(MemoryResource):
    x: Any = None
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    @consumer_work(returns=v)
    def load(self, stage_info: StageInfo):
        return self.x[stage_info.loop_offset, _lane64()]


@dataclass(kw_only=True)
class Buf(MemoryResource):
    allocator: Any = None
    alloc: Any = None
    val: Any = TaskLocalVariable.uninitialized()
    pos: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.val = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)
        self.pos = TaskLocalVariable(dtype=cutlass.Boolean, default=False)

    def get_smem_requirements(self):
        return [self.alloc]

    def _smem(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, STAGES)))

    @producer_work
    def write(self, stage_info: StageInfo, v):
        self._smem()[_lane64(), stage_info.stage_idx] = v

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo):
        return self._smem()[_lane64(), stage_info.stage_idx]

    @consumer_work(returns=pos, work_attrs=WorkAttr.AUXILIARY)
    def is_positive(self, stage_info: StageInfo, x):
        return x > 0.0


@dataclass(kw_only=True)
class Dst(MemoryResource):
    y: Any = None
    z: Any = None

    @producer_work
    def store(self, stage_info: StageInfo, x):
        self.y[stage_info.loop_offset, _lane64()] = x

    @producer_work
    def store_zero(self, stage_info: StageInfo):
        self.y[stage_info.loop_offset, _lane64()] = cutlass.Float32(0.0)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def mark(self, stage_info: StageInfo, *, tag: cutlass.Constexpr = 1):
        self.z[stage_info.loop_offset, _lane64()] = cutlass.Float32(tag)


@schedule
def producer_schedule(pdl, src, buf, n):
    pdl.wait_griddep()
    with domain_loop(0, n, 1):
        v = src.load()
        buf.try_acquire()
        buf.acquire()
        buf.write(v=v)
        buf.commit()


@schedule
def consumer_schedule(buf, dst, launch, n):
    with domain_loop(0, n, 1) as d:
        buf.try_wait()
        buf.wait()
        x = buf.read()
        pos = buf.is_positive(x=x)
        buf.release()
        with when_true(pos):
            dst.store(x=x)
        with when_false(pos):
            dst.store_zero()
        with d.every(2, start=1):
            dst.mark(tag=1)
        with d.last_iter():
            dst.mark(tag=2)
    launch.launch_griddep()


def build(x=None, y=None, z=None, n=None, verbose=True, coalesced_barriers=False, **manager_options):
    """The program, for ``warpsched check`` (CPU: ``n`` None) and the kernel (``n`` = rows of x).
    ``coalesced_barriers``: the pipeline's mbarriers live in a BarrierAllocator array placed in the
    unified SMEM block instead of a self-allocated array."""
    n = trip_count("rows", n)
    cfg = PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=STAGES, producer_group=threads(32), consumer_group=threads(2 * 32),
        producer_signaling_threads=SignalingThreads.TaskWarpLeader)
    allocator = SmemAllocator()
    pdl, launch = PdlWaitBarrier(name="PdlWait"), PdlLaunchBarrier(name="PdlLaunch")
    src, dst = Src(name="Src", x=x), Dst(name="Dst", y=y, z=z)
    buf = Buf(name="Buf", pipeline_config=cfg, allocator=allocator,
              alloc=SmemAllocation("buf", dtype=cutlass.Float32, count=WIDTH * STAGES, alignment=128))
    allocator.add_resource(buf)
    barriers = None
    if coalesced_barriers:
        barriers = BarrierAllocator()
        barriers.add_resource(buf)
        barriers.compute_layout()
        barriers.set_backing(allocator)
    allocator.compute_layout()
    tasks = [Task(name="ProducerTask", src_resources=[pdl, src], dst_resources=[buf], warp_idx=0, num_warps=2,
                  schedule=producer_schedule(pdl, src, buf, n)),
             Task(name="ConsumerTask", src_resources=[buf], dst_resources=[dst, launch], warp_idx=2, num_warps=2,
                  schedule=consumer_schedule(buf, dst, launch, n))]
    graph = {src: [pdl], buf: [src], dst: [buf], launch: [dst]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator,
                       barrier_allocator=barriers, verbose=verbose, **manager_options)


@cute.kernel
def relu_kernel(mx: cute.Tensor, my: cute.Tensor, mz: cute.Tensor, coalesced: cutlass.Constexpr = False):
    mgr = build(mx, my, mz, n=cute.size(mx, mode=[0]), verbose=False, coalesced_barriers=coalesced)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def relu_host(mx: cute.Tensor, my: cute.Tensor, mz: cute.Tensor, stream, coalesced: cutlass.Constexpr = False):
    relu_kernel(mx, my, mz, coalesced).launch(grid=[1, 1, 1], block=[128, 1, 1], stream=stream)


_CACHE = {}


def run(x, y, z, coalesced=False):
    """x, y, z: [n, 64] fp32 on the GPU; y = relu(x), z marks (see the module doc)."""
    mx, my, mz = _common.to_cute(x, 1), _common.to_cute(y, 1), _common.to_cute(z, 1)
    stream = _common.current_stream()
    if coalesced not in _CACHE:
        _CACHE[coalesced] = cute.compile(relu_host, mx, my, mz, stream, coalesced, options=_common.PTX_OPTIONS)
    _CACHE[coalesced](mx, my, mz, stream)


def reference(x):
    import torch

    y = torch.relu(x)
    z = torch.zeros_like(x)
    z[1::2] = 1
    z[-1] = 2
    return y, z


def compile_for_cpu(arch="sm_90a", coalesced=False):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    t = [make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(3)]
    return cute.compile(relu_host, *t, make_fake_stream(), coalesced, options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
