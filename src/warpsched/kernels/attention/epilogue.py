"""The epilogues of warpsched's FlashAttention forward (``warpsched.kernels.attention.forward``): O / sum
and the LSE out of a consumer warp group's registers, either directly (``GmemO.store``, 16-bit
global stores, rows past S_q skipped) or through the unit's Q stage and a TMA store
(``store_o_tma``, the ``tma_store_o`` option)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute

from warpsched import MemoryResource, StageInfo, producer_work

from . import register_math as amath
from .register_math import WG_ROWS


@dataclass(kw_only=True)
class GmemO(MemoryResource):
    """A warp group's 64 output rows and their LSE (direct stores, rows past S_q skipped)."""

    g: Any = None
    wg: int = 0

    def get_smem_requirements(self):
        return [self.g.alloc_o[self.wg]] if self.g.o_buffer else []  # this warp group's O tile

    @producer_work
    @cute.jit
    def drain(self, stage_info: StageInfo):
        """``o_buffer``: the warp group's last TMA store has read its O tile (before the CTA exits)."""
        tidx, _, _ = cute.arch.thread_idx()
        if tidx % 128 == 0:
            cute.arch.cp_async_bulk_wait_group(0, read=True)

    @producer_work
    def store_normalized(self, stage_info: StageInfo, acc_o, softmax_state):
        """``unit_overlap``: O / sum from the precomputed 1 / sum and LSE, then O = 0."""
        store_o_normalized(self.g, stage_info, acc_o, softmax_state, wg=self.wg)

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, acc_o, softmax_state):
        if cutlass.const_expr(self.g.o_buffer):
            store_o_buffered(self.g, stage_info, acc_o, softmax_state, wg=self.wg)
            return
        g, v = self.g, stage_info.context.values
        tidx, _, _ = cute.arch.thread_idx()
        lse = softmax_state.normalize(acc_o, v.pv_mma, v.scale)
        thr = v.pv_mma.get_slice(tidx % 128)
        unit = g.unit_of(stage_info)
        q_block, head, _, _ = g.unit_coords(unit)
        batch = g.out_batch(unit)  # split_kv: this run's partial rows
        block = q_block * g.wgs + self.wg
        if cutlass.const_expr(g.varlen):  # the unit's sequence's rows of the packed O and LSE
            q_start, seqlen_q, _, _ = g.seq_bounds(unit)
            o_rows = g.seq_view(v.mO, q_start, head)
        else:
            o_rows = v.mO[(None, None, head, batch)]
        gO = cute.local_tile(o_rows, (WG_ROWS, g.head_dim), (block, 0))
        t_g = amath.rows_view(v.pv_mma, thr.partition_C(gO))
        coords = amath.rows_view(v.pv_mma, thr.partition_C(cute.make_identity_tensor(g.pv_tile[:2])))
        out = cute.make_rmem_tensor_like(acc_o, g.out_dtype)
        out.store(acc_o.load().to(g.out_dtype))
        o_mn = amath.rows_view(v.pv_mma, out)
        if cutlass.const_expr(g.varlen):
            m_lse = cute.domain_offset((q_start,), v.mLSE[(0, head, None)])
        else:
            m_lse, seqlen_q = v.mLSE[(batch, head, None)], g.seqlen_q  # the `if` below may not carry objects
        for i in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
            row = block * WG_ROWS + coords[i, 0][0]
            if row < seqlen_q:
                for j in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                    t_g[i, j] = o_mn[i, j]
                if coords[i, 0][1] == 0:  # one lane of the row's quad writes its LSE
                    m_lse[row] = lse[i]


@cute.jit
def _store_lse(g, v, thr, lse, block, head, batch):
    """The LSE of this warp group's rows of Q block ``block`` (one lane per row; rows past S_q skipped),
    for the epilogues that write O through TMA."""
    coords = amath.rows_view(v.pv_mma, thr.partition_C(cute.make_identity_tensor(g.pv_tile[:2])))
    m_lse, seqlen_q = v.mLSE[(batch, head, None)], g.seqlen_q
    for i in cutlass.range_constexpr(cute.size(lse)):
        row = block * WG_ROWS + coords[i, 0][0]
        if row < seqlen_q:
            if coords[i, 0][1] == 0:  # one lane of the row's quad writes its LSE
                m_lse[row] = lse[i]


