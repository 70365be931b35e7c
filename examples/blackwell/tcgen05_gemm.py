"""Blackwell TMA + tcgen05 GEMM as a warpsched program (compiles for sm_100a; cannot run on the H200).

C[M, N] = A[M, K] @ B[N, K]^T, fp16/bf16 in, fp32 accumulate in TMEM, 1 CTA per 128x256 tile.

    StoreTask (warps 0-3):  acc_ready = tmem_c.try_wait(); tmem_c.wait()
                            for i in range(4):  (trace-time: four 64-column subtiles)
                                frag = tmem_c.load_subtile(subtile_idx=i)   # tcgen05.ld
                                gmem_d.store(frag=frag, subtile_idx=i)
                            tmem_c.release()                                # 128 thread arrivals
    LoadTask  (warp 4):     for k: k = gmem_ab.k_coord(); smem_ab.try_acquire(); smem_ab.acquire()
                                   smem_ab.tma_load(k=k); smem_ab.commit()  (TmaUmma)
    MmaTask   (warp 5):     tmem_c.acquire()
                            for k as d: smem_ab.try_wait(); smem_ab.wait(); stage = smem_ab.stage()
                                        d.first_iter(): tmem_c.mma(stage=stage, first=True)
                                        d.every(1, start=1): tmem_c.mma(stage=stage)
                                        smem_ab.release()              # tcgen05.commit -> empty[s]
                            tmem_c.commit()                            # tcgen05.commit -> full (UmmaAsync)

TMEM: a TmemAllocator with one 256-column allocation; the lowering allocates it (warp 0), publishes
the base through SMEM and frees it when every task is done.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import os
import sys

try:
    from ..hopper import _common
except ImportError:  # run as a script / loaded by path: share the Hopper examples' helpers
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hopper"))
    import _common  # type: ignore

import cutlass
import cutlass.cute as cute
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import tcgen05

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, TmemAllocation, TmemAllocator, WorkAttr, consumer_work,
                       domain_loop, producer_work, schedule, threads, trip_count)

MMA_INST = (128, 256, 16)
TILER = (128, 256, 64)
AB_STAGES = 4
SUBTILES = 4
EPI_WARPS = 4


@dataclass(kw_only=True)
class GmemAB(MemoryResource):
    k: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.k = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="K tile of this iteration")

    @consumer_work(returns=k)
    def k_coord(self, stage_info: StageInfo):
        return stage_info.loop_offset


@dataclass(kw_only=True)
class SmemAB(MemoryResource):
    g: Any = None
    stage_tok: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.stage_tok = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="SMEM stage the MMA reads")

    def get_smem_requirements(self):
        return [self.g.alloc_a, self.g.alloc_b]

    @producer_work
    @cute.jit
    def tma_load(self, stage_info: StageInfo, k):
        v = stage_info.context.values  # what the kernel passed to mgr.run()
        tCgA = v.thr_mma.partition_A(v.gA)
        tCgB = v.thr_mma.partition_B(v.gB)
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(v.tma_a, 0, cute.make_layout(1), cute.group_modes(v.sA, 0, 3),
                                                      cute.group_modes(tCgA, 0, 3))
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(v.tma_b, 0, cute.make_layout(1), cute.group_modes(v.sB, 0, 3),
                                                      cute.group_modes(tCgB, 0, 3))
        s = stage_info.stage_idx
        cute.copy(v.tma_a, tAgA[(None, k)], tAsA[(None, s)], tma_bar_ptr=stage_info.barrier)
        cute.copy(v.tma_b, tBgB[(None, k)], tBsB[(None, s)], tma_bar_ptr=stage_info.barrier)

    @consumer_work(returns=stage_tok, work_attrs=WorkAttr.AUXILIARY)
    def stage(self, stage_info: StageInfo):
        return stage_info.stage_idx


@dataclass(kw_only=True)
class TmemC(MemoryResource):
    g: Any = None
    frag: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.frag = TaskLocalVariable(dtype=None, docs="fp32 subtile of the accumulator in registers")

    def get_tmem_requirements(self):
        return [self.g.tmem_acc]

    @producer_work
    @cute.jit
    def mma(self, stage_info: StageInfo, stage, *, first: cutlass.Constexpr = False):
        v = stage_info.context.values
        tCrA = v.tiled_mma.make_fragment_A(v.sA)
        tCrB = v.tiled_mma.make_fragment_B(v.sB)
        acc = tmem_acc(stage_info.context)
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            mma = v.mma_overwrite if cutlass.const_expr(first and kb == 0) else v.tiled_mma
            cute.gemm(mma, acc, tCrA[(None, None, kb, stage)], tCrB[(None, None, kb, stage)], acc)

    @consumer_work(returns=frag)
    @cute.jit
    def load_subtile(self, stage_info: StageInfo, *, subtile_idx: cutlass.Constexpr = 0):
        v = stage_info.context.values
        tidx, _, _ = cute.arch.thread_idx()
        acc = tmem_acc(stage_info.context)
        epi_tiler = ((cute.size(acc, mode=[0, 0]), cute.size(acc, mode=[0, 1]) // SUBTILES),)
        acc_epi = cute.zipped_divide(acc, epi_tiler)
        atom = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x64), cutlass.Float32)
        t2r = tcgen05.make_tmem_copy(atom, acc_epi[None, 0]).get_slice(tidx)
        tDtC = t2r.partition_S(acc_epi)
        tDgC = t2r.partition_D(cute.zipped_divide(v.thr_mma.partition_C(v.gC), epi_tiler))
        frag = cute.make_rmem_tensor(tDgC[None, None, 0].shape, cutlass.Float32)
        cute.copy(tcgen05.make_tmem_copy(atom, acc_epi[None, 0]), tDtC[None, None, subtile_idx], frag)
        return frag


@dataclass(kw_only=True)
class GmemD(MemoryResource):
    g: Any = None

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, frag, *, subtile_idx: cutlass.Constexpr = 0):
        g, v = self.g, stage_info.context.values
        tidx, _, _ = cute.arch.thread_idx()
        acc = tmem_acc(stage_info.context)
        epi_tiler = ((cute.size(acc, mode=[0, 0]), cute.size(acc, mode=[0, 1]) // SUBTILES),)
        atom = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x64), cutlass.Float32)
        t2r = tcgen05.make_tmem_copy(atom, cute.zipped_divide(acc, epi_tiler)[None, 0]).get_slice(tidx)
        tDgC = t2r.partition_D(cute.zipped_divide(v.thr_mma.partition_C(v.gC), epi_tiler))
        out = cute.make_rmem_tensor(frag.shape, g.io_dtype)
        out.store(frag.load().to(g.io_dtype))
        cute.autovec_copy(out, tDgC[None, None, subtile_idx])


def tmem_acc(context):
    """The accumulator in TMEM: the lowering allocated it and put its base on the kernel context
    (``acc_tile``: the MMA's tile, the CTA pair's in tcgen05_gemm_2cta.py)."""
    v = context.values
    return cute.make_tensor(context.tmem_base, v.tiled_mma.make_fragment_C(v.tiled_mma.partition_shape_C(
        v.acc_tile)).layout)


@schedule
def load_schedule(gmem_ab, smem_ab, k_tiles):
    with domain_loop(0, k_tiles, 1):
        k = gmem_ab.k_coord()
        smem_ab.try_acquire()
        smem_ab.acquire()
        smem_ab.tma_load(k=k)
        smem_ab.commit()


@schedule
def mma_schedule(smem_ab, tmem_c, k_tiles):
    tmem_c.acquire()
    with domain_loop(0, k_tiles, 1) as d:
        smem_ab.try_wait()
        smem_ab.wait()
        stage = smem_ab.stage()
        with d.first_iter():
            tmem_c.mma(stage=stage, first=True)
        with d.every(1, start=1):
            tmem_c.mma(stage=stage)
        smem_ab.release()
    tmem_c.commit()


@schedule
def store_schedule(tmem_c, gmem_d):
    tmem_c.try_wait()
    tmem_c.wait()
    for i in range(SUBTILES):  # trace-time: one load / store pair per subtile
        frag = tmem_c.load_subtile(subtile_idx=i)
        gmem_d.store(frag=frag, subtile_idx=i)
    tmem_c.release()


def build(g=None, *, k_tiles=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` on the CPU and for the kernel while it is traced.

    ``g``: the Tcgen05Gemm being traced; None on the CPU (a default one supplies the same dtype,
    tile bytes and allocations). ``k_tiles``: the kernel's runtime K-tile count (None on the CPU):
    every k_tiles >= 1 is checked."""
    g = g if g is not None else Tcgen05Gemm()
    k_tiles = trip_count("k_tiles", k_tiles)
    tile_bytes = (TILER[0] + TILER[1]) * TILER[2] * g.io_dtype.width // 8
    ab_cfg = PipelineConfig.create_tma_umma_pipeline_cfg(num_stages=AB_STAGES, num_bytes=tile_bytes,
                                                         producer_group=threads(1), consumer_group=threads(1),
                                                         cta_layout_vmnk=(1, 1, 1, 1))
    acc_cfg = PipelineConfig.create_umma_async_pipeline_cfg(num_stages=1, producer_group=threads(1),
                                                            consumer_group=threads(EPI_WARPS * 32),
                                                            cta_layout_vmnk=(1, 1, 1, 1))
    gmem_ab, gmem_d = GmemAB(name="GmemAB"), GmemD(name="GmemD", g=g)
    smem_ab = SmemAB(name="SmemAB", pipeline_config=ab_cfg, g=g)
    tmem_c = TmemC(name="TmemC", pipeline_config=acc_cfg, g=g)
    tasks = [
        Task(name="StoreTask", src_resources=[tmem_c], dst_resources=[gmem_d], warp_idx=0, num_warps=EPI_WARPS,
             schedule=store_schedule(tmem_c, gmem_d)),
        Task(name="LoadTask", src_resources=[gmem_ab], dst_resources=[smem_ab], warp_idx=4, num_warps=1,
             schedule=load_schedule(gmem_ab, smem_ab, k_tiles)),
        Task(name="MmaTask", src_resources=[smem_ab], dst_resources=[tmem_c], warp_idx=5, num_warps=1,
             schedule=mma_schedule(smem_ab, tmem_c, k_tiles)),
    ]
    graph = {smem_ab: [gmem_ab], tmem_c: [smem_ab], gmem_d: [tmem_c]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=SmemAllocator.for_resources(
        smem_ab), tmem_allocator=TmemAllocator.for_resources(tmem_c), verbose=verbose, **manager_options)


