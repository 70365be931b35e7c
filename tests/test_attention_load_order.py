"""The forward's ``k_ahead`` (K_j loaded before V_{j-1}, V of the last tile after the loop), ``early_rescale``
(O rescaled between the S and the P V GEMMs' issue) and ``max_chains`` (the row max in independent chains):
the programs SAFE for every K/V count, persistent or not, at head dims 128 and 256; a load schedule that
forgets the last V is rejected as a deadlock; the row max equals the sequential one; bad options name the
fix. Their PTX counts: tests/test_attention.py (EXPECTED)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)

from warpsched import ValidationError, domain_loop, schedule  # noqa: E402
from warpsched.model.ir import StepKind  # noqa: E402
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host  # noqa: E402
from warpsched.kernels.attention import register_math as amath  # noqa: E402
from warpsched.kernels.attention.schedules import next_tile, tile_loop  # noqa: E402
from _planting import planted  # noqa: E402


def _options(head_dim, persistent, **kw):
    options = dict(host.tuned_options(head_dim, False), persistent=persistent, **kw)
    if not persistent:
        options.update(q_stages=1, o_buffer=False)
    return options


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("kw", [dict(k_ahead=True), dict(early_rescale=True),
                                dict(k_ahead=True, early_rescale=True, max_chains=4), dict(try_waits=True)])
def test_reordered_programs_are_safe(head_dim, persistent, kw):
    g = att.FlashAttention(head_dim=head_dim, **_options(head_dim, persistent, **kw))
    mgr = att.build(g, verbose=False, progress=False, cache_verdict=False)
    assert mgr.result.accepted and mgr.result.checker.verdict == "SAFE"
    report = mgr.result.checker.report()
    assert ("every units_per_cta >= 1" in report) if persistent else ("every kv_tiles >= 1" in report)


def test_k_ahead_changes_the_program():
    """k_ahead is a different program (its fingerprint), not an option the schedule ignores."""
    base = att.build(att.FlashAttention(**att.TUNED), verbose=False, progress=False)
    ahead = att.build(att.FlashAttention(**att.TUNED, k_ahead=True), verbose=False, progress=False)
    rescale = att.build(att.FlashAttention(**att.TUNED, early_rescale=True), verbose=False, progress=False)
    assert len({base.fingerprint, ahead.fingerprint, rescale.fingerprint}) == 3


@schedule
def _last_v_forgotten(smem_q, smem_k, smem_v, kv_tiles, wq=None, units=None, k_ahead=False):
    """k_ahead's load order without V of the unit's last tile after the loop."""
    with tile_loop(wq, units):
        smem_q.acquire()
        smem_q.tma_load()
        smem_q.commit()
        with domain_loop(0, kv_tiles, 1) as d:
            smem_k.acquire()
            smem_k.tma_load()
            smem_k.commit()
            with d.every(1, start=1):
                smem_v.acquire()
                smem_v.tma_load(behind=True)
                smem_v.commit()
        next_tile(wq)  # planted: the last tile's V is never loaded


def test_k_ahead_without_the_last_v_is_a_deadlock():
    with planted(att, load_schedule=_last_v_forgotten):
        with pytest.raises(ValidationError) as e:
            att.build(att.FlashAttention(**att.TUNED, k_ahead=True), verbose=False, progress=False,
                      cache_verdict=False)
    text = str(e.value)
    assert "SmemV" in text and "deadlock" in text.lower()


class _Row:
    """A (rows, columns) view of Python floats standing in for the accumulator (row_max_of is traced Python)."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, ij):
        return self.rows[ij[0]][ij[1]]


@pytest.mark.parametrize("chains", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [4, 16, 32, 40, 64])
def test_row_max_chains_equal_the_sequential_max(monkeypatch, chains, n):
    import random

    r = random.Random(n * 10 + chains)
    rows = [[r.uniform(-50, 50) for _ in range(n)] for _ in range(2)]
    calls = []
    monkeypatch.setattr(amath.cute, "size", lambda t, mode=None: len(t.rows[0]))
    monkeypatch.setattr(amath.cute.arch, "fmax", lambda a, b: calls.append(1) or max(a, b))
    for i, prev in ((0, float("-inf")), (1, 49.0)):
        calls.clear()
        assert amath.row_max_of(_Row(rows), i, prev, chains) == max([prev] + rows[i])
        assert len(calls) == n  # n maxima in either form: the chains only shorten the dependent path


@pytest.mark.parametrize("kwargs,needle", [
    (dict(k_ahead=True, unit_overlap=True, o_buffer=True, tma_store_o=True, q_stages=2, head_dim=64),
     "unit_overlap=True has schedules of its own"),
    (dict(early_rescale=True, overlap=False), "needs overlap=True"),
    (dict(max_chains=3), "max_chains=3"),
    (dict(try_waits=True, unit_overlap=True, o_buffer=True, tma_store_o=True, q_stages=2, head_dim=64),
     "unit_overlap=True has schedules of its own"),
])
def test_option_errors(kwargs, needle):
    with pytest.raises(att.AttentionConfigError, match=needle):
        att.FlashAttention(**kwargs)


def test_slice_stages_is_code_generation_only():
    """slice_stages changes how the GEMMs address their stage, not the program: the same fingerprint (and so
    the same proof), at head dims 128 and 256."""
    for hd in (128, 256):
        options = host.tuned_options(hd, False)
        a, b = (att.build(att.FlashAttention(head_dim=hd, **options, slice_stages=flag), verbose=False,
                          progress=False) for flag in (False, True))
        assert a.fingerprint == b.fingerprint


def test_try_waits_probe_before_each_blocking_wait():
    """try_waits leads the softmax loop's K / V / MathOrder waits (and the first warp group's MathOrder acquire)
    with their try_waits: another program, proven (test_reordered_programs_are_safe), whose PTX probes each of
    those barriers without blocking (``mbarrier.try_wait.parity.acquire``) before the blocking loop; with three
    warp groups too (head dim 64, non-causal)."""
    import re

    for hd, causal in ((128, True), (64, False)):
        plain, led = (att.build(att.FlashAttention(head_dim=hd, causal=causal, **dict(
            host.tuned_options(hd, causal), try_waits=flag)), verbose=False, progress=False) for flag in (False, True))
        assert plain.fingerprint != led.fingerprint
        kinds = [s.kind for t in led.program.tasks if t.name.startswith("Softmax") for s in t.schedule.steps]
        assert sum(k is StepKind.ConsumerTryWait for k in kinds) >= 2 * 2  # K and V in each warp group at least
    probes = [len(re.findall(r"mbarrier\.try_wait\.parity\.acquire", host.compile_for_cpu(
        head_dim=128, causal=True, try_waits=flag).artifacts.PTX)) for flag in (False, True)]
    # K and V (the first turn's and the loop's V waits) in both warp groups, MathOrder's wait and acquire
    assert probes[0] == 0 and probes[1] >= 6, probes
