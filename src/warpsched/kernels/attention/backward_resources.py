"""The resources of warpsched's FlashAttention backward (``warpsched.kernels.attention.backward``): the K / V
block (and the S / dP / dQ GEMMs that read it), the Q / dO ring (and the dV / dK GEMMs), a warp group's
gradient state, the dS tiles the warp groups swap (``shared_ds``), the dQ stages the writer warp adds into
global memory, and the warp groups' turn (``wg_order``). docs/attention.md, "Backward"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from warpsched import MemoryResource, StageInfo, TaskLocalVariable, WorkAttr, consumer_work, producer_work, wgmma_wait

from . import backward_math as bmath
from . import declared, dq_finish, dq_order
from . import register_math as amath
from .backward_math import HALF
from .dq_finish_io import DQFinishIO, wait_adds
from .dq_turns import DQTurnIO
from ..gemm.fixup import runtime_branch


def _gemm_over_rows(g, v, acc, a_regs, s_bt, stage, wg):
    """acc += A B_stage over the step's query rows: A (P^T or dS^T) from registers, B the stage's dO^T or Q^T
    view (``d_split``: warp group ``wg``'s half of D; the caller fences and commits)."""
    thr = v.dkv_mma.get_slice(cute.arch.thread_idx()[0] % 128)
    view = 2 * stage + wg if g.d_split else stage  # d_split: (D half, queries, 2 * stage + D half)
    cute.gemm(v.dkv_mma, acc, a_regs, v.dkv_mma.make_fragment_B(thr.partition_B(s_bt))[(None, None, None, view)], acc)


@cute.jit
def _gemm_over_d(g, v, acc, s_a, s_b, stage, half: cutlass.Constexpr, wg: cutlass.Constexpr = 0):
    """acc = A_h B_stage^T over the head dim: key half ``half`` of the K or V tile ``s_a``
    (``FlashAttentionBackward.key_half``) against the stage of the Q or dO ring ``s_b`` (the first k-block
    overwrites the accumulator). ``g.stage_first``: the stage's tile is sliced before it is partitioned (its
    address computed once, each k-block a fixed offset from it), else every k-block's descriptor indexes the
    ring by the run-time stage. ``g.split_queries``: the stage's rows of warp group ``wg``'s queries."""
    thr = v.sdp_mma.get_slice(cute.arch.thread_idx()[0] % 128)
    frag_a = v.sdp_mma.make_fragment_A(thr.partition_A(s_a))
    sliced = g.stage_first or g.split_queries
    if cutlass.const_expr(g.split_queries):  # this warp group's 32 query rows of the stage
        frag_b = v.sdp_mma.make_fragment_B(thr.partition_B(
            cute.local_tile(s_b[(None, None, stage)], (g.sdp_cols, g.head_dim), (wg, 0))))
    else:
        frag_b = v.sdp_mma.make_fragment_B(thr.partition_B(s_b[(None, None, stage)] if g.stage_first else s_b))
    for kb in cutlass.range_constexpr(cute.size(frag_a, mode=[2])):
        mma = v.sdp_mma_zero if cutlass.const_expr(kb == 0) else v.sdp_mma
        b = frag_b[(None, None, kb)] if sliced else frag_b[(None, None, kb, stage)]
        cute.gemm(mma, acc, frag_a[(None, None, kb, half)], b, acc)


def v_part(g, wg):
    """The part of V warp group ``wg``'s dP GEMM reads: its own key half, or with ``d_split`` all of V."""
    return "V" if g.d_split else f"V{wg}"


def _fragment(mma, thr, tile, as_a):
    """``tile`` as ``mma``'s A operand (``as_a``) or its B operand, partitioned for this thread."""
    return mma.make_fragment_A(thr.partition_A(tile)) if as_a else mma.make_fragment_B(thr.partition_B(tile))


@dataclass(kw_only=True)
class SmemKV(MemoryResource):
    """The unit's K and V (128 keys each, as two 64-key halves, one per warp group): one stage, loaded
    once; read by the S / dP GEMMs (A operands) and the dQ GEMM (K as the B operand, transposed view)."""

    g: Any = None
    retire = wgmma_wait  # wgmma.wait_group(pending): the GEMMs' SMEM and register reads are done
    acc_s: Any = TaskLocalVariable.uninitialized()
    acc_dp: Any = TaskLocalVariable.uninitialized()
    acc_dv: Any = TaskLocalVariable.uninitialized()
    acc_dk: Any = TaskLocalVariable.uninitialized()
    acc_dq: Any = TaskLocalVariable.uninitialized()
    p: Any = TaskLocalVariable.uninitialized()
    ds: Any = TaskLocalVariable.uninitialized()
    lse2: Any = TaskLocalVariable.uninitialized()
    delta: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.acc_s = TaskLocalVariable(dtype=None, docs="S^T = K Q^T, then P^T (fp32 registers)")
        self.acc_dp = TaskLocalVariable(dtype=None, docs="dP^T = V dO^T, then dS^T (fp32 registers)")
        self.acc_dv = TaskLocalVariable(dtype=None, docs="dV of this warp group's keys (fp32 registers)")
        self.acc_dk = TaskLocalVariable(dtype=None, docs="dK / scale of this warp group's keys (fp32 registers)")
        self.acc_dq = TaskLocalVariable(dtype=None, docs="dQ / scale of one Q block, this warp group's keys' part")
        self.p = TaskLocalVariable(dtype=None, docs="P^T in 16 bits: the A operand of dV += P^T dO")
        self.ds = TaskLocalVariable(dtype=None, docs="dS^T in 16 bits: the A operand of dK += dS^T Q")
        self.lse2 = TaskLocalVariable(dtype=None, docs="the step's queries' LSE * log2 e (fp32 registers)")
        self.delta = TaskLocalVariable(dtype=None, docs="the step's queries' rowsum(dO * O) (fp32 registers)")

    @consumer_work(returns=(acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds), work_attrs=WorkAttr.AUXILIARY)
    def init(self, stage_info: StageInfo):
        v, g = stage_info.context.values, self.g
        tidx, _, _ = cute.arch.thread_idx()
        sdp = v.sdp_mma.get_slice(tidx % 128)
        acc_s = cute.make_rmem_tensor(sdp.partition_shape_C((HALF, g.sdp_cols)), cutlass.Float32)
        acc_dp = cute.make_rmem_tensor(sdp.partition_shape_C((HALF, g.sdp_cols)), cutlass.Float32)
        dkv = v.dkv_mma.get_slice(tidx % 128)
        acc_dv = cute.make_rmem_tensor(dkv.partition_shape_C((HALF, g.d_cols)), cutlass.Float32)
        acc_dk = cute.make_rmem_tensor(dkv.partition_shape_C((HALF, g.d_cols)), cutlass.Float32)
        acc_dq = cute.make_rmem_tensor(v.dq_mma.get_slice(tidx % 128).partition_shape_C(g.dq_acc_tile),
                                       cutlass.Float32)
        if cutlass.const_expr(g.split_queries and not g.own_regs):  # P^T / dS^T only on their way to SMEM
            return (acc_s, acc_dp, acc_dv, acc_dk, acc_dq, cute.make_rmem_tensor_like(acc_s, g.dtype),
                    cute.make_rmem_tensor_like(acc_dp, g.dtype))
        pv = v.dkv_rs_mma if g.own_regs else v.dkv_mma  # own_regs: A operands of the register-sourced MMA
        return (acc_s, acc_dp, acc_dv, acc_dk, acc_dq, amath.make_p(acc_s, pv, g.dtype),
                amath.make_p(acc_dp, pv, g.dtype))

    @consumer_work(returns=(lse2, delta), work_attrs=WorkAttr.AUXILIARY)
    def init_stats(self, stage_info: StageInfo, acc_s):
        """``overlap_scores``: registers for the step's queries' LSE and delta, loaded under the GEMMs."""
        return bmath.make_stats(acc_s, stage_info.context.values)

    def get_smem_requirements(self):
        return [self.g.alloc_k, self.g.alloc_v]

    @producer_work
    def tma_load(self, stage_info: StageInfo):
        g, v = self.g, stage_info.context.values
        n_block, kv_head, batch = g.unit_coords(v.unit)
        for tma, m_x, s_x in ((v.tma_k, v.mK, v.sK), (v.tma_v, v.mV, v.sV)):
            if cutlass.const_expr(g.varlen):  # the unit's sequence's keys of the packed K / V
                g_x = cute.flat_divide(g.rows_of(m_x, v.unit, kv_head, batch, key=True),
                                       (HALF, g.head_dim))[(None, None, None, 0)]
            else:
                g_x = cute.flat_divide(m_x, (HALF, g.head_dim))[(None, None, None, 0, kv_head, batch)]
            t_s, t_g = cute.nvgpu.cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(s_x, 0, 2),
                                                        cute.group_modes(g_x, 0, 2))
            for w in range(g.key_halves):  # keys [64 w, 64 w + 64) of the block go to warp group w's half
                stage_info.tma_copy(tma, t_g[(None, n_block * g.key_halves + w)], t_s[(None, w)])

    def consumer_footprint(self, task_name):
        """What each gradient warp group's work touches in the stage: all of K (its S GEMM reads its half,
        ``shared_ds``'s dQ GEMM both) and its own V half (its dP GEMM; with ``tma_store_dkv`` also written:
        ``store_grads``; ``d_split``: all of V, both warp groups' keys). Checked for disjoint writes by
        verify/checks_writes.py."""
        if self.g.d_split:
            return {"K": "r", "V": "r"}
        wg = int(task_name[-1])
        return {"K": "r", f"V{wg}": "rw" if self.g.tma_store_dkv and not self.g.dkv_in_ds else "r"}

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def store_grads(self, stage_info: StageInfo, acc_dk, acc_dv, *, wg: cutlass.Constexpr = 0):
        """``tma_store_dkv``: dV and dK leave through this warp group's V half, which only its own dP GEMMs
        read (all retired), before the stage is released (``backward_math.store_dkv_tma``)."""
        g, v = self.g, stage_info.context.values
        n_block, kv_head, batch = g.unit_coords(v.unit)
        stage_info.touches(f"V{wg}", "w")  # held to consumer_footprint (lower/footprints.py)
        bmath.store_dkv_tma(acc_dk, acc_dv, g, stage_info.context, n_block, kv_head, batch, wg=wg)

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads K, V (and Q, dO: SmemQdO.gemm_operand) until the retire
    @cute.jit
    def mma_sdp(self, stage_info: StageInfo, acc_s, acc_dp, idx, *, wg: cutlass.Constexpr = 0):
        """S^T = K_w Q_i^T and dP^T = V_w dO_i^T, one commit group (``idx``: the Q / dO stage)."""
        v = stage_info.context.values
        declared.take(self.g, stage_info, "the Q / dO stage", "SmemKV.mma_sdp", "SmemQdO")
        stage_info.touches("K")
        stage_info.touches(v_part(self.g, wg))
        warpgroup.fence()
        _gemm_over_d(self.g, v, acc_s, v.sK, v.sQ, idx[0], self.g.key_half(wg), wg)
        _gemm_over_d(self.g, v, acc_dp, v.sV, v.sdO, idx[0], self.g.key_half(wg), wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads K (and Q: SmemQdO.gemm_operand) until its retire
    @cute.jit
    def mma_s(self, stage_info: StageInfo, acc_s, idx, *, wg: cutlass.Constexpr = 0):
        """``overlap_scores``: S^T = K_w Q_i^T in a commit group of its own, so P is computed while the
        dP GEMM (``mma_dp``, the next group) still runs."""
        v = stage_info.context.values
        declared.take(self.g, stage_info, "the Q / dO stage", "SmemKV.mma_s", "SmemQdO")
        stage_info.touches("K")
        warpgroup.fence()
        _gemm_over_d(self.g, v, acc_s, v.sK, v.sQ, idx[0], self.g.key_half(wg), wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads V (and dO: SmemQdO.gemm_operand) until its retire
    @cute.jit
    def mma_dp(self, stage_info: StageInfo, acc_dp, idx, *, wg: cutlass.Constexpr = 0):
        """``overlap_scores``: dP^T = V_w dO_i^T, its own commit group."""
        v = stage_info.context.values
        declared.take(self.g, stage_info, "the Q / dO stage", "SmemKV.mma_dp", "SmemQdO")
        stage_info.touches(v_part(self.g, wg))
        _gemm_over_d(self.g, v, acc_dp, v.sV, v.sdO, idx[0], self.g.key_half(wg), wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads K (and the dS tiles) until the retire
    @cute.jit
    def mma_dq(self, stage_info: StageInfo, acc_dq, *, wg: cutlass.Constexpr = 0, part: cutlass.Constexpr = 0):
        """dQ's part of this warp group. ``shared_ds``: dQ[:, 64 wg : 64 wg + 64] over all 128 keys, A from
        both warp groups' dS tiles (the other's through ``SmemDS``), B from K's (D half, key half) blocks
        (``ds_rows``: dQ[64 wg : 64 wg + 64, :], A from row half wg of both tiles, B from K's key halves;
        ``dq_swap``: its transpose, A from K's blocks and B from the dS tiles; each tile at the stage its
        declaration named, ``SmemDS._declare``);
        else dQ_w = dS_w K_w over this warp group's 64 keys (A: its own dS tile; ``d_split``: the 64 columns
        ``part`` of its half of D, ``FlashAttentionBackward.dq_kt_view``; ``split_queries``: A the two warp groups'
        adjacent dS tiles as one, both declared)."""
        g, v = self.g, stage_info.context.values
        stage_info.touches("K")
        tidx, _, _ = cute.arch.thread_idx()
        thr = v.dq_mma.get_slice(tidx % 128)
        if cutlass.const_expr(g.shared_ds):  # both warp groups' dS tiles (FlashAttentionBackward.dq_operands)
            stages = [declared.take(g, stage_info, f"SmemDS{half}'s tile", "SmemKV.mma_dq", f"SmemDS{half}")
                      for half in range(2)]
            # dq_swap: dQ^T = K^T dS^T, the same views with K^T as A and dS as B
            frag_kt = _fragment(v.dq_mma, thr, v.sKt, as_a=g.dq_swap)
            warpgroup.fence()
            for half in cutlass.range_constexpr(2):
                ds_part, kt_stage = g.dq_operands(wg, half)
                ds_part = ds_part + stages[half] * g.ds_parts  # the stage's tile (its row halves with ds_rows)
                frag_ds = _fragment(v.dq_mma, thr, getattr(v, f"sdS{half}"), as_a=not g.dq_swap)
                for kb in cutlass.range_constexpr(cute.size(frag_ds, mode=[2])):
                    mma = v.dq_mma_zero if cutlass.const_expr(kb == 0 and half == 0) else v.dq_mma
                    ds, kt = frag_ds[(None, None, kb, ds_part)], frag_kt[(None, None, kb, kt_stage)]
                    a, b = (kt, ds) if g.dq_swap else (ds, kt)
                    cute.gemm(mma, acc_dq, a, b, acc_dq)
        else:
            if cutlass.const_expr(g.split_queries):  # both warp groups' query halves, one 64-row A operand
                _ = [declared.take(g, stage_info, f"SmemDS{half}'s tile", "SmemKV.mma_dq", f"SmemDS{half}")
                     for half in range(2)]
                tile = v.sdS_both
            else:
                tile = getattr(v, f"sdS{wg}")
            frag_kt = v.dq_mma.make_fragment_B(thr.partition_B(v.sKt))
            warpgroup.fence()
            frag_ds = v.dq_mma.make_fragment_A(thr.partition_A(tile))
            for kb in cutlass.range_constexpr(cute.size(frag_ds, mode=[2])):
                mma = v.dq_mma_zero if cutlass.const_expr(kb == 0) else v.dq_mma
                cute.gemm(mma, acc_dq, frag_ds[(None, None, kb, 0)], frag_kt[(None, None, kb, g.dq_kt_view(wg, part))],
                          acc_dq)
        warpgroup.commit_group()


@dataclass(kw_only=True)
class SmemQdO(MemoryResource):
    """The Q and dO tiles of one step (64 rows of one query head), a ring of ``qdo_stages``: one
    transaction barrier per stage for both tiles."""

    g: Any = None
    retire = wgmma_wait
    idx: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.idx = TaskLocalVariable(dtype=None, docs="the Q / dO stage of the current step (one Int32 register)")

    @consumer_work(returns=idx, work_attrs=WorkAttr.AUXILIARY)
    def init_index(self, stage_info: StageInfo):
        return cute.make_rmem_tensor(cute.make_layout(1), cutlass.Int32)

    def get_smem_requirements(self):
        return [self.g.alloc_q, self.g.alloc_do] + ([self.g.alloc_lse, self.g.alloc_delta] if self.g.tma_stats else [])

    @producer_work
    def tma_load(self, stage_info: StageInfo):
        g, v = self.g, stage_info.context.values
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        for tma, m_x, s_x in ((v.tma_q, v.mQ, v.sQ), (v.tma_do, v.mdO, v.sdO)):
            if cutlass.const_expr(g.varlen):  # the unit's sequence's rows of the packed Q / dO
                g_x = cute.flat_divide(g.rows_of(m_x, v.unit, head, batch),
                                       (g.block_m, g.head_dim))[(None, None, None, 0)]
            else:
                g_x = cute.flat_divide(m_x, (g.block_m, g.head_dim))[(None, None, None, 0, head, batch)]
            t_s, t_g = cute.nvgpu.cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(s_x, 0, 2),
                                                        cute.group_modes(g_x, 0, 2))
            stage_info.tma_copy(tma, t_g[(None, m_block)], t_s[(None, stage_info.stage_idx)])
        if cutlass.const_expr(g.tma_stats):  # the step's 64 LSE and delta values (StatsPrep's padded rows)
            block = m_block
            if cutlass.const_expr(g.varlen):  # the sequence's blocks of the padded rows (VarlenStatsPrep)
                block = g.padded_block0(v.unit) + m_block
            for tma, m_x, s_x in ((v.tma_lse, v.mLSEt, v.sLSE), (v.tma_delta, v.mDeltat, v.sDelta)):
                g_x = cute.flat_divide(m_x, (g.block_m,))[(None, None, head, 0 if g.varlen else batch)]
                t_s, t_g = cute.nvgpu.cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(s_x, 0, 1),
                                                            cute.group_modes(g_x, 0, 1))
                stage_info.tma_copy(tma, t_g[(None, block)], t_s[(None, stage_info.stage_idx)])

    @consumer_work
    def load_stats(self, stage_info: StageInfo, lse2, delta, *, wg: cutlass.Constexpr = 0):
        """``tma_stats``: the step's queries' LSE * log2 e and delta from the stage into registers."""
        v = stage_info.context.values
        bmath.stats_from_smem(lse2, delta, self.g, v, self._stats(v.sLSE, stage_info, wg),
                              self._stats(v.sDelta, stage_info, wg))

    def _stats(self, s_x, stage_info, wg):
        """The stage's LSE or delta values of warp group ``wg``'s queries (``split_queries``: its 32)."""
        s_x = s_x[(None, stage_info.stage_idx)]
        return cute.domain_offset((wg * self.g.sdp_cols,), s_x) if self.g.split_queries else s_x

    @consumer_work
    def load_lse(self, stage_info: StageInfo, lse2, *, wg: cutlass.Constexpr = 0):
        """``split_stats``: the LSE * log2 e alone (P needs it; delta is read after P, so the two never hold
        registers at once beside S and dP)."""
        v = stage_info.context.values
        bmath.stats_from_smem(lse2, None, self.g, v, self._stats(v.sLSE, stage_info, wg), None)

    @consumer_work
    def load_delta(self, stage_info: StageInfo, delta, *, wg: cutlass.Constexpr = 0):
        """``split_stats``: delta alone, for dS."""
        v = stage_info.context.values
        bmath.stats_from_smem(None, delta, self.g, v, None, self._stats(v.sDelta, stage_info, wg))

    @consumer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def gemm_operand(self, stage_info: StageInfo, idx):
        """Declares that the GEMM issued next (``SmemKV.mma_sdp``, ``mma_s`` or ``mma_dp``: its commit group)
        reads this stage, so the checker holds it until that group's retire; records the stage for it. The GEMM
        does not trace without it (``attention.declared``): it would read a stage the checker never saw it read."""
        idx[0] = stage_info.stage_idx
        declared.note(self.g, stage_info, "the Q / dO stage")

    @consumer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def gemm_operand_again(self, stage_info: StageInfo):
        """``gemm_operand`` for the next GEMM group of the same stage (``overlap_scores``: dP's, after S's), whose
        ``idx`` the first declaration recorded (rewriting it while S's group still reads it would race)."""
        declared.note(self.g, stage_info, "the Q / dO stage")

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dkv(self, stage_info: StageInfo, p, ds, acc_dv, acc_dk, *, wg: cutlass.Constexpr = 0):
        """dV += P^T dO_i and dK += dS^T Q_i: A from the 16-bit registers, B the stage's dO / Q through
        their transposed views (one commit group; P / dS and both accumulators in use until the retire)."""
        v, s = stage_info.context.values, stage_info.stage_idx
        warpgroup.fence()  # P and dS were written by ordinary instructions
        _gemm_over_rows(self.g, v, acc_dv, p, v.sdOt, s, wg)
        _gemm_over_rows(self.g, v, acc_dk, ds, v.sQt, s, wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads both SmemDS tiles (declared) until the retire
    @cute.jit
    def mma_dkv_shared(self, stage_info: StageInfo, acc_dv, acc_dk, *, wg: cutlass.Constexpr = 0,
                       halves: cutlass.Constexpr = (0, 1)):
        """``split_queries``: dV += P^T dO_i and dK += dS^T Q_i over the step's queries of warp groups ``halves``
        (all 64 by default), A from those warp groups' P^T / dS^T tiles (queries [32 h, 32 h + 32) from warp group
        h's), B this warp group's half of D of the stage's dO / Q (one commit group)."""
        g, v, s = self.g, stage_info.context.values, stage_info.stage_idx
        _ = [declared.take(g, stage_info, f"SmemDS{half}'s tile", "SmemQdO.mma_dkv_shared", f"SmemDS{half}")
             for half in halves]
        thr = v.dkv_mma.get_slice(cute.arch.thread_idx()[0] % 128)
        warpgroup.fence()
        for acc, name, s_bt in ((acc_dv, "sPA", v.sdOt), (acc_dk, "sdSA", v.sQt)):
            frag_b = v.dkv_mma.make_fragment_B(thr.partition_B(s_bt))[(None, None, None, 2 * s + wg)]
            for half in halves:
                frag_a = v.dkv_mma.make_fragment_A(thr.partition_A(getattr(v, f"{name}{half}")))
                blocks = cute.size(frag_a, mode=[2])
                for kb in cutlass.range_constexpr(blocks):
                    cute.gemm(v.dkv_mma, acc, frag_a[(None, None, kb, 0)], frag_b[(None, None, half * blocks + kb)],
                              acc)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dkv_own(self, stage_info: StageInfo, p, ds, acc_dv, acc_dk, *, wg: cutlass.Constexpr = 0):
        """``own_regs``: the dV / dK k-blocks of this warp group's own queries, A (P^T, dS^T) from its registers, B
        those queries' rows of the stage's dO / Q in its half of D (one commit group; the registers are the GEMM's
        until the retire)."""
        v, s = stage_info.context.values, stage_info.stage_idx
        thr = v.dkv_rs_mma.get_slice(cute.arch.thread_idx()[0] % 128)
        warpgroup.fence()  # P and dS were written by ordinary instructions
        for acc, a_regs, s_bt in ((acc_dv, p, v.sdOt), (acc_dk, ds, v.sQt)):
            frag_b = v.dkv_rs_mma.make_fragment_B(thr.partition_B(s_bt))[(None, None, None, 2 * s + wg)]
            blocks = cute.size(a_regs, mode=[2])
            for kb in cutlass.range_constexpr(blocks):
                cute.gemm(v.dkv_rs_mma, acc, a_regs[(None, None, kb)], frag_b[(None, None, wg * blocks + kb)], acc)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dv(self, stage_info: StageInfo, p, acc_dv, *, wg: cutlass.Constexpr = 0):
        """``overlap_dq``: dV += P^T dO_i alone in a commit group (dK's comes after the dQ GEMM)."""
        warpgroup.fence()
        v = stage_info.context.values
        _gemm_over_rows(self.g, v, acc_dv, p, v.sdOt, stage_info.stage_idx, wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dk(self, stage_info: StageInfo, ds, acc_dk, *, wg: cutlass.Constexpr = 0):
        """``overlap_dq``: dK += dS^T Q_i, the step's last commit group: dQ is staged while it runs."""
        warpgroup.fence()
        v = stage_info.context.values
        _gemm_over_rows(self.g, v, acc_dk, ds, v.sQt, stage_info.stage_idx, wg)
        warpgroup.commit_group()


@dataclass(kw_only=True)
class Grads(MemoryResource):
    """A warp group's gradient state (dK, dV in registers; dS^T's SMEM tile) and its writes to global
    memory: dQ atomics per step, dK and dV at the end of the unit."""

    g: Any = None
    wg: int = 0

    def get_smem_requirements(self):
        return [] if self.g.exchange else [self.g.alloc_ds[self.wg]]  # shared_ds / split_queries: SmemDS's

    @producer_work
    def reset(self, stage_info: StageInfo, acc_dv, acc_dk):
        acc_dv.fill(0.0)
        acc_dk.fill(0.0)

    def _step(self, stage_info):
        """(g, values, this warp group's first key, the step's first query, query head, batch)."""
        g, v = self.g, stage_info.context.values
        n_block, _, _ = g.unit_coords(v.unit)
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        first_key = n_block * g.block_n + g.key_half(self.wg) * HALF
        first_query = m_block * g.block_m + (self.wg * g.sdp_cols if g.split_queries else 0)
        return g, v, first_key, first_query, head, batch

    def _ds_tile(self, v):
        """Where ``dscores`` writes dS^T: this warp group's tile, or None with ``shared_ds`` (SmemDS.store)."""
        return None if self.g.exchange else getattr(v, f"sdSt{self.wg}")[(None, None, 0)]

    @producer_work
    def scores(self, stage_info: StageInfo, acc_s, acc_dp, p, ds):
        """P^T and dS^T of this step (``attention.backward_math.grads_of_scores``)."""
        g, v, n0, m0, head, batch = self._step(stage_info)
        bmath.grads_of_scores(acc_s, acc_dp, p, ds, self._ds_tile(v), g, v, n0, m0, head, batch, ctx=stage_info.context)

    @producer_work
    def stats(self, stage_info: StageInfo, lse2, delta):
        """``overlap_scores``: the step's queries' LSE and delta, loaded while the S / dP GEMMs run."""
        g, v, _, m0, head, batch = self._step(stage_info)
        bmath.query_stats(lse2, delta, g, v, m0, head, batch, g.seq_bounds(v.unit))

    @producer_work
    def probs(self, stage_info: StageInfo, acc_s, lse2):
        """``overlap_scores``: P^T from S^T (its GEMM retired; dP's may still run)."""
        g, v, n0, m0, head, batch = self._step(stage_info)
        bmath.probs(acc_s, lse2, g, v, n0, m0, head, batch, g.seq_bounds(v.unit)[3])

    @producer_work
    def dscores(self, stage_info: StageInfo, acc_s, acc_dp, p, ds, lse2, delta):
        """``overlap_scores``: dS^T from P^T and dP^T; P^T, dS^T into the A-operand registers."""
        v = stage_info.context.values
        bmath.dscores(acc_s, acc_dp, p, ds, lse2, delta, self._ds_tile(v), self.g, v, ctx=stage_info.context)

    @producer_work
    def store(self, stage_info: StageInfo, acc_dk, acc_dv):
        g, v = self.g, stage_info.context.values
        n_block, kv_head, batch = g.unit_coords(v.unit)
        bmath.store_dkv(acc_dk, acc_dv, g, v, n_block, kv_head, batch, wg=self.wg)


@dataclass(kw_only=True)
class MathOrder(MemoryResource):
    """``wg_order``: the two warp groups' turn to issue their S / dP GEMMs (a 1-stage AsyncAsync pipeline,
    no data)."""


@dataclass(kw_only=True)
class SmemDS(MemoryResource):
    """``shared_ds``: a warp group's dS^T tile (64 keys x 64 queries, 16-bit), written by that warp group
    and read by both dQ GEMMs: an AsyncAsync stage from the writing warp group to the other one, which
    releases it once its dQ GEMM has retired. ``split_queries``: the warp group's 32 queries' dS^T and P^T
    (two tiles), read by both warp groups' dV / dK and dQ GEMMs. The writer's own dQ GEMM reads it too
    (``own_gemm_operand``, after the commit): the checker holds that read until the writer's wgmma.wait_group
    retires the GEMM's group, and a ``store`` of the next tile before then is a race."""

    g: Any = None
    wg: int = 0

    def get_smem_requirements(self):
        return [self.g.alloc_ds[self.wg]] + self.g.alloc_p[self.wg:self.wg + 1]  # split_queries: P^T's tile too

    def _declare(self, stage_info):
        """The stage this declaration names (the waited one, or on the writer's side the one it committed last)
        for the task's next ``SmemKV.mma_dq`` (``attention.declared``): a run-time value with two stages (``dq_defer``,
        ``ds_stages=2``), else the only stage, 0."""
        stage = stage_info.stage_idx if self.g.ds_stages > 1 else 0
        declared.note(self.g, stage_info, f"SmemDS{self.wg}'s tile", stage)

    @producer_work
    def store(self, stage_info: StageInfo, ds, acc_dp, p=None):
        """dS^T into the tile (``split_queries``: this warp group's queries' dS^T, and P^T, given as ``p``, into
        its P^T tile)."""
        v = stage_info.context.values
        tiles = [(ds, getattr(v, f"sdSt{self.wg}")[(None, None, stage_info.stage_idx)])]
        if cutlass.const_expr(p is not None):
            tiles.append((p, getattr(v, f"sPt{self.wg}")[(None, None, 0)]))
        bmath.write_tiles(tiles, acc_dp, v, ctx=stage_info.context)

    @producer_work
    def store_grads(self, stage_info: StageInfo, acc_dk, acc_dv):
        """``dkv_in_ds``: after the last step, dV and dK leave through this tile (its two 64 x 64 halves) by TMA,
        once the other warp group's last dQ GEMM has read it (``backward_math.store_dkv_tma``)."""
        g, v = self.g, stage_info.context.values
        n_block, kv_head, batch = g.unit_coords(v.unit)
        bmath.store_dkv_tma(acc_dk, acc_dv, g, stage_info.context, n_block, kv_head, batch, wg=self.wg,
                            ds_stage=stage_info.stage_idx)

    @consumer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def gemm_operand(self, stage_info: StageInfo):
        """Declares that the dQ GEMM issued next (``SmemKV.mma_dq``) reads this tile until its retire."""
        self._declare(stage_info)

    @producer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def own_gemm_operand(self, stage_info: StageInfo):
        """The writer's side: its own dQ GEMM issued next (``SmemKV.mma_dq``) reads the tile it just
        committed, until its retire (a declaration: nothing runs)."""
        self._declare(stage_info)


@dataclass(kw_only=True)
class SmemDQ(MemoryResource):
    """A warp group's dQ part of one step (fp32, 64 x D) on its way to global memory: the warp group
    writes it (an AsyncAsync stage), the dQ writer warp adds it into dQaccum with one TMA reduce-add
    (``cp.reduce.async.bulk.tensor``), so no fp32 atomics run on the math warp groups."""

    g: Any = None
    wg: int = 0

    def get_smem_requirements(self):
        return [self.g.alloc_dq[self.wg]]

    @producer_work
    def store(self, stage_info: StageInfo, acc_dq, *, part: cutlass.Constexpr = 0):
        """dQ / scale into the stage (``part``: its 64-column part ``part``, ``d_split``), fenced for the TMA
        (async proxy) that reads it."""
        v = stage_info.context.values
        bmath.stage_dq(acc_dq, self.g, v, getattr(v, f"sdQ{self.wg}"), stage_info.stage_idx, part)

    @consumer_work
    def reduce_add(self, stage_info: StageInfo):
        """dQaccum[Q block] += the stage (one thread issues the TMA reduce-add and waits until it has read
        the stage, so the release after this work frees it). ``deterministic``: in the Q block's turn
        (attention.dq_order: the hand-over the grid checker proves, run here on the kernel's values)."""
        g, v = self.g, stage_info.context.values
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        m_block, col_block = g.dq_block(m_block, self.wg)  # this warp group's tile of the Q block's dQ
        s_dq = getattr(v, f"sdQ{self.wg}")
        if cutlass.const_expr(g.deterministic):
            slot, order, last = dq_order.dq_turn(g, v.unit, stage_info.loop_offset)
            io = DQTurnIO(g=g, v=v, s_dq=s_dq, m_block=m_block, head=head, batch=batch, col_block=col_block,
                          stage=stage_info.stage_idx)
            dq_order.dq_part_calls(slot, order, last, self.wg, flag=io, acc=io, branch=runtime_branch)
        else:
            bmath.reduce_dq(g, v, s_dq, m_block, head, batch, col_block, stage_info.stage_idx)

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def finish(self, stage_info: StageInfo):
        """``dq_finish`` (after the step's second ``reduce_add``): once the previous step's adds are complete (at the
        last step, this one's too), count this key block on their Q blocks' words; where it counted last, convert
        the Q block's finished fp32 tiles into dQ's rows through this stage (attention.dq_finish: the hand-over the
        grid checker proves, run here on the kernel's values)."""
        g, v = self.g, stage_info.context.values
        step, steps = stage_info.loop_offset, g.steps_of(v.unit)
        wait_adds(step == steps - 1)
        io = DQFinishIO(g=g, v=v, s_dq=getattr(v, f"sdQ{self.wg}"), stage=stage_info.stage_idx)

        def turn(s):
            slot, _, last = dq_order.dq_turn(g, v.unit, s)
            return slot, last
        dq_finish.finish_step_calls(step, steps, turn, flag=io, acc=io, out=io, when=io.when, branch=runtime_branch)
