"""Pipeline groups (Merge, FusedMerge, Fork) on two TMA-fed SMEM resources.

x, y: [M, N] fp32; tiles of 32 x 128; grid-stride over tiles; TmaAsync members, S stages each.

mode="merge":      LoadA (warp 4) and LoadB (warp 5) fill smem_a / smem_b (own full barriers);
                   AddTask (warps 0-3) waits each member, z = a + b, then group.release() once
                   (one shared empty barrier frees both loaders).
mode="fused":      same tasks; the loaders arm one shared full barrier (each with its own bytes) and
                   AddTask calls group.wait() / group.release() once.
mode="fork":       smem_a and smem_b are two pipeline views of one SMEM buffer (equal num_bytes, as in
                   TS): one Load task (warp 4) acquires both views, issues ONE TMA load of x and arms
                   the shared full barrier once with that load's bytes (group.commit()); CopyA
                   (warps 0-3) and CopyB (warps 8-11) each wait for the tile and release their own
                   view: z = x, w = x.

The SMEM buffers are declared in bytes (``SmemAllocation(name, size_bytes=..., alignment=...)``,
no dtype, as in TS) and viewed as fp32 tiles.
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

from warpsched import (MemoryResource, PipelineConfig, PipelineGroup, PipelineGroupMode, SmemAllocation,
                       SmemAllocator, StageInfo, Task, TaskLocalVariable, TaskManager, WorkAttr, consumer_work,
                       domain_loop, producer_work, schedule, threads, trip_count)

TILE = (32, 128)
STAGES = 3
MODES = {"merge": PipelineGroupMode.Merge, "fused": PipelineGroupMode.FusedMerge, "fork": PipelineGroupMode.Fork}


@dataclass(kw_only=True)
class SmemTile(MemoryResource):
    atom: Any = None
    gmem: Any = None
    tiles_n: Any = 1
    allocator: Any = None
    alloc: Any = None
    stage_tok: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.stage_tok = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="stage waited this iteration")

    def get_smem_requirements(self):
        return [self.alloc]

    @consumer_work(returns=stage_tok, work_attrs=WorkAttr.AUXILIARY)
    def stage(self, stage_info: StageInfo):
        return stage_info.stage_idx

    def staged(self):
        tm, tn = TILE
        layout = cute.make_layout((tm, tn, STAGES), stride=(tn, 1, tm * tn))
        return cute.make_tensor(cute.recast_ptr(self.allocator.get(self.alloc), dtype=cutlass.Float32), layout)

    @producer_work
    @cute.jit
    def load(self, stage_info: StageInfo):
        t = stage_info.loop_offset
        g = cute.local_tile(self.gmem, TILE, (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1),
                                                     cute.group_modes(self.staged(), 0, 2), cute.group_modes(g, 0, 2))
        stage_info.tma_copy(self.atom, t_g[(None, t // self.tiles_n, t % self.tiles_n)],
                            t_s[(None, stage_info.stage_idx)])


@dataclass(kw_only=True)
class Out(MemoryResource):
    a: Any = None  # SmemTile resources read by the store
    b: Any = None
    out: Any = None
    tiles_n: Any = 1

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, stage):
        """out tile = a (+ b when b is set), read from the waited stages; thread t owns column t."""
        tidx, _, _ = cute.arch.thread_idx()
        col_in = tidx % TILE[1]
        t = stage_info.loop_offset
        row0 = (t // self.tiles_n) * TILE[0]
        col = (t % self.tiles_n) * TILE[1] + col_in
        sa = self.a.staged()
        out = self.out
        s = stage
        if col < cute.size(out, mode=[1]):
            for r in cutlass.range(TILE[0], unroll=8):
                if row0 + r < cute.size(out, mode=[0]):
                    v = sa[(r, col_in, s)]
                    if cutlass.const_expr(self.b is not None):
                        v = v + self.b.staged()[(r, col_in, s)]
                    out[row0 + r, col] = v


@schedule
def load_one(smem, start, end, step):
    with domain_loop(start, end, step):
        smem.acquire()
        smem.load()
        smem.commit()


@schedule
def add_merge(grp, out, start, end, step):
    with domain_loop(start, end, step):
        grp.smem_a.wait()
        grp.smem_b.wait()
        stage = grp.smem_a.stage()  # members of a Merge advance in lock-step: one stage index for both
        out.store(stage=stage)
        grp.release()


@schedule
def add_fused(grp, out, start, end, step):
    with domain_loop(start, end, step):
        grp.wait()
        stage = grp.smem_a.stage()
        out.store(stage=stage)
        grp.release()


@schedule
def load_fork(grp, start, end, step):
    with domain_loop(start, end, step):
        grp.smem_a.acquire()
        grp.smem_b.acquire()
        grp.smem_a.load()  # one load fills the buffer both views read
        grp.commit()


@schedule
def copy_member(member, out, start, end, step):
    with domain_loop(start, end, step):
        member.wait()
        stage = member.stage()
        out.store(stage=stage)
        member.release()


def build(*, mode="merge", atoms=(None, None), gmems=(None, None), outs=(None, None), tiles_n=None, start=None,
          end=None, step=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` (CPU: runtime values None) and the kernel: each CTA walks
    tiles start, start + step, ... < end; the grid never exceeds the tile count (>= 1 tile per CTA)."""
    start, step = trip_count("first_tile", start, min=0), trip_count("grid_ctas", step)
    end = trip_count("tiles", end)
    tile_bytes = TILE[0] * TILE[1] * 4
    allocator = SmemAllocator()
    consumer_warps = 4

    def cfg():
        return PipelineConfig.create_tma_async_pipeline_cfg(num_stages=STAGES, num_bytes=tile_bytes,
                                                            producer_group=threads(1),
                                                            consumer_group=threads(consumer_warps))
    def buffer(name):
        return SmemAllocation(name, size_bytes=tile_bytes * STAGES, alignment=1024)

    shared = buffer("smem_ab") if mode == "fork" else None  # Fork: both views share one buffer
    smem = [SmemTile(name=n, pipeline_config=cfg(), atom=a, gmem=g, tiles_n=tiles_n, allocator=allocator,
                     alloc=shared or buffer(n))
            for n, a, g in zip(("smem_a", "smem_b"), atoms, gmems)]
    for r in smem:
        allocator.add_resource(r)
    grp = PipelineGroup(name="ab", members=smem, mode=MODES[mode])
    allocator.add_pipeline_group(grp)
    allocator.compute_layout()
    rng = (start, end, step)
    if mode == "fork":
        outs_r = [Out(name=f"out_{i}", a=smem[i], out=outs[i], tiles_n=tiles_n) for i in range(2)]
        tasks = [Task(name="Load", src_resources=[], dst_resources=smem, warp_idx=4, num_warps=1,
                      schedule=load_fork(grp, *rng)),
                 Task(name="CopyA", src_resources=[smem[0]], dst_resources=[outs_r[0]], warp_idx=0, num_warps=4,
                      schedule=copy_member(_member(grp, 0), outs_r[0], *rng)),
                 Task(name="CopyB", src_resources=[smem[1]], dst_resources=[outs_r[1]], warp_idx=8, num_warps=4,
                      schedule=copy_member(_member(grp, 1), outs_r[1], *rng))]
        graph = {outs_r[0]: [smem[0]], outs_r[1]: [smem[1]]}
    else:
        out = Out(name="out", a=smem[0], b=smem[1], out=outs[0], tiles_n=tiles_n)
        tasks = [Task(name="Add", src_resources=smem, dst_resources=[out], warp_idx=0, num_warps=4,
                      schedule=(add_merge if mode == "merge" else add_fused)(grp, out, *rng)),
                 Task(name="LoadA", src_resources=[], dst_resources=[smem[0]], warp_idx=4, num_warps=1,
                      schedule=load_one(smem[0], *rng)),
                 Task(name="LoadB", src_resources=[], dst_resources=[smem[1]], warp_idx=5, num_warps=1,
                      schedule=load_one(smem[1], *rng))]
        graph = {out: list(smem)}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


