"""The attention forward's user masks (kernels/attention/masks.py): a ``mask_mod`` traced into the
softmax's tiles and a ``softcap``, on the CPU (sm_90a compiles). Neither touches the synchronization,
so the kernel's program, its fingerprint and its proof are the ones without them; the kernels without
them compile to the same PTX as before they existed (checked when they were added: byte-identical for
the four tuned configurations). Their numbers are checked on the H200 by
bench/attention_mask_check.py."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host as ah  # noqa: E402


def sliding_window(b, h, q, kv):
    return (kv <= q) & (q - kv < 256)


def _count(ptx, what):
    return sum(what in line for line in ptx.splitlines())


@pytest.fixture(scope="module")
def ptx():
    opts = ah.tuned_options(128, False)
    return {name: ah.compile_for_cpu(head_dim=128, causal=False, **opts, **extra).artifacts.PTX
            for name, extra in (("plain", {}), ("mask", {"mask_mod": sliding_window}), ("softcap", {"softcap": 30.0}))}


def test_mask_mod_is_traced_into_every_tile(ptx):
    """Two compares per score the thread holds (kv <= q, q - kv < 256), on every tile (the plain
    kernel compares only on the tail tile); nothing else changes."""
    extra = _count(ptx["mask"], "setp.") - _count(ptx["plain"], "setp.")
    assert extra > 0 and extra % 2 == 0
    for what in ("wgmma.mma_async", "mbarrier", "cp.async.bulk.tensor", "bar.sync"):
        assert _count(ptx["mask"], what) == _count(ptx["plain"], what), what


def test_softcap_adds_a_tanh_per_score_and_nothing_else(ptx):
    assert _count(ptx["plain"], "tanh") == 0 and _count(ptx["softcap"], "tanh") > 0
    for what in ("wgmma.mma_async", "mbarrier", "setp.", "bar.sync"):
        assert _count(ptx["softcap"], what) == _count(ptx["plain"], what), what


@pytest.mark.parametrize("extra", [{"mask_mod": sliding_window}, {"softcap": 30.0}])
def test_the_program_and_its_proof_are_the_ones_without_them(extra):
    plain = att.build(att.FlashAttention(**att.TUNED), verbose=False, exhaustive_deadlock_race_check=False)
    masked = att.build(att.FlashAttention(**att.TUNED, **extra), verbose=False, exhaustive_deadlock_race_check=False)
    assert masked.fingerprint == plain.fingerprint


@pytest.mark.parametrize("kw,needle", [
    (dict(mask_mod=3), "mask_mod=3: expected a function"),
    (dict(softcap=0), "softcap=0: expected a positive number"),
    (dict(softcap=True), "softcap=True: expected a positive number"),
    (dict(softcap="30"), "expected a positive number"),
    (dict(mask_mod=sliding_window, unit_overlap=True, o_buffer=True, tma_store_o=True, q_stages=2),
     "unit_overlap=True"),
])
def test_what_the_kernel_cannot_apply_is_refused(kw, needle):
    with pytest.raises(att.AttentionConfigError, match=needle):
        att.FlashAttention(**kw)
