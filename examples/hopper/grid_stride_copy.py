"""Grid-stride copy: one task, one domain loop whose bounds are runtime values.

    CopyTask (warps 0-3):  for i in range(bx * T + tx, n, grid * T):
                               v = src.load()          # consumer work, returns a token
                               dst.store(v=v)          # producer work, reads the token

No pipelines: the lowering emits no barriers at all. Host: ``copy(x, y)`` with torch tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    from . import _common
except ImportError:  # run as a script / loaded by path
    import _common  # type: ignore

import cutlass
import cutlass.cute as cute

from warpsched import (MemoryResource, StageInfo, Task, TaskLocalVariable, TaskManager, consumer_work,
                       domain_loop, producer_work, schedule, trip_count)

NUM_WARPS = 4
THREADS = NUM_WARPS * 32


@dataclass(kw_only=True)
class Src(MemoryResource):
    tensor: Any = None
    value: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.value = TaskLocalVariable(dtype=cutlass.Float32, default=0.0, docs="element read this iteration")

    @consumer_work(returns=value)
    @cute.jit
    def load(self, stage_info: StageInfo):
        return self.tensor[stage_info.loop_offset]


@dataclass(kw_only=True)
class Dst(MemoryResource):
    tensor: Any = None

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, v):
        self.tensor[stage_info.loop_offset] = v


@schedule
def copy_schedule(src, dst, start, end, step):
    with domain_loop(start, end, step, unroll=4):
        v = src.load()
        dst.store(v=v)


def build(src_tensor=None, dst_tensor=None, start=None, end=None, step=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: no values) and the kernel (runtime values).
    A thread may get no element at all (its first index is already past n)."""
    start = trip_count("first_element", start, min=0)
    end = trip_count("n", end, min=0)
    step = trip_count("grid_threads", step)
    src, dst = Src(name="Src", tensor=src_tensor), Dst(name="Dst", tensor=dst_tensor)
    task = Task(name="CopyTask", src_resources=[src], dst_resources=[dst], warp_idx=0, num_warps=NUM_WARPS,
                schedule=copy_schedule(src, dst, start, end, step))
    return TaskManager(tasks=[task], resource_dependency_graph={dst: [src]}, verbose=verbose, **manager_options)


@cute.kernel
def copy_kernel(mx: cute.Tensor, my: cute.Tensor):
    tx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    n = cute.size(mx, mode=[0])
    mgr = build(mx, my, start=bx * THREADS + tx, end=n, step=gdim * THREADS, verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def copy_host(mx: cute.Tensor, my: cute.Tensor, blocks: cutlass.Int32, stream):
    copy_kernel(mx, my).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)


_CACHE = {}


def copy(x, y, blocks=None):
    """y.view(-1)[:] = x.view(-1) (float32, contiguous). Returns a zero-argument relauncher."""
    assert x.dtype == y.dtype and x.numel() == y.numel() and x.is_contiguous() and y.is_contiguous()
    mx, my = _common.to_cute(x.view(-1), 0), _common.to_cute(y.view(-1), 0)
    blocks = blocks or _common.num_sms() * 8
    key = (x.dtype,)
    stream = _common.current_stream()
    if key not in _CACHE:
        _CACHE[key] = cute.compile(copy_host, mx, my, cutlass.Int32(blocks), stream, options=_common.PTX_OPTIONS)
    f = _CACHE[key]
    f(mx, my, cutlass.Int32(blocks), stream)
    return lambda: f(mx, my, cutlass.Int32(blocks), stream)


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (n,), (1,), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (n,), (1,), assumed_align=16)
    return cute.compile(copy_host, x, y, cutlass.Int32(132), make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
