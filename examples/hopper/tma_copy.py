"""TMA -> SMEM -> TMA copy pipeline: a load task and a store task around a TmaAsync pipeline.

    LoadTask  (warp 0):  for t in range(bx, tiles, grid):      # grid-stride over tiles
                             coords = gmem_x.tile_coords()
                             smem.acquire()                      # wait empty[s]; arrive.expect_tx full[s]
                             smem.tma_load(coords=coords)        # cp.async.bulk.tensor -> full[s]
                             smem.commit()                       # no-op: TMA completes the transaction
    StoreTask (warp 1):  for t in range(bx, tiles, grid):
                             smem.wait()                         # try_wait full[s]
                             stage = smem.stage()                # consumer work: the stage index token
                             gmem_y.tma_store(stage=stage)       # lane 0: bulk store, wait until SMEM read
                             smem.release()                      # lane 0 arrives on empty[s]

Same structure as bench/handwritten/tma_copy.py with store_lag=0 (the zero-overhead
comparison). Host: ``copy(x, y)`` for 2D row-major torch tensors whose rows are 16-byte aligned.
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
                       TaskLocalVariable, TaskManager, WorkAttr, consumer_work, domain_loop, producer_work, schedule,
                       trip_count)

NUM_STAGES = 3  # 3 x 32 KiB stages: two CTAs per SM (the hand-written baseline's tuned setting)
MAX_CTAS = 1 << 30  # default grid = one CTA per tile


@dataclass(kw_only=True)
class GmemX(MemoryResource):
    tiles_n: Any = 1
    coords: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.coords = TaskLocalVariable(dtype=None, docs="(tile_m, tile_n) of this iteration's tile")

    @consumer_work(returns=coords)
    def tile_coords(self, stage_info: StageInfo):
        t = stage_info.loop_offset
        return (t // self.tiles_n, t % self.tiles_n)


@dataclass(kw_only=True)
class SmemTiles(MemoryResource):
    atom: Any = None  # TMA load atom
    gmem: Any = None  # TMA tensor of X
    tile_mn: Any = (64, 256)
    dtype: Any = cutlass.BFloat16
    alloc: Any = None
    stage_token: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.stage_token = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="SMEM stage read this iteration")

    def get_smem_requirements(self):
        return [self.alloc]

    def staged(self, context):
        """The SMEM stages as one (tm, tn, stages) tensor (``context``: StageInfo.context)."""
        tm, tn = self.tile_mn
        S = self.pipeline_config.num_stages
        return context.smem_view(self.alloc, cute.make_layout((tm, tn, S), stride=(tn, 1, tm * tn)))

    @producer_work
    @cute.jit
    def tma_load(self, stage_info: StageInfo, coords):
        s_buf = self.staged(stage_info.context)
        g = cute.local_tile(self.gmem, self.tile_mn, (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1),
                                                     cute.group_modes(s_buf, 0, 2), cute.group_modes(g, 0, 2))
        # on the stage's barrier; warpsched checks the copy's bytes against num_bytes while tracing
        stage_info.tma_copy(self.atom, t_g[(None, coords[0], coords[1])], t_s[(None, stage_info.stage_idx)])

    @consumer_work(returns=stage_token)
    def stage(self, stage_info: StageInfo):
        return stage_info.stage_idx


@dataclass(kw_only=True)
class GmemY(MemoryResource):
    atom: Any = None  # TMA store atom
    gmem: Any = None
    smem: Any = None  # the SmemTiles resource (layout of the stages)
    tiles_n: Any = 1

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def drain(self, stage_info: StageInfo):
        if cute.arch.lane_idx() == 0:
            cute.arch.cp_async_bulk_wait_group(0, read=False)

    @producer_work
    @cute.jit
    def tma_store(self, stage_info: StageInfo, stage, *, lag: cutlass.Constexpr = 0):
        lane = cute.arch.lane_idx()
        if lane == 0:
            s_buf = self.smem.staged(stage_info.context)
            g = cute.local_tile(self.gmem, self.smem.tile_mn, (None, None))
            t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1),
                                                         cute.group_modes(s_buf, 0, 2), cute.group_modes(g, 0, 2))
            t = stage_info.loop_offset
            cute.copy(self.atom, t_s[(None, stage)], t_g[(None, t // self.tiles_n, t % self.tiles_n)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(lag, read=True)  # at most `lag` stores still read SMEM


@schedule
def load_schedule(gmem_x, smem, start, end, step, count=None):
    with domain_loop(start, end, step, count=count):
        coords = gmem_x.tile_coords()
        smem.acquire()
        smem.tma_load(coords=coords)
        smem.commit()


@schedule
def store_schedule(smem, gmem_y, start, end, step, count=None):
    with domain_loop(start, end, step, count=count):
        smem.wait()
        stage = smem.stage()
        gmem_y.tma_store(stage=stage)
        smem.release()


@schedule
def store_schedule_lag1(smem, gmem_y, start, end, step, count=None):
    """One TMA store in flight: release each stage one iteration later (split wait/release
    counters, advance_on_wait=True). Every CTA gets at least one tile (grid <= tiles), so the
    tail release always has a stage to return."""
    with domain_loop(start, end, step, count=count) as d:
        smem.wait()
        stage = smem.stage()
        gmem_y.tma_store(stage=stage, lag=1)
        with d.every(1, start=1):
            smem.release()
    gmem_y.drain()
    smem.release()


def default_tile(dtype):
    """32 KiB tiles, 256 elements wide."""
    return (32 * 1024 // (256 * (dtype.width // 8)), 256)


def build(*, load_atom=None, mx=None, store_atom=None, my=None, dtype=cutlass.BFloat16, tile_mn=None,
          num_stages=NUM_STAGES, store_lag=1, tiles_n=None, start=None, end=None, step=None, verbose=True,
          **manager_options):
    """The program, for ``warpsched check`` (CPU: runtime values None) and the kernel. Each CTA walks
    tiles start, start + step, ... < end; the grid never exceeds the tile count, so every CTA runs
    at least one tile (the lag-1 tail release needs one)."""
    tile_mn = tuple(tile_mn or default_tile(dtype))
    start, step = trip_count("first_tile", start, min=0), trip_count("grid_ctas", step)
    end = trip_count("tiles", end)
    per_cta = trip_count("tiles_per_cta", min=1)  # the grid never exceeds the tile count (the lag-1 tail
    # release needs a tile: with none, it would complete an empty phase and hang the producer tail)
    tm, tn = tile_mn
    tile_bytes = tm * tn * dtype.width // 8
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=num_stages, num_bytes=tile_bytes,  # groups:
                                                       advance_on_wait=store_lag > 0)  # derived from the tasks
    alloc = SmemAllocation("tiles", dtype=dtype, count=tm * tn * num_stages, alignment=1024)
    gmem_x = GmemX(name="GmemX", tiles_n=tiles_n)
    smem = SmemTiles(name="SmemTiles", pipeline_config=cfg, atom=load_atom, gmem=mx, tile_mn=tile_mn, dtype=dtype,
                     alloc=alloc)
    gmem_y = GmemY(name="GmemY", atom=store_atom, gmem=my, smem=smem, tiles_n=tiles_n)
    tasks = [
        Task(name="LoadTask", src_resources=[gmem_x], dst_resources=[smem], warp_idx=0, num_warps=1,
             schedule=load_schedule(gmem_x, smem, start, end, step, per_cta)),
        Task(name="StoreTask", src_resources=[smem], dst_resources=[gmem_y], warp_idx=1, num_warps=1,
             schedule=(store_schedule_lag1 if store_lag else store_schedule)(smem, gmem_y, start, end, step, per_cta)),
    ]
    return TaskManager(tasks=tasks, resource_dependency_graph={smem: [gmem_x], gmem_y: [smem]},
                       smem_allocator=SmemAllocator.for_resources(smem), verbose=verbose, **manager_options)


class TmaCopy:
    def __init__(self, dtype, tile_mn=None, num_stages=NUM_STAGES, max_ctas=132, store_lag=1):
        assert store_lag in (0, 1)
        self.store_lag = store_lag
        self.dtype = dtype
        self.tile_mn = tuple(tile_mn or default_tile(dtype))
        self.num_stages = num_stages
        self.max_ctas = max_ctas

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, stream):
        one_stage = cute.make_layout(self.tile_mn, stride=(self.tile_mn[1], 1))
        load_atom, tma_x = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mX, one_stage, self.tile_mn)
        store_atom, tma_y = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mY, one_stage, self.tile_mn)
        tiles = cute.ceil_div(mX.shape, self.tile_mn)
        grid_x = cutlass.min(tiles[0] * tiles[1], self.max_ctas)
        self.kernel(load_atom, tma_x, store_atom, tma_y).launch(grid=[grid_x, 1, 1], block=[64, 1, 1],
                                                                 stream=stream)

    @cute.kernel
    def kernel(self, load_atom: cute.CopyAtom, mX: cute.Tensor, store_atom: cute.CopyAtom, mY: cute.Tensor):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(load_atom)
            cute.nvgpu.cpasync.prefetch_descriptor(store_atom)
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        tiles_m = cute.ceil_div(cute.size(mX, mode=[0]), self.tile_mn[0])
        tiles_n = cute.ceil_div(cute.size(mX, mode=[1]), self.tile_mn[1])
        mgr = build(load_atom=load_atom, mx=mX, store_atom=store_atom, my=mY, dtype=self.dtype,
                    tile_mn=self.tile_mn, num_stages=self.num_stages, store_lag=self.store_lag, tiles_n=tiles_n,
                    start=bidx, end=tiles_m * tiles_n, step=gdim, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def copy(x, y, num_stages=NUM_STAGES, tile_mn=None, max_ctas=None, store_lag=1):
    """y[:] = x for 2D row-major tensors (rows 16-byte aligned). Returns a zero-argument relauncher."""
    assert x.dim() == 2 and x.shape == y.shape and x.dtype == y.dtype
    dt = _common.cutlass_dtype(x.dtype)
    max_ctas = max_ctas or MAX_CTAS
    key = (dt, num_stages, tile_mn, max_ctas, store_lag)
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if key not in _CACHE:
        _CACHE[key] = cute.compile(TmaCopy(dt, tile_mn, num_stages, max_ctas, store_lag), mx, my, stream,
                                   options=_common.PTX_OPTIONS)
    f = _CACHE[key]
    f(mx, my, stream)
    return lambda: f(mx, my, stream)


def compiled_for(x, y, num_stages=NUM_STAGES, tile_mn=None, max_ctas=None, store_lag=1):
    dt = _common.cutlass_dtype(x.dtype)
    return _CACHE[(dt, num_stages, tile_mn, max_ctas or MAX_CTAS, store_lag)]


def compile_for_cpu(arch="sm_90a", dtype=cutlass.BFloat16, **kw):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    div = 16 * 8 // dtype.width
    M, N = cute.sym_int32(), cute.sym_int32(divisibility=div)
    ld = cute.sym_int64(divisibility=div)
    x = make_fake_tensor(dtype, (M, N), (ld, 1), assumed_align=16)
    y = make_fake_tensor(dtype, (M, N), (ld, 1), assumed_align=16)
    return cute.compile(TmaCopy(dtype, **kw), x, y, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
