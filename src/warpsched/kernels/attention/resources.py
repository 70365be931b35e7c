"""The resources of warpsched's FlashAttention forward (``warpsched.kernels.attention.forward``): the Q
ring, the K and V rings with their GEMMs, a warp group's softmax state and the warp groups' turn on the
tensor cores. Each work method reads the kernel configuration (``g``, a ``FlashAttention``) and the
values the kernel passes to ``TaskManager.run`` (``stage_info.context.values``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from warpsched import (MemoryResource, StageInfo, TaskLocalVariable, WorkAttr, consumer_work, producer_work,
                       wgmma_wait)

from . import declared, epilogue, poly_exp2
from . import masks as amasks
from . import register_math as amath
from .ahead import KAheadWorks, ScoresAheadWorks
from .register_math import WG_ROWS
from .softmax import OnlineSoftmax


@dataclass(kw_only=True)
class SmemQ(MemoryResource):
    """Both warp groups' Q tiles, one transaction barrier per stage. ``q_stages`` 2: a ring, so the
    load task fetches the next unit's Q (and then its K / V) while this unit is still computing."""

    g: Any = None
    q_idx: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.q_idx = TaskLocalVariable(dtype=None, docs="the Q stage of the current unit (one Int32 register)")

    @consumer_work(returns=q_idx, work_attrs=WorkAttr.AUXILIARY)
    def init_index(self, stage_info: StageInfo):
        return cute.make_rmem_tensor(cute.make_layout(1), cutlass.Int32)

    def get_smem_requirements(self):
        return [self.g.alloc_q]

    @producer_work
    def tma_load(self, stage_info: StageInfo, unit_xy=None):
        g, v = self.g, stage_info.context.values
        g.hold_unit(stage_info)  # the load task's first work of a tile (unit_in_regs, packed batches only)
        if cutlass.const_expr(unit_xy is not None):  # unit_overlap, in the loop: the next unit's Q
            q_block, head, batch = unit_xy[3], unit_xy[4], unit_xy[5]
        else:
            q_block, head, batch, _ = g.ahead_of(stage_info)[0] if g.unit_overlap else g.unit_coords(g.unit_of(stage_info))
        if cutlass.const_expr(g.varlen):  # the unit's sequence's rows of the packed Q
            q_rows = g.seq_view(v.mQ, g.seq_bounds(g.unit_of(stage_info))[0], head)
            gQ = cute.flat_divide(q_rows, (WG_ROWS, g.head_dim))[(None, None, None, 0)]
        else:
            gQ = cute.flat_divide(v.mQ, (WG_ROWS, g.head_dim))[(None, None, None, 0, head, batch)]
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_q, 0, cute.make_layout(1), cute.group_modes(v.sQ, 0, 2),
                                                    cute.group_modes(gQ, 0, 2))
        for w in range(g.wgs):  # rows [64 w, 64 w + 64) of the block go to warp group w's tile
            stage_info.tma_copy(v.tma_q, t_g[(None, q_block * g.wgs + w)],
                                t_s[(None, g.wgs * stage_info.stage_idx + w)])

    @consumer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def gemm_operand(self, stage_info: StageInfo, q_idx=None):
        """Declares that the S GEMM issued next (``SmemK.mma_qk``, same wgmma commit group) reads
        this stage: a wgmma reads two SMEM operands but a work method belongs to one resource, so
        Q's side is stated here and the checker holds Q until the wgmma.wait_group that retires
        the S GEMM's group. With a Q ring (``q_idx``): records the stage for ``SmemK.mma_qk``, which does not
        trace without this declaration (``attention.declared``)."""
        if q_idx is not None:
            q_idx[0] = stage_info.stage_idx
        declared.note(self.g, stage_info, "Q")

    def consumer_footprint(self, task_name):
        """Each softmax warp group reads (and with ``tma_store_o`` writes, ``store_o``) only its own 64-row
        tile of the stage. Checked for disjoint writes by verify/checks_writes.py."""
        return {f"Q{task_name[-1]}": "rw" if self.g.o_through_q else "r"}

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def store_o(self, stage_info: StageInfo, acc_o, softmax_state, *, wg: cutlass.Constexpr = 0):
        """``tma_store_o``: O / sum through this warp group's tile of the Q stage (every S GEMM that read
        it has retired) and one TMA store; its SMEM reads finish before the work returns, so the
        stage may be released after it (``attention.epilogue.store_o_tma``)."""
        stage_info.touches(f"Q{wg}", "w")  # held to consumer_footprint (lower/footprints.py)
        epilogue.store_o_tma(self.g, stage_info, acc_o, softmax_state, wg=wg)


