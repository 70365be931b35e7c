"""The backward's ``dkv_in_ds`` epilogue (head dim 64, 128-row Q blocks): after the last step each warp group takes
its dS tile back once more (the other warp group's last dQ GEMM has read it), stages dV and dK in its two 64 x 64
halves and stores both by TMA with one wait, where the default stages them one after the other in its V half and
waits for each store. The program is SAFE, twins that stage before taking the tile back or leave the last hand-over
untaken are rejected where they go wrong, options it cannot serve are refused by name, and the kernel compiles with
one TMA-store wait fewer per warp group. On the H200: bench/attention_bwd_check.py (variant ``kvds``)."""
from __future__ import annotations

import os
import re
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched import schedule  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bh  # noqa: E402
from warpsched.kernels.attention import backward_schedules as bs  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402
from _planting import QUIET, rejected  # noqa: E402



def _options(**more):
    return dict(bh.default_options(64), dkv_in_ds=True, **more)



@pytest.mark.parametrize("causal", [False, True])
def test_the_program_is_safe_and_is_not_the_default_one(causal):
    g = ab.FlashAttentionBackward(head_dim=64, causal=causal, **_options())
    program = ab.build(g, **QUIET)  # raises ValidationError unless every check and the exhaustive checker pass
    plain = ab.build(ab.FlashAttentionBackward(head_dim=64, causal=causal, **bh.default_options(64)), **QUIET)
    assert program.fingerprint != plain.fingerprint  # the epilogue's extra hand-over is part of the checked program


def _steps_then(ds_mine, smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_other, turn):
    """The default program's step loop and K / V release, with dK / dV left in the registers (the twins add their
    own epilogue after it)."""
    turn = {k: v for k, v in turn.items() if k not in ("dkv_in_ds", "tma_store_dkv")}
    bs.grad_schedule.fn(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, **turn)


@schedule
def _staged_before_the_tile_is_back(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, **turn):
    _steps_then(ds_mine, smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_other, turn)
    ds_mine.store_grads(acc_dk=None, acc_dv=None)  # planted: before the acquire
    ds_mine.acquire()
    ds_mine.commit()
    ds_other.wait()
    ds_other.release()


@schedule
def _last_hand_over_never_taken(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, **turn):
    _steps_then(ds_mine, smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_other, turn)
    ds_mine.acquire()
    ds_mine.store_grads(acc_dk=None, acc_dv=None)
    ds_mine.commit()  # planted: the other warp group never takes this one


@pytest.mark.parametrize("twin,marker,named", [
    (_staged_before_the_tile_is_back, "planted: before the acquire", "store_grads"),
    (_last_hand_over_never_taken, None, "SmemDS"),
])
def test_planted_epilogue_twins_are_rejected(twin, marker, named):
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options())
    rejected(ab, g, __file__, named, marker, grad_schedule=twin)


@pytest.mark.parametrize("head_dim,options,named", [
    (64, {"tma_store_dkv": False}, "tma_store_dkv=False"),
    (64, {"block_m": 64, "shared_ds": False}, "shared_ds=False"),
    (128, {}, "head_dim=128"),
])
def test_what_it_cannot_serve_is_refused_by_name(head_dim, options, named):
    with pytest.raises(AttentionConfigError) as e:
        ab.FlashAttentionBackward(head_dim=head_dim, **dict(bh.default_options(head_dim), dkv_in_ds=True, **options))
    assert "dkv_in_ds=True" in str(e.value) and named in str(e.value), str(e.value)


def _count(pattern, ptx):
    return len(re.findall(pattern, ptx))


def test_the_kernel_waits_once_for_both_stores():
    """As many TMA stores as the default (dV and dK per warp group), one bulk-group read wait fewer per warp group,
    and the kernel's traced program is the one checked SAFE above."""
    from warpsched.verify.verdicts import VERDICTS

    ptx = bh.compile_for_cpu(head_dim=64, causal=True, **_options()).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options())
    assert fingerprint == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    plain = bh.compile_for_cpu(head_dim=64, causal=True, **bh.default_options(64)).artifacts.PTX
    store = r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta\.tile\.bulk_group"
    wait = r"cp\.async\.bulk\.wait_group\.read"
    assert _count(store, ptx) == _count(store, plain) == 4
    assert _count(wait, ptx) == _count(wait, plain) - 2
