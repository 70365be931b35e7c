"""GEMM-shaped load / mma / store schedule (Blackwell pipeline types), checkable on the CPU.

  LoadTask  (warp 4)    gmem_ab --coords--> smem_ab   TMA fills A/B tiles   (TmaUmma)
  MmaTask   (warp 5)    smem_ab --------->  tmem_c    tcgen05 MMA into TMEM (UmmaAsync)
  StoreTask (warps 0-3) tmem_c  --------->  gmem_d    TMEM -> registers -> GMEM

The work bodies are placeholders: as in the TS authoring lifecycle, the schedule structure
is written and verified first, the TMA / MMA code is filled in afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskLocalVariable, TaskManager,
                       WorkAttr, consumer_work, domain_loop, producer_work, schedule)

from ._groups import thread_group

NUM_K_TILES = 8
AB_STAGES = 4
ACC_STAGES = 2
TILE_BYTES = 2 * 128 * 64 * 2  # A and B tiles, 128 x 64 bf16 each
EPILOGUE_WARPS = 4


@dataclass(kw_only=True)
class GmemAB(MemoryResource):
    """Global A and B: hands out the coordinates of the next K tile."""

    coords: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.coords = TaskLocalVariable(dtype="Int32x3", default=0, docs="(k, m, n) of the tile to load")

    @consumer_work(returns=coords)
    def compute_coords(self, stage_info: StageInfo):
        return (stage_info.loop_offset, 0, 0)


@dataclass(kw_only=True)
class SmemAB(MemoryResource):
    """A/B tiles in shared memory, filled by TMA and read by the MMA."""

    desc: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.desc = TaskLocalVariable(dtype="Uint64", default=0, docs="SMEM descriptor of the stage")

    @producer_work
    def tma_load(self, stage_info: StageInfo, coords):
        """TMA copies of A and B into the acquired stage (filled in when lowering)."""

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc(self, stage_info: StageInfo):
        return stage_info.stage_idx


@dataclass(kw_only=True)
class TmemC(MemoryResource):
    """The fp32 accumulator in tensor memory."""

    acc: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.acc = TaskLocalVariable(dtype="Float32xN", default=0, docs="accumulator fragment in registers")

    @producer_work
    def mma(self, stage_info: StageInfo, desc):
        """tcgen05.mma of one K tile into the acquired accumulator stage."""

    @consumer_work(returns=acc)
    def load_acc(self, stage_info: StageInfo):
        return 0


@dataclass(kw_only=True)
class GmemD(MemoryResource):
    """Global output D."""

    @producer_work
    def store(self, stage_info: StageInfo, acc):
        """Convert and store the accumulator fragment."""


def make_resources():
    gmem_ab = GmemAB(name="GmemAB")
    smem_ab = SmemAB(name="SmemAB", pipeline_config=PipelineConfig.create_tma_umma_pipeline_cfg(
        num_stages=AB_STAGES, num_bytes=TILE_BYTES, producer_group=thread_group(1),
        consumer_group=thread_group(1), cta_layout_vmnk=(1, 1, 1, 1)))
    tmem_c = TmemC(name="TmemC", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=ACC_STAGES, producer_group=thread_group(1),
        consumer_group=thread_group(EPILOGUE_WARPS * 32), cta_layout_vmnk=(1, 1, 1, 1)))
    gmem_d = GmemD(name="GmemD")
    return gmem_ab, smem_ab, tmem_c, gmem_d


@schedule
def load_schedule(gmem_ab, smem_ab):
    with domain_loop(0, NUM_K_TILES, 1):
        coords = gmem_ab.compute_coords()
        smem_ab.try_acquire()
        smem_ab.acquire()
        smem_ab.tma_load(coords=coords)
        smem_ab.commit()


@schedule
def mma_schedule(smem_ab, tmem_c):
    tmem_c.try_acquire()
    tmem_c.acquire()
    with domain_loop(0, NUM_K_TILES, 1):
        smem_ab.try_wait()
        smem_ab.wait()
        desc = smem_ab.build_desc()
        tmem_c.mma(desc=desc)
        smem_ab.release()
    tmem_c.commit()


@schedule
def store_schedule(tmem_c, gmem_d):
    tmem_c.try_wait()
    tmem_c.wait()
    acc = tmem_c.load_acc()
    gmem_d.store(acc=acc)
    tmem_c.release()


def build(verbose: bool = True, **manager_options) -> TaskManager:
    gmem_ab, smem_ab, tmem_c, gmem_d = make_resources()
    tasks = [
        Task(name="StoreTask", src_resources=[tmem_c], dst_resources=[gmem_d], warp_idx=0,
             num_warps=EPILOGUE_WARPS, schedule=store_schedule(tmem_c, gmem_d), num_registers=232),
        Task(name="LoadTask", src_resources=[gmem_ab], dst_resources=[smem_ab], warp_idx=4, num_warps=1,
             schedule=load_schedule(gmem_ab, smem_ab), num_registers=40),
        Task(name="MmaTask", src_resources=[smem_ab], dst_resources=[tmem_c], warp_idx=5, num_warps=1,
             schedule=mma_schedule(smem_ab, tmem_c), num_registers=40),
    ]
    graph = {smem_ab: [gmem_ab], tmem_c: [smem_ab], gmem_d: [tmem_c]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=verbose, **manager_options)


if __name__ == "__main__":
    build()
