"""The attention backward with the forward's ``mask_mod`` and ``softcap`` (attention.backward_math): P is
recomputed as the forward made it (capped, masked) and dS goes through the cap's derivative; neither
changes the program or its proof; both compile for sm_90a with what they add and nothing else. On the
H200: bench/attention_training_masks.py (gradients against an fp64 reference)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bwd_host  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402


def prefix_lm(b, h, q, kv):
    return (kv < 300) | (kv <= q)


def test_masks_leave_the_backward_program_as_it_is():
    plain = ab.build(ab.FlashAttentionBackward(head_dim=64), verbose=False, exhaustive_deadlock_race_check=False)
    masked = ab.build(ab.FlashAttentionBackward(head_dim=64, mask_mod=prefix_lm, softcap=30.0), verbose=False,
                      exhaustive_deadlock_race_check=False)
    assert masked.fingerprint == plain.fingerprint


@pytest.mark.parametrize("bad, words", [(dict(softcap=-1.0), "positive number"), (dict(mask_mod=3), "a function")])
def test_bad_masks_are_refused_naming_the_fix(bad, words):
    with pytest.raises(AttentionConfigError, match=words):
        ab.FlashAttentionBackward(head_dim=64, **bad)


@pytest.fixture(scope="module")
def ptx():
    plain = bwd_host.compile_for_cpu(head_dim=64).artifacts.PTX
    capped = bwd_host.compile_for_cpu(head_dim=64, softcap=30.0).artifacts.PTX
    masked = bwd_host.compile_for_cpu(head_dim=64, mask_mod=prefix_lm).artifacts.PTX
    return plain, capped, masked


def test_the_cap_adds_its_tanh_and_derivative(ptx):
    plain, capped, _ = ptx
    assert plain.count("tanh.approx") == 0 and capped.count("tanh.approx") > 0
    assert capped.count("lg2.approx") > plain.count("lg2.approx")  # t read back from P: one lg2 per score


def test_the_mask_adds_compares_not_barriers(ptx):
    plain, _, masked = ptx
    for op in ("bar.sync", "mbarrier.try_wait", "wgmma.mma_async"):
        assert masked.count(op) == plain.count(op), op
    assert masked.count("setp.") > plain.count("setp.")
