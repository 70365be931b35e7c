"""Planted-bug base: an SMEM scratch buffer that aliases a pipeline stage (H200, warpsched lowering).

    ProducerTask (warp 0):  for i in range(n):  v = src.load(); tile.acquire(); tile.write(v=v); tile.commit()
    ReaderTask (warp 1):    for i in range(n):  tile.wait(); a = tile.read()
                                                b = scratch.read()      # the same bytes as the stage
                                                tile.release()
                                                out.store(a=a, b=b)     # y[i] = a + b = 2 x[i]

``tile`` is a 1-stage AsyncAsync ring of one 32-float row; ``scratch`` is a second resource whose SMEM
allocation shares the stage's bytes (one alias group, two phases). Reading the scratch inside the
stage's wait/release window is safe; the planted bug (tools/planted/cases.py) moves the release
before the scratch read, so the producer can overwrite the bytes first. x, y: [n, 32] fp32.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "hopper"))
import _common  # noqa: E402

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,  # noqa: E402
                       TaskLocalVariable, TaskManager, consumer_work, domain_loop, producer_work, schedule, threads,
                       trip_count)

WIDTH = 32


@dataclass(kw_only=True)
class Src(MemoryResource):
    x: Any = None
    v: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.v = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    @consumer_work(returns=v)
    def load(self, stage_info: StageInfo):
        return self.x[stage_info.loop_offset, cute.arch.lane_idx()]


@dataclass(kw_only=True)
class Tile(MemoryResource):
    allocator: Any = None
    alloc: Any = None
    a: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.a = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    def get_smem_requirements(self):
        return [self.alloc]

    def _row(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout(WIDTH))

    @producer_work
    def write(self, stage_info: StageInfo, v):
        self._row()[cute.arch.lane_idx()] = v

    @consumer_work(returns=a)
    def read(self, stage_info: StageInfo):
        return self._row()[cute.arch.lane_idx()]


@dataclass(kw_only=True)
class Scratch(MemoryResource):
    allocator: Any = None
    alloc: Any = None
    b: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.b = TaskLocalVariable(dtype=cutlass.Float32, default=0.0)

    def get_smem_requirements(self):
        return [self.alloc]

    @consumer_work(returns=b)
    def read(self, stage_info: StageInfo):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout(WIDTH))[cute.arch.lane_idx()]


@dataclass(kw_only=True)
class Out(MemoryResource):
    y: Any = None

    @producer_work
    def store(self, stage_info: StageInfo, a, b):
        self.y[stage_info.loop_offset, cute.arch.lane_idx()] = a + b


@schedule
def producer_schedule(src, tile, n):
    with domain_loop(0, n, 1):
        v = src.load()
        tile.acquire()
        tile.write(v=v)
        tile.commit()


@schedule
def reader_schedule(tile, scratch, out, n):
    with domain_loop(0, n, 1):
        tile.wait()
        a = tile.read()
        b = scratch.read()  # @alias_read
        tile.release()  # @alias_release
        out.store(a=a, b=b)


def build(x=None, y=None, n=None, verbose=True, **manager_options):
    """CPU: ``n`` None (every row count); the kernel passes the rows of x."""
    n = trip_count("rows", n)
    allocator = SmemAllocator()
    tile_alloc = SmemAllocation("tile", dtype=cutlass.Float32, count=WIDTH, alignment=128)
    scratch_alloc = SmemAllocation("scratch", dtype=cutlass.Float32, count=WIDTH, alignment=128)
    allocator.add_alias_group([[tile_alloc], [scratch_alloc]])
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(32),
                                                         consumer_group=threads(32))
    src, out = Src(name="Src", x=x), Out(name="Out", y=y)
    tile = Tile(name="Tile", pipeline_config=cfg, allocator=allocator, alloc=tile_alloc)
    scratch = Scratch(name="Scratch", allocator=allocator, alloc=scratch_alloc)
    allocator.add_resource(tile)
    allocator.add_resource(scratch)
    allocator.compute_layout()
    tasks = [Task(name="ProducerTask", src_resources=[src], dst_resources=[tile], warp_idx=0, num_warps=1,
                  schedule=producer_schedule(src, tile, n)),
             Task(name="ReaderTask", src_resources=[tile, scratch], dst_resources=[out], warp_idx=1, num_warps=1,
                  schedule=reader_schedule(tile, scratch, out, n))]
    graph = {tile: [src], out: [tile, scratch], scratch: []}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


@cute.kernel
def alias_kernel(mx: cute.Tensor, my: cute.Tensor):
    mgr = build(mx, my, n=cute.size(mx, mode=[0]), verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def alias_host(mx: cute.Tensor, my: cute.Tensor, stream):
    alias_kernel(mx, my).launch(grid=[1, 1, 1], block=[64, 1, 1], stream=stream)


_CACHE = {}


def run(x, y):
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if "f" not in _CACHE:
        _CACHE["f"] = cute.compile(alias_host, mx, my, stream, options=_common.PTX_OPTIONS)
    _CACHE["f"](mx, my, stream)


def reference(x):
    return 2.0 * x


def compile_for_cpu(arch="sm_90a"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    x, y = (make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(2))
    return cute.compile(alias_host, x, y, make_fake_stream(), options=_common.ptx_options(arch))
