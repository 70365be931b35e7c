"""Small program builders shared by the checker tests (no tests in this module).

Every builder returns a ``warpsched.verify.Program`` so the tests call ``run_checker``
directly and do not depend on the static checks.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, SmemAllocation,
                       SmemAllocator, Task, TaskLocalVariable, WorkAttr, WorkQueue, consumer_work,
                       producer_work)
from warpsched.verify import Options, Program


class Group:
    """Duck-typed cutlass CooperativeGroup (the checker reads ``.size`` only)."""

    def __init__(self, size):
        self.size = size


class WgmmaWorks:
    """Hopper WGMMA work stubs for a test resource: a GEMM (one commit group), a consumer's declared operand,
    a producer's own declared read of the stage it committed, and wgmma.wait_group."""

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def wgmma(self, stage_info):
        pass

    @consumer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def operand(self, stage_info):
        pass

    @producer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def own_operand(self, stage_info):
        pass

    @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY)
    def wgmma_wait(self, stage_info, pending=0):
        pass


@dataclass(kw_only=True)
class Buf(WgmmaWorks, MemoryResource):
    """A buffer with every kind of work method the tests need."""

    flag: object = TaskLocalVariable.uninitialized()
    allocs: tuple = ()

    def __post_init__(self):
        self.flag = TaskLocalVariable(dtype="Boolean", default=False)

    def get_smem_requirements(self):
        return list(self.allocs)

    @producer_work
    def fill(self, stage_info):
        pass

    @consumer_work
    def read(self, stage_info):
        pass

    @consumer_work(returns=flag, work_attrs=WorkAttr.AUXILIARY)
    def decide(self, stage_info):
        return True


@dataclass(kw_only=True)
class Queue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return False


def async_cfg(stages=2, prod=32, cons=32, **kw):
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=stages, producer_group=Group(prod),
                                                          consumer_group=Group(cons), **kw)


def tma_cfg(stages=2, cons=1, nbytes=1024, **kw):
    return PipelineConfig.create_tma_async_pipeline_cfg(num_stages=stages, num_bytes=nbytes,
                                                        producer_group=Group(1), consumer_group=Group(cons),
                                                        cta_layout_vmnk=(1, 1, 1, 1), **kw)


def task(name, sched, *, src=(), dst=(), warp=0, warps=1):
    return Task(name=name, src_resources=list(src), dst_resources=list(dst), warp_idx=warp, num_warps=warps,
                schedule=sched)


def program(tasks, graph=None, *, smem=None, max_states=200_000, **opts):
    return Program(tasks=list(tasks), graph=dict(graph or {}), smem_allocator=smem,
                   options=Options(max_states=max_states, **opts))


def aliased_pair(stages_a=1):
    """Two resources whose SMEM allocations alias (phases of one alias group)."""
    alloc_a = SmemAllocation("a_tiles", dtype=2, count=1024 * stages_a)
    alloc_b = SmemAllocation("b_scratch", dtype=2, count=1024)
    smem = SmemAllocator()
    smem.add_alias_group([[alloc_a], [alloc_b]])
    smem.compute_layout()
    return smem, alloc_a, alloc_b


__all__ = ["Buf", "Group", "PdlLaunchBarrier", "PdlWaitBarrier", "Queue", "aliased_pair", "async_cfg", "program",
           "task", "tma_cfg"]
