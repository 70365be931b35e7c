"""Leader-routed completions on the H200: four TMA producer warps each load a quarter of a
tile into the same stage; with TaskWarpLeader only the first warp arms the transaction
barrier, for the bytes of all four (num_bytes = num_bytes_per_warp_per_cta x 4 warps).

    LoadTask (warps 0-3):   for t in tiles:  tile.acquire()          # all wait empty; warp 0 arms 4 KiB
                                             tile.tma_load_part()    # warp w: rows [8w, 8w + 8) of the tile
                                             tile.commit()           # no-op: the TMA completes the barrier
    ConsumerTask (warp 4):  for t in tiles:  tile.wait(); out.store_plus_one(); tile.release()

x, y: [rows, 32] fp32, rows a multiple of 32; each CTA walks tiles bx, bx + grid, ...

The seed's 2-CTA variant (``run(..., cluster=True)``): clusters of 2 CTAs, cta_layout_vmnk
(1, 2, 1, 1), ``CtaLeader | TaskWarpLeader`` with multicast. A tile is 64 rows (8 parts); warp w
of CTA r loads part 4r + w and multicasts it into both CTAs, so each CTA's barrier receives the
bytes of 4 warps x 2 CTAs, which its leader warp armed (num_bytes = 1 KiB x 4 x 2). The consumer
of CTA r stores only the parts its peer loaded: y is complete only if the multicast landed.
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
                       Task, TaskLocalVariable, TaskManager, consumer_work, domain_loop, producer_work, schedule,
                       threads, trip_count)

WIDTH, LOAD_WARPS, PART_ROWS, STAGES = 32, 4, 8, 4
TILE_ROWS = LOAD_WARPS * PART_ROWS  # rows one CTA's warps load per tile
CLUSTER_CTAS = 2  # the 2-CTA variant
PART = (PART_ROWS, WIDTH)
BYTES_ONE_WARP_ONE_CTA = PART_ROWS * WIDTH * 4


@dataclass(kw_only=True)
class Tile(MemoryResource):
    atom: Any = None
    gmem: Any = None  # TMA tensor of x, tiled by one warp's part
    allocator: Any = None
    alloc: Any = None
    ctas: int = 1  # CTAs of the cluster that share (multicast) every tile

    def get_smem_requirements(self):
        return [self.alloc]

    def parts(self):  # (rows, cols, part, stage); part = rank * LOAD_WARPS + warp
        n = LOAD_WARPS * self.ctas
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout(
            (PART_ROWS, WIDTH, n, STAGES), stride=(WIDTH, 1, PART_ROWS * WIDTH, n * PART_ROWS * WIDTH)))

    @producer_work
    @cute.jit
    def tma_load_part(self, stage_info: StageInfo):
        w = cute.arch.make_warp_uniform(cute.arch.warp_idx()) % LOAD_WARPS
        s = self.parts()
        g = cute.local_tile(self.gmem, PART, (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1), cute.group_modes(s, 0, 2),
                                                     cute.group_modes(g, 0, 2))
        if cutlass.const_expr(self.ctas == 1):
            cute.copy(self.atom, t_g[(None, stage_info.loop_offset * LOAD_WARPS + w, 0)],
                      t_s[(None, w, stage_info.stage_idx)], tma_bar_ptr=stage_info.barrier)
        else:
            # this CTA's part lands in every CTA of the cluster, at the same offset, and completes the
            # bytes on each CTA's barrier of this stage (armed there by that CTA's leader warp)
            p = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster()) * LOAD_WARPS + w
            cute.copy(self.atom, t_g[(None, stage_info.loop_offset * LOAD_WARPS * self.ctas + p, 0)],
                      t_s[(None, p, stage_info.stage_idx)], tma_bar_ptr=stage_info.barrier,
                      mcast_mask=cutlass.Int16((1 << self.ctas) - 1))

    @consumer_work
    def read(self, stage_info: StageInfo):
        """The consumer's work is done by Out.store_plus_one (reads every part of the stage)."""


@dataclass(kw_only=True)
class TileWithStage(Tile):
    stage_token: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.stage_token = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="stage read this iteration")

    @consumer_work(returns=stage_token)
    def stage(self, stage_info: StageInfo):
        return stage_info.stage_idx


@dataclass(kw_only=True)
class Out(MemoryResource):
    y: Any = None
    tile: Any = None
    stage: Any = 0

    @producer_work
    @cute.jit
    def store_plus_one(self, stage_info: StageInfo, stage):
        lane = cute.arch.lane_idx()
        s = self.tile.parts()
        ctas = self.tile.ctas
        peer = 0  # the CTA whose parts this one stores: itself, or in a cluster its peer (multicast data)
        if cutlass.const_expr(ctas > 1):
            peer = (cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster()) + 1) % ctas
        for q in cutlass.range_constexpr(LOAD_WARPS):
            p = peer * LOAD_WARPS + q
            for r in cutlass.range_constexpr(PART_ROWS):
                row = (stage_info.loop_offset * ctas * LOAD_WARPS + p) * PART_ROWS + r
                self.y[row, lane] = s[r, lane, p, stage] + cutlass.Float32(1.0)


@schedule
def load(tile, start, end, step):
    with domain_loop(start, end, step):
        tile.acquire()
        tile.tma_load_part()
        tile.commit()


@schedule
def consume(tile, out, start, end, step):
    with domain_loop(start, end, step):
        tile.wait()
        stage = tile.stage()
        out.store_plus_one(stage=stage)
        tile.release()


