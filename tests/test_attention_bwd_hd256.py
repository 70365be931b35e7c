"""The attention backward at head dim 256 (``FlashAttentionBackward.d_split``): 64 keys per CTA, both warp
groups compute S and dP over all 256 columns and each owns one 128-column half of dK, dV and dQ. The
program is the 64 / 128 one (same tasks, same schedules), proven SAFE; the kernel fits the SMEM with one
Q / dO stage and traces the checked program; options that need the key split are refused naming the fix.
Numbers on the H200: docs/attention.md ("Head dim 256 backward", bench/attention_bwd_check.py)."""
from __future__ import annotations

import re

import pytest

from warpsched import ValidationError
from warpsched.kernels import _host
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention.forward import AttentionConfigError

QUIET = {"verbose": False, "progress": False, "cache_verdict": False}


@pytest.mark.parametrize("causal", [False, True])
def test_the_defaults_split_d_and_fit_the_smem(causal):
    g = ab.FlashAttentionBackward(head_dim=256, causal=causal, **host.default_options(256))
    assert (g.block_n, g.key_halves, g.d_cols, g.dq_cols, g.qdo_stages) == (64, 1, 128, 128, 1)
    assert g.kv_bytes == 2 * 64 * 256 * 2 and g.tma_stats and not g.tma_store_dkv
    mgr = ab.build(g, **QUIET)
    assert mgr.result.checker.verdict == "SAFE"
    # the same tasks and schedules as head dim 128 without shared_ds: one program, the data split differs
    plain = ab.build(ab.FlashAttentionBackward(head_dim=128, causal=causal, tma_stats=True), verbose=False,
                     exhaustive_deadlock_race_check=False)
    assert [t.name for t in mgr.tasks] == [t.name for t in plain.tasks]


def test_a_second_q_stage_is_refused_by_the_smem_check():
    with pytest.raises(ValidationError, match=r"smem capacity.*sQ"):
        ab.build(ab.FlashAttentionBackward(head_dim=256, qdo_stages=2), **QUIET)


@pytest.mark.parametrize("option", ["shared_ds", "tma_store_dkv"])
def test_key_split_options_are_refused_naming_the_fix(option):
    with pytest.raises(AttentionConfigError, match=rf"head_dim=256 .*{option}=False"):
        ab.FlashAttentionBackward(head_dim=256, **{option: True})


def test_the_kernel_traces_the_checked_program():
    from warpsched.verify.verdicts import VERDICTS

    ptx = host.compile_for_cpu(head_dim=256, causal=True, **host.default_options(256)).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    cpu = ab.build(ab.FlashAttentionBackward(head_dim=256, causal=True, **host.default_options(256)), verbose=False,
                   exhaustive_deadlock_race_check=False)
    assert fingerprint == cpu.fingerprint
    counts = _host.count_ptx(ptx)
    # per warp group: S^T and dP^T over D = 256 (16 k-steps of m64n64 each); dV, dK over 64 queries and dQ
    # over 64 keys (4 k-steps of m64n128 each: the warp group's 128 columns)
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx)) == 2 * 2 * 16
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16", ptx)) == 2 * 3 * 4
    assert counts["wgmma.mma_async"] == 2 * (2 * 16 + 3 * 4)
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)) == 2 * 128 // 32  # dQ halves, 32-float boxes
    assert not re.findall(r"(red|atom)\.global", ptx)
