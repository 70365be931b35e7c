"""``poly_exp2``: part of P's exponentials computed by a polynomial on the FMA pipe instead of MUFU.EX2
(kernels/attention/poly_exp2.py). The arithmetic is checked on its numpy twin (the same float32 operations);
the kernels are checked to trace the same program with fewer ``ex2.approx`` in their PTX, and bad values of the
option to be refused naming the fix. What it is worth on the GPU: docs/history/attention_backward.md ("exp2 on the
FMA pipe")."""
from __future__ import annotations

import re

import numpy as np
import pytest

from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as bwd_host
from warpsched.kernels.attention import host as fwd_host
from warpsched.kernels.attention import poly_exp2 as pe
from warpsched.kernels.attention.forward import AttentionConfigError, FlashAttention


@pytest.mark.parametrize("degree", [3, 4])
def test_the_polynomial_is_within_its_bound_over_every_normal_result(degree):
    x = np.linspace(-126.0, 64.0, 1_000_001, dtype=np.float32)
    x = np.concatenate([x, np.float32([-0.5, 0.5, -1.5, 1e-7, -1e-7, 0.0])])
    rel = np.abs(pe.reference(x, degree).astype(np.float64) / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() <= pe.MAX_REL_ERROR[degree]
    # well below half an ulp of the type P is rounded to: bf16 (8 bits) at degree 3, fp16 (11 bits) at degree 4
    assert pe.MAX_REL_ERROR[3] < 2.0 ** -9 / 10 and pe.MAX_REL_ERROR[4] < 2.0 ** -12 / 10


@pytest.mark.parametrize("degree", [3, 4])
def test_masked_scores_give_exactly_zero_and_tiny_ones_no_nan(degree):
    """-inf (a masked score, or a row whose LSE is +inf) must give +0.0 as MUFU does: a forward row with no key
    sums its P to decide that O = 0 and LSE = +inf. Below -126 the result is a non-negative denormal or 0."""
    out = pe.reference(np.float32([-np.inf, -127.0, -300.0, np.nan]), degree)
    assert out.tolist() == [0.0, 0.0, 0.0, 0.0] and not np.signbit(out).any()
    low = pe.reference(np.linspace(-127.0, -126.0, 10001, dtype=np.float32), degree)
    assert np.isfinite(low).all() and (low >= 0).all() and (low < 2.0 ** -125).all()


def test_the_ptx_uses_no_special_function_unit():
    for degree in (3, 4):
        text = pe.ptx(degree)
        assert "ex2" not in text and "cvt" not in text  # F2I / FRND issue at MUFU's rate: rounded by a magic add
        assert text.count("fma.rn.ftz.f32") == degree
        assert "0f4B400000" in text and "shl.b32 ti, ti, 23" in text


def test_every_kth_value_of_a_row_goes_to_the_polynomial():
    assert [pe.polynomial_column(j, 4) for j in range(8)] == [False, False, False, True] * 2
    assert not any(pe.polynomial_column(j, 0) for j in range(64))
    assert sum(pe.polynomial_column(j, 8) for j in range(64)) == 8


def _ex2_count(ptx):
    return len(re.findall(r"\bex2\.approx", ptx))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_backward_traces_the_same_program_with_a_quarter_of_its_exp2_moved(head_dim):
    """Register math only: the checked program (its fingerprint) is the default's; the PTX's ex2 count falls
    by P's values per thread and step over k (64 keys x 64 queries per warp group at head dim 128: 32 a thread;
    64 x 128 at head dim 64: 64), once per warp group's code."""
    from warpsched.verify.verdicts import VERDICTS

    base = dict(bwd_host.default_options(head_dim), poly_exp2=0)
    plain = bwd_host.compile_for_cpu(head_dim=head_dim, causal=True, **base).artifacts.PTX
    plain_fp = VERDICTS.looked_up[-1]
    poly = bwd_host.compile_for_cpu(head_dim=head_dim, causal=True, **dict(base, poly_exp2=4)).artifacts.PTX
    assert VERDICTS.looked_up[-1] == plain_fp and VERDICTS.get(plain_fp).verdict == "SAFE"
    per_thread = 32 if head_dim == 128 else 64
    assert _ex2_count(plain) - _ex2_count(poly) == 2 * per_thread // 4
    assert poly.count("0f4B400000") >= 2 * per_thread // 4


def test_the_forward_moves_every_kth_exp2_of_its_softmax():
    opts = dict(fwd_host.tuned_options(128, False, 4096))
    plain = fwd_host.compile_for_cpu(head_dim=128, **opts).artifacts.PTX
    poly = fwd_host.compile_for_cpu(head_dim=128, **dict(opts, poly_exp2=4)).artifacts.PTX
    assert _ex2_count(poly) < _ex2_count(plain) and "0f4B400000" in poly
    assert "poly_exp2=4" in FlashAttention(head_dim=128, poly_exp2=4).config.options


@pytest.mark.parametrize("value", [1, -2, 2.5, True])
def test_bad_values_are_refused_naming_what_is_expected(value):
    with pytest.raises(AttentionConfigError, match=r"poly_exp2=.*expected 0 .* or k >= 2"):
        ab.FlashAttentionBackward(head_dim=128, poly_exp2=value)
    with pytest.raises(AttentionConfigError, match=r"poly_exp2=.*expected 0 .* or k >= 2"):
        FlashAttention(head_dim=128, poly_exp2=value)


def test_the_backward_records_the_option_by_value():
    assert "poly_exp2=8" in ab.FlashAttentionBackward(head_dim=128, poly_exp2=8).config.options
    assert not any(o.startswith("poly_exp2") for o in ab.FlashAttentionBackward(head_dim=128).config.options)


def test_interleaved_polynomials_wait_for_the_mufu_value_before_them():
    """``poly_interleave``: each polynomial's input gets a dependence on the MUFU value computed before it
    (``fma(prev, 0, x)``), so ptxas spreads the polynomials among the MUFU instructions (without it, every
    polynomial came ahead of one unbroken MUFU run). Same program, same exponentials."""
    from warpsched.verify.verdicts import VERDICTS

    base = dict(bwd_host.default_options(128), poly_exp2=4)
    plain = bwd_host.compile_for_cpu(head_dim=128, **base).artifacts.PTX
    fp = VERDICTS.looked_up[-1]
    woven = bwd_host.compile_for_cpu(head_dim=128, **dict(base, poly_interleave=True)).artifacts.PTX
    assert VERDICTS.looked_up[-1] == fp and VERDICTS.get(fp).verdict == "SAFE"
    assert _ex2_count(woven) == _ex2_count(plain)
    dependence = r"fma\.rn\.f32 x, %[rf]\d+, 0f00000000, %[rf]\d+;"  # the asm's operands, bound
    assert len(re.findall(dependence, woven)) == 2 * 32 // 4 and not re.findall(dependence, plain)
    assert "poly_interleave" in ab.FlashAttentionBackward(head_dim=128, poly_exp2=4, poly_interleave=True).config.options


def test_interleaving_without_the_polynomial_is_refused():
    with pytest.raises(AttentionConfigError, match=r"poly_interleave=True with poly_exp2=0.*set poly_exp2=k"):
        ab.FlashAttentionBackward(head_dim=128, poly_interleave=True)