def _member(grp, i):
    """A Fork consumer drives its own member directly (it is the many side)."""
    return grp.members[i]


class GroupKernel:
    def __init__(self, mode, max_ctas=1 << 30):
        self.mode, self.max_ctas = mode, max_ctas
        self.threads = 12 * 32 if mode == "fork" else 8 * 32

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, mZ: cute.Tensor, mW: cute.Tensor, stream):
        one = cute.make_layout(TILE, stride=(TILE[1], 1))
        op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        ax, tx = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mX, one, TILE)
        ay, ty = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mY, one, TILE)
        tiles = cute.ceil_div(mX.shape, TILE)
        grid = cutlass.min(tiles[0] * tiles[1], self.max_ctas)
        self.kernel(ax, tx, ay, ty, mZ, mW).launch(grid=[grid, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, ax: cute.CopyAtom, mX: cute.Tensor, ay: cute.CopyAtom, mY: cute.Tensor, mZ: cute.Tensor,
               mW: cute.Tensor):
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        tiles_m = cute.ceil_div(cute.size(mX, mode=[0]), TILE[0])
        tiles_n = cute.ceil_div(cute.size(mX, mode=[1]), TILE[1])
        mgr = build(mode=self.mode, atoms=(ax, ay), gmems=(mX, mY), outs=(mZ, mW), tiles_n=tiles_n, start=bidx,
                    end=tiles_m * tiles_n, step=gdim, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def run(x, y, z, w, mode="merge"):
    """merge / fused: z = x + y; fork: z = x, w = x (fp32 2D, rows 16-byte aligned)."""
    m = [_common.to_cute(t, 1) for t in (x, y, z, w)]
    stream = _common.current_stream()
    if mode not in _CACHE:
        _CACHE[mode] = cute.compile(GroupKernel(mode), *m, stream, options=_common.PTX_OPTIONS)
    _CACHE[mode](*m, stream)


def compile_for_cpu(arch="sm_90a", mode="merge"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    M, N = cute.sym_int32(), cute.sym_int32(divisibility=4)
    t = [make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(divisibility=4), 1), assumed_align=16)
         for _ in range(4)]
    return cute.compile(GroupKernel(mode), *t, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    for m in MODES:
        print(m, _common.count_ptx(compile_for_cpu(mode=m).artifacts.PTX))
        build(mode=m, verbose=False)
