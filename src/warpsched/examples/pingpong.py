"""Ping-pong: one buffer transformed in place by two tasks, declared as a self-edge.

The producer reads the current contents and writes the next ones inside acquire / commit;
the consumer transforms in place inside wait / release. Both sides run over one pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskLocalVariable, TaskManager,
                       consumer_work, domain_loop, producer_work, schedule)

from warpsched.examples._groups import thread_group

NUM_K_TILES = 6


@dataclass(kw_only=True)
class SmemPingPongResource(MemoryResource):
    cur: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.cur = TaskLocalVariable(dtype="Float32", default=0.0, docs="current contents of the slot")

    # The producer side reads the slot it owns (inside acquire / commit) before overwriting it.
    @producer_work(returns=cur)
    def read_current(self, stage_info: StageInfo):
        return 0.0

    @producer_work
    def write_next(self, stage_info: StageInfo, cur):
        """Write f(cur) back into the same slot."""

    @consumer_work
    def transform_inplace(self, stage_info: StageInfo):
        """Read the slot and rewrite it with g(contents)."""


def make_config(kind: str = "async_async", warps: int = 1):
    """The slot's pipeline; ``kind=None`` gives none (a rejected twin: ping-pong needs one)."""
    if kind is None:
        return None
    if kind == "async_async":
        return PipelineConfig.create_async_async_pipeline_cfg(  # @pp_async_async_cfg
            num_stages=1, producer_group=thread_group(32 * warps), consumer_group=thread_group(32 * warps))
    if kind == "tma_async":
        return PipelineConfig.create_tma_async_pipeline_cfg(  # @pp_tma_async_cfg
            num_stages=1, num_bytes=4096, producer_group=thread_group(1), consumer_group=thread_group(warps))
    if kind == "umma_async":  # synchronous consumer too (Blackwell): accepted
        return PipelineConfig.create_umma_async_pipeline_cfg(  # @pp_umma_async_cfg
            num_stages=1, producer_group=thread_group(1), consumer_group=thread_group(32 * warps),
            cta_layout_vmnk=(1, 1, 1, 1))
    factory = {"tma_umma": PipelineConfig.create_tma_umma_pipeline_cfg,
               "async_umma": PipelineConfig.create_async_umma_pipeline_cfg,
               "umma_umma": PipelineConfig.create_umma_umma_pipeline_cfg}[kind]
    extra = {"num_bytes": 4096} if kind == "tma_umma" else {}
    return factory(num_stages=1, producer_group=thread_group(1), consumer_group=thread_group(1),  # @pp_mma_cfg
                   cta_layout_vmnk=(1, 1, 1, 1), **extra)


@schedule
def producer_schedule(smem_pp):
    with domain_loop(0, NUM_K_TILES, 1):
        smem_pp.acquire()  # @pp_producer_acquire
        cur = smem_pp.read_current()
        smem_pp.write_next(cur=cur)
        smem_pp.commit()


@schedule
def consumer_schedule(smem_pp):
    with domain_loop(0, NUM_K_TILES, 1):
        smem_pp.wait()
        smem_pp.transform_inplace()
        smem_pp.release()


def build(verbose: bool = True, kind: str = "async_async", sides=("producer", "consumer"),
          **manager_options) -> TaskManager:
    """``sides`` keeps only some of the two tasks (a rejected twin: ping-pong needs both)."""
    smem_pp = SmemPingPongResource(name="SmemPP", pipeline_config=make_config(kind))
    producer_task = Task(name="Producer", dst_resources=[smem_pp], warp_idx=0, num_warps=1,
                         schedule=producer_schedule(smem_pp))
    consumer_task = Task(name="Consumer", src_resources=[smem_pp], warp_idx=1, num_warps=1,
                         schedule=consumer_schedule(smem_pp))
    tasks = [t for t, side in ((producer_task, "producer"), (consumer_task, "consumer")) if side in sides]
    return TaskManager(tasks=tasks, resource_dependency_graph={smem_pp: [smem_pp]}, verbose=verbose,
                       **manager_options)


if __name__ == "__main__":
    build()
