"""The backward's ``dv_writer`` epilogue: after the last step each warp group stages dV (bf16 / fp16) in a dQ tile
the writer warp has already read, and the writer stores it by TMA, so the warp group waits for one TMA store (dK's,
through its V half) instead of two in a row. The program is SAFE with the default options at head dims 64 and 128,
twins that drop the writer's drain or store dV after handing the tile back are rejected at the planted call,
options it cannot serve are refused by name, and the kernel compiles with one TMA store fewer per warp group and
two more in the writer. On the H200: bench/attention_bwd_check.py (variant ``dvw``)."""
from __future__ import annotations

import os
import re
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


def _options(head_dim, **more):
    return dict(bh.default_options(head_dim), dv_writer=True, **more)


def _planted_line(marker):
    lines = open(__file__).read().splitlines()
    return f"test_attention_bwd_dv_writer.py:{1 + next(i for i, l in enumerate(lines) if marker in l)}"


@pytest.mark.parametrize("head_dim,causal", [(64, True), (128, False), (128, True)])
def test_the_program_is_safe_and_is_not_the_default_one(head_dim, causal):
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **_options(head_dim))
    program = ab.build(g, **QUIET)  # raises ValidationError unless every check and the exhaustive checker pass
    plain = ab.build(ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **bh.default_options(head_dim)),
                     **QUIET)
    assert program.fingerprint != plain.fingerprint  # the writer's dV store is part of the checked program


@schedule
def _writer_without_the_drain(smem_dq0, smem_dq1, steps, finish=False, dv=False):
    with domain_loop(0, steps, 1):  # planted: dV's tiles never taken
        for smem_dq in (smem_dq0, smem_dq1):
            smem_dq.wait()
            smem_dq.reduce_add()
            smem_dq.release()


@schedule
def _dv_stored_after_the_release(smem_dq0, smem_dq1, steps, finish=False, dv=False):
    with domain_loop(0, steps, 1):
        for smem_dq in (smem_dq0, smem_dq1):
            smem_dq.wait()
            smem_dq.reduce_add()
            smem_dq.release()
    for smem_dq in (smem_dq0, smem_dq1):
        smem_dq.wait()
        smem_dq.release()
        smem_dq.store_dv()  # planted: after the release


@pytest.mark.parametrize("twin,marker,named", [
    (_writer_without_the_drain, None, "SmemDQ"),
    (_dv_stored_after_the_release, "planted: after the release", "store_dv"),
])
def test_planted_writer_twins_are_rejected(twin, marker, named):
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options(64))
    with planted(ab, dq_writer_schedule=twin):
        with pytest.raises(ValidationError) as e:
            ab.build(g, **QUIET)
    msg = str(e.value)
    assert named in msg, msg
    if marker:
        assert _planted_line(marker) in msg, msg


@pytest.mark.parametrize("options,named", [
    ({"dq_stages": 1}, "dq_stages=1"),
    ({"tma_store_dkv": False}, "tma_store_dkv=False"),
    ({"dq_finish": True}, "dq_finish=True"),
])
def test_what_it_cannot_serve_is_refused_by_name(options, named):
    with pytest.raises(AttentionConfigError) as e:
        ab.FlashAttentionBackward(head_dim=64, **dict(_options(64), **options))
    assert "dv_writer=True" in str(e.value) and named in str(e.value), str(e.value)


def _bulk_stores(ptx):
    return len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta\.tile\.bulk_group", ptx))


def test_the_kernel_stores_dv_from_the_dq_tile():
    """The same number of TMA stores as the default (dV moved from the warp groups to the writer), and the
    kernel's traced program is the one checked SAFE above."""
    ptx = bh.compile_for_cpu(head_dim=64, causal=True, **_options(64)).artifacts.PTX
    from warpsched.verify.verdicts import VERDICTS

    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=64, causal=True, **_options(64))
    assert fingerprint == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    plain = bh.compile_for_cpu(head_dim=64, causal=True, **bh.default_options(64)).artifacts.PTX
    assert _bulk_stores(ptx) == _bulk_stores(plain) > 0
