"""Merge group of a thread-filled ring and a TMA-filled ring, drained by one 4-warp task.

The shape of CUTLASS's 07_group_pipeline_ts/01 merge copy, written for warpsched's tests: ring A
(AsyncAsync, consumer_group in threads: 128) is filled by one warp's plain stores, ring B
(TmaAsync, consumer_group in warps: 4) by a bulk tensor copy, or -- ``USE_TMA = False`` -- by
plain stores too (AsyncAsync + AsyncAsync). The store task waits on both members and releases
them with one ``group.release()``: the shared empty barrier takes ring A's group (128) and every
store thread arrives on it.

Reference-TS surface used: ``PipelineGroup(mode=PipelineGroupMode.Merge)`` registered with
``SmemAllocator.add_pipeline_group``; member views ``group.ring_a`` passed to the schedules;
``cutlass.Array`` views of ``smem_base.data_ptr() + offset``; ``stage_info.barrier`` handed to
``cp_async_bulk_tensor_shared_cta_global`` (or, ``BARRIER_FORM``, ``stage_info.barrier.data_ptr().toint()``
as an mbarrier address, or ``cp_async_bulk_tensor_shared_cluster_global``); ``create_tensor_map_tiled_from_view``.
"""
from dataclasses import dataclass, field
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.experimental.cuda as cuda
import cutlass.pipeline as pipeline
from cutlass.experimental import primitives as prims

from cutlass.experimental.task_scheduling.enums import PipelineGroupMode
from cutlass.experimental.task_scheduling.memory import SmemAllocation, SmemAllocator
from cutlass.experimental.task_scheduling.resources import (MemoryResource, PipelineConfig, PipelineGroup, StageInfo,
                                                            TaskLocalVariable, WorkAttr, consumer_work,
                                                            producer_work)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

TILE = 128  # fp16 elements per stage of each ring
STAGES = 4
STORE_WARPS = 4
USE_TMA = True  # ring B filled by TMA (TmaAsync member) or by plain stores (AsyncAsync member)
BARRIER_FORM = "pointer"  # how the TMA copy gets stage_info.barrier: "pointer", "array", "array_in_if", "cluster"


@dataclass
class TileCursor(MemoryResource):
    """No storage: hands the loaders the tile index of each iteration."""

    tile: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.tile = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0), docs="tile index")

    @consumer_work(returns=tile)
    @cute.jit
    def next_tile(self, stage_info: StageInfo) -> cutlass.Int32:
        return stage_info.loop_offset


