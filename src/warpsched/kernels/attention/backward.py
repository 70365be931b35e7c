"""FlashAttention backward for Hopper (H100 / H200, sm_90a), written as a warpsched program.

Given Q, K, V, dO (B, H, S, D; K / V may have fewer heads: GQA), the forward's log-sum-exp and
delta = rowsum(dO * O) (fp32, (B, H, S_q)), it computes dK and dV (in the input dtype) and adds dQ
into an fp32 accumulation buffer (B, H, S_q rounded up to 64, D), which the host converts. bf16 or
fp16; head dim 64 or 128; any S_q, S_k >= 1; causal top-left aligned, as the forward.

A work unit is a 128-key block of one (batch, K/V head); one CTA per unit (CTAs with the longest
loops, the first key blocks of a causal problem, first). The CTA keeps its K and V in SMEM and walks
every (query head of the K/V head's group, 64-row Q block) that sees its keys, so dK and dV (summed
over the group's query heads) stay in registers until the end. 384 threads in three warp groups:

    LoadTask (warp 0, 24 regs)  kv.acquire; TMA K, V (two 64-key halves each); kv.commit
                                for each step (query head, Q block): qdo.acquire; TMA Q_i, dO_i; qdo.commit
    Grad0 (warps 4-7, 240)      keys [64 wg, 64 wg + 64) of the block:  zero dK, dV; kv.wait
    Grad1 (warps 8-11, 240)     for each step: qdo.wait; S^T = K_w Q_i^T, dP^T = V_w dO_i^T (wgmma); retire
                                               P^T, dS^T (grads.scores; dS^T also into SMEM)
                                               dV += P^T dO_i, dK += dS^T Q_i (wgmma, A from registers)
                                               dQ_w = dS_w K_w (wgmma from SMEM); retire; qdo.release
                                               dQaccum += scale * dQ_w (fp32 atomics)
                                kv.release; dK * scale, dV -> global

The step count per unit is read at run time (every count >= 0 is proven: a causal key block past
the last query has no step and writes zeros). docs/attention.md, "Backward".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, WorkAttr, consumer_work, producer_work, threads, trip_count,
                       wgmma_wait)

from .. import _host
from . import backward_math as bmath
from .backward_schedules import dq_writer_schedule, grad_schedule, load_schedule
from . import register_math as amath
from .config import AttentionConfig
from .forward import AttentionConfigError
from .masks import check as check_masks
from .masks import window_bounds
from .backward_math import HALF
from .backward_units import BLOCK_M, BLOCK_N, BackwardUnits
from . import dq_order
from .dq_turns import DQTurnIO
from ..gemm.fixup import runtime_branch

BWD_HEAD_DIMS = (64, 128)


# ---------------------------------------------------------------------------------- resources
@cute.jit
def _gemm_over_d(v, acc, frag_a, frag_b, stage, wg: cutlass.Constexpr):
    """acc = A_w B_stage^T over the head dim: warp group ``wg``'s 64 keys of K or V against the stage's Q or
    dO (the first k-block overwrites the accumulator)."""
    for kb in cutlass.range_constexpr(cute.size(frag_a, mode=[2])):
        mma = v.sdp_mma_zero if cutlass.const_expr(kb == 0) else v.sdp_mma
        cute.gemm(mma, acc, frag_a[(None, None, kb, wg)], frag_b[(None, None, kb, stage)], acc)


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
        acc_s = cute.make_rmem_tensor(sdp.partition_shape_C((HALF, BLOCK_M)), cutlass.Float32)
        acc_dp = cute.make_rmem_tensor(sdp.partition_shape_C((HALF, BLOCK_M)), cutlass.Float32)
        dkv = v.dkv_mma.get_slice(tidx % 128)
        acc_dv = cute.make_rmem_tensor(dkv.partition_shape_C((HALF, g.head_dim)), cutlass.Float32)
        acc_dk = cute.make_rmem_tensor(dkv.partition_shape_C((HALF, g.head_dim)), cutlass.Float32)
        acc_dq = cute.make_rmem_tensor(v.dq_mma.get_slice(tidx % 128).partition_shape_C((BLOCK_M, g.dq_cols)),
                                       cutlass.Float32)
        return (acc_s, acc_dp, acc_dv, acc_dk, acc_dq, amath.make_p(acc_s, v.dkv_mma, g.dtype),
                amath.make_p(acc_dp, v.dkv_mma, g.dtype))

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
            for w in range(2):  # keys [64 w, 64 w + 64) of the block go to warp group w's half
                stage_info.tma_copy(tma, t_g[(None, n_block * 2 + w)], t_s[(None, w)])

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads K, V (and Q, dO: SmemQdO.gemm_operand) until the retire
    @cute.jit
    def mma_sdp(self, stage_info: StageInfo, acc_s, acc_dp, idx, *, wg: cutlass.Constexpr = 0):
        """S^T = K_w Q_i^T and dP^T = V_w dO_i^T, one commit group (``idx``: the Q / dO stage)."""
        v = stage_info.context.values
        tidx, _, _ = cute.arch.thread_idx()
        thr = v.sdp_mma.get_slice(tidx % 128)
        frag_k = v.sdp_mma.make_fragment_A(thr.partition_A(v.sK))
        frag_v = v.sdp_mma.make_fragment_A(thr.partition_A(v.sV))
        frag_q = v.sdp_mma.make_fragment_B(thr.partition_B(v.sQ))
        frag_do = v.sdp_mma.make_fragment_B(thr.partition_B(v.sdO))
        warpgroup.fence()
        _gemm_over_d(v, acc_s, frag_k, frag_q, idx[0], wg)
        _gemm_over_d(v, acc_dp, frag_v, frag_do, idx[0], wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads K (and Q: SmemQdO.gemm_operand) until its retire
    @cute.jit
    def mma_s(self, stage_info: StageInfo, acc_s, idx, *, wg: cutlass.Constexpr = 0):
        """``overlap_scores``: S^T = K_w Q_i^T in a commit group of its own, so P is computed while the
        dP GEMM (``mma_dp``, the next group) still runs."""
        v = stage_info.context.values
        thr = v.sdp_mma.get_slice(cute.arch.thread_idx()[0] % 128)
        warpgroup.fence()
        _gemm_over_d(v, acc_s, v.sdp_mma.make_fragment_A(thr.partition_A(v.sK)),
                     v.sdp_mma.make_fragment_B(thr.partition_B(v.sQ)), idx[0], wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads V (and dO) until its retire
    @cute.jit
    def mma_dp(self, stage_info: StageInfo, acc_dp, idx, *, wg: cutlass.Constexpr = 0):
        """``overlap_scores``: dP^T = V_w dO_i^T, its own commit group."""
        v = stage_info.context.values
        thr = v.sdp_mma.get_slice(cute.arch.thread_idx()[0] % 128)
        _gemm_over_d(v, acc_dp, v.sdp_mma.make_fragment_A(thr.partition_A(v.sV)),
                     v.sdp_mma.make_fragment_B(thr.partition_B(v.sdO)), idx[0], wg)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads K (and the dS tiles) until the retire
    @cute.jit
    def mma_dq(self, stage_info: StageInfo, acc_dq, *, wg: cutlass.Constexpr = 0):
        """dQ's part of this warp group. ``shared_ds``: dQ[:, 64 wg : 64 wg + 64] over all 128 keys, A from
        both warp groups' dS tiles (the other's through ``SmemDS``), B from K's (D half, key half) blocks;
        else dQ_w = dS_w K_w over this warp group's 64 keys (A: its own dS tile)."""
        g, v = self.g, stage_info.context.values
        tidx, _, _ = cute.arch.thread_idx()
        thr = v.dq_mma.get_slice(tidx % 128)
        frag_kt = v.dq_mma.make_fragment_B(thr.partition_B(v.sKt))
        warpgroup.fence()
        if cutlass.const_expr(g.shared_ds):  # sKt: (D half, keys, 2 * key half + D half)
            for half in cutlass.range_constexpr(2):
                frag_ds = v.dq_mma.make_fragment_A(thr.partition_A(getattr(v, f"sdS{half}")))
                for kb in cutlass.range_constexpr(cute.size(frag_ds, mode=[2])):
                    mma = v.dq_mma_zero if cutlass.const_expr(kb == 0 and half == 0) else v.dq_mma
                    cute.gemm(mma, acc_dq, frag_ds[(None, None, kb, 0)], frag_kt[(None, None, kb, 2 * half + wg)],
                              acc_dq)
        else:
            frag_ds = v.dq_mma.make_fragment_A(thr.partition_A(getattr(v, f"sdS{wg}")))
            for kb in cutlass.range_constexpr(cute.size(frag_ds, mode=[2])):
                mma = v.dq_mma_zero if cutlass.const_expr(kb == 0) else v.dq_mma
                cute.gemm(mma, acc_dq, frag_ds[(None, None, kb, 0)], frag_kt[(None, None, kb, wg)], acc_dq)
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
        return [self.g.alloc_q, self.g.alloc_do]

    @producer_work
    def tma_load(self, stage_info: StageInfo):
        g, v = self.g, stage_info.context.values
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        for tma, m_x, s_x in ((v.tma_q, v.mQ, v.sQ), (v.tma_do, v.mdO, v.sdO)):
            if cutlass.const_expr(g.varlen):  # the unit's sequence's rows of the packed Q / dO
                g_x = cute.flat_divide(g.rows_of(m_x, v.unit, head, batch),
                                       (BLOCK_M, g.head_dim))[(None, None, None, 0)]
            else:
                g_x = cute.flat_divide(m_x, (BLOCK_M, g.head_dim))[(None, None, None, 0, head, batch)]
            t_s, t_g = cute.nvgpu.cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(s_x, 0, 2),
                                                        cute.group_modes(g_x, 0, 2))
            stage_info.tma_copy(tma, t_g[(None, m_block)], t_s[(None, stage_info.stage_idx)])

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def gemm_operand(self, stage_info: StageInfo, idx):
        """Declares that the S / dP GEMMs issued next (``SmemKV.mma_sdp``, same commit group) read this
        stage, so the checker holds it until their retire; records the stage for them."""
        idx[0] = stage_info.stage_idx

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dkv(self, stage_info: StageInfo, p, ds, acc_dv, acc_dk):
        """dV += P^T dO_i and dK += dS^T Q_i: A from the 16-bit registers, B the stage's dO / Q through
        their transposed views (one commit group; P / dS and both accumulators in use until the retire)."""
        v, s = stage_info.context.values, stage_info.stage_idx
        tidx, _, _ = cute.arch.thread_idx()
        thr = v.dkv_mma.get_slice(tidx % 128)
        frag_dot = v.dkv_mma.make_fragment_B(thr.partition_B(v.sdOt))
        frag_qt = v.dkv_mma.make_fragment_B(thr.partition_B(v.sQt))
        warpgroup.fence()  # P and dS were written by ordinary instructions
        cute.gemm(v.dkv_mma, acc_dv, p, frag_dot[(None, None, None, s)], acc_dv)
        cute.gemm(v.dkv_mma, acc_dk, ds, frag_qt[(None, None, None, s)], acc_dk)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dv(self, stage_info: StageInfo, p, acc_dv):
        """``overlap_dq``: dV += P^T dO_i alone in a commit group (dK's comes after the dQ GEMM)."""
        v = stage_info.context.values
        thr = v.dkv_mma.get_slice(cute.arch.thread_idx()[0] % 128)
        warpgroup.fence()
        cute.gemm(v.dkv_mma, acc_dv, p, v.dkv_mma.make_fragment_B(thr.partition_B(v.sdOt))[
            (None, None, None, stage_info.stage_idx)], acc_dv)
        warpgroup.commit_group()

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_dk(self, stage_info: StageInfo, ds, acc_dk):
        """``overlap_dq``: dK += dS^T Q_i, the step's last commit group: dQ is staged while it runs."""
        v = stage_info.context.values
        thr = v.dkv_mma.get_slice(cute.arch.thread_idx()[0] % 128)
        warpgroup.fence()
        cute.gemm(v.dkv_mma, acc_dk, ds, v.dkv_mma.make_fragment_B(thr.partition_B(v.sQt))[
            (None, None, None, stage_info.stage_idx)], acc_dk)
        warpgroup.commit_group()


