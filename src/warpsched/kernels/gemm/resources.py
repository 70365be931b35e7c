"""The persistent GEMM's resources and their work bodies (CuTe DSL): the A/B TMA -> WGMMA rings,
the tile coordinates, the epilogue (registers -> SMEM -> TMA store) and pingpong's math order.
``g`` is the PersistentGemm being traced (gemm/kernel.py): the work bodies read its layouts and atoms."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import epilogue as gemm_epilogue
from .config import GemmConfigError
from .fixup import (AtomicFixupIO, ParallelFixupIO, SerialFixupIO, acc_vectors, fragment_block, runtime_branch,
                    runtime_repeat)
from .handover import atomic_fixup_calls, parallel_fixup_calls, serial_fixup_calls

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from warpsched import (MemoryResource, StageInfo, TaskLocalVariable, WorkAttr, consumer_work, producer_work,
                       threads)


@dataclass(kw_only=True)
class GmemAB(MemoryResource):
    g: Any = None
    m: Any = TaskLocalVariable.uninitialized()
    n: Any = TaskLocalVariable.uninitialized()
    k0: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.m = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="M tile coordinate of the work tile")
        self.n = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="N tile coordinate of the work tile")
        self.k0 = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="first K tile of the unit (split-K)")

    @consumer_work(returns=(m, n, k0))
    def tile_coords(self, stage_info: StageInfo, which=0):
        unit = stage_info.work_tile.tile_idx[0]
        m, n, _ = self.g.unit_tile(unit, which)
        return m, n, self.g.unit_k(unit)[0]


@dataclass(kw_only=True)
class SmemAB(MemoryResource):
    """One TMA -> WGMMA ring (``ring``: 0, or 1 for pingpong's second warp group). ``shared``:
    pingpong_shared's one ring, read by both math warp groups (each slices the MMA by its own
    thread index within its warp group)."""

    g: Any = None
    ring: int = 0
    shared: bool = False
    first_thread: int = 128  # first thread of the warp group(s) that run the MMA on this ring
    acc: Any = TaskLocalVariable.uninitialized()
    frag_a: Any = TaskLocalVariable.uninitialized()
    frag_b: Any = TaskLocalVariable.uninitialized()
    even: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.even = TaskLocalVariable(dtype=cutlass.Int32, default=0,
                                      docs="pingpong_shared: 1 on this CTA's 1st, 3rd, ... work tile (Mma0's)")
        self.acc = TaskLocalVariable(dtype=None, docs="fp32 accumulator fragment (registers)")
        self.frag_a = TaskLocalVariable(dtype=None, docs="WGMMA SMEM descriptors of A, all stages")
        self.frag_b = TaskLocalVariable(dtype=None, docs="WGMMA SMEM descriptors of B, all stages")

    def get_smem_requirements(self):
        return [self.g.alloc_a[self.ring], self.g.alloc_b[self.ring]] if self.g is not None else []

    @producer_work
    @cute.jit
    def tma_load(self, stage_info: StageInfo, m, n, k0):
        g = self.g
        bM, bN, bK = g.tile_mnk
        k, s = k0 + stage_info.loop_offset, stage_info.stage_idx
        m, l = g.batch_coord(m)  # batched: product l's M tile
        gA = cute.local_tile(g.batch_slice(g.mA, l), (bM, bK), (m, None))
        gB = cute.local_tile(g.batch_slice(g.mB, l), (bN, bK), (n, None))
        sA, sB = cute.group_modes(g.smem_a(self.ring), 0, 2), cute.group_modes(g.smem_b(self.ring), 0, 2)
        hint_a, hint_b = ({} if p is None else dict(cache_policy=cutlass.Int64(p)) for p in g.l2_policy)
        if cutlass.const_expr(g.clustered):
            # each CTA loads its slice of the shared operand and multicasts it to its cluster peers
            cm, cn = g.cluster_mn
            tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(g.tma_a, g.cluster_coord[1], cute.make_layout(cn), sA,
                                                          cute.group_modes(gA, 0, 2))
            tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(g.tma_b, g.cluster_coord[0], cute.make_layout(cm), sB,
                                                          cute.group_modes(gB, 0, 2))
            # on the stage's barrier; warpsched checks the copies' bytes against num_bytes while tracing
            stage_info.tma_copy(g.tma_a, tAgA[(None, k)], tAsA[(None, s)], mcast_mask=g.a_mcast_mask, **hint_a)
            stage_info.tma_copy(g.tma_b, tBgB[(None, k)], tBsB[(None, s)], mcast_mask=g.b_mcast_mask, **hint_b)
        else:
            tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(g.tma_a, 0, cute.make_layout(1), sA,
                                                          cute.group_modes(gA, 0, 2))
            tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(g.tma_b, 0, cute.make_layout(1), sB,
                                                          cute.group_modes(gB, 0, 2))
            stage_info.tma_copy(g.tma_a, tAgA[(None, k)], tAsA[(None, s)], **hint_a)
            stage_info.tma_copy(g.tma_b, tBgB[(None, k)], tBsB[(None, s)], **hint_b)

    @consumer_work(returns=(acc, frag_a, frag_b), work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def init_acc(self, stage_info: StageInfo):
        g = self.g
        tidx, _, _ = cute.arch.thread_idx()
        thr_mma = g.tiled_mma.get_slice(tidx % 128 if cutlass.const_expr(self.shared) else tidx - self.first_thread)
        frag_a = g.tiled_mma.make_fragment_A(thr_mma.partition_A(g.smem_a(self.ring)))
        frag_b = g.tiled_mma.make_fragment_B(thr_mma.partition_B(g.smem_b(self.ring)))
        acc = cute.make_rmem_tensor(g.tiled_mma.partition_shape_C(g.tile_mnk[:2]), g.acc_dtype)
        return acc, frag_a, frag_b

    @consumer_work(returns=even, work_attrs=WorkAttr.AUXILIARY)
    def owns(self, stage_info: StageInfo):
        """pingpong_shared: whether this work tile is the CTA's 1st, 3rd, ... (the static queue
        gives CTA b the units b, b + grid, ...): 1 for Mma0's tiles, 0 for Mma1's."""
        bid, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        local = (stage_info.work_tile.tile_idx[0] - bid) // grid
        return 1 - local % 2

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads the stage until the retire below
    @cute.jit
    def mma(self, stage_info: StageInfo, acc, frag_a, frag_b, *, first: cutlass.Constexpr = False):
        """wgmma over one K tile; ``first``: overwrite the accumulator (a new output tile)."""
        g = self.g
        s = stage_info.stage_idx
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(frag_a, mode=[2])):
            # two MMA objects with a fixed ACCUMULATE field: setting it inside a runtime loop
            # would carry a runtime value across regions
            mma = g.mma_overwrite if cutlass.const_expr(first and kb == 0) else g.tiled_mma
            cute.gemm(mma, acc, frag_a[(None, None, kb, s)], frag_b[(None, None, kb, s)], acc)
        cute.nvgpu.warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT)
    def retire(self, stage_info: StageInfo, *, pending: cutlass.Constexpr = 0):
        """wgmma.wait_group(pending): all but the newest ``pending`` groups stopped reading SMEM."""
        cute.nvgpu.warpgroup.wait_group(pending)


@dataclass(kw_only=True)
class GmemC(MemoryResource):
    """The output; ``which`` picks the epilogue's SMEM buffers and warps."""

    g: Any = None
    which: int = 0
    first_thread: int = 128
    num_threads: int = 256

    def get_smem_requirements(self):
        return [self.g.alloc_c[self.which]] if self.g is not None else []

    def _store_warp(self):
        return self.first_thread // 32

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, acc):
        """acc -> bf16 -> stmatrix into SMEM sub-tiles (bM x epi_n) -> TMA store, ``epi_stage`` in
        flight. Buffer e % epi_stage: a buffer comes round again only after the store that last read
        it was waited on (wait_group.read), within a tile and, as sub-tiles per tile are a multiple
        of epi_stage or the tile ends with a full wait (``epi_drain``), from one tile to the next."""
        g = self.g
        m, n, split = g.unit_tile(stage_info.work_tile.tile_idx[0], self.which)
        bM, bN, _ = g.tile_mnk
        l = 0
        if cutlass.const_expr(g.split_k and not g.serial):
            # host-reduced split-K: C is the fp32 workspace, split s owning rows [s, s + 1) * tiles_m * bM
            gC = cute.local_tile(g.mC, (bM, bN), (split * g.tiles_m + m, n))
        else:
            m, l = g.batch_coord(m)  # batched: product l's M tile
            gC = cute.local_tile(g.batch_slice(g.mC, l), (bM, g.out_n), (m, n))
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        sC = g.smem_c(self.which)
        epi_bar = stage_info.context.task_named_barrier()  # the task's own id: none to pick by hand
        # the fragment stored: the accumulator, or SwiGLU's half-width silu(gate) * up (gemm_epilogue)
        frag = acc
        if cutlass.const_expr(g.epi.swiglu):
            frag = cute.make_rmem_tensor(g.out_mma.partition_shape_C((bM, g.out_n)), g.acc_dtype)
        tiled_copy_r2s = g.epilogue_copy(g.out_mma)
        thr_r2s = tiled_copy_r2s.get_slice(tidx - self.first_thread)
        tRS_sC = thr_r2s.partition_D(sC)
        tRS_acc = tiled_copy_r2s.retile(frag)
        rC_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        tRS_rAcc = cute.make_rmem_tensor(rC_shape, g.acc_dtype)
        tRS_rC = cute.make_rmem_tensor(rC_shape, g.c_dtype)
        gather = EpilogueGather(tRS_acc, tRS_rAcc, g.out_n // g.epi_tile[1])
        gC_epi = cute.zipped_divide(gC, g.epi_tile)
        bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(g.tma_c, 0, cute.make_layout(1),
                                                          cute.group_modes(sC, 0, 2), gC_epi)
        epi_shape = gC_epi.shape[1]
        epi_layout = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
        store_pipe = pipeline.PipelineTmaStore.create(num_stages=g.epi_stage, producer_group=threads(self.num_threads))
        if cutlass.const_expr(g.stream_k):
            # stream-K: a unit with fewer than k_tiles K tiles shares its tile (gemm.streamk): share 0
            # (the tile's last K tiles, a CTA's first stream-K unit) leaves its partial sum in the
            # slot's workspace tile, each next share adds it to its own and hands on, and the last (the
            # tile's first K tiles) adds and stores C. A whole tile: stored.
            _, k_first, k_count, slot = g.sk_unit(stage_info.work_tile.tile_idx[0])
            owner = cutlass.Boolean(True)
            # meaningful for a shared tile only; computed before the runtime if, which could not carry
            # the plan object through its region
            share, last = g.sk_plan.share(slot, k_first, k_count)
            if k_count < g.k_tiles:
                self.serial_fixup(acc, slot, 0, share, tidx, epi_bar, flag_idx=slot, last=last)
                owner = share == last
            if owner:
                self.finish(acc, frag, m, n, tidx)
                self.store_tile(acc, tiled_copy_r2s, tRS_sC, tRS_acc, tRS_rAcc, tRS_rC, gather, bSG_sC, bSG_gC,
                                epi_shape, epi_layout, store_pipe, epi_bar, warp_idx)
        elif cutlass.const_expr(g.split_reduce == "atomic"):
            # the tile's last share to arrive stores C
            if self.atomic_fixup(acc, m, n, tidx, epi_bar):
                self.finish(acc, frag, m, n, tidx)
                self.store_tile(acc, tiled_copy_r2s, tRS_sC, tRS_acc, tRS_rAcc, tRS_rC, gather, bSG_sC, bSG_gC,
                                epi_shape, epi_layout, store_pipe, epi_bar, warp_idx)
        elif cutlass.const_expr(g.serial):
            if cutlass.const_expr(g.split_reduce == "parallel"):
                self.parallel_fixup(acc, m, n, split, tidx, epi_bar)
            else:
                self.serial_fixup(acc, m, n, split, tidx, epi_bar)
            if split == g.splits - 1:  # the last K share holds the sum: it stores C
                self.finish(acc, frag, m, n, tidx)
                self.store_tile(acc, tiled_copy_r2s, tRS_sC, tRS_acc, tRS_rAcc, tRS_rC, gather, bSG_sC, bSG_gC,
                                epi_shape, epi_layout, store_pipe, epi_bar, warp_idx)
        else:
            self.finish(acc, frag, m, n, tidx, l)
            self.store_tile(acc, tiled_copy_r2s, tRS_sC, tRS_acc, tRS_rAcc, tRS_rC, gather, bSG_sC, bSG_gC,
                            epi_shape, epi_layout, store_pipe, epi_bar, warp_idx)

    def finish(self, acc, frag, m, n, tidx, l=0):
        """The fused epilogue (bias, activation, SwiGLU, residual, alpha: gemm_epilogue.apply) on
        the finished accumulator, into ``frag``; nothing without one."""
        if self.g.epi.fused:
            gemm_epilogue.apply(self.g, acc, frag, m, n, tidx - self.first_thread, l)
        if cutlass.const_expr(self.g.epi.keep):
            self.store_h(acc, m, n, tidx - self.first_thread)

    @cute.jit
    def store_h(self, acc, m, n, thread):
        """swiglu_keep: h = silu(gate) * up of the finished z into the aux tensor (M, N / 2), tile (m, n)'s bM x
        bN / 2 block. A quad of threads holds a row's h two columns each per 8-column chunk; over four chunks
        it transposes them by shuffles so each lane stores one chunk as a 16-byte vector (rows past M skipped;
        N / 2 is a multiple of 8, so a chunk is in or out whole). Tiles whose h width is not a multiple of 32:
        one predicated scalar store per element."""
        g = self.g
        bM, bN, _ = g.tile_mnk
        aux = g.mAux  # a tensor, not the kernel object, is what the runtime ifs below write
        rows, cols = cute.size(aux, mode=[0]), cute.size(aux, mode=[1])
        r0, c0 = m * bM, n * (bN // 2)
        coords = gemm_epilogue.h_coords(g, thread)
        groups = gemm_epilogue.h_groups(g)
        if cutlass.const_expr(groups is not None):
            chunks = cute.flat_divide(aux, (1, 8))  # (1, 8, M, N / 16): one 16-byte chunk per (row, 8 columns)
            q = cute.arch.lane_idx() % 4
            for i in cutlass.range_constexpr(len(groups)):
                regs = groups[i][0]
                w = [[gemm_epilogue.h_value(g, acc, regs[k][e]) for e in range(2)] for k in range(4)]
                got = [[None] * 2 for _ in range(4)]  # got[s]: lane q ^ s's columns of chunk q (s = 0: its own)
                for e in cutlass.range_constexpr(2):
                    got[0][e] = _pick(q, [w[k][e] for k in range(4)])
                    for s_ in cutlass.range_constexpr(1, 4):
                        send = _pick(q ^ s_, [w[k][e] for k in range(4)])  # lane q ^ s wants its own chunk
                        got[s_][e] = cute.arch.shuffle_sync_bfly(send, offset=s_)
                vec = cute.make_rmem_tensor(cute.make_layout(8), cutlass.Float32)
                for p in cutlass.range_constexpr(4):  # columns 2 p, 2 p + 1 of the chunk: lane p's, got[p ^ q]
                    for e in cutlass.range_constexpr(2):
                        vec[2 * p + e] = _pick(p ^ q, [got[s_][e] for s_ in range(4)])
                out = cute.make_rmem_tensor(cute.make_layout(8), g.c_dtype)
                out.store(vec.load().to(g.c_dtype))
                j0 = regs[0][0]
                row = r0 + coords[j0][0]
                block = (c0 + coords[j0][1]) // 8 + q  # this lane's first column is thread 0's + 2 q: chunk q on
                if row < rows:
                    if block * 8 < cols:
                        cute.autovec_copy(out, chunks[(0, None, row, block)])
        else:
            for j in cutlass.range_constexpr(len(g.swiglu_pairs)):
                r, c = coords[j]
                h = gemm_epilogue.h_value(g, acc, j).to(g.c_dtype)
                if r0 + r < rows:
                    if c0 + c < cols:
                        aux[(r0 + r, c0 + c)] = h

    @cute.jit
    def store_tile(self, acc, tiled_copy_r2s, tRS_sC, tRS_acc, tRS_rAcc, tRS_rC, gather, bSG_sC, bSG_gC, epi_shape,
                   epi_layout, store_pipe, epi_bar, warp_idx):
        g = self.g
        for e in cutlass.range_constexpr(cute.size(epi_shape)):
            pairs = gather.pairs(e)
            for j in cutlass.range_constexpr(len(pairs)):
                tRS_rAcc[pairs[j][0]] = tRS_acc[pairs[j][1]]
            if cutlass.const_expr(g.scaled and not g.epi.fused):  # fp8: per-tensor scales in one fp32 factor
                tRS_rC.store((tRS_rAcc.load() * g.alpha).to(g.c_dtype))
            else:
                tRS_rC.store(tRS_rAcc.load().to(g.c_dtype))
            buf = e % g.epi_stage
            cute.copy(tiled_copy_r2s, tRS_rC, tRS_sC[(None, None, None, buf)])
            cute.arch.fence_proxy("async.shared", space="cta")  # generic-proxy writes -> TMA reads
            if cutlass.const_expr(g.epi_sync == "single"):
                # one barrier per sub-tile: sub-tile e + 1 is written right after this barrier into
                # the buffer store e + 1 - epi_stage read, so the store warp waits for that store
                # first (stores up to e - 1 are issued: epi_stage - 2 may stay in flight)
                if warp_idx == self._store_warp():
                    cute.arch.cp_async_bulk_wait_group(g.epi_stage - 2, read=True)
                epi_bar.arrive_and_wait()
                if warp_idx == self._store_warp():
                    cute.copy(g.tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_layout.get_hier_coord(e))])
                    store_pipe.producer_commit()
            else:
                epi_bar.arrive_and_wait()
                if warp_idx == self._store_warp():
                    cute.copy(g.tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_layout.get_hier_coord(e))])
                    store_pipe.producer_commit()
                    if cutlass.const_expr(g.epi_drain and e == cute.size(epi_shape) - 1):
                        # sub-tiles per tile not a multiple of the buffers: every store has read its
                        # buffer before the next tile writes buffer 0 again
                        cute.arch.cp_async_bulk_wait_group(0, read=True)
                    else:
                        store_pipe.producer_acquire()  # the oldest in-flight store has read its buffer
                epi_bar.arrive_and_wait()

    @cute.jit
    def serial_fixup(self, acc, m, n, split, tidx, epi_bar, flag_idx=None, last=None):
        """Serial split-K, K share ``split`` of tile (m, n): wait until the flag of the tile says the
        shares before it are in the fp32 tile workspace, add that tile to ``acc``; unless this is
        the last share, write the sum back and advance the flag (release after a GPU-scope fence
        and the epilogue barrier); the last share resets the flag for the next launch.
        Deadlock-free while every CTA of the persistent grid is resident: share s of tile t is
        unit s * tiles + t, it waits only for unit (s - 1) * tiles + t, and every CTA runs its
        units in increasing order. The wait is bounded (SPIN_LIMIT polls): past it the tile is
        poisoned with NaN rather than hang. The calls are gemm.handover.serial_fixup_calls, the
        description the grid checker proves, on this share's values (gemm.fixup.SerialFixupIO:
        with ``g.gmem_flags`` the flag verbs go through lower/gmem_flags, else hand-written).
        Stream-K passes its workspace slot as (m, 0) and ``flag_idx``, and the tile's ``last`` share
        (a runtime value: gemm.streamk.StreamKPlan.share)."""
        g = self.g
        bM, bN, _ = g.tile_mnk
        if cutlass.const_expr(last is None):
            last = g.splits - 1
        idx = m * g.tiles_n + n if flag_idx is None else flag_idx
        tile = fragment_block(g, acc, idx, tidx - self.first_thread)
        # the hand-over the grid checker proves, run on this share's values (gemm.fixup)
        io = SerialFixupIO(self, acc_vectors(acc), tile, tidx, epi_bar, g.mF, g.gmem_flags)
        serial_fixup_calls(idx, split, last, flag=io, tile=io, branch=runtime_branch)

    @cute.jit
    def parallel_fixup(self, acc, m, n, split, tidx, epi_bar):
        """Parallel split-K: every share but the last writes its fp32 tile into its own slab and
        counts itself on the tile's flag (atomic add, release after a GPU-scope fence and the
        epilogue barrier); the last share waits until the flag counts the others, resets it and
        adds the slabs to ``acc``. One wait per tile instead of serial_fixup's chain; the same
        residency argument (the last share is the tile's highest unit) and bounded wait. The calls
        are gemm.handover.parallel_fixup_calls, the description the grid checker proves, on this
        share's values (gemm.fixup.ParallelFixupIO)."""
        g = self.g
        io = ParallelFixupIO(self, acc_vectors(acc), tidx - self.first_thread, tidx, epi_bar, g.mF, g.gmem_flags, m, n)
        # the hand-over the grid checker proves, run on this share's values (gemm.fixup)
        parallel_fixup_calls(m * g.tiles_n + n, split, g.splits - 1, lambda share: share, flag=io, slabs=io,
                             branch=runtime_branch, repeat=runtime_repeat)

    @cute.jit
    def atomic_fixup(self, acc, m, n, tidx, epi_bar):
        """Atomic split-K: every K share adds its fp32 tile into the zeroed tile workspace with
        vector reductions (red.global.add.v2.f32, fire and forget: no share waits for another),
        then counts itself on the tile's flag (acq_rel atomic after a GPU-scope fence and the
        epilogue barrier). The share that counts last (any split, whichever finishes last) gets
        True, broadcast to its warp groups by a predicate-OR barrier: it reads the sum into
        ``acc``, zeroes the workspace tile and the flag for the next launch, and stores C. Nothing
        waits on another CTA, so the hand-over cannot deadlock whatever the residency. The calls are
        gemm.handover.atomic_fixup_calls, the description the grid checker proves (reductions ->
        acq_rel count -> the last share's reads), on this share's values (gemm.fixup.AtomicFixupIO)."""
        g = self.g
        bM, bN, _ = g.tile_mnk
        thr = g.epi_tiled_mma.get_slice(tidx - self.first_thread)
        tCgW = thr.partition_C(cute.local_tile(g.mW, (bM, bN), (m, n)))
        io = AtomicFixupIO(self, acc, tCgW, tidx, epi_bar, g.mF, g.gmem_flags)
        # the hand-over the grid checker proves, run on this share's values (gemm.fixup)
        return atomic_fixup_calls(m * g.tiles_n + n, g.splits - 1, flag=io, tile=io, when=io.when)

    @producer_work
    @cute.jit
    def drain(self, stage_info: StageInfo):
        """After the last tile: the SMEM of every TMA store is read before the CTA exits."""
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == self._store_warp():
            pipeline.PipelineTmaStore.create(num_stages=self.g.epi_stage,
                                             producer_group=threads(self.num_threads)).producer_tail()