@dataclass(kw_only=True)
class SmemK(KAheadWorks, MemoryResource):
    """The K ring: TMA in, S = Q K^T (wgmma, both operands from SMEM) out."""

    g: Any = None
    retire = wgmma_wait  # wgmma.wait_group(pending): the stage's WGMMA reads are done
    acc_s: Any = TaskLocalVariable.uninitialized()
    acc_o: Any = TaskLocalVariable.uninitialized()
    softmax_state: Any = TaskLocalVariable.uninitialized()
    p: Any = TaskLocalVariable.uninitialized()
    unit_rows: Any = TaskLocalVariable.uninitialized()
    unit_xy: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.acc_s = TaskLocalVariable(dtype=None, docs="S = Q K^T, then P (fp32 registers)")
        self.acc_o = TaskLocalVariable(dtype=None, docs="O accumulator (fp32 registers)")
        self.softmax_state = TaskLocalVariable(dtype=None, docs="the online softmax's running max, sum and O "
                                               "rescale per row (softmax.OnlineSoftmax, registers)")
        self.p = TaskLocalVariable(dtype=None, docs="P in 16 bits: the A operand of O += P V (registers)")
        self.unit_rows = TaskLocalVariable(dtype=None, docs="unit_overlap: K/V tiles, first Q row here and next")
        self.unit_xy = TaskLocalVariable(dtype=None, docs="unit_overlap, load task: this / the next unit's coordinates")

    @consumer_work(returns=(acc_s, acc_o, softmax_state, p), work_attrs=WorkAttr.AUXILIARY)
    def init(self, stage_info: StageInfo):
        v = stage_info.context.values
        tidx, _, _ = cute.arch.thread_idx()
        acc_s = cute.make_rmem_tensor(v.qk_mma.get_slice(tidx % 128).partition_shape_C(self.g.qk_tile[:2]),
                                      cutlass.Float32)
        acc_o = cute.make_rmem_tensor(v.pv_mma.get_slice(tidx % 128).partition_shape_C(self.g.pv_tile[:2]),
                                      cutlass.Float32)
        state = OnlineSoftmax(v.pv_mma, acc_o, unit_overlap=self.g.unit_overlap)
        return acc_s, acc_o, state, amath.make_p(acc_s, v.pv_mma, self.g.dtype)

    def get_smem_requirements(self):
        return [self.g.alloc_k]

    @producer_work
    def tma_load(self, stage_info: StageInfo, unit_xy=None):
        g, v = self.g, stage_info.context.values
        if cutlass.const_expr(unit_xy is not None):  # unit_overlap, in the loop: K_{j+1}, or the next unit's K_0
            j = stage_info.loop_offset
            last = cutlass.min(1, cutlass.max(0, j + 2 - unit_xy[0]))
            batch = last * unit_xy[5] + (1 - last) * unit_xy[1]
            kv_head = last * unit_xy[6] + (1 - last) * unit_xy[2]
            tile = (1 - last) * (j + 1)
        else:
            coords, tile = (g.ahead_of(stage_info) if g.unit_overlap
                            else (g.unit_coords(g.unit_of(stage_info)), g.kv_tile_of(stage_info)))
            _, _, batch, kv_head = coords
        if cutlass.const_expr(g.varlen):  # the unit's sequence's keys of the packed K
            k_rows = g.seq_view(v.mK, g.seq_bounds(g.unit_of(stage_info))[2], kv_head)
            gK = cute.flat_divide(k_rows, (g.block_n, g.head_dim))[(None, None, None, 0)]
        elif cutlass.const_expr(g.paged):  # the page that holds the tile, in the cache's one batch
            gK = cute.flat_divide(v.mK, (g.block_n, g.head_dim))[(None, None, None, 0, kv_head, 0)]
            tile = g.physical_tile(g.unit_of(stage_info), tile)
        else:
            gK = cute.flat_divide(v.mK, (g.block_n, g.head_dim))[(None, None, None, 0, kv_head, batch)]
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_k, 0, cute.make_layout(1), cute.group_modes(v.sK, 0, 2),
                                                    cute.group_modes(gK, 0, 2))
        stage_info.tma_copy(v.tma_k, t_g[(None, tile)], t_s[(None, stage_info.stage_idx)])

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads the stage (and Q) until the retire
    @cute.jit
    def mma_qk(self, stage_info: StageInfo, acc_s, q_idx=None, *, wg: cutlass.Constexpr = 0):
        v, s = stage_info.context.values, stage_info.stage_idx
        declared.take(self.g, stage_info, "Q", "SmemK.mma_qk")
        stage_info.touches(f"Q{wg}", resource="SmemQ")  # its warp group's tile (SmemQ.consumer_footprint)
        tidx, _, _ = cute.arch.thread_idx()
        thr = v.qk_mma.get_slice(tidx % 128)
        frag_q = v.qk_mma.make_fragment_A(thr.partition_A(v.sQ))
        frag_k = v.qk_mma.make_fragment_B(thr.partition_B(v.sK))
        q_stage = wg
        if cutlass.const_expr(q_idx is not None):
            q_stage = self.g.wgs * q_idx[0] + wg
        if cutlass.const_expr(self.g.slice_stages):  # the stage first: one 64-bit descriptor add per k-block
            stage_q, stage_k = frag_q[(None, None, None, q_stage)], frag_k[(None, None, None, s)]
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(frag_q, mode=[2])):
            mma = v.qk_mma_zero if cutlass.const_expr(kb == 0) else v.qk_mma  # S is overwritten
            if cutlass.const_expr(self.g.slice_stages):
                a, b = stage_q[(None, None, kb)], stage_k[(None, None, kb)]
            else:
                a, b = frag_q[(None, None, kb, q_stage)], frag_k[(None, None, kb, s)]
            cute.gemm(mma, acc_s, a, b, acc_s)
        warpgroup.commit_group()


