"""Split-consumer on the H200: two TMA-filled buffers, a wait-only sync task that signals a
proxy declared downstream of both, and a compute task that waits only on the proxy, then
works on and releases the original buffers (the seed's schedules, Hopper pipeline types).

    LoadA / LoadB (warps 0, 1):  for t in tiles:  c = gmem.compute_coords(); smem.acquire()
                                                  smem.tma_load(coords=c); smem.commit()
    SyncTask (warp 2):           for t in tiles:  smem_a.wait(); smem_b.wait()          # wait-only:
                                                  proxy.acquire(); proxy.signal_ready()  # advances on wait
                                                  proxy.commit()
    ComputeTask (warp 3):        for t in tiles:  proxy.wait()
                                                  da = smem_a.build_desc(); db = smem_b.build_desc()
                                                  out.add_tiles(desc_a=da, desc_b=db)   # out = a + 2 b
                                                  smem_a.release(); smem_b.release(); proxy.release()

a, b, out: [rows, 32] fp32; a tile is 8 rows (1 KiB); each CTA walks tiles bx, bx + grid, ...

The seed's 2-CTA variant (``run(..., cluster=True)``): clusters of 2 CTAs, cta_layout_vmnk
(1, 2, 1, 1), the buffers declared with ``consumer_wait_signaling_threads=All`` (the sync task
waits in every CTA) and ``consumer_signaling_threads=CtaLeader`` (the compute task releases on
the leader CTA of each CTA group). On Hopper's V = 1 clusters every CTA leads its own group, so
each CTA still releases its own stages; the V = 2 (UMMA pair) shape is Blackwell-only.
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

from warpsched import (MemoryResource, PipelineConfig, SignalingThreads, SmemAllocation, SmemAllocator, StageInfo,
                       Task, TaskLocalVariable, TaskManager, WorkAttr, consumer_work, domain_loop, producer_work,
                       schedule, threads, trip_count)

WIDTH, TILE_ROWS, STAGES = 32, 8, 4
TILE = (TILE_ROWS, WIDTH)
TILE_BYTES = TILE_ROWS * WIDTH * 4


@dataclass(kw_only=True)
class Gmem(MemoryResource):
    coords: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.coords = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="tile index")

    @consumer_work(returns=coords)
    def compute_coords(self, stage_info: StageInfo):
        return stage_info.loop_offset


@dataclass(kw_only=True)
class SmemTile(MemoryResource):
    atom: Any = None
    gmem: Any = None  # TMA tensor
    allocator: Any = None
    alloc: Any = None
    desc: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.desc = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="stage holding this tile")

    def get_smem_requirements(self):
        return [self.alloc]

    def staged(self):
        return cute.make_tensor(self.allocator.get(self.alloc),
                                cute.make_layout((TILE_ROWS, WIDTH, STAGES), stride=(WIDTH, 1, TILE_ROWS * WIDTH)))

    @producer_work
    @cute.jit
    def tma_load(self, stage_info: StageInfo, coords):
        s = self.staged()
        g = cute.local_tile(self.gmem, TILE, (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1), cute.group_modes(s, 0, 2),
                                                     cute.group_modes(g, 0, 2))
        stage_info.tma_copy(self.atom, t_g[(None, coords, 0)], t_s[(None, stage_info.stage_idx)])

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc(self, stage_info: StageInfo):
        return stage_info.stage_idx


@dataclass(kw_only=True)
class Proxy(MemoryResource):
    @producer_work
    def signal_ready(self, stage_info: StageInfo):
        """Nothing to write: the commit itself is the signal."""


@dataclass(kw_only=True)
class GmemOut(MemoryResource):
    out: Any = None
    smem_a: Any = None
    smem_b: Any = None

    @producer_work
    @cute.jit
    def add_tiles(self, stage_info: StageInfo, desc_a, desc_b):
        lane = cute.arch.lane_idx()
        sa, sb = self.smem_a.staged(), self.smem_b.staged()
        for r in cutlass.range_constexpr(TILE_ROWS):  # rows % TILE_ROWS == 0 (checked by run())
            row = stage_info.loop_offset * TILE_ROWS + r
            self.out[row, lane] = sa[r, lane, desc_a] + cutlass.Float32(2.0) * sb[r, lane, desc_b]


@schedule
def load_schedule(gmem, smem, start, end, step):
    with domain_loop(start, end, step):
        coords = gmem.compute_coords()
        smem.acquire()
        smem.tma_load(coords=coords)
        smem.commit()


@schedule
def sync_schedule(smem_a, smem_b, proxy, start, end, step):  # wait-only consumer of both buffers
    with domain_loop(start, end, step):
        smem_a.wait()
        smem_b.wait()
        proxy.acquire()
        proxy.signal_ready()
        proxy.commit()


@schedule
def compute_schedule(proxy, smem_a, smem_b, out, start, end, step):  # proxy consumer
    with domain_loop(start, end, step):
        proxy.wait()
        desc_a = smem_a.build_desc()  # work, no direct wait
        desc_b = smem_b.build_desc()
        out.add_tiles(desc_a=desc_a, desc_b=desc_b)
        smem_a.release()
        smem_b.release()
        proxy.release()


CLUSTER = (1, 2, 1, 1)


def build(atom_a=None, ta=None, atom_b=None, tb=None, out=None, start=None, end=None, step=None, verbose=True,
          cluster=False, **manager_options):
    """The program, for ``warpsched check`` (CPU: runtime values None) and the kernel: each CTA walks
    tiles start, start + step, ... < end. Without a cluster the grid never exceeds the tile count
    (>= 1 tile per CTA); with one, a CTA past the last tile runs no iteration (>= 0)."""
    start, step = trip_count("first_tile", start, min=0), trip_count("grid_ctas", step)
    end = trip_count("tiles", end, min=0 if cluster else 1)
    allocator = SmemAllocator()

    def tile_cfg():
        if cluster:  # wait in every CTA, release on the leader CTA of each CTA group
            return PipelineConfig.create_tma_async_pipeline_cfg(
                num_stages=STAGES, num_bytes=TILE_BYTES, producer_group=threads(1), consumer_group=threads(1),
                cta_layout_vmnk=CLUSTER, consumer_signaling_threads=SignalingThreads.CtaLeader,
                consumer_wait_signaling_threads=SignalingThreads.All)
        return PipelineConfig.create_tma_async_pipeline_cfg(num_stages=STAGES, num_bytes=TILE_BYTES,
                                                           producer_group=threads(1), consumer_group=threads(1))

    gmem_a, gmem_b = Gmem(name="gmem_a"), Gmem(name="gmem_b")
    smem_a = SmemTile(name="smem_a", pipeline_config=tile_cfg(), atom=atom_a, gmem=ta, allocator=allocator,
                      alloc=SmemAllocation("a", dtype=cutlass.Float32, count=TILE_ROWS * WIDTH * STAGES,
                                           alignment=128))
    smem_b = SmemTile(name="smem_b", pipeline_config=tile_cfg(), atom=atom_b, gmem=tb, allocator=allocator,
                      alloc=SmemAllocation("b", dtype=cutlass.Float32, count=TILE_ROWS * WIDTH * STAGES,
                                           alignment=128))
    proxy = Proxy(name="proxy", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=STAGES, producer_group=threads(32), consumer_group=threads(32),
        **(dict(cta_layout_vmnk=CLUSTER) if cluster else {})))
    gout = GmemOut(name="gmem_out", out=out, smem_a=smem_a, smem_b=smem_b)
    allocator.add_resource(smem_a)
    allocator.add_resource(smem_b)
    allocator.compute_layout()
    loop = (start, end, step)
    tasks = [
        Task(name="LoadA", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0, num_warps=1,
             schedule=load_schedule(gmem_a, smem_a, *loop)),
        Task(name="LoadB", src_resources=[gmem_b], dst_resources=[smem_b], warp_idx=1, num_warps=1,
             schedule=load_schedule(gmem_b, smem_b, *loop)),
        Task(name="SyncTask", src_resources=[smem_a, smem_b], dst_resources=[proxy], warp_idx=2, num_warps=1,
             schedule=sync_schedule(smem_a, smem_b, proxy, *loop)),
        Task(name="ComputeTask", src_resources=[proxy, smem_a, smem_b], dst_resources=[gout], warp_idx=3,
             num_warps=1, schedule=compute_schedule(proxy, smem_a, smem_b, gout, *loop)),
    ]
    graph = {smem_a: [gmem_a], smem_b: [gmem_b], proxy: [smem_a, smem_b], gout: [proxy]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


def build_cluster(verbose=True, **manager_options):
    """The 2-CTA kernel's program on the CPU: `warpsched check examples/hopper/patterns/split_consumer.py:build_cluster`."""
    return build(verbose=verbose, cluster=True, **manager_options)


