"""The on-disk verdict cache: a SAFE verdict stored by one process answers the next process's
compile of the same program under the same warpsched code, and nothing else."""
from __future__ import annotations

import json
import os

import pytest

from warpsched.examples import gemm, pingpong
from warpsched.verify import verdicts
from warpsched.verify.verdicts import DISK, VERDICTS


@pytest.fixture
def disk(tmp_path, monkeypatch, checker_runs):
    monkeypatch.setenv("WARPSCHED_VERDICT_CACHE", "1")
    monkeypatch.setenv("WARPSCHED_CACHE_DIR", str(tmp_path))
    return tmp_path, checker_runs


def _fresh_process():
    VERDICTS.clear()  # what a new Python process starts with


def test_a_safe_verdict_is_reused_by_the_next_process(disk):
    tmp, runs = disk
    first = gemm.build(verbose=False, cache_verdict=True)
    assert len(runs) == 1 and first.result.checker.verdict == "SAFE"
    stored = os.listdir(tmp / "verdicts")
    assert stored == [f"{verdicts.code_version()[:16]}-{first.fingerprint}.json"]
    _fresh_process()
    hits = DISK.hits
    again = gemm.build(verbose=False, cache_verdict=True)
    assert len(runs) == 1 and again.verdict_cached and DISK.hits == hits + 1  # no search
    assert again.result.accepted and again.result.checker.verdict == "SAFE"
    assert again.result.checker.states == first.result.checker.states
    assert again.result.checker.report() == first.result.checker.report()
    other = pingpong.build(verbose=False, cache_verdict=True)  # another program: searched
    assert len(runs) == 2 and not other.verdict_cached


def test_other_code_corrupt_or_foreign_files_are_misses(disk, monkeypatch):
    tmp, runs = disk
    first = gemm.build(verbose=False, cache_verdict=True)
    path = DISK.path(first.fingerprint)
    _fresh_process()
    monkeypatch.setattr(verdicts, "_CODE_VERSION", "0" * 64)  # as if warpsched's sources had changed
    gemm.build(verbose=False, cache_verdict=True)
    assert len(runs) == 2
    monkeypatch.setattr(verdicts, "_CODE_VERSION", None)
    for bad in ("{not json", json.dumps({"fingerprint": "x" * 64, "code": verdicts.code_version(), "verdict": "SAFE"}),
                json.dumps({"fingerprint": first.fingerprint, "code": verdicts.code_version(), "verdict": "UNSAFE"})):
        with open(path, "w") as fh:
            fh.write(bad)
        _fresh_process()
        mgr = gemm.build(verbose=False, cache_verdict=True)
        assert not mgr.verdict_cached and mgr.result.checker.verdict == "SAFE"
    assert len(runs) == 5


def test_only_safe_results_without_findings_are_stored(disk):
    tmp, runs = disk
    mgr = gemm.build(verbose=False, cache_verdict=True, max_states=5)  # stops early: INCOMPLETE
    assert mgr.result.checker.verdict == "INCOMPLETE"
    assert not os.path.isdir(tmp / "verdicts") or os.listdir(tmp / "verdicts") == []


def test_switched_off_nothing_is_read_or_written(disk, monkeypatch):
    tmp, runs = disk
    monkeypatch.setenv("WARPSCHED_VERDICT_CACHE", "0")
    gemm.build(verbose=False, cache_verdict=True)
    _fresh_process()
    gemm.build(verbose=False, cache_verdict=True)
    assert len(runs) == 2 and not os.path.exists(tmp / "verdicts")
