"""A producer that walks its rows backwards, a consumer that walks forwards, guards on both.

    ProducerTask (warps 0-1):  for i in range(stride * n - 1, -1, -stride) as d:   # counts down
                                   v = src.load()                  # x[i // stride, t]
                                   buf.acquire()
                                   buf.write(v=v)                  # SMEM stage
                                   d.every(3, start=1): buf.bump() # +100 on zero-based iterations 1, 4, 7, ...
                                   buf.commit()
                                   d.first_iter(): mark.put(tag=1) # w[i // stride] = 1 (i = its first value)
                                   d.last_iter():  mark.put(tag=2) # w[0] = 2
    ConsumerTask (warps 2-3):  for j in range(n) as d:
                                   buf.wait(); y_j = buf.read(); buf.release()
                                   dst.store(x=y_j)                # y[j]
                                   d.every(2, start=1): dst.mark(tag=1)   # z[j] = 1 on odd j
                                   d.last_iter():       dst.mark(tag=2)   # z[n - 1] = 2

So y[j] = x[n - 1 - j] (+ 100 where j % 3 == 1): the guards count iterations from 0 whatever the
loop's start and step (model/iteration.py), and the reversed loop runs n iterations, as the checker
proves. ``n`` is a runtime trip_count (stride 1) or a compile-time int (any stride).

``variant="wrong"`` is issue 30's wrong program: the producer commits on zero-based iterations
0, 2, 4 of a 5-iteration reversed loop, the consumer waits on 1, 3: one stage is never consumed,
so the producer's end-of-kernel drain waits forever. warpsched rejects it (unconsumed commit, both
loops named with 5 iterations); built with ``skip_validation=True`` it hangs on the GPU.
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
WIDTH = 64  # elements per row = threads per task
WRONG_ROWS = 5  # the wrong variant's loops: range(5, 0, -1) and range(5, 0, -1)


def _lane64():
    tidx, _, _ = cute.arch.thread_idx()
    return tidx % WIDTH


@dataclass(kw_only=True)
class Src(MemoryResource):
    x: Any = None
    stride: int = 1
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    @consumer_work(returns=v)
    def load(self, stage_info: StageInfo):
        return self.x[stage_info.loop_offset // self.stride, _lane64()]


@dataclass(kw_only=True)
class Buf(MemoryResource):
    allocator: Any = None
    alloc: Any = None
    val: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.val = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    def get_smem_requirements(self):
        return [self.alloc]

    def _smem(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, STAGES)))

    @producer_work
    def write(self, stage_info: StageInfo, v):
        self._smem()[_lane64(), stage_info.stage_idx] = v

    @producer_work
    def bump(self, stage_info: StageInfo):
        s = self._smem()
        s[_lane64(), stage_info.stage_idx] = s[_lane64(), stage_info.stage_idx] + cutlass.Float32(100.0)

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo):
        return self._smem()[_lane64(), stage_info.stage_idx]


@dataclass(kw_only=True)
class Dst(MemoryResource):
    y: Any = None
    z: Any = None

    @producer_work
    def store(self, stage_info: StageInfo, x):
        self.y[stage_info.loop_offset, _lane64()] = x

    @producer_work
    def mark(self, stage_info: StageInfo, *, tag: cutlass.Constexpr = 1):
        self.z[stage_info.loop_offset, _lane64()] = cutlass.Float32(tag)


@dataclass(kw_only=True)
class Marks(MemoryResource):
    w: Any = None
    stride: int = 1

    @producer_work
    def put(self, stage_info: StageInfo, *, tag: cutlass.Constexpr = 1):
        self.w[stage_info.loop_offset // self.stride, _lane64()] = cutlass.Float32(tag)


@schedule
def producer_schedule(src, buf, marks, n, stride):
    with domain_loop(stride * n - 1 if stride > 1 else n - 1, -1, -stride) as d:
        v = src.load()
        buf.acquire()
        buf.write(v=v)
        with d.every(3, start=1):
            buf.bump()
        buf.commit()
        with d.first_iter():
            marks.put(tag=1)
        with d.last_iter():
            marks.put(tag=2)


@schedule
def consumer_schedule(buf, dst, n):
    with domain_loop(0, n) as d:
        buf.wait()
        y = buf.read()
        buf.release()
        dst.store(x=y)
        with d.every(2, start=1):
            dst.mark(tag=1)
        with d.last_iter():
            dst.mark(tag=2)


@schedule
def wrong_producer_schedule(src, buf, marks, n, stride):
    with domain_loop(WRONG_ROWS, 0, -1) as d:  # 5 iterations
        v = src.load()
        with d.every(2, start=0):  # zero-based 0, 2, 4: three commits
            buf.acquire()
            buf.write(v=v)
            buf.commit()
        with d.first_iter():
            marks.put(tag=1)


@schedule
def wrong_consumer_schedule(buf, dst, n):
    with domain_loop(WRONG_ROWS, 0, -1) as d:  # 5 iterations
        with d.every(2, start=1):  # zero-based 1, 3: two waits
            buf.wait()
            y = buf.read()
            dst.store(x=y)
            buf.release()


def build(x=None, y=None, z=None, w=None, n=None, stride=1, variant="right", verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: ``n`` None) and the kernel (``n`` = rows of x, a
    runtime value, or a compile-time int when ``stride`` > 1)."""
    if stride > 1 and type(n) is not int:
        raise ValueError("reversed_copy: stride > 1 needs a compile-time int n")
    rows = n if type(n) is int else trip_count("rows", n)
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=STAGES, producer_group=threads(2 * 32),
                                                         consumer_group=threads(2 * 32))
    allocator = SmemAllocator()
    src, dst = Src(name="Src", x=x, stride=stride), Dst(name="Dst", y=y, z=z)
    marks = Marks(name="Marks", w=w, stride=stride)
    buf = Buf(name="Buf", pipeline_config=cfg, allocator=allocator,
              alloc=SmemAllocation("buf", dtype=cutlass.Float32, count=WIDTH * STAGES, alignment=128))
    allocator.add_resource(buf)
    allocator.compute_layout()
    prod, cons = ((producer_schedule, consumer_schedule) if variant == "right"
                  else (wrong_producer_schedule, wrong_consumer_schedule))
    tasks = [Task(name="ProducerTask", src_resources=[src], dst_resources=[buf, marks], warp_idx=0, num_warps=2,
                  schedule=prod(src, buf, marks, rows, stride)),
             Task(name="ConsumerTask", src_resources=[buf], dst_resources=[dst], warp_idx=2, num_warps=2,
                  schedule=cons(buf, dst, rows))]
    graph = {buf: [src], dst: [buf], marks: [src]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


@cute.kernel
def reversed_kernel(mx: cute.Tensor, my: cute.Tensor, mz: cute.Tensor, mw: cute.Tensor,
                    n_static: cutlass.Constexpr = 0, stride: cutlass.Constexpr = 1,
                    variant: cutlass.Constexpr = "right"):
    n = n_static if n_static else cute.size(mx, mode=[0])
    mgr = build(mx, my, mz, mw, n=n, stride=stride, variant=variant, verbose=False,
                skip_validation=(variant == "wrong"))
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def reversed_host(mx: cute.Tensor, my: cute.Tensor, mz: cute.Tensor, mw: cute.Tensor, stream,
                  n_static: cutlass.Constexpr = 0, stride: cutlass.Constexpr = 1,
                  variant: cutlass.Constexpr = "right"):
    reversed_kernel(mx, my, mz, mw, n_static, stride, variant).launch(grid=[1, 1, 1], block=[128, 1, 1],
                                                                      stream=stream)


_CACHE = {}


def run(x, y, z, w, n_static=0, stride=1, variant="right"):
    """x, y, z, w: [n, 64] fp32 on the GPU (see the module doc for what lands where)."""
    ms = [_common.to_cute(t, 1) for t in (x, y, z, w)]
    stream = _common.current_stream()
    key = (n_static, stride, variant)
    if key not in _CACHE:
        _CACHE[key] = cute.compile(reversed_host, *ms, stream, n_static, stride, variant,
                                   options=_common.PTX_OPTIONS)
    _CACHE[key](*ms, stream)


def reference(x):
    """(y, z, w) the right variant must produce, computed on the host in float64."""
    import torch

    n = x.shape[0]
    y = torch.flip(x.double(), dims=[0])
    y[1::3] += 100.0
    z = torch.zeros_like(y)
    z[1::2] = 1
    z[-1] = 2
    w = torch.zeros_like(y)
    w[n - 1] = 1
    w[0] = 2
    return y, z, w


def compile_for_cpu(arch="sm_90a", n_static=0, stride=1):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32() if not n_static else n_static
    t = [make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(4)]
    return cute.compile(reversed_host, *t, make_fake_stream(), n_static, stride,
                        options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
