"""The GEMM skeleton, persistent: every task loops over the tiles of a static WorkQueue.

  LoadTask  (warp 4)    gmem_ab --coords--> smem_ab   (TmaUmma)
  MmaTask   (warp 5)    smem_ab --------->  tmem_c    (UmmaAsync)
  StoreTask (warps 0-3) tmem_c  --------->  gmem_d
  every task            WorkQueue: try_wait / wait / get_and_advance_work_tile / release

Static persistent scheduling has no scheduler task: each task ends every work tile with the
same queue epilogue, so all of them advance to the next tile at the same logical boundary.
The work queue is upstream of every produced resource (the tile decides what is produced)
and in every task's ``src_resources``. Resources are the ones of :mod:`gemm`; the MMA's
accumulator adds the per-work-tile reset of the TS resources page.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (PipelineConfig, StageInfo, Task, TaskManager, TileSchedulerConfig, WorkAttr, WorkQueue,
                       domain_loop, producer_work, schedule, work_tile_loop)

from ._groups import thread_group
from .gemm import (AB_STAGES, ACC_STAGES, EPILOGUE_WARPS, NUM_K_TILES, TILE_BYTES, GmemAB, GmemD, SmemAB,
                   TmemC)

NUM_TILES_MNL = (4, 4, 1)  # output tiles in M, N and batch


@dataclass(kw_only=True)
class PersistentTmemC(TmemC):
    """The accumulator, reset at the start of every work tile."""

    scale_d: object = None

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def init_work_tile_state(self, stage_info: StageInfo) -> None:
        """The first MMA of a tile overwrites the accumulator, later ones accumulate."""
        self.scale_d = False


@schedule
def load_schedule(gmem_ab, smem_ab, wq):
    with work_tile_loop(wq):
        with domain_loop(0, NUM_K_TILES, 1):
            coords = gmem_ab.compute_coords()
            smem_ab.try_acquire()
            smem_ab.acquire()
            smem_ab.tma_load(coords=coords)
            smem_ab.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def mma_schedule(smem_ab, tmem_c, wq):
    with work_tile_loop(wq):
        tmem_c.init_work_tile_state()
        tmem_c.try_acquire()
        tmem_c.acquire()
        with domain_loop(0, NUM_K_TILES, 1):
            smem_ab.try_wait()
            smem_ab.wait()
            desc = smem_ab.build_desc()
            tmem_c.mma(desc=desc)
            smem_ab.release()
        tmem_c.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def store_schedule(tmem_c, gmem_d, wq):
    with work_tile_loop(wq):
        # As in the TS docs: an empty domain loop puts the drain and the queue epilogue in the
        # tail, where WorkQueue placement requires the epilogue to be.
        with domain_loop(0, NUM_K_TILES, 1):
            pass
        tmem_c.try_wait()
        tmem_c.wait()
        acc = tmem_c.load_acc()
        gmem_d.store(acc=acc)
        tmem_c.release()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


def build(verbose: bool = True, **manager_options) -> TaskManager:
    gmem_ab = GmemAB(name="GmemAB")
    smem_ab = SmemAB(name="SmemAB", pipeline_config=PipelineConfig.create_tma_umma_pipeline_cfg(
        num_stages=AB_STAGES, num_bytes=TILE_BYTES, producer_group=thread_group(1),
        consumer_group=thread_group(1), cta_layout_vmnk=(1, 1, 1, 1)))
    tmem_c = PersistentTmemC(name="TmemC", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=ACC_STAGES, producer_group=thread_group(1),
        consumer_group=thread_group(EPILOGUE_WARPS * 32), cta_layout_vmnk=(1, 1, 1, 1)))
    gmem_d = GmemD(name="GmemD")
    wq = WorkQueue(name="WorkQueue", tile_scheduler_config=TileSchedulerConfig(num_tiles=NUM_TILES_MNL))
    tasks = [
        Task(name="StoreTask", src_resources=[tmem_c, wq], dst_resources=[gmem_d], warp_idx=0,
             num_warps=EPILOGUE_WARPS, schedule=store_schedule(tmem_c, gmem_d, wq), num_registers=232),
        Task(name="LoadTask", src_resources=[gmem_ab, wq], dst_resources=[smem_ab], warp_idx=4, num_warps=1,
             schedule=load_schedule(gmem_ab, smem_ab, wq), num_registers=40),
        Task(name="MmaTask", src_resources=[smem_ab, wq], dst_resources=[tmem_c], warp_idx=5, num_warps=1,
             schedule=mma_schedule(smem_ab, tmem_c, wq), num_registers=40),
    ]
    graph = {smem_ab: [gmem_ab, wq], tmem_c: [smem_ab, wq], gmem_d: [tmem_c, wq]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=verbose, **manager_options)


if __name__ == "__main__":
    build()
