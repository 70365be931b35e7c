"""The default schedules of warpsched's FlashAttention forward (``warpsched.kernels.attention.forward``): the
load task's and the softmax warp groups' (two, or three chained with ``wgs=3``), with or without the
intra-warpgroup overlap, the Q ring and the TMA-store epilogues; the persistent work-tile loop around them.
The ``unit_overlap`` schedules are in attention/ahead.py. docs/attention.md."""
from __future__ import annotations

import contextlib

from warpsched import domain_loop, schedule, work_tile_loop


def tile_loop(wq, units):
    """The persistent loop over this CTA's work tiles, or (one tile per CTA) no loop."""
    return work_tile_loop(wq, tile_count=units) if wq is not None else contextlib.nullcontext()


def next_tile(wq):
    if wq is not None:
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def unit_fetch_schedule(wq, units):
    """``dynamic_units``: the scheduler warp asks for the CTA's next unit as each one starts; with the queue's one
    stage that is once every task has moved on to the unit (each releases the response it advanced by), with n
    stages once every task has moved on to the unit n - 1 before it."""
    with tile_loop(wq, units):
        wq.acquire()
        wq.fetch_work_tile()
        wq.commit()
        next_tile(wq)


@schedule
def load_schedule(smem_q, smem_k, smem_v, kv_tiles, wq=None, units=None, k_ahead=False, fetch=False):
    """Per unit: Q, then K_j and V_j in turn. ``k_ahead`` (FlashAttention-3's order): K_0, then K_j before
    V_{j-1}, V of the last tile after the loop, so a K load no longer queues behind the previous V
    stage's release (the late one: V_{j-2} is released after the P V GEMM of step j - 1). ``fetch``
    (``load_fetches_units``): once the unit's loads are issued, ask the unit queue for the CTA's next unit."""
    with tile_loop(wq, units):
        smem_q.acquire()  # persistent: the previous tile's Q is released after its last S GEMM
        smem_q.tma_load()
        smem_q.commit()
        with domain_loop(0, kv_tiles, 1) as d:
            smem_k.acquire()
            smem_k.tma_load()
            smem_k.commit()
            if k_ahead:
                with d.every(1, start=1):
                    smem_v.acquire()
                    smem_v.tma_load(behind=True)  # V_{j-1}
                    smem_v.commit()
            else:
                smem_v.acquire()
                smem_v.tma_load()
                smem_v.commit()
        if k_ahead:
            smem_v.acquire()
            smem_v.tma_load(last=True)  # V of the unit's last tile
            smem_v.commit()
        if fetch:
            wq.acquire()
            wq.fetch_work_tile()
            wq.commit()
        next_tile(wq)


@schedule
def softmax_schedule(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True, wq=None,
                     units=None, q_ring=False, tma_store_o=False, drain_o=False, chain=False, order_out=None,
                     ring=None, early_rescale=False, try_waits=False):
    """Two warp groups: ``wg`` 0 produces the math order (it goes first), 1 consumes it. ``chain`` (three,
    0 -> 1 -> 2): ``order`` is the turn this warp group waits for (None: 0), ``order_out`` the one it hands
    on (None: the last); ``ring`` (``ring_order``): MathOrder02, produced by 0 and consumed by 2, so 0's next
    turn also waits for 2's: a strict round robin (the first turn is free: the pipeline starts empty).
    overlap=True (FlashAttention-3's intra-warpgroup overlap), per K/V tile j: issue S_j and then
    O += P_{j-1} V_{j-1} in one turn; wait for S_j only and run softmax_j while the PV GEMM runs; retire it,
    release V_{j-1}, rescale O. Q is released after the loop, then the last P V. overlap=False: S_j, wait,
    softmax_j, O += P_j V_j, wait. ``q_ring``: the S GEMM reads the Q stage this unit waited on.
    ``tma_store_o``: O leaves through Q's stage. ``drain_o`` (``o_buffer``): wait for the last O store's reads.
    ``early_rescale`` (with overlap): O *= the last softmax's correction in the turn, between the S GEMM's
    issue and the P V GEMM's, not after the P V GEMM's wait (which then only converts P). ``try_waits``: each
    K / V / MathOrder wait in the loop is led by its try_wait (the compiled wait probes once and branches around
    the blocking loop)."""

    if not chain:  # two warp groups, one MathOrder: 0 hands the turn to 1
        order, order_out = (None, order) if wg == 0 else (order, None)
    acc_s, acc_o, softmax_state, p = smem_k.init()
    q_idx = smem_q.init_index() if q_ring else None
    with tile_loop(wq, units):
        scores.reset(acc_o=acc_o, softmax_state=softmax_state)
        smem_q.wait()
        with domain_loop(0, kv_tiles, 1) as d:
            if order is not None:
                if try_waits:
                    order.try_wait()
                order.wait()  # the previous warp group has issued this turn's GEMMs
            if order_out is not None:
                if try_waits:
                    order_out.try_acquire()
                order_out.acquire()  # the next warp group has issued its previous GEMMs
            if ring is not None:
                ring.acquire() if wg == 0 else ring.wait()  # 0: warp group 2 had its previous turn
            if try_waits:
                smem_k.try_wait()
            smem_k.wait()
            if q_ring:
                smem_q.gemm_operand(q_idx=q_idx)  # Q is read by the S GEMM too, until its retire
                smem_k.mma_qk(acc_s=acc_s, q_idx=q_idx, wg=wg)
            else:
                smem_q.gemm_operand()
                smem_k.mma_qk(acc_s=acc_s, wg=wg)
            if overlap:
                with d.every(1, start=1):
                    if early_rescale:
                        scores.rescale_o(acc_o=acc_o, softmax_state=softmax_state)  # corr_{j-1}
                    if try_waits:
                        smem_v.try_wait()
                    smem_v.wait()
                    smem_v.mma_pv(p=p, acc_o=acc_o)  # P_{j-1} V_{j-1}
            if order is not None:
                order.release()
            if order_out is not None:
                order_out.commit()
            if ring is not None:
                ring.commit() if wg == 0 else ring.release()
            if overlap:
                with d.first_iter():
                    smem_k.retire()
                with d.every(1, start=1):
                    smem_k.retire(pending=1)  # S_j is done; the PV GEMM may still run
            else:
                smem_k.retire()
            smem_k.release()
            scores.softmax(acc_s=acc_s, softmax_state=softmax_state, wg=wg)
            if overlap:
                with d.every(1, start=1):
                    smem_v.retire()
                    smem_v.release()
                if early_rescale:
                    scores.store_p(acc_s=acc_s, p=p)
                else:
                    scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
            else:
                scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
                if try_waits:
                    smem_v.try_wait()
                smem_v.wait()
                smem_v.mma_pv(p=p, acc_o=acc_o)
                smem_v.retire()
                smem_v.release()
        if not tma_store_o:
            smem_q.release()  # every S GEMM of the tile has retired: the next tile's Q may load
        if overlap:
            if early_rescale:
                scores.rescale_o(acc_o=acc_o, softmax_state=softmax_state)
            if try_waits:
                smem_v.try_wait()
            smem_v.wait()
            smem_v.mma_pv(p=p, acc_o=acc_o)
            smem_v.retire()
            smem_v.release()
        if tma_store_o:
            smem_q.store_o(acc_o=acc_o, softmax_state=softmax_state, wg=wg)
            smem_q.release()
        else:
            gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)
        next_tile(wq)
    if drain_o:
        gmem_o.drain()
