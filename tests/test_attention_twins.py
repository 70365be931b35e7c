"""warpsched.kernels.attention.forward's program with planted bugs (twin schedules in place of the softmax
schedule, tests/_planting.py): each twin is rejected where it is wrong (a stage released before its
WGMMA retires, a turn never handed back, O stored after the release of the Q stage it goes through),
and the configurations they are twins of are checked SAFE. The kernel, its PTX and its host side are
tests/test_attention.py's."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)

from warpsched import ValidationError, domain_loop, schedule  # noqa: E402
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host  # noqa: E402
from _planting import planted  # noqa: E402

def _planted_build(*args, consumer_schedule, **kw):
    """att.build with a twin in place of the softmax schedule the configuration uses."""
    g = args[0] if args else kw["g"]
    name = "softmax_ahead_schedule" if g.unit_overlap else "softmax_schedule"
    with planted(att, **{name: consumer_schedule}):
        return att.build(*args, **kw)


def _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg):
    """The kernel's step after the S GEMM: retire it, release K, softmax, rescale O (twins share it)."""
    smem_k.retire()
    smem_k.release()
    scores.softmax(acc_s=acc_s, softmax_state=softmax_state, wg=wg)
    scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)


def _pv_gemm(smem_v, p, acc_o):
    """O += P V on the next V stage, retired and released (twins share it)."""
    smem_v.wait()
    smem_v.mma_pv(p=p, acc_o=acc_o)
    smem_v.retire()
    smem_v.release()


@schedule
def _v_released_before_retire(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True, wq=None,
                              units=None):
    """The overlapped schedule with V_{j-1} released right after its GEMM is issued."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    smem_q.wait()
    with domain_loop(0, kv_tiles, 1) as d:
        order.acquire() if wg == 0 else order.wait()
        smem_k.wait()
        smem_q.gemm_operand()
        smem_k.mma_qk(acc_s=acc_s, wg=wg)
        with d.every(1, start=1):
            smem_v.wait()
            smem_v.mma_pv(p=p, acc_o=acc_o)
            smem_v.release()  # planted: the wgmma still reads the stage
        order.commit() if wg == 0 else order.release()
        _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg)
    _pv_gemm(smem_v, p, acc_o)
    smem_q.release()
    gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)


@schedule
def _second_keeps_turn(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True, wq=None,
                       units=None):
    """Warp group 1 waits for its turn but never hands it back."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    smem_q.wait()
    with domain_loop(0, kv_tiles, 1):
        if wg == 0:
            order.acquire()
        else:
            order.wait()
        smem_k.wait()
        smem_q.gemm_operand()
        smem_k.mma_qk(acc_s=acc_s, wg=wg)
        if wg == 0:
            order.commit()
        _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg)
        _pv_gemm(smem_v, p, acc_o)
    smem_q.release()
    gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)


@schedule
def _q_released_with_last_gemm_in_flight(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True,
                                         wq=None, units=None):
    """Persistent, no overlap, with Q released on the last K/V tile right after the S GEMM is
    issued: the next unit's Q TMA may overwrite Q while that GEMM still reads it."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    with att._tiles(wq, units):
        scores.reset(acc_o=acc_o, softmax_state=softmax_state)
        smem_q.wait()
        with domain_loop(0, kv_tiles, 1) as d:
            order.acquire() if wg == 0 else order.wait()
            smem_k.wait()
            smem_q.gemm_operand()
            smem_k.mma_qk(acc_s=acc_s, wg=wg)
            with d.last_iter():
                smem_q.release()  # planted: before the retire below
            order.commit() if wg == 0 else order.release()
            _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg)
            _pv_gemm(smem_v, p, acc_o)
        gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)
        att._next_tile(wq)


def test_q_released_before_its_last_gemm_is_rejected():
    """Q is read by the S GEMM (declared with SmemQ.gemm_operand): releasing it before that
    GEMM's retire is a race with the next unit's Q load."""
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(persistent=True), consumer_schedule=_q_released_with_last_gemm_in_flight,
                  verbose=False,
                  progress=False, cache_verdict=False)
    assert "SmemQ" in str(e.value) and "race" in str(e.value)


@schedule
def _ring_q_released_with_last_gemm_in_flight(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg,
                                              overlap=True, wq=None, units=None, q_ring=True):
    """The Q ring's schedule (overlapped) with Q released on the last K/V tile before its S GEMM
    retires: two units later the load task refills that stage while the GEMM may still read it."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    q_idx = smem_q.init_index()
    with att._tiles(wq, units):
        scores.reset(acc_o=acc_o, softmax_state=softmax_state)
        smem_q.wait()
        with domain_loop(0, kv_tiles, 1) as d:
            order.acquire() if wg == 0 else order.wait()
            smem_k.wait()
            smem_q.gemm_operand(q_idx=q_idx)
            smem_k.mma_qk(acc_s=acc_s, q_idx=q_idx, wg=wg)
            with d.every(1, start=1):
                smem_v.wait()
                smem_v.mma_pv(p=p, acc_o=acc_o)
            with d.last_iter():
                smem_q.release()  # planted: before the retire below
            order.commit() if wg == 0 else order.release()
            with d.first_iter():
                smem_k.retire()
            with d.every(1, start=1):
                smem_k.retire(pending=1)
            smem_k.release()
            scores.softmax(acc_s=acc_s, softmax_state=softmax_state, wg=wg)
            with d.every(1, start=1):
                smem_v.retire()
                smem_v.release()
            scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
        _pv_gemm(smem_v, p, acc_o)
        gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)
        att._next_tile(wq)


