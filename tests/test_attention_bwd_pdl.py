"""The backward launched with programmatic dependent launch (``pdl=True``): its CTAs start while the pre-pass
(``StatsPrep``, which triggers them) still runs, load K / V, and wait (griddepcontrol.wait) before the first Q /
dO stage, which carries the pre-pass's LSE / delta. The program is SAFE; a twin that loads a Q / dO stage before
the wait is rejected at that load; the option is refused where the warp groups would read the LSE / delta from
global memory; the kernel compiles with one wait, the pre-pass with its trigger. On the H200:
bench/attention_bwd_check.py (variant ``pdl``)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched import ValidationError, domain_loop, schedule  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import backward_host as bh  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402
from _planting import planted  # noqa: E402

QUIET = {"verbose": False, "progress": False, "cache_verdict": False}


@pytest.mark.parametrize("head_dim,causal", [(64, True), (128, False)])
def test_the_program_is_safe(head_dim, causal):
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **dict(bh.default_options(head_dim), pdl=True))
    ab.build(g, **QUIET)  # raises ValidationError unless every check and the exhaustive checker pass


@schedule
def _qdo_before_the_wait(smem_kv, smem_qdo, steps, pdl=None):
    smem_kv.acquire()
    smem_kv.tma_load()
    smem_kv.commit()
    with domain_loop(0, steps, 1):
        smem_qdo.acquire()  # planted: before the wait for the pre-pass
        smem_qdo.tma_load()
        smem_qdo.commit()
    pdl.wait_griddep()


def test_a_qdo_stage_loaded_before_the_wait_is_rejected_there():
    g = ab.FlashAttentionBackward(head_dim=64, **dict(bh.default_options(64), pdl=True))
    with planted(ab, load_schedule=_qdo_before_the_wait):
        with pytest.raises(ValidationError) as e:
            ab.build(g, **QUIET)
    msg = str(e.value)
    lines = open(__file__).read().splitlines()
    line = 1 + next(i for i, text in enumerate(lines) if "planted: before the wait" in text)
    assert "pdl ordering" in msg and "SmemQdO" in msg and f"test_attention_bwd_pdl.py:{line}" in msg, msg


def test_without_tma_stats_it_is_refused_by_name():
    with pytest.raises(AttentionConfigError) as e:
        ab.FlashAttentionBackward(head_dim=64, pdl=True)
    assert "pdl=True with tma_stats=False" in str(e.value)


def test_the_kernel_waits_once_and_the_pre_pass_triggers_it():
    options = dict(bh.default_options(128), pdl=True)
    ptx = bh.compile_for_cpu(head_dim=128, causal=True, **options).artifacts.PTX
    assert ptx.count("griddepcontrol.wait") == 1  # the load warp's, between K / V and the first Q / dO stage
    plain = bh.compile_for_cpu(head_dim=128, causal=True, **bh.default_options(128)).artifacts.PTX
    assert "griddepcontrol.wait" not in plain