@cute.jit
def store_o_tma(g, stage_info, acc_o, softmax_state, *, wg: cutlass.Constexpr = 0):
    """``tma_store_o``: O / sum into this warp group's tile of the Q stage (every S GEMM that
    read it has retired), one TMA store of the tile (rows past S_q are clipped by TMA), its
    SMEM reads finished before the work returns, so the stage may be released after it; the
    LSE is stored directly (one lane per row)."""
    v = stage_info.context.values
    tidx, _, _ = cute.arch.thread_idx()
    lse = softmax_state.normalize(acc_o, v.pv_mma, v.scale)
    thr = v.pv_mma.get_slice(tidx % 128)
    q_stage = g.wgs * stage_info.stage_idx + wg
    out = cute.make_rmem_tensor_like(acc_o, g.dtype)
    out.store(acc_o.load().to(g.dtype))
    cute.autovec_copy(out, thr.partition_C(v.sQ[(None, None, q_stage)]))
    cute.arch.fence_proxy("async.shared", space="cta")  # the TMA store (async proxy) reads these writes
    stage_info.context.sync_task()
    q_block, head, batch, _ = g.unit_coords(g.unit_of(stage_info))
    if tidx % 128 == 0:
        gO = cute.flat_divide(v.mO_tma, (WG_ROWS, g.head_dim))[(None, None, None, 0, head, batch)]
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_o, 0, cute.make_layout(1),
                                                    cute.group_modes(v.sQ, 0, 2), cute.group_modes(gO, 0, 2))
        cute.copy(v.tma_o, t_s[(None, q_stage)], t_g[(None, q_block * g.wgs + wg)])
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(0, read=True)
    stage_info.context.sync_task()  # reads done before the release
    _store_lse(g, v, thr, lse, q_block * g.wgs + wg, head, batch)


@cute.jit
def store_o_buffered(g, stage_info, acc_o, softmax_state, *, wg: cutlass.Constexpr = 0):
    """``o_buffer``: O / sum into the warp group's own SMEM tile and one TMA store of it, left in
    flight: the thread that issued it waits for its SMEM reads only before the next unit's O is
    written there (or at the end, ``GmemO.drain``). The tile is this warp group's alone, so the
    bulk-group wait and the named barrier after it order its reuse; the LSE is stored directly."""
    v = stage_info.context.values
    lse = softmax_state.normalize(acc_o, v.pv_mma, v.scale)
    _store_buffered(g, stage_info, acc_o, lse, wg)


@cute.jit
def store_o_normalized(g, stage_info, acc_o, softmax_state, *, wg: cutlass.Constexpr = 0):
    """``unit_overlap``: O *= 1 / sum (the state's ``o_inv`` and ``lse`` were computed before the next
    unit's first S tile reset the running sum), the buffered TMA store, then O = 0 for the next unit."""
    v = stage_info.context.values
    softmax_state.normalize_finished(acc_o, v.pv_mma)
    _store_buffered(g, stage_info, acc_o, softmax_state.lse, wg)
    acc_o.fill(0.0)


@cute.jit
def _store_buffered(g, stage_info, acc_o, lse, wg: cutlass.Constexpr):
    """The normalized O through the warp group's SMEM tile and a TMA store left in flight; the LSE."""
    v = stage_info.context.values
    tidx, _, _ = cute.arch.thread_idx()
    thr = v.pv_mma.get_slice(tidx % 128)
    out = cute.make_rmem_tensor_like(acc_o, g.dtype)
    out.store(acc_o.load().to(g.dtype))
    if tidx % 128 == 0:
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # the previous unit's store has read the tile
    stage_info.context.sync_task()
    s_o = getattr(v, f"sO{wg}")  # wg is a compile-time constant
    cute.autovec_copy(out, thr.partition_C(s_o[(None, None, 0)]))
    cute.arch.fence_proxy("async.shared", space="cta")  # the TMA store (async proxy) reads these writes
    stage_info.context.sync_task()
    q_block, head, batch, _ = g.unit_coords(g.unit_of(stage_info))
    if tidx % 128 == 0:
        gO = cute.flat_divide(v.mO_tma, (WG_ROWS, g.head_dim))[(None, None, None, 0, head, batch)]
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_o, 0, cute.make_layout(1),
                                                    cute.group_modes(s_o, 0, 2), cute.group_modes(gO, 0, 2))
        cute.copy(v.tma_o, t_s[(None, 0)], t_g[(None, q_block * g.wgs + wg)])
        cute.arch.cp_async_bulk_commit_group()
    _store_lse(g, v, thr, lse, q_block * g.wgs + wg, head, batch)
