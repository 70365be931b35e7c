"""One 128 x 64 output tile per CTA with tcgen05: TMA -> SMEM ring -> UMMA into TMEM -> epilogue
that stages the accumulator in SMEM the mainloop's ring no longer needs, then stores it.

Reference-TS surface used: ``create_tma_umma_pipeline_cfg`` / ``create_umma_async_pipeline_cfg``;
``SmemAllocator.add`` (a standalone allocation), ``add_tmem_ptr`` (the kernel allocates TMEM itself
around ``run()``), ``add_alias_group`` (epilogue staging aliases the A/B ring), ``get``;
``TmemAllocation`` / ``TmemAllocator``; ``stage_info.context.tmem_ptr_i32.load()``;
``Task.is_selected()``; ``stage_info.loop_start`` / ``loop_end``; tuple ``returns=``; a tail
with Python-unrolled work calls; ``debug_print=``.
"""
from dataclasses import dataclass, field
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.experimental.cuda as cuda
import cutlass.pipeline as pipeline
from cutlass.experimental import primitives as prims

from cutlass.experimental.task_scheduling.memory import SmemAllocation, SmemAllocator, TmemAllocation, TmemAllocator
from cutlass.experimental.task_scheduling.resources import (MemoryResource, PipelineConfig, StageInfo,
                                                            TaskLocalVariable, WorkAttr, consumer_work,
                                                            producer_work)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

TM, TN, TK = 128, 64, 64  # CTA tile; TK fp16 = one 128-byte swizzled row
MMA_K = 16
STAGES = 2
A_ELEMS, B_ELEMS = TM * TK, TN * TK
COLS = 32  # accumulator columns per tcgen05.ld
EPI_WARPS = 4


@dataclass
class Coords(MemoryResource):
    k: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    m: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    n: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.k = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0), docs="k offset")
        self.m = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0), docs="m offset")
        self.n = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0), docs="n offset")

    @consumer_work(returns=(k, m, n))
    @cute.jit
    def at(self, stage_info: StageInfo):
        bx, by, _ = cute.arch.block_idx()
        k_tiles = stage_info.loop_end - stage_info.loop_start
        return (stage_info.loop_offset % k_tiles) * TK, bx * TM, by * TN


@dataclass
class OperandRing(MemoryResource):
    desc_a: Any = field(init=False, default=None)
    desc_b: Any = field(init=False, default=None)
    sa: Any = field(init=False, default=None)
    sb: Any = field(init=False, default=None)
    da: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    db: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    alloc_a: cutlass.Constexpr = field(init=False, default=None)
    alloc_b: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, desc_a, desc_b, **kwargs) -> None:
        super().__init__(**kwargs)
        self.desc_a, self.desc_b = desc_a, desc_b
        self.da = TaskLocalVariable(dtype=cutlass.Int64, default=cutlass.Int64(0), docs="A smem descriptor")
        self.db = TaskLocalVariable(dtype=cutlass.Int64, default=cutlass.Int64(0), docs="B smem descriptor")
        self.alloc_a = SmemAllocation("ring_a", A_ELEMS * STAGES * 2, alignment=1024)
        self.alloc_b = SmemAllocation("ring_b", B_ELEMS * STAGES * 2, alignment=1024)
        null = cutlass.inttoptr(0, mem_space=3, dtype=cutlass.Float16)
        self.sa = cutlass.Array(null, dtype=cutlass.Float16, shape=(A_ELEMS * STAGES,), addrspace=3)
        self.sb = cutlass.Array(null, dtype=cutlass.Float16, shape=(B_ELEMS * STAGES,), addrspace=3)

    def get_smem_requirements(self):
        return [self.alloc_a, self.alloc_b]

    @cute.jit
    def _bind(self, stage_info: StageInfo) -> None:
        base = stage_info.context.smem_base.data_ptr()
        self.sa = cutlass.Array(base + self.alloc_a.offset, dtype=cutlass.Float16, shape=(A_ELEMS * STAGES,),
                                addrspace=3)
        self.sb = cutlass.Array(base + self.alloc_b.offset, dtype=cutlass.Float16, shape=(B_ELEMS * STAGES,),
                                addrspace=3)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_loader(self, stage_info: StageInfo) -> None:
        self._bind(stage_info)

    @consumer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind_mma(self, stage_info: StageInfo) -> None:
        self._bind(stage_info)

    @producer_work
    @cute.jit
    def fill(self, stage_info: StageInfo, *, k: cutlass.Int32, m: cutlass.Int32, n: cutlass.Int32) -> None:
        if prims.elect_sync():
            s = stage_info.stage_idx
            prims.cp_async_bulk_tensor_shared_cta_global(self.sa.subview(A_ELEMS * s), self.desc_a, (k, m),
                                                         stage_info.barrier)
            prims.cp_async_bulk_tensor_shared_cta_global(self.sb.subview(B_ELEMS * s), self.desc_b, (k, n),
                                                         stage_info.barrier)

    @consumer_work(returns=(da, db))
    @cute.jit
    def descriptors(self, stage_info: StageInfo):
        s = stage_info.stage_idx
        da = prims.Tcgen05SmemDesc.build(self.sa.subview(A_ELEMS * s), leading_byte_offset=16,
                                         stride_byte_offset=1024, layout=2)
        db = prims.Tcgen05SmemDesc.build(self.sb.subview(B_ELEMS * s), leading_byte_offset=16,
                                         stride_byte_offset=1024, layout=2)
        return da, db


