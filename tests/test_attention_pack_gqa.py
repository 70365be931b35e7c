"""``pack_gqa`` (``attention.host.gqa_packed``): a grouped-query decode run as its K/V heads. The view's
exactness is checked here on the CPU with numpy (attention of the packed view, unpacked, equals grouped-query
attention of the original), and so are the cases it must leave alone. The kernel it launches is the plain
forward at another shape; its GPU run is bench/attention_decode.py's pack_gqa column."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cutlass")

from warpsched.kernels.attention import host  # noqa: E402
from warpsched.kernels.attention.host import PACK_ROWS, gqa_packed  # noqa: E402


class _Arr:
    """A numpy array with torch's ``.view`` (a reshape that must not copy) and ``.shape``."""

    def __init__(self, a):
        self.a = a
        self.shape = a.shape

    dtype, device = "float64", "cpu"

    def stride(self):
        return tuple(x // self.a.itemsize for x in self.a.strides)

    def get_device(self):
        return -1

    def view(self, *shape):
        out = self.a.view()
        try:
            out.shape = shape  # numpy raises instead of copying, as torch's view does
        except AttributeError as e:
            raise RuntimeError(str(e)) from e
        return _Arr(out)


def _attention(q, k, v, scale):
    """softmax(q k^T * scale) v with K/V heads repeated over each group (float64)."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("B, H, Hk, Sq, Sk", [(2, 32, 8, 1, 300), (1, 16, 2, 4, 77), (3, 8, 1, 16, 50)])
def test_the_packed_view_computes_grouped_query_attention(B, H, Hk, Sq, Sk):
    r = np.random.default_rng(B * 100 + H + Sq)
    q, k, v = r.standard_normal((B, H, Sq, 64)), r.standard_normal((B, Hk, Sk, 64)), r.standard_normal((B, Hk, Sk, 64))
    packed = gqa_packed(_Arr(q), Hk)
    assert packed is not None and packed.shape == (B, Hk, H // Hk * Sq, 64)
    assert np.shares_memory(packed.a, q)  # a view, no copy
    out = _attention(packed.a, k, v, 0.125).reshape(B, H, Sq, 64)  # as attention() views the result back
    np.testing.assert_allclose(out, _attention(q, k, v, 0.125), rtol=1e-12, atol=1e-12)


def test_cases_it_leaves_alone():
    q, k = _Arr(np.zeros((1, 32, 1, 64))), 8
    assert gqa_packed(q, 32) is None  # no GQA
    assert gqa_packed(q, k, causal=True) is None  # the mask depends on the query's position
    assert gqa_packed(q, k, window_size=(128, 0)) is None
    assert gqa_packed(q, k, mask_mod=lambda b, h, i, j: i >= j) is None
    assert gqa_packed(q, k, window_size=(-1, -1)) is not None  # an unbounded window is no window
    assert gqa_packed(_Arr(np.zeros((1, 32, PACK_ROWS // 4 + 1, 64))), k) is None  # past one Q block
    strided = _Arr(np.zeros((1, 1, 32, 64)).transpose(0, 2, 1, 3))  # (1, 32, 1, 64) with heads on rows: views
    assert gqa_packed(strided, k) is not None
    bad = _Arr(np.zeros((1, 2, 32, 64)).transpose(0, 2, 1, 3))  # (1, 32, 2, 64), rows strided past the heads
    assert gqa_packed(bad, k) is None


def test_attention_launches_the_packed_shape_and_views_the_result_back(monkeypatch):
    """host.attention (pack_gqa None, the default, or True): the launch sees (B, H_kv, group * S_q, D) and the
    caller gets (B, H, S_q, D) out and (B, H, S_q) LSE, equal to grouped-query attention; with a causal mask
    or pack_gqa=False the launch sees q as is."""
    r = np.random.default_rng(7)
    q, k, v = r.standard_normal((2, 16, 2, 64)), r.standard_normal((2, 4, 40, 64)), r.standard_normal((2, 4, 40, 64))
    launched = []

    def fake_prepare(q_, k_, v_, causal, scale, out, lse, *rest, **kw):  # the kernel, in numpy
        launched.append(q_.shape)
        o = _attention(q_.a, k_.a, v_.a, 0.125)
        s = np.einsum("bhqd,bhkd->bhqk", q_.a, np.repeat(k_.a, q_.shape[1] // k_.shape[1], 1)) * 0.125
        m = s.max(-1)
        lse_ = m + np.log(np.exp(s - m[..., None]).sum(-1))
        return (lambda *a: None), (), _Arr(o), _Arr(lse_), False

    monkeypatch.setattr(host, "_prepare", fake_prepare)
    out, lse = host.attention(_Arr(q), _Arr(k), _Arr(v), scale=0.125, return_lse=True, pack_gqa=True)
    assert launched == [(2, 4, 8, 64)] and out.shape == (2, 16, 2, 64) and lse.shape == (2, 16, 2)
    np.testing.assert_allclose(out.a, _attention(q, k, v, 0.125), rtol=1e-12, atol=1e-12)
    host.attention(_Arr(q), _Arr(k), _Arr(v), scale=0.125, causal=True, pack_gqa=True)
    host.attention(_Arr(q), _Arr(k), _Arr(v), scale=0.125, pack_gqa=False)
    host.attention(_Arr(q), _Arr(k), _Arr(v), scale=0.125)
    assert launched[1:] == [(2, 16, 2, 64), (2, 16, 2, 64), (2, 4, 8, 64)]  # causal, off: unpacked; default packs
