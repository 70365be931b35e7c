"""The attention kernels' GEMMs read only the shared-memory stages the checker saw them read
(``warpsched.kernels.attention.declared``). A GEMM's second operand (the forward's Q of the S GEMM; the
backward's Q / dO stage of the S and dP GEMMs and the dS tiles of the dQ GEMM) is declared by a ``WGMMA_OPERAND`` work,
and the checker trusts declarations: a program that leaves one out is accepted without that read. So each
declaration records its stage while the kernel is traced and the GEMM takes it back, and a GEMM without one
stops the trace (``LoweringError``). Planted here: a dQ GEMM with neither dS tile declared (with ``dq_defer``
and in the default program), a dP GEMM without the declaration of its read of dO, and the forward's S GEMM
without its Q declaration."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched import domain_loop, schedule  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bh  # noqa: E402
from warpsched.kernels.attention import backward_schedules as bs  # noqa: E402
from warpsched.kernels.attention import forward as fw  # noqa: E402
from warpsched.kernels.attention import host as fh  # noqa: E402
from warpsched.kernels.attention import schedules as fs  # noqa: E402
from _planting import QUIET, Standin, planted  # noqa: E402


def _options(**more):
    return dict(bh.default_options(64), dq_defer=True, **more)


@schedule
def _dq_gemm_without_declarations(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, tma_stats=False,
                                  tma_store_dkv=False, split_stats=False, early_stats=False, dkv_in_ds=False, **_):
    regs, lse2, delta, idx = bs.start_unit(smem_kv, smem_qdo, grads, True)
    _, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = regs
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        bs.step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, None, True, tma_stats, split_stats,
                       early_stats)
        ds_mine.acquire()
        ds_mine.store(ds=ds, acc_dp=acc_dp)
        ds_mine.commit()
        smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
        ds_other.wait()
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)  # planted: no gemm_operand() / own_gemm_operand() before it
        smem_qdo.retire()
        ds_other.release()
        smem_qdo.release()
        bs.stage_dq(smem_dq, acc_dq)
    bs.store_grads_at_end(smem_kv, grads, acc_dk, acc_dv, wg, ds_mine, ds_other, tma_store_dkv, dkv_in_ds)


@pytest.mark.parametrize("defer", [True, False])
def test_a_dq_gemm_with_no_declared_stage_does_not_trace(defer):
    """The dQ GEMM reads the dS stages its declarations named; without them the checker sees no read of the tiles
    (declarations are trusted, so it accepts the program), and the trace stops there instead of reading tiles
    whose reads nobody checked: with dq_defer and with the default program."""
    from warpsched.lower import LoweringError

    name = "grad_schedule_deferred" if defer else "grad_schedule"
    options = _options() if defer else bh.default_options(64)
    with planted(ab, **{name: _dq_gemm_without_declarations}):
        ab.build(ab.FlashAttentionBackward(head_dim=64, causal=True, **options), **QUIET)  # accepted: SAFE
        with pytest.raises(LoweringError, match="no gemm_operand"):
            bh.compile_for_cpu(head_dim=64, causal=True, **options)


def _scores_without_dp_declaration(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, order, overlap_scores,
                                   tma_stats, split_stats, early_stats, after_s=None):
    """``step_scores`` with dP's GEMM issued without declaring that it reads the Q / dO stage too."""
    acc_s, acc_dp, _, _, _, p, ds = regs
    if early_stats:
        bs.read_stage_stats(smem_qdo, lse2, delta, split_stats, wg)
    smem_qdo.gemm_operand(idx=idx)
    smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
    smem_kv.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)  # planted: no declaration of its read of dO
    if not early_stats:
        bs.read_stage_stats(smem_qdo, lse2, delta, split_stats, wg)
    smem_kv.retire(pending=1)
    grads.probs(acc_s=acc_s, lse2=lse2)
    if split_stats:
        smem_qdo.load_delta(delta=delta, wg=wg)
    smem_kv.retire()
    grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)


def test_a_dp_gemm_with_no_declaration_of_its_stage_does_not_trace():
    """dP's GEMM (its own commit group under overlap_scores) reads dO from the Q / dO stage: a declaration names
    that read for the checker (``gemm_operand_again``). Without it the checker accepts the program, not having
    seen the read, and the trace stops at the GEMM."""
    from warpsched.lower import LoweringError

    options = bh.default_options(64)
    with planted(bs, step_scores=_scores_without_dp_declaration):
        ab.build(ab.FlashAttentionBackward(head_dim=64, causal=True, **options), **QUIET)  # accepted: SAFE
        with pytest.raises(LoweringError, match="mma_dp in Grad0 reads the Q / dO stage"):
            bh.compile_for_cpu(head_dim=64, causal=True, **options)


@schedule
def _softmax_without_q_declaration(smem_q, *args, **kwargs):
    fs.softmax_schedule.fn(Standin(smem_q, gemm_operand=lambda **_: None), *args, **kwargs)  # no Q declaration


def test_a_forward_s_gemm_with_no_q_declaration_does_not_trace():
    """The forward's S GEMM (``SmemK.mma_qk``) reads Q through a declaration of SmemQ; without it the trace
    stops at the GEMM."""
    from warpsched.lower import LoweringError

    with planted(fw, softmax_schedule=_softmax_without_q_declaration):
        with pytest.raises(LoweringError, match="SmemK.mma_qk in Softmax0 reads Q"):
            fh.compile_for_cpu(head_dim=128, causal=True)

