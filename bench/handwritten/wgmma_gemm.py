"""Hand-written warp-specialized TMA + WGMMA GEMM for Hopper (sm_90a), CuTe DSL 4.8.1.

C[M, N] = A[M, K] @ B[N, K]^T      A, B bf16 (or fp16) row-major (K contiguous), fp32 accumulate,
                                   C bf16/fp16 (TMA-store epilogue through stmatrix) or fp32.

CTA = 3 warpgroups (384 threads), one CTA per SM, non-persistent, grid = #output tiles
(1D, grouped rasterization: GROUP_M=16 row-tiles share each B column strip for L2 reuse).

  WG0 (producer):  setmaxnreg.dec 40; warp 0 only:
                     for k_tile: pipe.producer_acquire(st)      # wait EMPTY[i]; arrive.expect_tx FULL[i]
                                 TMA A tile, TMA B tile -> stage i   (complete_tx on FULL[i])
                                 st.advance()
                     pipe.producer_tail(st)
  WG1, WG2 (consumers, "cooperative": each owns 64 rows of the 128-row tile):
                   setmaxnreg.inc 232;
                     k_tile 0: consumer_wait; wgmma x4 (ACCUMULATE=False on the first); commit
                     k_tile>0: consumer_wait; wgmma x4; commit; wgmma.wait_group 1;
                               consumer_release(previous stage)
                     wait_group 0; release last stage
                   epilogue per 128x32 sub-tile: acc -> bf16 regs -> stmatrix -> SMEM (4 buffers);
                     fence.proxy.async.shared::cta; named barrier (256 thr);
                     warp 4 issues the TMA store, bulk commit_group, wait_group.read <= 3;
                     named barrier.

Ragged M, N, K are supported (TMA zero-fills OOB loads, clips OOB stores); the only
requirement is 16-byte aligned rows: K % 8 == 0 and N * sizeof(C) % 16 == 0.
"""

import math
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # must precede `import cutlass`
# keep PTX (".artifacts.PTX") but dump the files outside the repo
PTX_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "warpsched_handwritten_ptx")
os.makedirs(PTX_DIR, exist_ok=True)  # must exist, else .artifacts.PTX is just a path
PTX_OPTIONS = "--keep-ptx --dump-dir=" + PTX_DIR

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401  (SmemAllocator)
import cutlass.pipeline as pipeline
import cutlass.tensor_utils  # noqa: F401  (LayoutEnum)
import cutlass.utils.hopper_helpers as sm90_utils
import cuda.bindings.driver as cuda