@dataclass(kw_only=True)
class Grads(MemoryResource):
    """A warp group's gradient state (dK, dV in registers; dS^T's SMEM tile) and its writes to global
    memory: dQ atomics per step, dK and dV at the end of the unit."""

    g: Any = None
    wg: int = 0

    def get_smem_requirements(self):
        return [] if self.g.shared_ds else [self.g.alloc_ds[self.wg]]  # shared_ds: SmemDS owns the tile

    @producer_work
    def reset(self, stage_info: StageInfo, acc_dv, acc_dk):
        acc_dv.fill(0.0)
        acc_dk.fill(0.0)

    @producer_work
    def scores(self, stage_info: StageInfo, acc_s, acc_dp, p, ds):
        """P^T and dS^T of this step (``attention.backward_math.grads_of_scores``)."""
        g, v = self.g, stage_info.context.values
        n_block, _, _ = g.unit_coords(v.unit)
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        s_ds = None if g.shared_ds else getattr(v, f"sdSt{self.wg}")  # shared_ds: SmemDS.store writes it
        bmath.grads_of_scores(acc_s, acc_dp, p, ds, s_ds, g, v,
                              n_block * BLOCK_N + self.wg * HALF, m_block * BLOCK_M, head, batch, wg=self.wg)

    def _step(self, stage_info):
        g, v = self.g, stage_info.context.values
        n_block, _, _ = g.unit_coords(v.unit)
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        return g, v, n_block * BLOCK_N + self.wg * HALF, m_block * BLOCK_M, head, batch

    @producer_work
    def stats(self, stage_info: StageInfo, lse2, delta):
        """``overlap_scores``: the step's queries' LSE and delta, loaded while the S / dP GEMMs run."""
        g, v, _, m0, head, batch = self._step(stage_info)
        bmath.query_stats(lse2, delta, g, v, m0, head, batch)

    @producer_work
    def probs(self, stage_info: StageInfo, acc_s, lse2):
        """``overlap_scores``: P^T from S^T (its GEMM retired; dP's may still run)."""
        g, v, n0, m0, head, batch = self._step(stage_info)
        bmath.probs(acc_s, lse2, g, v, n0, m0, head, batch)

    @producer_work
    def dscores(self, stage_info: StageInfo, acc_s, acc_dp, p, ds, lse2, delta):
        """``overlap_scores``: dS^T from P^T and dP^T; P^T, dS^T into the A-operand registers."""
        g, v = self.g, stage_info.context.values
        s_ds = None if g.shared_ds else getattr(v, f"sdSt{self.wg}")
        bmath.dscores(acc_s, acc_dp, p, ds, lse2, delta, s_ds, g, v, wg=self.wg)

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
    releases it once its dQ GEMM has retired. (The writer's own dQ GEMM reads it too; the writer retires
    that GEMM before its next ``store``, in program order.)"""

    g: Any = None
    wg: int = 0

    def get_smem_requirements(self):
        return [self.g.alloc_ds[self.wg]]

    @producer_work
    def store(self, stage_info: StageInfo, ds, acc_dp):
        v = stage_info.context.values
        bmath.write_ds(ds, acc_dp, v, getattr(v, f"sdSt{self.wg}"), wg=self.wg)

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def gemm_operand(self, stage_info: StageInfo):
        """Declares that the dQ GEMM issued next (``SmemKV.mma_dq``) reads this tile until its retire."""


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
    def store(self, stage_info: StageInfo, acc_dq):
        """scale * dQ into the stage, fenced for the TMA (async proxy) that reads it."""
        bmath.stage_dq(acc_dq, self.g, stage_info.context.values, getattr(stage_info.context.values, f"sdQ{self.wg}"))

    @consumer_work
    def reduce_add(self, stage_info: StageInfo):
        """dQaccum[Q block] += the stage (one thread issues the TMA reduce-add and waits until it has read
        the stage, so the release after this work frees it). ``deterministic``: in the Q block's turn
        (attention.dq_order: the hand-over the grid checker proves, run here on the kernel's values)."""
        g, v = self.g, stage_info.context.values
        head, m_block, batch = g.step_coords(v.unit, stage_info.loop_offset)
        col_block = self.wg if g.shared_ds else 0
        s_dq = getattr(v, f"sdQ{self.wg}")
        if cutlass.const_expr(g.deterministic):
            slot, order, last = dq_order.dq_turn(g, v.unit, stage_info.loop_offset)
            io = DQTurnIO(g=g, v=v, s_dq=s_dq, m_block=m_block, head=head, batch=batch, col_block=col_block)
            dq_order.dq_part_calls(slot, order, last, self.wg, flag=io, acc=io, branch=runtime_branch)
        else:
            bmath.reduce_dq(g, v, s_dq, m_block, head, batch, col_block)


# ---------------------------------------------------------------------------------- program
def build(g=None, *, steps=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` on the CPU and for the kernel while it is traced.

    ``g``: the FlashAttentionBackward being traced (None on the CPU: bf16, hd128, not causal).
    ``steps``: the CTA's runtime step count (None on the CPU); every count >= 0 is proven.
    The schedules are this module's names (``grad_schedule`` ...): a test plants a bug by replacing one
    (tests/_planting.py), not through a parameter of this function."""
    if g is None:
        g = FlashAttentionBackward()
    n = trip_count("steps", steps, min=0)
    kv_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=1, num_bytes=g.kv_bytes)
    qdo_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=g.qdo_stages, num_bytes=g.qdo_bytes)
    smem_kv = SmemKV(name="SmemKV", pipeline_config=kv_cfg, g=g)
    smem_qdo = SmemQdO(name="SmemQdO", pipeline_config=qdo_cfg, g=g)
    load = Task(name="LoadTask", src_resources=[], dst_resources=[smem_kv, smem_qdo], warp_idx=0, num_warps=1,
                num_registers=g.producer_regs, schedule=load_schedule(smem_kv, smem_qdo, n))
    dq_cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(128),
                                                            consumer_group=threads(32))
    smem_dqs = [SmemDQ(name=f"SmemDQ{wg}", pipeline_config=dq_cfg, g=g, wg=wg) for wg in range(2)]
    writer = Task(name="DQWriter", src_resources=list(smem_dqs), dst_resources=[], warp_idx=1, num_warps=1,
                  num_registers=g.producer_regs, schedule=dq_writer_schedule(*smem_dqs, n))
    tasks, graph, grads_all = [load, writer], {smem_kv: [], smem_qdo: []}, []
    smem_dss = []
    if g.shared_ds:
        ds_cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(128),
                                                                consumer_group=threads(128))
        smem_dss = [SmemDS(name=f"SmemDS{wg}", pipeline_config=ds_cfg, g=g, wg=wg) for wg in range(2)]
    order = None
    if g.wg_order:
        turn = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(128),
                                                              consumer_group=threads(128))
        order = MathOrder(name="MathOrder", pipeline_config=turn)
        graph[order] = []
    for wg in range(2):
        grads = Grads(name=f"Grads{wg}", g=g, wg=wg)
        grads_all.append(grads)
        src, dst = [smem_kv, smem_qdo], [grads, smem_dqs[wg]]
        turn = {} if order is None else {"order": order}
        turn.update({n: True for n in ("overlap_scores", "overlap_dq") if getattr(g, n)})
        if order is not None:
            (dst if wg == 0 else src).append(order)
        if g.shared_ds:
            sched = grad_schedule(smem_kv, smem_qdo, grads, smem_dqs[wg], n, wg, smem_dss[wg], smem_dss[1 - wg],
                                  **turn)
            src, dst = src + [smem_dss[1 - wg]], dst + [smem_dss[wg]]
            graph[smem_dss[wg]] = [smem_kv, smem_qdo]
        else:
            sched = grad_schedule(smem_kv, smem_qdo, grads, smem_dqs[wg], n, wg, **turn)
        tasks.append(Task(name=f"Grad{wg}", src_resources=src, dst_resources=dst, warp_idx=4 * (1 + wg), num_warps=4,
                          num_registers=g.consumer_regs, schedule=sched))
        graph[grads] = [smem_kv, smem_qdo]
        graph[smem_dqs[wg]] = [smem_kv, smem_qdo]
    smem = SmemAllocator.for_resources(smem_kv, smem_qdo, *grads_all, *smem_dss, *smem_dqs)
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=smem, verbose=verbose,
                       **manager_options)


# ---------------------------------------------------------------------------------- kernel
class FlashAttentionBackward(BackwardUnits):
    """Compile-time configuration (dtype, head dim, causal, Q / dO stages) and the kernel."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, causal=False, qdo_stages=2, producer_regs=24,
                 consumer_regs=240, shared_ds=False, wg_order=False, window_size=None, mask_mod=None, softcap=None,
                 varlen=False, deterministic=False, overlap_scores=False, overlap_dq=False):
        if dtype not in (cutlass.BFloat16, cutlass.Float16):
            raise AttentionConfigError(f"dtype {dtype.__name__}: supported are BFloat16 and Float16")
        if head_dim not in BWD_HEAD_DIMS:
            raise AttentionConfigError(f"head_dim={head_dim}: the backward supports head dims {BWD_HEAD_DIMS}")
        if qdo_stages not in (1, 2, 3):
            raise AttentionConfigError(f"qdo_stages={qdo_stages}: expected 1, 2 or 3")
        self.dtype, self.head_dim, self.causal, self.qdo_stages = dtype, head_dim, bool(causal), qdo_stages
        # the forward's sliding window: a key block's steps run over the Q blocks that see it (first_m_block,
        # end_m_block); only the blocks the window's edges cross are masked (backward_math.grads_of_scores)
        self.window_left, self.window_right = window_bounds(window_size, self.causal, False)
        # the forward's mask_mod and softcap: P recomputed as the forward made it, dS through the cap's derivative
        check_masks(mask_mod, softcap, False)
        self.mask_mod, self.softcap = mask_mod, softcap
        if shared_ds and head_dim != 128:
            raise AttentionConfigError(f"shared_ds=True at head dim {head_dim}: it splits D in two 64-column dQ "
                                       "halves, one per warp group; it needs head_dim=128")
        # shared_ds: the warp groups swap dS tiles and each computes half of dQ's columns over all 128 keys
        # (one dQ reduce-add per step instead of two partial sums)
        self.shared_ds = bool(shared_ds)
        self.dq_cols = head_dim // 2 if self.shared_ds else head_dim  # dQ columns per warp group
        self.wg_order = bool(wg_order)  # the warp groups take turns issuing their S / dP GEMMs
        # P computed while the dP GEMM runs (LSE / delta loaded under both); dQ staged while the dK GEMM runs
        self.overlap_scores, self.overlap_dq = bool(overlap_scores), bool(overlap_dq)
        self.varlen = bool(varlen)  # packed sequences: FlashAttentionBackwardVarlen (backward_units.seq_bounds)
        if deterministic and self.varlen:
            raise AttentionConfigError("deterministic=True with varlen: not yet; the packed backward adds dQ by "
                                       "fp32 reduce-adds (deterministic=False)")
        # dQ added in key-block order per Q block (attention.dq_order): FlashAttentionBackwardDeterministic
        self.deterministic = bool(deterministic)
        self.block_m, self.block_n = BLOCK_M, BLOCK_N
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs
        self.threads = 384
        elem = dtype.width // 8
        self.kv_bytes = 2 * BLOCK_N * head_dim * elem  # K and V of the block
        self.qdo_bytes = 2 * BLOCK_M * head_dim * elem  # Q and dO of a step
        self.alloc_k = SmemAllocation("sK", dtype=dtype, count=BLOCK_N * head_dim, alignment=1024)
        self.alloc_v = SmemAllocation("sV", dtype=dtype, count=BLOCK_N * head_dim, alignment=1024)
        self.alloc_q = SmemAllocation("sQ", dtype=dtype, count=qdo_stages * BLOCK_M * head_dim, alignment=1024)
        self.alloc_do = SmemAllocation("sdO", dtype=dtype, count=qdo_stages * BLOCK_M * head_dim, alignment=1024)
        self.alloc_ds = [SmemAllocation(f"sdS{wg}", dtype=dtype, count=HALF * BLOCK_M, alignment=1024)
                         for wg in range(2)]
        self.alloc_dq = [SmemAllocation(f"sdQ{wg}", dtype=cutlass.Float32, count=BLOCK_M * self.dq_cols, alignment=1024)
                         for wg in range(2)]
        self.seqlen_q = self.seqlen_k = self.heads = self.kv_heads = self.batches = None  # set while tracing
        self.config = AttentionConfig(
            "backward", dtype.__name__, head_dim, self.causal, BLOCK_M, BLOCK_N, qdo_stages, self.window_left,
            self.window_right, getattr(mask_mod, "__name__", None), softcap,
            tuple(n for n in ("shared_ds", "wg_order", "varlen", "deterministic", "overlap_scores", "overlap_dq")
                  if getattr(self, n)))

    # ---- compile-time layouts
    def _mmas(self):
        k_major, mn_major = LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), LayoutEnum.COL_MAJOR.sm90_mma_major_mode()
        d = self.head_dim

        def mma(a_major, b_major, tile, a_source=warpgroup.OperandSource.SMEM):
            return sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, a_major, b_major, cutlass.Float32,
                                                     (1, 1, 1), tile, a_source)
        sdp = mma(k_major, k_major, (HALF, BLOCK_M))  # S^T, dP^T: (keys, queries), contraction over D
        dkv = mma(k_major, mn_major, (HALF, d), warpgroup.OperandSource.RMEM)  # dV, dK: over queries
        dq = mma(k_major, mn_major, (BLOCK_M, self.dq_cols))  # dQ: (queries, D or its half), over keys
        return sdp, dkv, dq

    def _layouts(self):
        """Each SMEM buffer and, for the ones a GEMM also reads transposed, the same bytes as the other
        operand kind: a K-major (rows, D) tile and an MN-major (D, rows) one have one physical layout."""
        d, dt, R, C = self.head_dim, self.dtype, LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        st = self.qdo_stages
        return {
            "sK": sm90_utils.make_smem_layout_a(R, (HALF, BLOCK_M, d), dt, 2),  # (keys, D, half)
            "sV": sm90_utils.make_smem_layout_a(R, (HALF, BLOCK_M, d), dt, 2),
            # (D, keys, key half) or, shared_ds, (D half, keys, 2 * key half + D half): the same bytes
            "sKt": (sm90_utils.make_smem_layout_b(C, (BLOCK_M, d // 2, HALF), dt, 4) if self.shared_ds
                    else sm90_utils.make_smem_layout_b(C, (BLOCK_M, d, HALF), dt, 2)),
            "sQ": sm90_utils.make_smem_layout_b(R, (HALF, BLOCK_M, d), dt, st),  # (queries, D, stage)
            "sdO": sm90_utils.make_smem_layout_b(R, (HALF, BLOCK_M, d), dt, st),
            "sQt": sm90_utils.make_smem_layout_b(C, (HALF, d, BLOCK_M), dt, st),  # (D, queries, stage)
            "sdOt": sm90_utils.make_smem_layout_b(C, (HALF, d, BLOCK_M), dt, st),
            "sdS": sm90_utils.make_smem_layout_a(R, (BLOCK_M, d, HALF), dt, 1),  # (queries, keys)
            "sdSt": sm90_utils.make_smem_layout_b(C, (BLOCK_M, HALF, BLOCK_M), dt, 1),  # (keys, queries)
            "sdQ": sm90_utils.make_smem_layout_a(R, (BLOCK_M, self.dq_cols, self.dq_cols), cutlass.Float32, 1),
        }

    @staticmethod
    def _sdhb(t):
        """(B, H, S, D) -> (S, D, H, B), the mode order TMA tiles."""
        return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[2, 3, 1, 0]))

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream)

    def _launch(self, mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mCuQ=None, mCuK=None,
                max_seqlen_q=None, max_seqlen_k=None, mSem=None):
        """The launch both entry points trace (``FlashAttentionBackwardVarlen`` passes the cu_seqlens)."""
        lay = self._layouts()
        sdp_mma, dkv_mma, dq_mma = self._mmas()
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tile = (HALF, self.head_dim)
        atoms = [cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, self._sdhb(t), cute.slice_(lay[name], (None, None, 0)),
                                                        tile)
                 for t, name in ((mQ, "sQ"), (mK, "sK"), (mV, "sV"), (mdO, "sdO"))]
        tma_dq, tdQ = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyReduceBulkTensorTileS2GOp(), self._sdhb(mdQacc),
            cute.slice_(lay["sdQ"], (None, None, 0)), (BLOCK_M, self.dq_cols))
        if cutlass.const_expr(self.varlen):
            self.grid_setup(max_seqlen_q, max_seqlen_k, cute.size(mQ, mode=[1]), cute.size(mK, mode=[1]),
                            cute.size(mCuQ, mode=[0]) - 1)
        else:
            self.grid_setup(cute.size(mQ, mode=[2]), cute.size(mK, mode=[2]), cute.size(mQ, mode=[1]),
                            cute.size(mK, mode=[1]), cute.size(mQ, mode=[0]))
        self.kernel(atoms[0][0], atoms[0][1], atoms[1][0], atoms[1][1], atoms[2][0], atoms[2][1], atoms[3][0],
                    atoms[3][1], mLSE, mDelta, tma_dq, tdQ, self._sdhb(mdK), self._sdhb(mdV), sdp_mma,
                    dkv_mma, dq_mma, scale, mCuQ, mCuK, max_seqlen_q, max_seqlen_k, mSem).launch(
                        grid=[self.num_units, 1, 1], block=[self.threads, 1, 1],
                                                   min_blocks_per_mp=1, stream=stream)

    @cute.kernel
    def kernel(self, tma_q: cute.CopyAtom, mQ: cute.Tensor, tma_k: cute.CopyAtom, mK: cute.Tensor,
               tma_v: cute.CopyAtom, mV: cute.Tensor, tma_do: cute.CopyAtom, mdO: cute.Tensor, mLSE: cute.Tensor,
               mDelta: cute.Tensor, tma_dq: cute.CopyAtom, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor,
               sdp_mma: cute.TiledMma, dkv_mma: cute.TiledMma, dq_mma: cute.TiledMma, scale: cutlass.Float32,
               mCuQ: Optional[cute.Tensor], mCuK: Optional[cute.Tensor], max_seqlen_q: Optional[cutlass.Int32],
               max_seqlen_k: Optional[cutlass.Int32], mSem: Optional[cute.Tensor]):
        bid, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            for atom in (tma_q, tma_k, tma_v, tma_do, tma_dq):
                cute.nvgpu.cpasync.prefetch_descriptor(atom)
        # mQ / mK are the TMA views: (S, D, H, B)
        if cutlass.const_expr(self.varlen):
            self.cu_q, self.cu_k = mCuQ, mCuK
            self.grid_setup(max_seqlen_q, max_seqlen_k, cute.size(mQ, mode=[2]), cute.size(mK, mode=[2]),
                            cute.size(mCuQ, mode=[0]) - 1)
        else:
            self.grid_setup(cute.size(mQ, mode=[0]), cute.size(mK, mode=[0]), cute.size(mQ, mode=[2]),
                            cute.size(mK, mode=[2]), cute.size(mQ, mode=[3]))
        mgr = build(self, steps=self.steps_of(bid), verbose=False)  # checked here, while tracing
        if cutlass.const_expr(self.deterministic):
            dq_order.require_safe(self)  # the hand-over between CTAs, by the grid checker
        self.checked = _host.checked(mgr)  # the verdict its compile reports (attention.backward_host.VERDICT_OF)
        mgr.setup_resources_and_tasks()
        zeros = self._mmas()
        sdp_zero, dq_zero = zeros[0], zeros[2]
        sdp_zero.set(warpgroup.Field.ACCUMULATE, False)
        dq_zero.set(warpgroup.Field.ACCUMULATE, False)
        for m in (sdp_mma, dkv_mma, dq_mma):
            m.set(warpgroup.Field.ACCUMULATE, True)
        lay = self._layouts()
        view = mgr.smem_allocator.view
        s = {name: view(alloc, lay[name]) for name, alloc in (("sK", self.alloc_k), ("sV", self.alloc_v),
                                                              ("sQ", self.alloc_q), ("sdO", self.alloc_do))}
        s.update(sKt=view(self.alloc_k, lay["sKt"]), sQt=view(self.alloc_q, lay["sQt"]),
                 sdOt=view(self.alloc_do, lay["sdOt"]))
        for wg in cutlass.range_constexpr(2):
            s[f"sdS{wg}"] = view(self.alloc_ds[wg], lay["sdS"])
            s[f"sdSt{wg}"] = view(self.alloc_ds[wg], lay["sdSt"])[(None, None, 0)]
            s[f"sdQ{wg}"] = view(self.alloc_dq[wg], lay["sdQ"])
        mgr.run(tma_q=tma_q, tma_k=tma_k, tma_v=tma_v, tma_do=tma_do, mQ=mQ, mK=mK, mV=mV, mdO=mdO, mLSE=mLSE,
                mDelta=mDelta, tma_dq=tma_dq, mdQacc=mdQacc, mdK=mdK, mdV=mdV, sdp_mma=sdp_mma, sdp_mma_zero=sdp_zero,
                dkv_mma=dkv_mma, dq_mma=dq_mma, dq_mma_zero=dq_zero, unit=bid, scale=scale, mSem=mSem,
                scale_log2=scale * math.log2(math.e), **s)


class FlashAttentionBackwardVarlen(FlashAttentionBackward):
    """The backward over packed variable-length sequences: q, dO (1, H, total_q, D), k, v, dK, dV (1, H_kv,
    total_k, D) views of (total, heads, D) tensors, LSE and delta (1, H, total_q), dQaccum (1, H, total_q
    rounded up to 64, D), the int32 offsets ``mCuQ`` / ``mCuK`` (B + 1) and the longest sequences' lengths.
    The program is the backward's (backward_units.seq_bounds picks the rows and keys)."""

    def __init__(self, **options):
        super().__init__(varlen=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor, mCuQ: cute.Tensor,
                 mCuK: cute.Tensor, max_seqlen_q: cutlass.Int32, max_seqlen_k: cutlass.Int32, scale: cutlass.Float32,
                 stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mCuQ, mCuK, max_seqlen_q,
                     max_seqlen_k)


class FlashAttentionBackwardDeterministic(FlashAttentionBackward):
    """The backward with dQ added in a fixed order (``deterministic=True``, attention.dq_order): the
    arguments of ``FlashAttentionBackward`` and ``mSem``, one Int32 word per (batch, query head, 64-row Q
    block), zero at launch. Same program (the intra-CTA schedules do not change); the hand-over between
    CTAs is ``dq_order.dq_protocol``'s, proven by the grid checker."""

    def __init__(self, **options):
        super().__init__(deterministic=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor, mSem: cute.Tensor,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mSem=mSem)