class Tcgen05Gemm:
    """Configuration only (plain Python, the same on the CPU and in the kernel); the kernel's
    trace-time values reach the work methods through ``mgr.run(...)``."""

    def __init__(self, io_dtype=cutlass.Float16):
        self.io_dtype = io_dtype
        self.alloc_a = SmemAllocation("sA", dtype=io_dtype, count=TILER[0] * TILER[2] * AB_STAGES, alignment=1024)
        self.alloc_b = SmemAllocation("sB", dtype=io_dtype, count=TILER[1] * TILER[2] * AB_STAGES, alignment=1024)
        self.tmem_acc = TmemAllocation("acc", columns=TILER[1])

    def _make_tiled_mma(self):
        op = tcgen05.MmaF16BF16Op(self.io_dtype, cutlass.Float32, MMA_INST, tcgen05.CtaGroup.ONE,
                                  tcgen05.OperandSource.SMEM, cute.nvgpu.OperandMajorMode.K,
                                  cute.nvgpu.OperandMajorMode.K)
        return cute.make_tiled_mma(op)

    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        tiled_mma = self._make_tiled_mma()
        a_layout = sm100_utils.make_smem_layout_a(tiled_mma, TILER, a.element_type, AB_STAGES)
        b_layout = sm100_utils.make_smem_layout_b(tiled_mma, TILER, b.element_type, AB_STAGES)
        op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_a, tA = cute.nvgpu.make_tiled_tma_atom_A(op, a, cute.select(a_layout, mode=[0, 1, 2]), TILER, tiled_mma)
        tma_b, tB = cute.nvgpu.make_tiled_tma_atom_B(op, b, cute.select(b_layout, mode=[0, 1, 2]), TILER, tiled_mma)
        grid = cute.ceil_div((*c.layout.shape, 1), TILER[:2])
        self.kernel(tiled_mma, tma_a, tA, tma_b, tB, c, a_layout, b_layout).launch(
            grid=grid, block=(6 * 32, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
               mB: cute.Tensor, mC: cute.Tensor, a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout):
        bidx, bidy, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 4:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
        coord = (bidx, bidy, None)
        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        mma_overwrite = self._make_tiled_mma()
        mma_overwrite.set(tcgen05.Field.ACCUMULATE, False)
        gA = cute.local_tile(mA, TILER, coord, proj=(1, None, 1))
        mgr = build(self, k_tiles=cute.size(gA, mode=[2]), verbose=False)  # checked here, while tracing
        mgr.setup_resources_and_tasks()
        view = mgr.smem_allocator.view  # a view past its allocation is refused
        mgr.run(tiled_mma=tiled_mma, mma_overwrite=mma_overwrite, thr_mma=tiled_mma.get_slice(0), acc_tile=TILER[:2],
                tma_a=tma_a, tma_b=tma_b, gA=gA, gB=cute.local_tile(mB, TILER, coord, proj=(None, 1, 1)),
                gC=cute.local_tile(mC, TILER, coord, proj=(1, 1, None)), sA=view(self.alloc_a, a_layout),
                sB=view(self.alloc_b, b_layout))


def compile_for_cpu(arch="sm_100a", io_dtype=cutlass.Float16):
    from cutlass.cute.runtime import make_fake_stream

    a, b, c = _common.fake_gemm_operands(io_dtype, io_dtype)
    return cute.compile(Tcgen05Gemm(io_dtype), a, b, c, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