@cute.jit
def fenced_wgmma_wait(runtime_value: cutlass.Float32, pending: cutlass.Constexpr):
    """``wgmma.wait_group(pending)`` that ptxas cannot schedule earlier. A plain wait has no operands, so
    ptxas's scheduler hoists it to wherever it likes; before the P V GEMM's wait it hoisted it to the top
    of the softmax (to start converting P into the GEMM's A registers early), so the softmax never ran
    under the P V GEMM. A wait under a branch on a value only known at run time (always taken; the
    unconditional wait after it keeps a NaN from skipping it) fences it in place."""
    if runtime_value == runtime_value:
        cute.nvgpu.warpgroup.wait_group(pending)
    cute.nvgpu.warpgroup.wait_group(pending)


@dataclass(kw_only=True)
class SmemV(MemoryResource):
    """The V ring: TMA in, O += P V (wgmma, P from registers) out."""

    g: Any = None

    @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY)
    def retire(self, stage_info: StageInfo, *, pending: int = 0):
        """``wgmma.wait_group(pending)`` (as ``warpsched.wgmma_wait``); with ``pv_wait_fence`` where the
        schedule puts it (``fenced_wgmma_wait``): after the softmax that runs under the P V GEMM."""
        if cutlass.const_expr(self.g.pv_wait_fence):
            fenced_wgmma_wait(stage_info.context.values.scale_log2, pending)
        else:
            warpgroup.wait_group(pending)

    def get_smem_requirements(self):
        return [self.g.alloc_v]

    @producer_work
    def tma_load(self, stage_info: StageInfo, unit_xy=None, *, behind: cutlass.Constexpr = False,
                 last: cutlass.Constexpr = False):
        """V_j by TMA; ``k_ahead`` (``load_schedule``): ``behind``, the tile before the loop offset's, or after
        the loop ``last``, the unit's last tile."""
        g, v = self.g, stage_info.context.values
        if cutlass.const_expr(unit_xy is not None):  # unit_overlap: this unit's (batch, K/V head)
            batch, kv_head = unit_xy[1], unit_xy[2]
        else:
            _, _, batch, kv_head = g.unit_coords(g.unit_of(stage_info))
        if cutlass.const_expr(g.varlen):
            v_rows = g.seq_view(v.mV, g.seq_bounds(g.unit_of(stage_info))[2], kv_head, seq_mode=1)
            gV = cute.flat_divide(v_rows, (g.head_dim, g.block_n))[(None, None, 0, None)]
        elif cutlass.const_expr(g.paged):
            gV = cute.flat_divide(v.mV, (g.head_dim, g.block_n))[(None, None, 0, None, kv_head, 0)]
        else:
            gV = cute.flat_divide(v.mV, (g.head_dim, g.block_n))[(None, None, 0, None, kv_head, batch)]
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_v, 0, cute.make_layout(1), cute.group_modes(v.sV, 0, 2),
                                                    cute.group_modes(gV, 0, 2))
        if cutlass.const_expr(last):
            tile = g.last_kv_tile(g.unit_of(stage_info))
        elif cutlass.const_expr(unit_xy is not None):
            tile = stage_info.loop_offset
        else:
            tile = g.kv_tile_of(stage_info) - (1 if cutlass.const_expr(behind) else 0)
        if cutlass.const_expr(g.paged):
            tile = g.physical_tile(g.unit_of(stage_info), tile)
        stage_info.tma_copy(v.tma_v, t_g[(None, tile)], t_s[(None, stage_info.stage_idx)])

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    @cute.jit
    def mma_pv(self, stage_info: StageInfo, p, acc_o):
        """O += P V; P's registers and O are in use until the retire."""
        v, s = stage_info.context.values, stage_info.stage_idx
        tidx, _, _ = cute.arch.thread_idx()
        frag_v = v.pv_mma.make_fragment_B(v.pv_mma.get_slice(tidx % 128).partition_B(v.sV))
        stage_v = frag_v[(None, None, None, s)]
        warpgroup.fence()  # P was written by ordinary instructions
        if cutlass.const_expr(self.g.slice_stages):  # one 64-bit descriptor add per k-block
            for kb in cutlass.range_constexpr(cute.size(p, mode=[2])):
                cute.gemm(v.pv_mma, acc_o, p[(None, None, kb)], stage_v[(None, None, kb)], acc_o)
        else:
            cute.gemm(v.pv_mma, acc_o, p, stage_v, acc_o)
        warpgroup.commit_group()