class WgmmaGemmKernel:
    def __init__(
        self,
        ab_dtype=cutlass.BFloat16,
        c_dtype=cutlass.BFloat16,
        acc_dtype=cutlass.Float32,
        tile_mn=(128, 256),
        group_m=16,
        producer_regs=40,
        consumer_regs=232,
    ):
        self.ab_dtype = ab_dtype
        self.c_dtype = c_dtype
        self.acc_dtype = acc_dtype
        self.tile_mn = tuple(tile_mn)
        assert self.tile_mn[0] in (64, 128) and self.tile_mn[1] in (64, 128, 256)
        self.group_m = group_m
        self.producer_regs = producer_regs
        self.consumer_regs = consumer_regs
        # two consumer warpgroups stacked along M when the tile is big (each WG: 64 x N)
        self.atom_layout_mnk = (2, 1, 1) if self.tile_mn[0] == 128 else (1, 1, 1)
        self.num_consumer_wgs = math.prod(self.atom_layout_mnk)
        self.num_consumer_threads = 128 * self.num_consumer_wgs
        self.threads = 128 * (1 + self.num_consumer_wgs)
        self.epi_store_warp = 4  # first warp of the first consumer warpgroup
        self.layout = cutlass.tensor_utils.LayoutEnum.ROW_MAJOR  # A, B: K-major; C: N-major
        self.smem_capacity = cutlass.memory.get_smem_capacity_in_bytes("sm_90")

    def _setup(self):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            self.layout.sm90_mma_major_mode(),
            self.layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, self.tile_mn[1]),
        )
        mma_k = cute.size(self.tiled_mma.shape_mnk, mode=[2])  # 16 for 16-bit inputs
        self.tile_mnk = (*self.tile_mn, mma_k * 4)  # bK = 64 -> one 128B swizzle row
        self.epi_tile = (min(128, self.tile_mn[0]), 32)
        self.epi_stage = 4
        ab_bytes = (self.tile_mnk[0] + self.tile_mnk[1]) * self.tile_mnk[2] * self.ab_dtype.width // 8
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * self.c_dtype.width // 8 * self.epi_stage
        self.ab_stage = (self.smem_capacity - 1024 - epi_bytes) // ab_bytes
        self.a_smem_staged = sm90_utils.make_smem_layout_a(self.layout, self.tile_mnk, self.ab_dtype, self.ab_stage)
        self.b_smem_staged = sm90_utils.make_smem_layout_b(self.layout, self.tile_mnk, self.ab_dtype, self.ab_stage)
        self.epi_smem_staged = sm90_utils.make_smem_layout_epi(self.c_dtype, self.layout, self.epi_tile, self.epi_stage)

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, stream: cuda.CUstream):
        self._setup()
        bM, bN, bK = self.tile_mnk
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_a, tma_tA = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mA, cute.slice_(self.a_smem_staged, (None, None, 0)), (bM, bK))
        tma_b, tma_tB = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mB, cute.slice_(self.b_smem_staged, (None, None, 0)), (bN, bK))
        tma_c, tma_tC = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mC,
            cute.slice_(self.epi_smem_staged, (None, None, 0)), self.epi_tile)

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, self.ab_stage * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(self.a_smem_staged)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(self.b_smem_staged)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(self.epi_smem_staged)], 1024]

        self.shared_storage = SharedStorage
        tiles_m = cute.ceil_div(cute.size(mC, mode=[0]), bM)
        tiles_n = cute.ceil_div(cute.size(mC, mode=[1]), bN)
        self.kernel(
            tma_a, tma_tA, tma_b, tma_tB, tma_c, tma_tC, self.tiled_mma,
            self.a_smem_staged, self.b_smem_staged, self.epi_smem_staged,
        ).launch(
            grid=[tiles_m * tiles_n, 1, 1],
            block=[self.threads, 1, 1],
            min_blocks_per_mp=1,  # register cap at entry, needed for setmaxnreg to take effect
            stream=stream,
        )

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_c: cute.CopyAtom,
        mC: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_staged: cute.ComposedLayout,
        b_smem_staged: cute.ComposedLayout,
        epi_smem_staged: cute.ComposedLayout,
    ):
        bM, bN, bK = self.tile_mnk
        S = self.ab_stage
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // 128)

        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)

        # ---- tile coordinates: grouped rasterization (GROUP_M row tiles per group) ----
        tiles_m = cute.ceil_div(cute.size(mC, mode=[0]), bM)
        tiles_n = cute.ceil_div(cute.size(mC, mode=[1]), bN)
        per_group = self.group_m * tiles_n
        first_m = (bid // per_group) * self.group_m
        group_m = cutlass.min(tiles_m - first_m, self.group_m)
        pid_m = first_m + (bid % per_group) % group_m
        pid_n = (bid % per_group) // group_m

        # ---- shared memory + pipeline ----
        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        tx_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(a_smem_staged, (None, None, 0))) + \
            cute.size_in_bytes(self.ab_dtype, cute.slice_(b_smem_staged, (None, None, 0)))
        pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(),
            num_stages=S,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # consumer_release arrives once per consumer warp (lane 0)
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_consumer_wgs * 4),
            tx_count=tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
            defer_sync=False,
        )
        sA = storage.sA.get_tensor(a_smem_staged.outer, swizzle=a_smem_staged.inner)
        sB = storage.sB.get_tensor(b_smem_staged.outer, swizzle=b_smem_staged.inner)
        sC = storage.sC.get_tensor(epi_smem_staged.outer, swizzle=epi_smem_staged.inner)

        gA = cute.local_tile(mA, (bM, bK), (pid_m, None))  # (bM, bK, k_tiles)
        gB = cute.local_tile(mB, (bN, bK), (pid_n, None))  # (bN, bK, k_tiles)
        gC = cute.local_tile(mC, (bM, bN), (pid_m, pid_n))  # (bM, bN)
        k_tiles = cute.size(gA, mode=[2])

        if wg_idx == 0:
            # ======================= producer warpgroup =======================
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                    tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
                tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                    tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
                st = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, S)
                for k in cutlass.range(k_tiles, unroll=1):
                    pipe.producer_acquire(st)
                    bar = pipe.producer_get_barrier(st)
                    cute.copy(tma_a, tAgA[(None, k)], tAsA[(None, st.index)], tma_bar_ptr=bar)
                    cute.copy(tma_b, tBgB[(None, k)], tBsB[(None, st.index)], tma_bar_ptr=bar)
                    pipe.producer_commit(st)
                    st.advance()
                pipe.producer_tail(st)
        else:
            # ======================= consumer warpgroups =======================
            cute.arch.setmaxregister_increase(self.consumer_regs)
            ctidx = tidx - 128
            thr_mma = tiled_mma.get_slice(ctidx)
            tCsA = thr_mma.partition_A(sA)
            tCsB = thr_mma.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA)  # smem descriptors
            tCrB = tiled_mma.make_fragment_B(tCsB)
            tCgC = thr_mma.partition_C(gC)
            acc = cute.make_rmem_tensor(tCgC.shape, self.acc_dtype)
            num_kb = cute.size(tCrA, mode=[2])

            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, S)
            rel = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, S)

            # k_tile 0 (peeled): first wgmma overwrites the accumulator
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
            pipe.consumer_wait(read)
            cute.nvgpu.warpgroup.fence()
            for kb in cutlass.range_constexpr(num_kb):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                          tCrB[(None, None, kb, read.index)], acc)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            cute.nvgpu.warpgroup.commit_group()
            read.advance()

            for k in cutlass.range(1, k_tiles, unroll=1):
                pipe.consumer_wait(read)
                cute.nvgpu.warpgroup.fence()
                for kb in cutlass.range_constexpr(num_kb):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)],
                              tCrB[(None, None, kb, read.index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                cute.nvgpu.warpgroup.wait_group(1)  # the previous k_tile's wgmmas are done
                pipe.consumer_release(rel)
                rel.advance()
                read.advance()
            cute.nvgpu.warpgroup.wait_group(0)
            pipe.consumer_release(rel)

            # ---------------- epilogue: regs -> smem (stmatrix) -> TMA store ----------------
            epi_bar = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_consumer_threads)
            copy_atom_r2s = sm90_utils.sm90_get_smem_store_op(
                self.layout, elem_ty_d=self.c_dtype, elem_ty_acc=self.acc_dtype)
            copy_atom_C = cute.make_copy_atom(
                cute.nvgpu.warp.StMatrix8x8x16bOp(self.layout.is_m_major_c(), 4), self.c_dtype)
            tiled_copy_r2s = cute.make_tiled_copy_S(
                copy_atom_r2s, cute.make_tiled_copy_C_atom(copy_atom_C, tiled_mma))
            thr_r2s = tiled_copy_r2s.get_slice(ctidx)
            tRS_sC = thr_r2s.partition_D(sC)  # (R2S, R2S_M, R2S_N, EPI_STAGE)
            tRS_acc = tiled_copy_r2s.retile(acc)
            rC_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
            tRS_rAcc = cute.make_rmem_tensor(rC_shape, self.acc_dtype)
            tRS_rC = cute.make_rmem_tensor(rC_shape, self.c_dtype)
            n_per = cute.size(tRS_rAcc)

            gC_epi = cute.zipped_divide(gC, self.epi_tile)  # ((EM, EN), (num_m, num_n))
            bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(
                tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_epi)
            epi_shape = gC_epi.shape[1]
            epi_layout = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
            n_epi = cute.size(epi_shape)
            store_pipe = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stage,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_consumer_threads),
            )
            for e in cutlass.range_constexpr(n_epi):
                for v in cutlass.range_constexpr(n_per):
                    tRS_rAcc[v] = tRS_acc[e * n_per + v]
                tRS_rC.store(tRS_rAcc.load().to(self.c_dtype))
                buf = e % self.epi_stage
                cute.copy(tiled_copy_r2s, tRS_rC, tRS_sC[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")  # generic-proxy writes -> TMA reads
                epi_bar.arrive_and_wait()
                if warp_idx == self.epi_store_warp:
                    cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_layout.get_hier_coord(e))])
                    store_pipe.producer_commit()   # cp.async.bulk.commit_group
                    store_pipe.producer_acquire()  # cp.async.bulk.wait_group.read epi_stage-1
                epi_bar.arrive_and_wait()
            if warp_idx == self.epi_store_warp:
                store_pipe.producer_tail()  # wait_group 0