@dataclass
class Accumulator(MemoryResource):
    idesc: Any = field(init=False, default=None)
    taddr: Any = field(init=False, default=None)
    accumulate: Any = field(init=False, default=None)
    frag: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    cols: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cols = TmemAllocation("acc", TN)
        self.frag = TaskLocalVariable(dtype=cutlass.Float32, default=cutlass.full([COLS], 0.0, cutlass.Float32),
                                      docs="32 accumulator columns of this thread's row")
        self.idesc = cutlass.Int32(0)
        self.taddr = cutlass.Int32(0)
        self.accumulate = cutlass.Boolean(False)

    def get_tmem_requirements(self):
        return [self.cols]

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def setup_mma(self, stage_info: StageInfo) -> None:
        self.idesc = prims.Tcgen05InstrDesc.build(a_dtype=cutlass.Float16, b_dtype=cutlass.Float16,
                                                  c_dtype=cutlass.Float32, n_dim=TN, m_dim=TM)
        self.taddr = stage_info.context.tmem_ptr_i32.load()
        self.accumulate = cutlass.Boolean(False)

    @consumer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def setup_epilogue(self, stage_info: StageInfo) -> None:
        self.taddr = stage_info.context.tmem_ptr_i32.load()

    @producer_work
    @cute.jit
    def mma(self, stage_info: StageInfo, *, da: cutlass.Int64, db: cutlass.Int64) -> None:
        acc = cutlass.Array(prims.make_tmem_ptr(self.taddr, cutlass.Float32).data_ptr(), dtype=cutlass.Int32,
                            addrspace=6)
        for kb in cutlass.range_constexpr(TK // MMA_K):
            step = (MMA_K * 2 * kb) >> 4
            if prims.elect_sync():
                prims.tcgen05_mma(prims.Tcgen05MMAKind.F16, prims.CTAGroup.CTA_1, acc, da + step, db + step,
                                  self.idesc, self.accumulate)
            self.accumulate = cutlass.Boolean(True)

    @consumer_work(returns=frag)
    @cute.jit
    def columns(self, stage_info: StageInfo, *, part: cutlass.Constexpr[int]):
        warp = cute.arch.warp_idx()
        ptr = prims.make_tmem_ptr_from_warp_row_col(self.taddr, warp, (self.taddr & 0xFFFF) + part * COLS,
                                                    cutlass.Float32)
        frag = prims.tcgen05_ld("32x32b", ptr, num=COLS)
        cute.arch.fence_view_async_tmem_load()
        return frag


@dataclass
class Output(MemoryResource):
    out: Any = field(init=False, default=None)
    staging: Any = field(init=False, default=None)
    alloc_stage: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, out, **kwargs) -> None:
        super().__init__(**kwargs)
        self.out = out
        self.alloc_stage = SmemAllocation("epilogue", TM * TN * 4, alignment=128)
        self.staging = cutlass.Array(cutlass.inttoptr(0, mem_space=3, dtype=cutlass.Float32), dtype=cutlass.Float32,
                                     shape=(TM * TN,), addrspace=3)

    def get_smem_requirements(self):
        return [self.alloc_stage]

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def bind(self, stage_info: StageInfo) -> None:
        self.staging = cutlass.Array(stage_info.context.smem_base.data_ptr() + self.alloc_stage.offset,
                                     dtype=cutlass.Float32, shape=(TM * TN,), addrspace=3)

    @producer_work
    @cute.jit
    def stage(self, stage_info: StageInfo, *, frag: cutlass.Float32, part: cutlass.Constexpr[int]) -> None:
        tx, _, _ = cute.arch.thread_idx()
        for j in cutlass.range_constexpr(COLS):
            self.staging[tx * TN + part * COLS + j] = frag[j]

    @producer_work
    @cute.jit
    def flush(self, stage_info: StageInfo) -> None:
        tx, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        for j in cutlass.range(TN, unroll_full=True):
            self.out[bx * TM + tx, by * TN + j] = self.staging[tx * TN + j]