class SplitConsumer:
    def __init__(self, max_ctas=132, cluster=False):
        self.max_ctas, self.cluster = max_ctas, cluster

    @cute.jit
    def __call__(self, ma: cute.Tensor, mb: cute.Tensor, mout: cute.Tensor, stream):
        one = cute.make_layout(TILE, stride=(WIDTH, 1))
        op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        atom_a, ta = cute.nvgpu.cpasync.make_tiled_tma_atom(op, ma, one, TILE)
        atom_b, tb = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mb, one, TILE)
        tiles = cute.ceil_div(cute.size(ma, mode=[0]), TILE_ROWS)
        kern = self.kernel(atom_a, ta, atom_b, tb, mout)
        if cutlass.const_expr(self.cluster):  # whole clusters; a CTA past the last tile runs no iteration
            ctas = CLUSTER[1]
            grid = cutlass.min(cute.ceil_div(tiles, ctas), self.max_ctas // ctas) * ctas
            kern.launch(grid=[grid, 1, 1], block=[128, 1, 1], cluster=[ctas, 1, 1], stream=stream)
        else:
            grid = cutlass.min(tiles, self.max_ctas)
            kern.launch(grid=[grid, 1, 1], block=[128, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, atom_a: cute.CopyAtom, ta: cute.Tensor, atom_b: cute.CopyAtom, tb: cute.Tensor,
               mout: cute.Tensor):
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        tiles = cute.ceil_div(cute.size(mout, mode=[0]), TILE_ROWS)
        mgr = build(atom_a, ta, atom_b, tb, mout, start=bidx, end=tiles, step=gdim, verbose=False,
                    cluster=self.cluster)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def run(a, b, out, max_ctas=132, cluster=False):
    """out = a + 2 b for [rows, 32] fp32 tensors, rows a multiple of 8."""
    assert a.shape[0] % TILE_ROWS == 0 and a.shape[1] == WIDTH
    ma, mb, mo = (_common.to_cute(t, 1) for t in (a, b, out))
    stream = _common.current_stream()
    key = (max_ctas, cluster)
    if key not in _CACHE:
        _CACHE[key] = cute.compile(SplitConsumer(max_ctas, cluster), ma, mb, mo, stream,
                                   options=_common.PTX_OPTIONS)
    _CACHE[key](ma, mb, mo, stream)


def reference(a, b):
    return a + 2.0 * b


def compile_for_cpu(arch="sm_90a", cluster=False):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    a, b, o = (make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(3))
    return cute.compile(SplitConsumer(cluster=cluster), a, b, o, make_fake_stream(),
                        options=_common.ptx_options(arch))


if __name__ == "__main__":
    print(_common.count_ptx(compile_for_cpu().artifacts.PTX))
    print(_common.count_ptx(compile_for_cpu(cluster=True).artifacts.PTX))
    print(_common.count_ptx(compile_for_cpu("sm_100a", cluster=True).artifacts.PTX))
    build(verbose=False)
    build(verbose=False, cluster=True)
