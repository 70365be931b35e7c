"""The backward's ``late_v`` (FlashAttention-4's start of a unit): V in a stage of its own, loaded after the first
Q / dO stage, waited for inside the first step between the S and dP GEMMs, and after the loop (``if_empty()``)
when a unit has no step. The program is SAFE for every step count >= 0 at head dims 64 and 128, causal or not
(with ``dq_defer`` too); twins that skip V's wait or its load at zero steps, or issue the dP GEMM before V's wait,
are rejected; options it cannot serve are refused by name; the kernel compiles with the checked program.
On the GPU: bench/attention_bwd_check.py (variants ``lv`` / ``lvf``)."""
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
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402
from _planting import QUIET, planted, rejected  # noqa: E402


def _kernel(head_dim=64, causal=True, **more):
    return ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, late_v=True,
                                     **dict(bh.default_options(head_dim, full=not causal), **more))


@pytest.mark.parametrize("head_dim,causal", [(64, True), (64, False), (128, True), (128, False)])
def test_the_program_is_safe_for_every_step_count(head_dim, causal):
    g = _kernel(head_dim, causal)
    assert g.kv_bytes == g.v_bytes == 128 * head_dim * 2  # K alone in SmemKV, V in SmemV
    program = ab.build(g, **QUIET)  # raises ValidationError unless every check and the exhaustive checker pass
    assert program.result.checker.verdict == "SAFE"
    assert "SmemV" in {r.name for t in program.program.tasks for r in t.src_resources}
    plain = ab.build(ab.FlashAttentionBackward(head_dim=head_dim, causal=causal,
                                               **bh.default_options(head_dim, full=not causal)), **QUIET)
    assert program.fingerprint != plain.fingerprint


def test_without_v_waited_after_an_empty_loop_it_is_rejected():
    """A unit with no step releases V without waiting for its load: the exhaustive checker finds the hang."""
    with planted(bs, wait_v_if_no_step=lambda d, smem_v: None):
        rejected(ab, _kernel(), __file__, "SmemV")


def test_without_v_loaded_after_an_empty_loop_it_is_rejected():
    @schedule
    def load_twin(smem_kv, smem_qdo, steps, smem_v=None):
        smem_kv.acquire()
        smem_kv.tma_load()
        smem_kv.commit()
        with domain_loop(0, steps, 1) as d:
            smem_qdo.acquire()
            smem_qdo.tma_load()
            smem_qdo.commit()
            with d.first_iter():
                bs.load_v(smem_v)  # planted: no load after a loop with no step
    rejected(ab, _kernel(), __file__, "SmemV", load_schedule=load_twin)


def test_the_dp_gemm_before_v_is_waited_for_is_rejected():
    def early(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, order, overlap_scores, tma_stats, split_stats,
              early_stats, v_first=None):
        """``step_scores`` as the head dim 128 default runs it (``early_stats``, no ``split_stats``), with dP's
        GEMM issued before V's wait."""
        acc_s, acc_dp, _, _, _, p, ds = regs
        d, smem_v = v_first
        bs.read_stage_stats(smem_qdo, lse2, delta, split_stats, wg)
        smem_qdo.gemm_operand(idx=idx)
        smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
        smem_qdo.gemm_operand_again()
        smem_v.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)  # planted: V read before its wait
        with d.first_iter():
            smem_v.wait()
        smem_kv.retire(pending=1)
        grads.probs(acc_s=acc_s, lse2=lse2)
        smem_kv.retire()
        grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)

    g = _kernel(128, True)
    assert g.early_stats and not g.split_stats  # the step the twin writes out
    with planted(bs, step_scores=early):
        rejected(ab, g, __file__, "SmemV", "planted: V read before its wait")


@pytest.mark.parametrize("head_dim,options,named", [
    (256, bh.default_options(256), "head_dim=256"),
    (64, {}, "overlap_scores=False"),  # S and dP in one commit group: no place for V's wait between them
    (64, dict(bh.default_options(64), dkv_in_ds=True), "dkv_in_ds=True")])
def test_options_it_cannot_serve_are_refused_by_name(head_dim, options, named):
    with pytest.raises(AttentionConfigError) as e:
        ab.FlashAttentionBackward(head_dim=head_dim, causal=True, late_v=True, **options)
    assert named in str(e.value) and "late_v" in str(e.value)


@pytest.mark.parametrize("head_dim,causal", [(64, True), (128, False)])
def test_the_kernel_compiles_with_the_checked_program(head_dim, causal):
    compiled = bh.compile_for_cpu(head_dim=head_dim, causal=causal, late_v=True,
                                  **bh.default_options(head_dim, full=not causal))
    ptx = compiled.artifacts.PTX
    assert ptx.count("cp.async.bulk.tensor") > 0
