"""The lowering fuzzer (tools/lower_fuzz.py) as a bounded regression test: random programs warpsched
proves SAFE, with work bodies that keep state across the lowering's runtime regions, compile on the CPU
or are refused cleanly; none crashes the lowering or produces invalid IR."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import lower_fuzz  # noqa: E402


@pytest.mark.parametrize("arch,seed", [("sm_90a", 11), ("sm_100a", 12)])
def test_accepted_random_programs_compile_without_an_internal_error(arch, seed):
    lines = []
    counts = lower_fuzz.fuzz(60, seed, arch, timeout=120, show=2, log=lambda *a, **k: lines.append(" ".join(map(str, a))))
    report = "\n".join(lines)
    assert counts["crash"] == 0 and counts["timeout"] == 0, report
    assert counts["compiled"] >= 8, report  # the seed yields accepted programs, and they compile


def test_an_undeclared_count_is_refused_cleanly_wherever_a_region_changes_it():
    lines = []
    counts = lower_fuzz.fuzz(60, 11, "sm_90a", timeout=120, show=2, undeclared=True,
                             log=lambda *a, **k: lines.append(" ".join(map(str, a))))
    report = "\n".join(lines)
    assert counts["crash"] == 0 and counts["timeout"] == 0, report
    assert counts["refused"] >= 8 and "declare the field with its DSL type" in report, report