# ----------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------
_CACHE = {}


def _cutlass_dtype(torch_dtype):
    import torch

    return {torch.float32: cutlass.Float32, torch.bfloat16: cutlass.BFloat16,
            torch.float16: cutlass.Float16}[torch_dtype]


def _check_args(a, b, c):
    M, K = a.shape
    N, K2 = b.shape
    assert K == K2 and tuple(c.shape) == (M, N), f"shapes: A{tuple(a.shape)} B{tuple(b.shape)} C{tuple(c.shape)}"
    assert a.dtype == b.dtype and a.dtype.itemsize == 2, "A, B must be bf16/fp16"
    for name, t in (("A", a), ("B", b), ("C", c)):
        assert t.is_cuda and t.stride(1) == 1, f"{name} must be row-major on the GPU"
        assert (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0, (
            f"{name}: TMA needs 16-byte aligned base and row stride "
            f"(K % 8 == 0 for A/B, N * sizeof(C) % 16 == 0 for C)")


def get_compiled(a, b, c, options="", **kw):
    import torch
    from cutlass.cute.runtime import from_dlpack

    key = (a.dtype, c.dtype, options, tuple(sorted(kw.items())))
    mA = from_dlpack(a, assumed_align=16).mark_layout_dynamic(leading_dim=1)
    mB = from_dlpack(b, assumed_align=16).mark_layout_dynamic(leading_dim=1)
    mC = from_dlpack(c, assumed_align=16).mark_layout_dynamic(leading_dim=1)
    if key not in _CACHE:
        kern = WgmmaGemmKernel(_cutlass_dtype(a.dtype), _cutlass_dtype(c.dtype), **kw)
        stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
        _CACHE[key] = cute.compile(kern, mA, mB, mC, stream, options=options)
    return _CACHE[key], mA, mB, mC


def gemm(a, b, c, **kw):
    """c = a @ b.T (a: [M,K], b: [N,K], c: [M,N]). Returns a zero-arg relauncher."""
    import torch

    _check_args(a, b, c)
    f, mA, mB, mC = get_compiled(a, b, c, **kw)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    f(mA, mB, mC, stream)
    return lambda: f(mA, mB, mC, stream)


def compile_for_cpu(ab_dtype=cutlass.BFloat16, c_dtype=cutlass.BFloat16, options=None, **kw):
    from cutlass.cute.runtime import make_fake_tensor, make_fake_stream

    M = cute.sym_int32()
    N = cute.sym_int32(divisibility=8)
    K = cute.sym_int32(divisibility=8)
    a = make_fake_tensor(ab_dtype, (M, K), (cute.sym_int64(divisibility=8), 1), assumed_align=16)
    b = make_fake_tensor(ab_dtype, (N, K), (cute.sym_int64(divisibility=8), 1), assumed_align=16)
    c = make_fake_tensor(c_dtype, (M, N), (cute.sym_int64(divisibility=8), 1), assumed_align=16)
    kern = WgmmaGemmKernel(ab_dtype, c_dtype, **kw)
    return cute.compile(kern, a, b, c, make_fake_stream(), options=options or PTX_OPTIONS)


PTX_PATTERNS = ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx",
                "cp.async.bulk.tensor", "wgmma.mma_async", "wgmma.fence", "wgmma.commit_group",
                "wgmma.wait_group", "setmaxnreg", "stmatrix", "bar.sync", "bar.arrive"]


def count_ptx(ptx, patterns=PTX_PATTERNS):
    lines = ptx.splitlines()
    return {p: sum(p in l for l in lines) for p in patterns}


if __name__ == "__main__":
    import sys

    cdt = {"bf16": cutlass.BFloat16, "fp32": cutlass.Float32}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
    f = compile_for_cpu(c_dtype=cdt)
    ptx = f.artifacts.PTX
    print(f"PTX: {len(ptx.splitlines())} lines")
    for k, v in count_ptx(ptx).items():
        print(f"{k:24s} {v}")
