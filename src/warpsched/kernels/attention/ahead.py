"""The ``unit_overlap`` schedules of warpsched's FlashAttention forward (``warpsched.kernels.attention.forward``):
the S GEMM runs one K/V tile ahead of the P V GEMM across work-unit boundaries.

The default consumer issues S_j with P_{j-1} V_{j-1} inside a unit, but each unit starts with an S GEMM
it must wait for with nothing of its own to overlap, and ends with a P V GEMM it waits for before the
store. Here the loop over a unit's K/V tiles j issues S_{j+1} (on the unit's last tile: S_0 of the CTA's
next unit, on the next Q stage) together with P_j V_j, so the next unit's first S tile and its softmax run
while the last P V GEMM finishes, and the unit's O is stored after that:

    LoadTask   before the tiles: Q and K_0 of the CTA's first unit
               per unit: this and the next unit's coordinates (registers)
                         j < kv_tiles:  last j: Q of the next unit;  K_{j+1} (last j: the next unit's K_0);  V_j
    Softmax    before the tiles: q.wait; S_0 (turn); softmax_0; P_0
               per unit: K/V tile count, first Q rows of this and the next unit (registers)
                         j < kv_tiles:  last j: q.release; q.wait (the next unit's Q)
                                        turn: S_{j+1} = Q K^T; O += P_j V_j
                                        last j: 1 / sum and LSE of this unit, max / sum reset
                                        k.retire(1); k.release; softmax_{j+1}; v.retire(0); v.release
                                        last j: O / sum -> SMEM -> TMA store, O = 0
                                        P_{j+1} -> 16-bit registers; O *= exp2(max change)
               after the tiles: q.release (the look-ahead past the CTA's last unit: a clamped valid unit
               whose Q and K_0 are loaded and whose S tile is discarded); the last O store's reads

No branch on "first unit" or "last unit" is needed: the first unit's S_0 is before the tile loop and
the look-ahead past the last one is a real, discarded tile (one Q and one K load per CTA), so the
checker proves the program for every K/V count >= 1 per unit and every unit count, as the default.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from warpsched import StageInfo, WorkAttr, consumer_work, domain_loop, producer_work, schedule

from .schedules import next_tile, tile_loop


class KAheadWorks:
    """``unit_overlap`` works of ``SmemK`` (a mixin; the task-local variables are SmemK's fields)."""

    @consumer_work(returns="unit_rows", work_attrs=WorkAttr.AUXILIARY)
    def init_ahead(self, stage_info: StageInfo):
        """Consumers: registers for the unit's K/V tile count and the first Q rows of this and the next
        unit (``Scores.enter_unit``)."""
        return cute.make_rmem_tensor(cute.make_layout(3), cutlass.Int32)

    @producer_work(returns="unit_xy", work_attrs=WorkAttr.AUXILIARY)
    def init_unit_xy(self, stage_info: StageInfo):
        """Load task: registers for ``enter_unit``'s per-unit coordinates."""
        return cute.make_rmem_tensor(cute.make_layout(7), cutlass.Int32)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def enter_unit(self, stage_info: StageInfo, unit_xy):
        """Load task, once per unit: its K/V tile count and (batch, K/V head), and the next unit's (Q block,
        head, batch, K/V head) (``ahead_of``), so the K/V loop does no integer division (computing
        ``ahead_of`` per K load put 7 divisions and 446 instructions in that loop; now 85, none)."""
        g = self.g
        t = g.unit_of(stage_info)
        _, _, batch, kv_head = g.unit_coords(t)
        nq, nh, nb, nkv = g.unit_coords(cutlass.min(t + g.ctas, g.num_units - 1))
        for i, x in enumerate((g.kv_tiles_of(t), batch, kv_head, nq, nh, nb, nkv)):
            unit_xy[i] = x


class ScoresAheadWorks:
    """``unit_overlap`` works of ``Scores`` (a mixin)."""

    @producer_work
    def enter_unit(self, stage_info: StageInfo, unit_rows):
        """Once per unit: its K/V tile count and the first Q row of it and of the next unit (``ahead_of``),
        in registers, so the K/V loop does no integer division (selecting the unit index per tile and
        taking its coordinates kept ~5 divisions in every iteration: 0.80x the default)."""
        g = self.g
        t = g.unit_of(stage_info)
        unit_rows[0] = g.kv_tiles_of(t)
        unit_rows[1] = g.unit_coords(t)[0] * g.block_m
        unit_rows[2] = g.unit_coords(cutlass.min(t + g.ctas, g.num_units - 1))[0] * g.block_m

    @producer_work
    def finish(self, stage_info: StageInfo, softmax_state):
        """The unit's 1 / sum and LSE, then max / sum reset for the next unit."""
        v = stage_info.context.values
        softmax_state.finish_unit(v.pv_mma, v.scale)


@schedule
def load_ahead_schedule(smem_q, smem_k, smem_v, kv_tiles, wq, units):
    smem_q.acquire()  # the CTA's first unit: Q and K_0 (SmemQ / SmemK.tma_load read g.ahead_of)
    smem_q.tma_load()
    smem_q.commit()
    smem_k.acquire()
    smem_k.tma_load()
    smem_k.commit()
    unit_xy = smem_k.init_unit_xy()
    with tile_loop(wq, units):
        smem_k.enter_unit(unit_xy=unit_xy)  # this and the next unit's coordinates: no division in the loop
        with domain_loop(0, kv_tiles, 1) as d:
            with d.last_iter():
                smem_q.acquire()  # the next unit's Q
                smem_q.tma_load(unit_xy=unit_xy)
                smem_q.commit()
            smem_k.acquire()  # K_{j+1}, or the next unit's K_0
            smem_k.tma_load(unit_xy=unit_xy)
            smem_k.commit()
            smem_v.acquire()  # V_j
            smem_v.tma_load(unit_xy=unit_xy)
            smem_v.commit()
        next_tile(wq)


def _turn(order, order_out, smem_q, smem_k, q_idx, acc_s, wg, pv=None):
    """One turn on the tensor cores: S = Q K^T (and O += P V) issued between the MathOrder sync."""
    if order is not None:
        order.wait()  # the previous warp group has issued this turn's GEMMs
    if order_out is not None:
        order_out.acquire()  # the next warp group has issued its previous GEMMs
    smem_k.wait()
    smem_q.gemm_operand(q_idx=q_idx)  # Q is read by the S GEMM too, until its retire
    smem_k.mma_qk(acc_s=acc_s, q_idx=q_idx, wg=wg)
    if pv is not None:
        smem_v, p, acc_o = pv
        smem_v.wait()
        smem_v.mma_pv(p=p, acc_o=acc_o)
    if order is not None:
        order.release()
    if order_out is not None:
        order_out.commit()


@schedule
def softmax_ahead_schedule(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, wq, units):
    """Two warp groups: ``wg`` 0 produces the math order (it goes first), 1 consumes it."""
    order, order_out = (None, order) if wg == 0 else (order, None)
    acc_s, acc_o, softmax_state, p = smem_k.init()
    q_idx = smem_q.init_index()
    unit_rows = smem_k.init_ahead()
    scores.reset(acc_o=acc_o, softmax_state=softmax_state)
    smem_q.wait()  # the CTA's first unit: S_0 and its softmax before the tile loop
    _turn(order, order_out, smem_q, smem_k, q_idx, acc_s, wg)
    smem_k.retire()
    smem_k.release()
    scores.softmax(acc_s=acc_s, softmax_state=softmax_state, wg=wg)
    scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
    with tile_loop(wq, units):
        scores.enter_unit(unit_rows=unit_rows)  # tile count, first Q rows: no division in the K/V loop
        with domain_loop(0, kv_tiles, 1) as d:
            with d.last_iter():
                smem_q.release()  # every S GEMM of this unit has retired
                smem_q.wait()  # the next unit's Q
            _turn(order, order_out, smem_q, smem_k, q_idx, acc_s, wg, pv=(smem_v, p, acc_o))  # S_{j+1}, P_j V_j
            with d.last_iter():  # while the GEMMs run: this unit's 1 / sum and LSE; max / sum reset
                scores.finish(softmax_state=softmax_state)
            smem_k.retire(pending=1)  # S_{j+1} is done; the P V GEMM may still run
            smem_k.release()
            scores.softmax(acc_s=acc_s, softmax_state=softmax_state, unit_rows=unit_rows, wg=wg)
            smem_v.retire()
            smem_v.release()
            with d.last_iter():
                gmem_o.store_normalized(acc_o=acc_o, softmax_state=softmax_state)  # this unit's O, then O = 0
            scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
        next_tile(wq)
    smem_q.release()  # the look-ahead past the CTA's last unit
    gmem_o.drain()
