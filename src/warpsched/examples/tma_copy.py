"""TMA-to-async copy pipeline: a load task and a store task around SMEM (TmaAsync).

  LoadTask  (warp 4)     InputGmem --coords--> Smem     TMA box load into an acquired stage
  StoreTask (warps 0-3)  Smem --------------> OutputGmem read the stage, release it, store

The load task acquires a stage, issues the TMA load and commits (the TMA transaction bytes
complete the stage); the four store warps wait for a full stage, read it into registers,
release it and store to global memory. ``num_bytes`` is the bytes one TMA box writes. On a
TmaAsync pipeline one elected thread per consumer warp arrives on the empty barrier, so the
consumer group is sized to the 4 store warps (the reference TS writes the thread count, 128,
and lets ``enable_multicast_signaling`` recompute it; warpsched checks the arrival count).
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, WorkAttr, consumer_work, domain_loop, producer_work,
                       schedule)

from ._groups import thread_group

NUM_ROWS = 1024
BOX_ROWS, BOX_COLS = 32, 64  # one TMA box: 32 rows x 64 fp32
NUM_STAGES = 4
BOX_BYTES = BOX_ROWS * BOX_COLS * 4
STORE_WARPS = 4


@dataclass(kw_only=True)
class InputGmemResource(MemoryResource):
    """The source matrix: hands out the row coordinate of the next box."""

    gmem_idx: object = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.gmem_idx = TaskLocalVariable(dtype="Int32", default=0, docs="first row of the box to load")

    @consumer_work(returns=gmem_idx)
    def compute_coords(self, stage_info: StageInfo):
        return stage_info.loop_offset


@dataclass(kw_only=True)
class SmemResource(MemoryResource):
    """NUM_STAGES staging buffers of one TMA box each."""

    smem_val: object = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.smem_val = TaskLocalVariable(dtype="Float32xN", default=0, docs="this thread's part of the box")
        self._alloc_smem = SmemAllocation("smem_tiles", dtype="Float32", count=NUM_STAGES * BOX_ROWS * BOX_COLS,
                                          alignment=128)

    def get_smem_requirements(self):
        return [self._alloc_smem]

    @producer_work
    def tma_load(self, stage_info: StageInfo, gmem_idx) -> None:
        """cp.async.bulk.tensor of one box into stage ``stage_info.stage_idx`` (filled in when lowering)."""

    @consumer_work(returns=smem_val)
    def load_from_smem(self, stage_info: StageInfo):
        """Each store thread reads its elements of the stage into registers."""
        return 0


@dataclass(kw_only=True)
class OutputGmemResource(MemoryResource):
    """The destination matrix."""

    @producer_work
    def store(self, stage_info: StageInfo, smem_val) -> None:
        """Store this thread's registers to rows ``loop_offset .. loop_offset + BOX_ROWS``."""

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def fence(self, stage_info: StageInfo) -> None:
        """Helper with no payload: the verifier ignores it for ordering."""


@schedule
def load_schedule(input_gmem: InputGmemResource, smem: SmemResource) -> None:
    with domain_loop(0, NUM_ROWS, BOX_ROWS):
        gmem_idx = input_gmem.compute_coords()
        smem.try_acquire()  # probe the empty barrier
        smem.acquire()  # block until the stage is free
        smem.tma_load(gmem_idx=gmem_idx)
        smem.commit()  # the TMA transaction bytes complete the stage


@schedule
def store_schedule(smem: SmemResource, output_gmem: OutputGmemResource) -> None:
    with domain_loop(0, NUM_ROWS, BOX_ROWS):
        smem.try_wait()
        smem.wait()
        smem_val = smem.load_from_smem()
        smem.release()  # registers hold the data: the stage can be refilled
        output_gmem.store(smem_val=smem_val)


def build(verbose: bool = True, **manager_options) -> TaskManager:
    input_gmem = InputGmemResource(name="InputGmem")
    smem = SmemResource(name="Smem", pipeline_config=PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=NUM_STAGES, num_bytes=BOX_BYTES, producer_group=thread_group(1),
        consumer_group=thread_group(STORE_WARPS), cta_layout_vmnk=(1, 1, 1, 1)))
    output_gmem = OutputGmemResource(name="OutputGmem")

    allocator = SmemAllocator()
    allocator.add_resource(smem)
    allocator.compute_layout()

    store_task = Task(name="StoreTask", src_resources=[smem], dst_resources=[output_gmem], warp_idx=0,
                      num_warps=STORE_WARPS, schedule=store_schedule(smem, output_gmem))
    load_task = Task(name="LoadTask", src_resources=[input_gmem], dst_resources=[smem], warp_idx=4, num_warps=1,
                     schedule=load_schedule(input_gmem, smem))
    graph = {smem: [input_gmem], output_gmem: [smem]}
    return TaskManager(tasks=[store_task, load_task], resource_dependency_graph=graph, smem_allocator=allocator,
                       verbose=verbose, **manager_options)


if __name__ == "__main__":
    build()