@cute.kernel
def umma_kernel(da: cutlass.GridConstant[cuda.TensorMap], db: cutlass.GridConstant[cuda.TensorMap],
                c: cute.Tensor, k_tiles: cutlass.Int32):
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    ring_cfg = PipelineConfig.create_tma_umma_pipeline_cfg(
        num_stages=STAGES, num_bytes=(A_ELEMS + B_ELEMS) * 2,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1), cta_layout_vmnk=(1, 1, 1, 1))
    acc_cfg = PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, EPI_WARPS * 32), cta_layout_vmnk=(1, 1, 1, 1))
    coords = Coords(name="Coords")
    ring = OperandRing(da.get_ptr(), db.get_ptr(), name="Ring", pipeline_config=ring_cfg)
    acc = Accumulator(name="Acc", pipeline_config=acc_cfg)
    out = Output(c, name="Out")

    smem = SmemAllocator()
    tmem_slot = smem.add_tmem_ptr(SmemAllocation("tmem_slot", dtype=cutlass.Int32, alignment=4))
    flag = smem.add(SmemAllocation("done_flag", dtype=cutlass.Int64, alignment=8))
    smem.add_resource(ring)
    smem.add_resource(out)
    smem.add_alias_group([[ring.alloc_a, ring.alloc_b], [out.alloc_stage]])
    smem.compute_layout()
    tmem = TmemAllocator()
    tmem.add_resource(acc)
    tmem.compute_layout()

    @schedule
    def load(coords: Coords, ring: OperandRing) -> None:
        ring.bind_loader()
        with domain_loop(0, k_tiles, 1, unroll=1):
            k, m, n = coords.at()
            ring.try_acquire()
            ring.acquire()
            ring.fill(k=k, m=m, n=n)
            ring.commit()

    @schedule
    def mma(ring: OperandRing, acc: Accumulator) -> None:
        ring.bind_mma()
        acc.setup_mma()
        acc.try_acquire()
        acc.acquire()
        with domain_loop(0, k_tiles, 1, unroll=1):
            ring.try_wait()
            ring.wait()
            d_a, d_b = ring.descriptors()
            acc.mma(da=d_a, db=d_b)
            ring.release()
        acc.commit()

    @schedule
    def epilogue(acc: Accumulator, out: Output) -> None:
        acc.setup_epilogue()
        out.bind()
        with domain_loop(0, k_tiles, 1, unroll=1):  # the reference TS wants a domain in every schedule
            pass
        acc.try_wait()
        acc.wait()
        for part in cutlass.range_constexpr(TN // COLS):
            frag = acc.columns(part=part)
            out.stage(frag=frag, part=part)
        acc.release()
        out.flush()

    load_task = Task([coords], [ring], 4, 1, schedule=load(coords, ring), num_registers=48, name="Load",
                     debug_print=False)
    mma_task = Task([ring], [acc], 5, 1, schedule=mma(ring, acc), num_registers=48, name="Mma", debug_print=False)
    epi_task = Task([acc], [out], 0, EPI_WARPS, schedule=epilogue(acc, out), num_registers=168, name="Epilogue",
                    debug_print=False)
    @schedule
    def idle() -> None:
        with domain_loop(0, k_tiles, 1, unroll=1):
            pass

    pad_task = Task([], [], 6, 2, schedule=idle(), num_registers=48, name="Pad")
    manager = TaskManager(tasks=[load_task, mma_task, epi_task, pad_task],
                          resource_dependency_graph={ring: [coords], acc: [ring], out: [acc]},
                          smem_allocator=smem, tmem_allocator=tmem)
    manager.setup_resources_and_tasks()

    slot = manager.smem_allocator.get(tmem_slot)
    flag_bar = smem.get(flag)
    if warp == 0:
        prims.mbarrier_init(flag_bar, 1)  # (not waited on here: shows a standalone allocation in use)
        prims.tcgen05_alloc(slot, 64)
        prims.tcgen05_relinquish_alloc_permit()
    if epi_task.is_selected() or mma_task.is_selected():
        prims.barrier_cta_sync(1, thread_count=(EPI_WARPS + 1) * 32)
    base = cutlass.Int32(0)
    if epi_task.is_selected() or mma_task.is_selected():
        base = slot.load()
    manager.run()
    if epi_task.is_selected():
        prims.barrier_cta_sync(2, thread_count=EPI_WARPS * 32)
    if warp == 0:
        prims.tcgen05_dealloc(prims.make_tmem_ptr(base, cutlass.Float32), 64)


@cute.jit
def umma_host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, k_tiles: cutlass.Int32):
    da = cuda.create_tensor_map_tiled_from_view(a, box_dims=(TM, TK), stride_order=(1, 0),
                                                swizzle=cuda.TensorMapSwizzle.s128b)
    db = cuda.create_tensor_map_tiled_from_view(b, box_dims=(TN, TK), stride_order=(1, 0),
                                                swizzle=cuda.TensorMapSwizzle.s128b)
    umma_kernel(da, db, c, k_tiles).launch(grid=(c.shape[0] // TM, c.shape[1] // TN, 1), block=(256, 1, 1))


def cpu_build():
    from cutlass.cute.runtime import make_fake_tensor

    a = make_fake_tensor(cutlass.Float16, (256, 512), (512, 1), assumed_align=16)
    b = make_fake_tensor(cutlass.Float16, (128, 512), (512, 1), assumed_align=16)
    c = make_fake_tensor(cutlass.Float32, (256, 128), (128, 1), assumed_align=16)
    return umma_host, (a, b, c, cutlass.Int32(8)), "sm_100a"
