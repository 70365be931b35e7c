"""The seed's UMMA interleaving configurations, compiled for sm_100a (Blackwell; cannot run on
the H200). Barrier-protocol kernels: the pipelines, lanes and signaling are the seed's, the MMA
work bodies are placeholders (no tcgen05.mma is issued; the hardware-side arrivals are the
tcgen05.commit the lowering emits for each UMMA release / commit).

mode="warp_lane_tma_umma"  the seed's first config: TmaUmma, num_stages=8, interleave_stride=4.
                           A 4-warp TMA producer task (warp w loads tile 4 i + w into its lane's
                           stage) and a 4-warp MMA task (warp w owns lane w: wait, placeholder MMA,
                           tcgen05.commit release).
mode="domain_lane_umma"    the seed's softmax: scores UmmaAsync (1, 1, 2, 2), probs AsyncUmma
                           (2, 2, 1, 1); two 4-warp siblings on even / odd tiles and a 1-warp MMA task.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

_HOPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hopper")
if _HOPPER not in sys.path:
    sys.path.insert(0, _HOPPER)
import _common  # noqa: E402

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,  # noqa: E402
                       TaskManager, consumer_work, domain_loop, producer_work, schedule, threads, trip_count)

WIDTH, TILE_ROWS, STAGES, LANES = 32, 8, 8, 4
TILE = (TILE_ROWS, WIDTH)
TILE_BYTES = TILE_ROWS * WIDTH * 4


@dataclass(kw_only=True)
class SmemTiles(MemoryResource):
    atom: Any = None
    gmem: Any = None
    allocator: Any = None
    alloc: Any = None

    def get_smem_requirements(self):
        return [self.alloc]

    @producer_work
    @cute.jit
    def tma_load(self, stage_info: StageInfo):  # warp w of the task: tile 4 i + w
        w = cute.arch.make_warp_uniform(cute.arch.warp_idx()) % LANES
        s = cute.make_tensor(self.allocator.get(self.alloc),
                             cute.make_layout((TILE_ROWS, WIDTH, STAGES), stride=(WIDTH, 1, TILE_ROWS * WIDTH)))
        g = cute.local_tile(self.gmem, TILE, (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1), cute.group_modes(s, 0, 2),
                                                     cute.group_modes(g, 0, 2))
        cute.copy(self.atom, t_g[(None, stage_info.loop_offset * LANES + w, 0)], t_s[(None, stage_info.stage_idx)],
                  tma_bar_ptr=stage_info.barrier)

    @consumer_work
    def mma(self, stage_info: StageInfo):
        """Placeholder for tcgen05.mma reading the stage (not issued in this protocol kernel)."""


@schedule
def wl_load(tiles, iters):
    with domain_loop(0, iters, 1):
        tiles.acquire()
        tiles.tma_load()
        tiles.commit()


@schedule
def wl_mma(tiles, iters):
    with domain_loop(0, iters, 1):
        tiles.wait()
        tiles.mma()
        tiles.release()


def build_warp_lane(atom=None, tx=None, iters=None, verbose=True, **manager_options):
    """The warp-lane program, for ``warpsched check`` (CPU: ``iters`` None) and the kernel."""
    iters = trip_count("iters", iters)
    allocator = SmemAllocator()
    cfg = PipelineConfig.create_tma_umma_pipeline_cfg(  # the seed's config
        num_stages=STAGES, num_bytes=TILE_BYTES, producer_group=threads(1), consumer_group=threads(1),
        cta_layout_vmnk=(1, 1, 1, 1), interleave_stride=LANES)
    tiles = SmemTiles(name="tiles", pipeline_config=cfg, atom=atom, gmem=tx, allocator=allocator,
                      alloc=SmemAllocation("tiles", dtype=cutlass.Float32, count=TILE_ROWS * WIDTH * STAGES,
                                           alignment=128))
    allocator.add_resource(tiles)
    allocator.compute_layout()
    tasks = [Task(name="LoadTask", dst_resources=[tiles], warp_idx=0, num_warps=LANES, schedule=wl_load(tiles, iters)),
             Task(name="MmaTask", src_resources=[tiles], warp_idx=LANES, num_warps=LANES,
                  schedule=wl_mma(tiles, iters))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tiles: []}, smem_allocator=allocator,
                       verbose=verbose, **manager_options)


@dataclass(kw_only=True)
class Scores(MemoryResource):
    @producer_work
    def mma_scores(self, stage_info: StageInfo):
        """Placeholder for S = Q K^T (tcgen05.mma into TMEM)."""

    @consumer_work
    def compute_softmax(self, stage_info: StageInfo):
        """Placeholder for the TMEM load and softmax."""


@dataclass(kw_only=True)
class Probs(MemoryResource):
    @producer_work
    def store(self, stage_info: StageInfo):
        """Placeholder for writing P."""

    @consumer_work
    def mma_pv(self, stage_info: StageInfo):
        """Placeholder for O += P V (tcgen05.mma)."""


def build_domain_lane(n=None, verbose=True, **manager_options):
    """The domain-lane program, for ``warpsched check`` (CPU: ``n`` None) and the kernel."""
    n = trip_count("n", n)
    scores = Scores(name="scores", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=2, producer_group=threads(1), consumer_group=threads(128), cta_layout_vmnk=(1, 1, 1, 1),
        interleave_stride=(1, 1, 2, 2)))
    probs = Probs(name="probs", pipeline_config=PipelineConfig.create_async_umma_pipeline_cfg(
        num_stages=2, producer_group=threads(128), consumer_group=threads(1), cta_layout_vmnk=(1, 1, 1, 1),
        interleave_stride=(2, 2, 1, 1)))

    @schedule
    def mma(scores, probs):
        with domain_loop(0, n, 1):
            scores.acquire()
            scores.mma_scores()
            scores.commit()
            probs.wait()
            probs.mma_pv()
            probs.release()

    def make_softmax_task(lane, warp_idx):
        @schedule
        def softmax_lane(scores, probs):
            with domain_loop(lane, n, 2):
                scores.wait()
                scores.compute_softmax()
                probs.acquire()
                probs.store()
                probs.commit()
                scores.release()

        return Task(src_resources=[scores], dst_resources=[probs], warp_idx=warp_idx, num_warps=4,
                    schedule=softmax_lane(scores, probs), name=f"SoftmaxLane{lane}")

    tasks = [make_softmax_task(0, 0), make_softmax_task(1, 4),
             Task(name="Mma", src_resources=[probs], dst_resources=[scores], warp_idx=8, num_warps=1,
                  schedule=mma(scores, probs))]
    return TaskManager(tasks=tasks, resource_dependency_graph={scores: [], probs: [scores]}, verbose=verbose,
                       **manager_options)


class WarpLane:
    @cute.jit
    def __call__(self, mx: cute.Tensor, iters: cutlass.Int32):
        atom, tx = cute.nvgpu.cpasync.make_tiled_tma_atom(cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mx,
                                                          cute.make_layout(TILE, stride=(WIDTH, 1)), TILE)
        self.kernel(atom, tx, iters).launch(grid=[1, 1, 1], block=[8 * 32, 1, 1])

    @cute.kernel
    def kernel(self, atom: cute.CopyAtom, tx: cute.Tensor, iters: cutlass.Int32):
        mgr = build_warp_lane(atom, tx, iters, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


@cute.kernel
def domain_lane_kernel(n: cutlass.Int32):
    mgr = build_domain_lane(n, verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def domain_lane_host(n: cutlass.Int32):
    domain_lane_kernel(n).launch(grid=[1, 1, 1], block=[9 * 32, 1, 1])


def compile_for_cpu(mode, arch="sm_100a"):
    from cutlass.cute.runtime import make_fake_tensor

    if mode == "warp_lane_tma_umma":
        x = make_fake_tensor(cutlass.Float32, (cute.sym_int32(), WIDTH), (WIDTH, 1), assumed_align=16)
        return cute.compile(WarpLane(), x, cutlass.Int32(4), options=_common.ptx_options(arch))
    return cute.compile(domain_lane_host, cutlass.Int32(8), options=_common.ptx_options(arch))


if __name__ == "__main__":
    for m in ("warp_lane_tma_umma", "domain_lane_umma"):
        print(m, _common.count_ptx(compile_for_cpu(m).artifacts.PTX))