class EpilogueGather:
    """Which accumulator registers make up epilogue sub-tile e (trace-time index arithmetic).

    The retiled accumulator is ((R values x column chunks of the tile), M halves, 1); a sub-tile's
    registers are (R, M halves, Nr chunks), and sub-tile e (32 columns, every row) takes chunks
    [e * Nr, (e + 1) * Nr) of every M half. With one M half this is the flat slice
    [e * n, (e + 1) * n); with two (a 128-row tile on one warp group) it is not.
    tests/test_gemm_persistent.py checks the coordinates of both sides with identity tensors."""

    def __init__(self, acc_retiled, sub_regs, sub_tiles):
        self.R, self.Mr, self.Nr = (cute.size(sub_regs, mode=[i]) for i in range(3))
        self.per_half = cute.size(acc_retiled, mode=[0])
        if not (self.per_half * self.Mr == cute.size(acc_retiled) and self.per_half == self.R * self.Nr * sub_tiles):
            raise GemmConfigError(f"epilogue register layout {acc_retiled.layout} does not split into {sub_tiles} "
                                  f"sub-tiles of {sub_regs.layout}")

    def pairs(self, e):
        """(sub-tile register index, retiled accumulator index) for every register of sub-tile e."""
        R, Mr, Nr = self.R, self.Mr, self.Nr
        return [(i + R * (mh + Mr * c), i + R * (e * Nr + c) + self.per_half * mh)
                for c in range(Nr) for mh in range(Mr) for i in range(R)]


@dataclass(kw_only=True)
class MathOrder(MemoryResource):
    """Pingpong's turn on the tensor cores: a 1-stage AsyncAsync pipeline with no data."""


def _pick(i, values):
    """values[i] for a runtime index ``i`` in [0, len(values)), by selects (no dynamic register indexing)."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = cutlass.select_(i == k, values[k], out)
    return out