def make_config(cluster=False):
    if not cluster:
        return PipelineConfig.create_tma_async_pipeline_cfg(
            num_stages=STAGES, num_bytes=BYTES_ONE_WARP_ONE_CTA * LOAD_WARPS,  # sum across the 4 covered warps
            producer_group=threads(1), consumer_group=threads(1), cta_layout_vmnk=(1, 1, 1, 1),
            producer_signaling_threads=SignalingThreads.TaskWarpLeader,
            num_bytes_per_warp_per_cta=BYTES_ONE_WARP_ONE_CTA)
    return PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=STAGES, num_bytes=BYTES_ONE_WARP_ONE_CTA * LOAD_WARPS * CLUSTER_CTAS,  # 4 warps x 2 CTAs
        producer_group=threads(1),
        consumer_group=threads(CLUSTER_CTAS),  # each CTA's consumer warp releases into both CTAs
        cta_layout_vmnk=(1, CLUSTER_CTAS, 1, 1), mcast_mode_mn=(True, True),
        producer_signaling_threads=SignalingThreads.CtaLeader | SignalingThreads.TaskWarpLeader,
        num_bytes_per_warp_per_cta=BYTES_ONE_WARP_ONE_CTA)


def build(atom=None, tx=None, y=None, start=None, end=None, step=None, verbose=True, cluster=False,
          **manager_options):
    """The program, for ``warpsched check`` (CPU: runtime values None) and the kernel: each cluster
    walks tiles start, start + step, ... < end, and the grid never exceeds the tile count."""
    start, step = trip_count("first_tile", start, min=0), trip_count("grid_clusters", step)
    end = trip_count("tiles", end)
    allocator = SmemAllocator()
    ctas = CLUSTER_CTAS if cluster else 1
    tile = TileWithStage(name="tile", pipeline_config=make_config(cluster), atom=atom, gmem=tx, allocator=allocator,
                         ctas=ctas, alloc=SmemAllocation("tile", dtype=cutlass.Float32,
                                                         count=TILE_ROWS * ctas * WIDTH * STAGES, alignment=128))
    out = Out(name="out", y=y, tile=tile)
    allocator.add_resource(tile)
    allocator.compute_layout()
    tasks = [Task(name="LoadTask", dst_resources=[tile], warp_idx=0, num_warps=LOAD_WARPS,
                  schedule=load(tile, start, end, step)),
             Task(name="ConsumerTask", src_resources=[tile], dst_resources=[out], warp_idx=LOAD_WARPS, num_warps=1,
                  schedule=consume(tile, out, start, end, step))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tile: [], out: [tile]}, smem_allocator=allocator,
                       verbose=verbose, **manager_options)


def build_cluster(verbose=True, **manager_options):
    """The 2-CTA kernel's program on the CPU: `warpsched check examples/hopper/patterns/leader_routed.py:build_cluster`."""
    return build(verbose=verbose, cluster=True, **manager_options)


class LeaderRouted:
    def __init__(self, max_ctas=132, cluster=False):
        self.max_ctas, self.cluster = max_ctas, cluster
        self.ctas = CLUSTER_CTAS if cluster else 1

    @cute.jit
    def __call__(self, mx: cute.Tensor, my: cute.Tensor, stream):
        op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if cutlass.const_expr(self.cluster)
              else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
        atom, tx = cute.nvgpu.cpasync.make_tiled_tma_atom(op, mx, cute.make_layout(PART, stride=(WIDTH, 1)), PART)
        tiles = cute.size(mx, mode=[0]) // (TILE_ROWS * self.ctas)
        clusters = cutlass.min(tiles, self.max_ctas // self.ctas)
        block = [32 * (LOAD_WARPS + 1), 1, 1]
        if cutlass.const_expr(self.cluster):
            self.kernel(atom, tx, my).launch(grid=[clusters * self.ctas, 1, 1], block=block,
                                             cluster=[self.ctas, 1, 1], stream=stream)
        else:
            self.kernel(atom, tx, my).launch(grid=[clusters, 1, 1], block=block, stream=stream)

    @cute.kernel
    def kernel(self, atom: cute.CopyAtom, tx: cute.Tensor, my: cute.Tensor):
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        tiles = cute.size(my, mode=[0]) // (TILE_ROWS * self.ctas)
        # both CTAs of a cluster walk the same tiles (each tile is shared through multicast)
        mgr = build(atom, tx, my, start=bidx // self.ctas, end=tiles, step=gdim // self.ctas, verbose=False,
                    cluster=self.cluster)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def run(x, y, max_ctas=132, cluster=False):
    """y = x + 1 for [rows, 32] fp32, rows a multiple of 32 (of 64 with ``cluster``)."""
    assert x.shape[0] % (TILE_ROWS * (CLUSTER_CTAS if cluster else 1)) == 0 and x.shape[1] == WIDTH
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    key = (max_ctas, cluster)
    if key not in _CACHE:
        _CACHE[key] = cute.compile(LeaderRouted(max_ctas, cluster), mx, my, stream, options=_common.PTX_OPTIONS)
    _CACHE[key](mx, my, stream)


def reference(x):
    return x + 1.0


def compile_for_cpu(arch="sm_90a", cluster=False):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    x, y = (make_fake_tensor(cutlass.Float32, (n, WIDTH), (WIDTH, 1), assumed_align=16) for _ in range(2))
    return cute.compile(LeaderRouted(cluster=cluster), x, y, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    print(_common.count_ptx(compile_for_cpu().artifacts.PTX))
    print(_common.count_ptx(compile_for_cpu(cluster=True).artifacts.PTX))
    build(verbose=False)
    build(verbose=False, cluster=True)
