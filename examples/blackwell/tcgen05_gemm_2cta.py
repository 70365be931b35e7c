"""Blackwell 2-CTA tcgen05 GEMM (a CTA pair, cta_layout_vmnk=(2, 1, 1, 1)) as a warpsched program.
Compiles for sm_100a on the CPU; cannot run on the H200.

C[M, N] = A[M, K] @ B[N, K]^T, fp16 in, fp32 accumulate in TMEM. One pair of CTAs computes a
256 x 256 tile with tcgen05.mma.cta_group::2 (each CTA holds 128 rows of A, half of B and its
128 x 256 half of the accumulator); the schedules are tcgen05_gemm.py's:

    StoreTask (warps 0-3, both CTAs):  tmem_c.wait(); 4 x (load_subtile, store); tmem_c.release()
    LoadTask  (warp 4, both CTAs):     for k: smem_ab.acquire(); smem_ab.tma_load(k=k); smem_ab.commit()
    MmaTask   (warp 5, leader CTA):    tmem_c.acquire(); for k: smem_ab.wait(); mma; smem_ab.release()
                                       tmem_c.commit()

What the pair changes, all declared in build() and checked on both CTAs:
  smem_ab (TmaUmma)   num_bytes = 32 KiB per CTA x 1 warp x 2 CTAs: each CTA's TMA completes on the
                      leader's barrier, which only the leader arms; consumer_signaling_threads=CtaLeader
                      (the MMA waits and releases in the leader; its commit multicasts into both CTAs)
  tmem_c (UmmaAsync)  producer_signaling_threads=CtaLeader (the leader's commit reaches both CTAs'
                      full barriers); consumer_group = 128 epilogue threads x 2 CTAs, since both CTAs'
                      releases arrive on the leader's empty barrier
The MmaTask signals only CtaLeader sides, so it runs in the leader CTA alone (its MMA too).
"""
from __future__ import annotations

import os
import sys

try:
    from . import tcgen05_gemm as base
except ImportError:  # run as a script / loaded by path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tcgen05_gemm as base  # type: ignore

import cutlass
import cutlass.cute as cute
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import tcgen05

from warpsched import (PipelineConfig, SignalingThreads, SmemAllocation, SmemAllocator, Task, TaskManager,
                       TmemAllocation, TmemAllocator, threads, trip_count)

