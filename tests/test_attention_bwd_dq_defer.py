"""The backward's ``dq_defer`` program (dQ shared between the warp groups: head dims 64 and 128): each step's dQ GEMM is issued at the next
step, from dS tiles of two stages per warp group, so neither warp group waits for the other's dS of the step it is
on (the last step's dQ at the step's end; at the first step the GEMM reads an empty hand-over and is dropped, so
that the issue is unconditional). The program is SAFE with and without ``dkv_in_ds`` and ``early_stats``, twins
that read the other's tile before waiting for it, hand it back before the GEMM retires, or never issue the last
dQ are rejected, options it cannot serve are refused by name, and the kernel compiles with the checked program.
On the H200: bench/attention_bwd_check.py (variant ``defer``)."""
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



def _options(**more):
    return dict(bh.default_options(64), dq_defer=True, **more)



def _options128(**more):
    return dict(bh.default_options(128), dq_defer=True, **more)  # with the default's overlap_dq: dK issued last


@pytest.mark.parametrize("head_dim,causal,more", [(64, True, {}), (64, False, {}), (64, True, {"dkv_in_ds": True}),
                                                  (64, True, {"early_stats": True}), (64, True, {"overlap_dq": True}),
                                                  (128, True, {}), (128, False, {}), (128, True, {"overlap_dq": False})])
def test_the_program_is_safe_and_is_not_the_default_one(head_dim, causal, more):
    options = _options(**more) if head_dim == 64 else _options128(**more)
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **options)
    rows = 128 if head_dim == 64 else 64  # the dS tile: 64 keys x the Q block's rows, two stages of it
    assert g.ds_stages == 2 and g.alloc_ds[0].size_bytes == 2 * 64 * rows * 2
    program = ab.build(g, **QUIET)  # raises ValidationError unless every check and the exhaustive checker pass
    plain = ab.build(ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **dict(
        bh.default_options(head_dim), **more)), **QUIET)
    assert program.fingerprint != plain.fingerprint


def _twin(read_before_wait=False, release_before_retire=False, last_dq=True, staged_under_dk=False):
    @schedule
    def twin(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, tma_stats=False, tma_store_dkv=False,
             split_stats=False, early_stats=False, dkv_in_ds=False, **_):
        regs, lse2, delta, idx = bs.start_unit(smem_kv, smem_qdo, grads, True)
        _, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = regs
        with domain_loop(0, steps, 1) as d:
            with d.first_iter():
                ds_mine.acquire()
                ds_mine.commit()
            smem_qdo.wait()
            bs.step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, None, True, tma_stats, split_stats,
                           early_stats)
            if read_before_wait:
                ds_other.gemm_operand()  # planted: read before the wait
                ds_other.wait()
                ds_mine.own_gemm_operand()
                smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
            else:
                bs.issue_dq(smem_kv, ds_mine, ds_other, acc_dq, wg)
            ds_mine.acquire()
            ds_mine.store(ds=ds, acc_dp=acc_dp)
            ds_mine.commit()
            if staged_under_dk:  # overlap_dq's order: dV, dK, the previous dQ staged while dK runs
                smem_qdo.mma_dv(p=p, acc_dv=acc_dv, wg=wg)
                smem_qdo.mma_dk(ds=ds, acc_dk=acc_dk, wg=wg)
                with d.every(1, start=1):  # planted: staged with no retire, the previous dQ's GEMM may still run
                    bs.stage_dq(smem_dq, acc_dq)
                smem_qdo.retire()
                ds_other.release()
                smem_qdo.release()
            else:
                smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
                if release_before_retire:
                    ds_other.release()  # planted: before the retire
                smem_qdo.retire()
                if not release_before_retire:
                    ds_other.release()
                smem_qdo.release()
                with d.every(1, start=1):
                    bs.stage_dq(smem_dq, acc_dq)
            if last_dq:
                with d.last_iter():
                    bs.issue_dq(smem_kv, ds_mine, ds_other, acc_dq, wg)
                    smem_kv.retire()
                    ds_other.release()
                    bs.stage_dq(smem_dq, acc_dq)
        bs.store_grads_at_end(smem_kv, grads, acc_dk, acc_dv, wg, ds_mine, ds_other, tma_store_dkv, dkv_in_ds)
    return twin


def test_the_twin_builder_is_the_program():
    """The twins below differ from the shipped schedule in their planted line only: unplanted, the builder's
    program is SAFE (build raises ValidationError otherwise)."""
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options())
    with planted(ab, grad_schedule_deferred=_twin()):
        ab.build(g, **QUIET)


@pytest.mark.parametrize("twin,marker,named", [
    (_twin(read_before_wait=True), "planted: read before the wait", "gemm_operand"),
    (_twin(release_before_retire=True), "planted: before the retire", "SmemDS"),
    (_twin(last_dq=False), None, "SmemD"),
    (_twin(staged_under_dk=True), None, "is still writing"),
])
def test_planted_deferred_twins_are_rejected(twin, marker, named):
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options())
    rejected(ab, g, __file__, named, marker, grad_schedule_deferred=twin)


@pytest.mark.parametrize("head_dim,options,named", [
    (128, {"block_m": 80, "dq_stages": 1}, "block_m=80"),
    (128, {"shared_ds": False, "overlap_dq": False}, "shared_ds=False"),
    (64, {"deterministic": True}, "deterministic=True"),
])
def test_what_it_cannot_serve_is_refused_by_name(head_dim, options, named):
    with pytest.raises(AttentionConfigError) as e:
        ab.FlashAttentionBackward(head_dim=head_dim, **dict(bh.default_options(head_dim), dq_defer=True, **options))
    assert "dq_defer=True" in str(e.value) and named in str(e.value), str(e.value)


def test_the_kernel_traces_the_checked_program():
    from warpsched.verify.verdicts import VERDICTS

    bh.compile_for_cpu(head_dim=64, causal=True, **_options())
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options())
    assert fingerprint == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint



@pytest.mark.parametrize("head_dim,causal,extra,deferred", [
    (64, False, {}, True),                                   # a plain non-causal call: the default since measured
    (64, True, {}, False),                                   # causal rows lose with it
    (64, False, {"window_size": (100, 100)}, False),         # masks and the deterministic order keep the old default
    (64, False, {"softcap": 30.0}, False),
    (64, False, {"mask_mod": lambda b, h, q, kv: q >= kv}, False),
    (64, False, {"deterministic": True}, False),
    (128, False, {}, False), (256, False, {}, False)])
def test_the_call_defers_dq_on_plain_non_causal_head_dim_64(head_dim, causal, extra, deferred):
    args = dict(dict(window_size=None, mask_mod=None, softcap=None, deterministic=False), **extra)
    options, key = bh._options_and_key("bfloat16", head_dim, causal, {}, args["window_size"], args["mask_mod"],
                                       args["softcap"], args["deterministic"])
    assert bool(options.get("dq_defer")) is deferred
    assert (("dq_defer", True) in key[3]) is deferred
    if not extra:
        assert bh.default_options(head_dim, full=not causal).get("dq_defer", False) is deferred
    # the options a caller names are theirs alone
    mine, _ = bh._options_and_key("bfloat16", head_dim, causal, {"shared_ds": True}, None, None, None, False)
    assert "dq_defer" not in mine
    # the deferred kernel is the proven one the manifest lists for the full call
    if deferred:
        g = ab.FlashAttentionBackward(head_dim=64, causal=False, **bh.default_options(64, full=True))
        assert g.dq_defer and g.ds_stages == 2