@dataclass(kw_only=True)
class Scores(ScoresAheadWorks, MemoryResource):
    """A warp group's softmax state in registers (S / P, O, running max and sum; SmemK.init makes
    them, since values flow from consumer reads to producer writes)."""

    g: Any = None

    @producer_work
    @cute.jit
    def softmax(self, stage_info: StageInfo, acc_s, softmax_state, unit_rows=None, *, wg: cutlass.Constexpr = 0):
        """Mask S_j (tile j = the loop offset), P_j = exp2(...) in place, running max / sum, corr.
        ``unit_overlap``: S is one tile ahead, tile j + 1 or on the last tile the next unit's tile 0
        (``unit_rows`` from ``enter_unit``; before the tile loop: the CTA's first unit, tile 0)."""
        g, v = self.g, stage_info.context.values
        bN = g.block_n
        if cutlass.const_expr(unit_rows is not None):
            j = stage_info.loop_offset
            last = cutlass.min(1, cutlass.max(0, j + 2 - unit_rows[0]))  # 1: the unit's last tile
            row0 = last * unit_rows[2] + (1 - last) * unit_rows[1] + wg * WG_ROWS
            col0 = (1 - last) * (j + 1) * bN
        else:
            coords, tile = (g.ahead_of(stage_info) if g.unit_overlap
                            else (g.unit_coords(g.unit_of(stage_info)), g.kv_tile_of(stage_info)))
            row0 = (coords[0] * g.wgs + wg) * WG_ROWS
            col0 = tile * bN
        if cutlass.const_expr(g.softcap is not None):
            amasks.softcap_tile(acc_s, v.scale, g.softcap)
        seqlen_k = g.seq_bounds(g.unit_of(stage_info))[3] if cutlass.const_expr(g.varlen or g.paged) else g.seqlen_k
        amath.mask_tile(acc_s, v.qk_mma, row0, col0, seqlen_k, bN, g.causal, g.window_left, g.window_right)
        if cutlass.const_expr(g.mask_mod is not None):
            amasks.mask_mod_tile(acc_s, v.qk_mma, row0, col0, bN, g.mask_mod, coords[2], coords[1])
        softmax_state.step(acc_s, v.qk_mma, v.scale_log2, g.pinned_exp2, g.max_chains, g.poly_exp2,
                           poly_exp2.degree_for(g.dtype))

    @producer_work
    def reset(self, stage_info: StageInfo, acc_o, softmax_state):
        """A new work tile: O = 0, running max -inf, running sum 0 (``unit_in_regs``: the unit held, units.hold_unit)."""
        self.g.hold_unit(stage_info)
        acc_o.fill(0.0)
        softmax_state.reset()

    @producer_work
    def rescale(self, stage_info: StageInfo, acc_s, p, acc_o, softmax_state):
        """P_j into the 16-bit A-operand registers, O *= corr: only once the previous O += P V
        has retired (it reads P's registers and accumulates into O)."""
        v = stage_info.context.values
        amath.store_p(acc_s, p, self.g.dtype)
        softmax_state.rescale(acc_o, v.pv_mma)

    @producer_work
    def store_p(self, stage_info: StageInfo, acc_s, p):
        """``early_rescale``: P_j into the A-operand registers alone (once the previous O += P V has retired)."""
        amath.store_p(acc_s, p, self.g.dtype)

    @producer_work
    def rescale_o(self, stage_info: StageInfo, acc_o, softmax_state):
        """``early_rescale``: O *= corr of the last softmax step, before the P V GEMM that adds that step's P."""
        softmax_state.rescale(acc_o, stage_info.context.values.pv_mma)


@dataclass(kw_only=True)
class MathOrder(MemoryResource):
    """The two warp groups' turn on the tensor cores: a 1-stage AsyncAsync pipeline, no data."""