_common = base._common
PAIR = (2, 1, 1, 1)  # cta_layout_vmnk: one CTA pair along M
MMA_INST = (256, 256, 16)  # the pair's MMA: 128 rows per CTA
TILER = (256, 256, 64)  # the pair's tile; each CTA loads A 128 x 64 and B 128 x 64
AB_STAGES = 4
EPI_WARPS = 4
CTA_AB_BYTES = (TILER[0] // 2 + TILER[1] // 2) * TILER[2] * 2  # one CTA's A + B per stage (fp16)


def build(g=None, *, k_tiles=None, verbose=True, ab_num_bytes=CTA_AB_BYTES * 1 * 2, acc_threads=EPI_WARPS * 32 * 2,
          mma_signaling=SignalingThreads.CtaLeader, **manager_options):
    """The pair program, for ``warpsched check`` on the CPU and for the kernel while it is traced.
    ``ab_num_bytes`` / ``acc_threads`` / ``mma_signaling``: the declared values (tests build twins with
    one CTA's bytes, one CTA's epilogue threads, or an MMA side that runs in both CTAs)."""
    g = g if g is not None else Tcgen05Gemm2Cta()
    k_tiles = trip_count("k_tiles", k_tiles)
    ab_cfg = PipelineConfig.create_tma_umma_pipeline_cfg(  # @pair_ab_cfg
        num_stages=AB_STAGES, num_bytes=ab_num_bytes, num_bytes_per_warp_per_cta=CTA_AB_BYTES,
        producer_group=threads(1), consumer_group=threads(1), cta_layout_vmnk=PAIR,
        consumer_signaling_threads=mma_signaling)
    acc_cfg = PipelineConfig.create_umma_async_pipeline_cfg(  # @pair_acc_cfg
        num_stages=1, producer_group=threads(1), consumer_group=threads(acc_threads), cta_layout_vmnk=PAIR,
        producer_signaling_threads=mma_signaling)
    gmem_ab, gmem_d = base.GmemAB(name="GmemAB"), base.GmemD(name="GmemD", g=g)
    smem_ab = base.SmemAB(name="SmemAB", pipeline_config=ab_cfg, g=g)
    tmem_c = base.TmemC(name="TmemC", pipeline_config=acc_cfg, g=g)
    tasks = [
        Task(name="StoreTask", src_resources=[tmem_c], dst_resources=[gmem_d], warp_idx=0, num_warps=EPI_WARPS,
             schedule=base.store_schedule(tmem_c, gmem_d)),
        Task(name="LoadTask", src_resources=[gmem_ab], dst_resources=[smem_ab], warp_idx=4, num_warps=1,
             schedule=base.load_schedule(gmem_ab, smem_ab, k_tiles)),
        Task(name="MmaTask", src_resources=[smem_ab], dst_resources=[tmem_c], warp_idx=5, num_warps=1,
             schedule=base.mma_schedule(smem_ab, tmem_c, k_tiles)),
    ]
    graph = {smem_ab: [gmem_ab], tmem_c: [smem_ab], gmem_d: [tmem_c]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=SmemAllocator.for_resources(
        smem_ab), tmem_allocator=TmemAllocator.for_resources(tmem_c), verbose=verbose, **manager_options)


class Tcgen05Gemm2Cta(base.Tcgen05Gemm):
    """One CTA's share of the pair: A 128 x 64 and B 128 x 64 per stage, a 128 x 256 accumulator."""

    def __init__(self, io_dtype=cutlass.Float16):
        super().__init__(io_dtype)
        self.alloc_a = SmemAllocation("sA", dtype=io_dtype, count=TILER[0] // 2 * TILER[2] * AB_STAGES, alignment=1024)
        self.alloc_b = SmemAllocation("sB", dtype=io_dtype, count=TILER[1] // 2 * TILER[2] * AB_STAGES, alignment=1024)
        self.tmem_acc = TmemAllocation("acc", columns=TILER[1])

    def _make_tiled_mma(self):
        op = tcgen05.MmaF16BF16Op(self.io_dtype, cutlass.Float32, MMA_INST, tcgen05.CtaGroup.TWO,
                                  tcgen05.OperandSource.SMEM, cute.nvgpu.OperandMajorMode.K,
                                  cute.nvgpu.OperandMajorMode.K)
        return cute.make_tiled_mma(op)

    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        tiled_mma = self._make_tiled_mma()
        a_layout = sm100_utils.make_smem_layout_a(tiled_mma, TILER, a.element_type, AB_STAGES)
        b_layout = sm100_utils.make_smem_layout_b(tiled_mma, TILER, b.element_type, AB_STAGES)
        vmnk = cute.tiled_divide(cute.make_layout((PAIR[0], 1, 1)), (tiled_mma.thr_id.shape,))
        # the 2-SM TMA: its mbarrier operand is the leader CTA's barrier (the peer bit masked off)
        op_a = sm100_utils.cluster_shape_to_tma_atom_A((PAIR[0], 1), tiled_mma.thr_id)
        op_b = sm100_utils.cluster_shape_to_tma_atom_B((PAIR[0], 1), tiled_mma.thr_id)
        tma_a, tA = cute.nvgpu.make_tiled_tma_atom_A(op_a, a, cute.select(a_layout, mode=[0, 1, 2]), TILER, tiled_mma,
                                                     vmnk.shape)
        tma_b, tB = cute.nvgpu.make_tiled_tma_atom_B(op_b, b, cute.select(b_layout, mode=[0, 1, 2]), TILER, tiled_mma,
                                                     vmnk.shape)
        grid = cute.ceil_div((*c.layout.shape, 1), (TILER[0] // 2, TILER[1], 1))
        grid = (cute.round_up(grid[0], PAIR[0]), grid[1], grid[2])
        self.kernel(tiled_mma, tma_a, tA, tma_b, tB, c, a_layout, b_layout).launch(
            grid=grid, block=(6 * 32, 1, 1), cluster=(PAIR[0], 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
               mB: cute.Tensor, mC: cute.Tensor, a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout):
        bidx, bidy, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 4:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
        coord = (bidx // PAIR[0], bidy, None)  # the pair's tile
        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        mma_overwrite = self._make_tiled_mma()
        mma_overwrite.set(tcgen05.Field.ACCUMULATE, False)
        gA = cute.local_tile(mA, TILER, coord, proj=(1, None, 1))
        mgr = build(self, k_tiles=cute.size(gA, mode=[2]), verbose=False)  # checked here, on both CTAs
        mgr.setup_resources_and_tasks()
        view = mgr.smem_allocator.view
        # thr_mma: this CTA's place in the pair (0 leads) selects its half of A and C, its share of B
        mgr.run(tiled_mma=tiled_mma, mma_overwrite=mma_overwrite, thr_mma=tiled_mma.get_slice(bidx % PAIR[0]),
                acc_tile=TILER[:2], tma_a=tma_a, tma_b=tma_b, gA=gA,
                gB=cute.local_tile(mB, TILER, coord, proj=(None, 1, 1)),
                gC=cute.local_tile(mC, TILER, coord, proj=(1, 1, None)), sA=view(self.alloc_a, a_layout),
                sB=view(self.alloc_b, b_layout))


def compile_for_cpu(arch="sm_100a", io_dtype=cutlass.Float16):
    from cutlass.cute.runtime import make_fake_stream

    a, b, c = _common.fake_gemm_operands(io_dtype, io_dtype)
    return cute.compile(Tcgen05Gemm2Cta(io_dtype), a, b, c, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    f = compile_for_cpu()
    print(_common.count_ptx(f.artifacts.PTX))
