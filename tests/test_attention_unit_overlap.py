"""``unit_overlap`` (attention/ahead.py: the S GEMM one K/V tile ahead across work units) on the
CPU, split from test_attention.py: its program SAFE for every unit and K/V count, and the twins
with a planted mistake (O stored before the last P V GEMM retires; the look-ahead's Q stage never
released) rejected; the option's precondition."""
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
from _planting import planted  # noqa: E402


@schedule
def _ahead_twin(smem_q, smem_k, smem_v, scores, order, gmem_o, kv_tiles, wg, wq, units, store_early=False,
                keep_lookahead=False):
    """softmax_ahead_schedule with one planted mistake: ``store_early`` stores the unit's O before the last
    P V GEMM has retired (it still accumulates into O); ``keep_lookahead`` never releases the Q stage of
    the look-ahead past the CTA's last unit."""
    from warpsched.kernels.attention.ahead import _turn, next_tile, tile_loop

    order, order_out = (None, order) if wg == 0 else (order, None)
    acc_s, acc_o, softmax_state, p = smem_k.init()
    q_idx = smem_q.init_index()
    unit_rows = smem_k.init_ahead()
    scores.reset(acc_o=acc_o, softmax_state=softmax_state)
    smem_q.wait()
    _turn(order, order_out, smem_q, smem_k, q_idx, acc_s, wg)
    smem_k.retire()
    smem_k.release()
    scores.softmax(acc_s=acc_s, softmax_state=softmax_state, wg=wg)
    scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
    with tile_loop(wq, units):
        scores.enter_unit(unit_rows=unit_rows)
        with domain_loop(0, kv_tiles, 1) as d:
            with d.last_iter():
                smem_q.release()
                smem_q.wait()
            _turn(order, order_out, smem_q, smem_k, q_idx, acc_s, wg, pv=(smem_v, p, acc_o))
            with d.last_iter():
                scores.finish(softmax_state=softmax_state)
            smem_k.retire(pending=1)
            smem_k.release()
            scores.softmax(acc_s=acc_s, softmax_state=softmax_state, unit_rows=unit_rows, wg=wg)
            if store_early:
                with d.last_iter():
                    gmem_o.store_normalized(acc_o=acc_o, softmax_state=softmax_state)  # planted: P V still in flight
            smem_v.retire()
            smem_v.release()
            if not store_early:
                with d.last_iter():
                    gmem_o.store_normalized(acc_o=acc_o, softmax_state=softmax_state)
            scores.rescale(acc_s=acc_s, p=p, acc_o=acc_o, softmax_state=softmax_state)
        next_tile(wq)
    if not keep_lookahead:
        smem_q.release()
    gmem_o.drain()


def _ahead_program(consumer_schedule=None):
    twin = {} if consumer_schedule is None else {"softmax_ahead_schedule": consumer_schedule}
    with planted(att, **twin):
        return att.build(att.FlashAttention(head_dim=64, causal=True, unit_overlap=True, **att.TUNED),
                         verbose=False, progress=False, cache_verdict=False)


def test_unit_overlap_is_safe_for_every_unit_and_kv_count():
    """unit_overlap (S one K/V tile ahead across units): SAFE for every K/V count >= 1 per unit and every unit
    count; the twin written out in this file without a planted mistake is SAFE too."""
    mgr = _ahead_program()
    res = mgr.result.checker
    assert mgr.result.accepted and res.verdict == "SAFE"
    assert "domain end kv_tiles_of [LoadTask, Softmax0, Softmax1]: every count >= 1" in res.report()
    assert "every units_per_cta >= 1" in res.report()
    assert _ahead_program(_ahead_twin).result.checker.verdict == "SAFE"


def test_unit_overlap_store_before_the_last_pv_retires_is_rejected():
    """Storing O on the unit's last tile before the P V GEMM issued with the next unit's S retires: O is
    read while the GEMM accumulates into it."""
    with pytest.raises(ValidationError) as e:
        _ahead_program(lambda *a: _ahead_twin(*a, store_early=True))
    assert "acc_o" in str(e.value) and "store_normalized" in str(e.value)


def test_unit_overlap_lookahead_q_must_be_released():
    """The look-ahead past the CTA's last unit waits a Q stage; not releasing it leaves the load task's
    producer tail waiting for it."""
    with pytest.raises(ValidationError) as e:
        _ahead_program(lambda *a: _ahead_twin(*a, keep_lookahead=True))
    assert "SmemQ" in str(e.value)


def test_unit_overlap_needs_the_o_buffer():
    with pytest.raises(att.AttentionConfigError, match="unit_overlap=True .* needs o_buffer=True"):
        att.FlashAttention(head_dim=64, q_stages=2, tma_store_o=True, unit_overlap=True)