@dataclass
class Ring(MemoryResource):
    """TILE x STAGES fp16 of SMEM, filled by one warp (plain stores, or one TMA copy per stage)."""

    src: Any = field(init=False, default=None)
    desc: Any = field(init=False, default=None)
    ring: Any = field(init=False, default=None)
    tma: cutlass.Constexpr = field(init=False, default=False)
    _bytes: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, src, desc, tma: bool, label: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.src, self.desc, self.tma = src, desc, tma
        self._bytes = SmemAllocation(label, STAGES * TILE * 2, alignment=128)
        self.ring = cutlass.Array(cutlass.inttoptr(0, mem_space=3, dtype=cutlass.Float16), dtype=cutlass.Float16,
                                  shape=(STAGES * TILE,), addrspace=3)

    def get_smem_requirements(self):
        return [self._bytes]

    @cute.jit
    def _view(self, stage_info: StageInfo) -> None:
        self.ring = cutlass.Array(stage_info.context.smem_base.data_ptr() + self._bytes.offset,
                                  dtype=cutlass.Float16, shape=(STAGES * TILE,), addrspace=3)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_producer(self, stage_info: StageInfo) -> None:
        self._view(stage_info)

    @consumer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_consumer(self, stage_info: StageInfo) -> None:
        self._view(stage_info)

    @producer_work
    @cute.jit
    def fill(self, stage_info: StageInfo, *, tile: cutlass.Int32) -> None:
        if cutlass.const_expr(self.tma):
            dst = self.ring.subview(stage_info.stage_idx * TILE)
            if cutlass.const_expr(BARRIER_FORM == "array"):
                # as CUTLASS's 04_02: a typed pointer rebuilt from the barrier array's address
                bar = cute.make_ptr(cutlass.Int64, stage_info.barrier.data_ptr().toint(), cutlass.AddressSpace.smem)
                if prims.elect_sync():
                    prims.cp_async_bulk_tensor_shared_cta_global(dst, self.desc, (0, tile), bar)
            elif cutlass.const_expr(BARRIER_FORM == "array_in_if"):
                # the same inside the runtime `if` (stage_info is carried through it read-only)
                if prims.elect_sync():
                    bar = cute.make_ptr(cutlass.Int64, stage_info.barrier.data_ptr().toint(),
                                        cutlass.AddressSpace.smem)
                    prims.cp_async_bulk_tensor_shared_cta_global(dst, self.desc, (0, tile), bar)
            elif cutlass.const_expr(BARRIER_FORM == "cluster"):
                # as CUTLASS's 04_01: the cluster form (coordinates before the barrier)
                if prims.elect_sync():
                    prims.cp_async_bulk_tensor_shared_cluster_global(dst, self.desc, (0, tile), stage_info.barrier,
                                                                     [])
            else:
                if prims.elect_sync():
                    prims.cp_async_bulk_tensor_shared_cta_global(dst, self.desc, (0, tile), stage_info.barrier)
        else:
            tx, _, _ = cute.arch.thread_idx()
            lane = tx % 32
            for i in cutlass.range_constexpr(TILE // 32):
                k = i * 32 + lane
                self.ring[stage_info.stage_idx * TILE + k] = self.src[tile * TILE + k]

    @consumer_work
    @cute.jit
    def mark_read(self, stage_info: StageInfo) -> None:
        pass


@dataclass
class Sink(MemoryResource):
    """Copies both rings' current stage to their outputs (one element per thread per ring)."""

    out_a: Any = field(init=False, default=None)
    out_b: Any = field(init=False, default=None)
    ring_a: Any = field(init=False, default=None)
    ring_b: Any = field(init=False, default=None)

    def __init__(self, out_a, out_b, ring_a, ring_b, **kwargs) -> None:
        super().__init__(**kwargs)
        self.out_a, self.out_b, self.ring_a, self.ring_b = out_a, out_b, ring_a, ring_b

    @producer_work
    @cute.jit
    def write(self, stage_info: StageInfo) -> None:
        tx, _, _ = cute.arch.thread_idx()
        stage = stage_info.loop_offset % STAGES
        for i in cutlass.range_constexpr(TILE // (STORE_WARPS * 32)):
            k = i * STORE_WARPS * 32 + tx
            self.out_a[stage_info.loop_offset * TILE + k] = self.ring_a.ring[stage * TILE + k]
            self.out_b[stage_info.loop_offset * TILE + k] = self.ring_b.ring[stage * TILE + k]


@cute.kernel
def merge_kernel(a: cute.Tensor, b: cute.Tensor, desc_b: cutlass.GridConstant[cuda.TensorMap], out_a: cute.Tensor,
                 out_b: cute.Tensor, tiles: cutlass.Constexpr):
    cfg_a = PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, STORE_WARPS * 32))
    if cutlass.const_expr(USE_TMA):
        cfg_b = PipelineConfig.create_tma_async_pipeline_cfg(
            num_stages=STAGES, num_bytes=TILE * 2, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, STORE_WARPS))
    else:
        cfg_b = PipelineConfig.create_async_async_pipeline_cfg(
            num_stages=STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, STORE_WARPS * 32))
    cursor = TileCursor(name="cursor")
    ring_a = Ring(a, None, False, "ring_a_bytes", name="ring_a", pipeline_config=cfg_a)
    ring_b = Ring(b, desc_b.get_ptr() if USE_TMA else None, USE_TMA, "ring_b_bytes", name="ring_b",
                  pipeline_config=cfg_b)
    group = PipelineGroup(name="ab_sync", members=[ring_a, ring_b], mode=PipelineGroupMode.Merge)
    sink = Sink(out_a, out_b, ring_a, ring_b, name="sink")
    smem = SmemAllocator()
    smem.add_resource(ring_a)
    smem.add_resource(ring_b)
    smem.add_pipeline_group(group)
    smem.compute_layout()

    @schedule
    def fill(cursor: TileCursor, ring: Ring) -> None:
        ring.bind_producer()
        with domain_loop(0, tiles, 1, unroll=1):
            t = cursor.next_tile()
            ring.try_acquire()
            ring.acquire()
            ring.fill(tile=t)
            ring.commit()

    @schedule
    def drain(ra: Ring, rb: Ring, sink: Sink, grp: PipelineGroup) -> None:
        ra.bind_consumer()
        rb.bind_consumer()
        with domain_loop(0, tiles, 1, unroll=1):
            ra.try_wait()
            ra.wait()
            rb.try_wait()
            rb.wait()
            ra.mark_read()
            rb.mark_read()
            sink.write()
            grp.release()

    tasks = [Task(src_resources=[ring_a, ring_b], dst_resources=[sink], warp_idx=0, num_warps=STORE_WARPS,
                  schedule=drain(group.ring_a, group.ring_b, sink, group), name="Store"),
             Task(src_resources=[cursor], dst_resources=[ring_a], warp_idx=4, num_warps=1,
                  schedule=fill(cursor, group.ring_a), name="LoadA"),
             Task(src_resources=[cursor], dst_resources=[ring_b], warp_idx=5, num_warps=1,
                  schedule=fill(cursor, group.ring_b), name="LoadB")]
    manager = TaskManager(tasks=tasks, resource_dependency_graph={ring_a: [cursor], ring_b: [cursor],
                                                                  sink: [ring_a, ring_b]}, smem_allocator=smem)
    manager.setup_resources_and_tasks()
    manager.run()


@cute.jit
def merge_host(a: cute.Tensor, b: cute.Tensor, out_a: cute.Tensor, out_b: cute.Tensor, tiles: cutlass.Constexpr):
    """a, out_a: (tiles * TILE,) fp16; b, out_b: (tiles, TILE) fp16 row-major (one TMA box per row)."""
    desc_b = cuda.create_tensor_map_tiled_from_view(b, box_dims=(TILE, 1), swizzle=cuda.TensorMapSwizzle.none)
    merge_kernel(a, b, desc_b, out_a, out_b, tiles).launch(grid=(1, 1, 1), block=((STORE_WARPS + 2) * 32, 1, 1))


def cpu_build(tiles: int = 8):
    from cutlass.cute.runtime import make_fake_tensor

    n = tiles * TILE
    a, out_a = (make_fake_tensor(cutlass.Float16, (n,), (1,), assumed_align=16) for _ in range(2))
    b, out_b = (make_fake_tensor(cutlass.Float16, (tiles, TILE), (TILE, 1), assumed_align=16) for _ in range(2))
    return merge_host, (a, b, out_a, out_b, tiles), "sm_90a"