def test_q_ring_is_checked_and_its_early_release_rejected():
    """q_stages=2 (the next unit's Q and K / V load during this unit): the ring's program is SAFE
    for every K/V count and unit count, and releasing a Q stage before its last S GEMM retires is
    still a race the checker finds (the refill two units later)."""
    mgr = att.build(att.FlashAttention(head_dim=64, q_stages=2), verbose=False, progress=False, cache_verdict=False)
    assert mgr.result.accepted and mgr.result.checker.verdict == "SAFE"
    assert "every units_per_cta >= 1" in mgr.result.checker.report()
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(head_dim=64, q_stages=2),
                  consumer_schedule=_ring_q_released_with_last_gemm_in_flight, verbose=False, progress=False,
                  cache_verdict=False)
    assert "SmemQ" in str(e.value) and "race" in str(e.value)


@schedule
def _o_stored_after_q_release(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True, wq=None,
                              units=None, q_ring=True, tma_store_o=True):
    """tma_store_o with Q released after the loop (as without the TMA store): O is then written
    into a Q stage the load task may already refill."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    q_idx = smem_q.init_index()
    with att._tiles(wq, units):
        scores.reset(acc_o=acc_o, softmax_state=softmax_state)
        smem_q.wait()
        with domain_loop(0, kv_tiles, 1):
            order.acquire() if wg == 0 else order.wait()
            smem_k.wait()
            smem_q.gemm_operand(q_idx=q_idx)
            smem_k.mma_qk(acc_s=acc_s, q_idx=q_idx, wg=wg)
            order.commit() if wg == 0 else order.release()
            _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg)
            _pv_gemm(smem_v, p, acc_o)
        smem_q.release()
        smem_q.store_o(acc_o=acc_o, softmax_state=softmax_state, wg=wg)  # planted: after the release
        att._next_tile(wq)


def test_tma_store_epilogue_is_checked_and_a_store_after_release_rejected():
    """tma_store_o writes O into the unit's Q stage and TMA-stores it (SmemQ.store_o, a consumer
    work of Q): SAFE when Q is released after it; a twin that releases Q first is rejected."""
    mgr = att.build(att.FlashAttention(head_dim=128, q_stages=2, tma_store_o=True), verbose=False, progress=False,
                    cache_verdict=False)
    assert mgr.result.accepted and mgr.result.checker.verdict == "SAFE"
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(head_dim=128, q_stages=2, tma_store_o=True),
                  consumer_schedule=_o_stored_after_q_release, verbose=False, progress=False, cache_verdict=False)
    assert "SmemQ" in str(e.value) and "store_o" in str(e.value)


def test_v_stage_released_before_its_wgmma_retires_is_rejected():
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(persistent=False), consumer_schedule=_v_released_before_retire, verbose=False,
                  progress=False, cache_verdict=False)
    assert "SmemV" in str(e.value) and "race" in str(e.value)


def test_math_order_is_part_of_the_checked_program():
    """The turn-taking of the two warp groups is a pipeline the checks see: never handing the
    turn back is rejected at MathOrder."""
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(persistent=False), consumer_schedule=_second_keeps_turn, verbose=False,
                  progress=False, cache_verdict=False)
    assert "MathOrder" in str(e.value)


@pytest.mark.slow
def test_three_warp_groups_chain_the_math_order():
    """wgs=3: four tasks, the turn handed 0 -> 1 -> 2 through two MathOrder pipelines, SAFE for every
    K/V count and unit count; a third warp group that never hands its turn back is not possible
    (it is last), but a middle one that keeps it is rejected."""
    mgr = att.build(att.FlashAttention(head_dim=64, wgs=3, q_stages=2, tma_store_o=True, o_buffer=True),
                    verbose=False, progress=False, cache_verdict=False)
    assert mgr.result.accepted and mgr.result.checker.verdict == "SAFE"
    assert {t.name for t in mgr.tasks} == {"LoadTask", "Softmax0", "Softmax1", "Softmax2"}
    pipelined = {r.name for t in mgr.tasks for r in t.src_resources + t.dst_resources
                 if getattr(r, "pipeline_config", None) is not None}
    assert pipelined == {"SmemQ", "SmemK", "SmemV", "MathOrder01", "MathOrder12"}
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(head_dim=64, wgs=3, persistent=False), consumer_schedule=_middle_keeps_turn,
                  verbose=False, progress=False, cache_verdict=False)
    assert "MathOrder01" in str(e.value)


@pytest.mark.slow
def test_ring_order_is_a_strict_round_robin():
    """ring_order (wgs=3): MathOrder02 from warp group 0 to 2 closes the chain, SAFE for every K/V and
    unit count (causal pairs, O buffer); a last warp group that never hands the turn back to 0 is
    rejected at MathOrder02, and ring_order with two warp groups is a config error."""
    mgr = att.build(att.FlashAttention(head_dim=64, wgs=3, q_stages=2, tma_store_o=True, o_buffer=True, causal=True,
                                       causal_pairs=True, ring_order=True),
                    verbose=False, progress=False, cache_verdict=False)
    assert mgr.result.accepted and mgr.result.checker.verdict == "SAFE"
    roles = {t.name: ([r.name for r in t.src_resources], [r.name for r in t.dst_resources]) for t in mgr.tasks}
    assert "MathOrder02" in roles["Softmax0"][1] and "MathOrder02" in roles["Softmax2"][0]
    assert not any("MathOrder02" in n for n in roles["Softmax1"][0] + roles["Softmax1"][1])
    with pytest.raises(ValidationError) as e:
        _planted_build(att.FlashAttention(head_dim=64, wgs=3, persistent=False, ring_order=True),
                  consumer_schedule=_last_keeps_ring_turn, verbose=False, progress=False, cache_verdict=False)
    assert "MathOrder02" in str(e.value)
    with pytest.raises(host.AttentionConfigError, match="ring_order=True with wgs=2"):
        att.FlashAttention(head_dim=64, ring_order=True)


@schedule
def _last_keeps_ring_turn(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True, wq=None,
                          units=None, chain=False, order_out=None, ring=None):
    """Planted bug: warp group 2 waits for its ring turn but never hands it back to warp group 0."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    scores.reset(acc_o=acc_o, softmax_state=softmax_state)
    smem_q.wait()
    with domain_loop(0, kv_tiles, 1):
        if order is not None:
            order.wait()
        if order_out is not None:
            order_out.acquire()
        if ring is not None:
            ring.acquire() if wg == 0 else ring.wait()
        smem_k.wait()
        smem_q.gemm_operand()
        smem_k.mma_qk(acc_s=acc_s, wg=wg)
        if order is not None:
            order.release()
        if order_out is not None:
            order_out.commit()
        if ring is not None and wg == 0:
            ring.commit()
        _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg)
        _pv_gemm(smem_v, p, acc_o)
    smem_q.release()
    gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)


@schedule
def _middle_keeps_turn(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, overlap=True, wq=None,
                       units=None, chain=False, order_out=None):
    """Planted bug: warp group 1 takes the turn from 0 but never releases it."""
    acc_s, acc_o, softmax_state, p = smem_k.init()
    scores.reset(acc_o=acc_o, softmax_state=softmax_state)
    smem_q.wait()
    with domain_loop(0, kv_tiles, 1):
        if order is not None:
            order.wait()
        if order_out is not None:
            order_out.acquire()
        smem_k.wait()
        smem_q.gemm_operand()
        smem_k.mma_qk(acc_s=acc_s, wg=wg)
        if order is not None and wg != 1:
            order.release()
        if order_out is not None:
            order_out.commit()
        _retire_k_then_softmax(smem_k, scores, acc_s, p, acc_o, softmax_state, wg)
        _pv_gemm(smem_v, p, acc_o)
    smem_q.release()
    gmem_o.store(acc_o=acc_o, softmax_state=softmax_state)
