"""The attention backward's other tile splits. Head dim 256 (``FlashAttentionBackward.d_split``, here without the
query split that the default adds: tests/test_attention_bwd_split_q.py): 64 keys per
CTA, both warp groups compute S and dP over all 256 columns and each owns one 128-column half of dK, dV and
dQ; the program is the 64 / 128 one (same tasks, same schedules), proven SAFE, fits the SMEM with one Q / dO
stage and traces the checked program. 128-row Q blocks at head dim 64 (``block_m=128``, last section). Options
that do not fit are refused naming the fix. Numbers on the H200: docs/attention.md ("Backward",
bench/attention_bwd_check.py)."""
from __future__ import annotations

import re

import pytest

from warpsched import ValidationError, domain_loop, schedule
from warpsched.kernels import _host
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention.forward import AttentionConfigError

from _planting import planted

QUIET = {"verbose": False, "progress": False, "cache_verdict": False}


@pytest.mark.parametrize("causal", [False, True])
def test_the_defaults_split_d_and_fit_the_smem(causal):
    g = ab.FlashAttentionBackward(head_dim=256, causal=causal, **host.D_SPLIT_OPTIONS)
    assert (g.block_n, g.key_halves, g.d_cols, g.dq_cols, g.qdo_stages) == (64, 1, 128, 128, 1)
    assert g.kv_bytes == 2 * 64 * 256 * 2 and g.tma_stats and not g.tma_store_dkv
    mgr = ab.build(g, **QUIET)
    assert mgr.result.checker.verdict == "SAFE"
    # the same tasks and schedules as head dim 128 without shared_ds: one program, the data split differs
    plain = ab.build(ab.FlashAttentionBackward(head_dim=128, causal=causal, tma_stats=True), verbose=False,
                     exhaustive_deadlock_race_check=False)
    assert [t.name for t in mgr.tasks] == [t.name for t in plain.tasks]


def test_a_second_q_stage_is_refused_by_the_smem_check():
    with pytest.raises(AttentionConfigError, match=r"head_dim=256, block_m=64, qdo_stages=2, dq_stages=1: SMEM needs"):
        ab.FlashAttentionBackward(head_dim=256, qdo_stages=2)


@pytest.mark.parametrize("option", ["shared_ds", "tma_store_dkv"])
def test_key_split_options_are_refused_naming_the_fix(option):
    with pytest.raises(AttentionConfigError, match=rf"head_dim=256 .*{option}=False"):
        ab.FlashAttentionBackward(head_dim=256, **{option: True})


def test_the_kernel_traces_the_checked_program():
    from warpsched.verify.verdicts import VERDICTS

    ptx = host.compile_for_cpu(head_dim=256, causal=True, **host.D_SPLIT_OPTIONS).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    cpu = ab.build(ab.FlashAttentionBackward(head_dim=256, causal=True, **host.D_SPLIT_OPTIONS), verbose=False,
                   exhaustive_deadlock_race_check=False)
    assert fingerprint == cpu.fingerprint
    counts = _host.count_ptx(ptx)
    # per warp group: S^T and dP^T over D = 256 (16 k-steps of m64n64 each); dV, dK over 64 queries (4 k-steps
    # of m64n128 each: the warp group's 128 columns); dQ over 64 keys as two 64-column parts in turn (4 k-steps
    # of m64n64 each), so its accumulator is 32 registers, not 64 (ptxas serialized every WGMMA with 64)
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx)) == 2 * (2 * 16 + 2 * 4)
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16", ptx)) == 2 * 2 * 4
    assert counts["wgmma.mma_async"] == 2 * (2 * 16 + 2 * 4 + 2 * 4)
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)) == 2 * 128 // 32  # dQ halves, 32-float boxes
    assert not re.findall(r"(red|atom)\.global", ptx)


@schedule
def _second_dq_part_staged_before_it_retires(smem_kv, smem_qdo, grads, smem_dq, steps, wg, dq_parts, **_):
    """Head dim 256's dQ parts, with the second part's registers staged while its GEMM may still write them
    (the retire after it is missing)."""
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = smem_kv.init()
    lse2, delta = smem_kv.init_stats(acc_s=acc_s)
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=acc_dv, acc_dk=acc_dk)
    smem_kv.wait()
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        smem_qdo.gemm_operand(idx=idx)
        smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
        smem_kv.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)
        smem_qdo.load_stats(lse2=lse2, delta=delta)
        smem_kv.retire(pending=1)
        grads.probs(acc_s=acc_s, lse2=lse2)
        smem_kv.retire()
        grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)
        smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        smem_qdo.retire()
        smem_qdo.release()
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg, part=1)
        smem_dq.store(acc_dq=acc_dq, part=1)  # planted: no retire of the part's GEMM before this read
        smem_kv.retire()
        smem_dq.commit()
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def test_dq_parts_staged_before_their_gemm_retires_are_rejected():
    """Head dim 256 computes dQ as two 64-column GEMMs in turn into one accumulator; staging the second
    part before its GEMM has retired is a register race on that accumulator, named at the planted call."""
    g = ab.FlashAttentionBackward(head_dim=256, **host.D_SPLIT_OPTIONS)
    assert g.dq_parts == 2 and g.dq_part_cols == 64
    with planted(ab, grad_schedule=_second_dq_part_staged_before_it_retires):
        with pytest.raises(ValidationError) as e:
            ab.build(g, **QUIET)
    msg = str(e.value)
    assert "acc_dq" in msg and "store" in msg and re.search(r"test_attention_bwd_tiles\.py:\d+", msg), msg


# ------------------------------------------------------------------ 128-row Q blocks at head dim 64
@pytest.mark.parametrize("shared_ds", [False, True])
def test_128_row_q_blocks_at_head_dim_64_are_safe_and_trace_their_program(shared_ds):
    """block_m=128 (head dim 64): S / dP are 64 keys x 128 queries per warp group; the LSE and delta are read
    one at a time (split_stats); with shared_ds each warp group computes 64 rows of dQ over all 128 keys
    from both dS tiles (ds_rows), else 128 rows over its own 64 keys."""
    from warpsched.verify.verdicts import VERDICTS

    opts = dict(host.default_options(64), block_m=128, shared_ds=shared_ds, dq_stages=2 if shared_ds else 1)
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **opts)
    assert g.split_stats and g.ds_rows == shared_ds and (g.dq_rows, g.dq_cols) == ((64 if shared_ds else 128), 64)
    ptx = host.compile_for_cpu(head_dim=64, causal=True, **opts).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    assert fingerprint == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    # per warp group: S^T, dP^T (m64n128, 4 k-steps each over D = 64); dV, dK over 128 queries (8 each) and dQ
    # (ds_rows: 8 over 128 keys; else 2 row atoms x 4 over the warp group's 64 keys), all m64n64
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16", ptx)) == 2 * 2 * 4
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx)) == 2 * 24
    # one reduce-add per warp group's tile: with flat_dq (the default) one box of the tile's contiguous values,
    # else two boxes of 32 columns (64 fp32 columns are two 128-byte swizzle rows)
    boxes = 1 if opts["flat_dq"] else 2
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)) == 2 * boxes


@pytest.mark.parametrize("kw, words", [({"head_dim": 128, "block_m": 128}, "block_m=128 with head_dim=128"),
                                       ({"head_dim": 64, "block_m": 128}, "tma_stats=False: 128-row Q blocks"),
                                       ({"head_dim": 64, "shared_ds": True},
                                        "shared_ds=True at head dim 64 with block_m=64"),
                                       ({"head_dim": 64, "block_m": 96}, "block_m=96: expected 64, 80 or 128")])
def test_q_block_options_that_do_not_fit_are_refused_naming_what_does(kw, words):
    with pytest.raises(AttentionConfigError, match=re.escape(words)):
        ab.FlashAttentionBackward(**kw)
