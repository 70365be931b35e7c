"""Progress lines of long checks, and the reductions' effect on the persistent GEMM."""
from __future__ import annotations

import importlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench"))  # checker_scaling

from warpsched.verify.checker import run_checker  # noqa: E402

explore_mod = importlib.import_module("warpsched.verify.checker.explore")


def _prog(S=2):
    from checker_scaling import build_program

    return build_program("b", S, 4)


def test_progress_lines_when_asked(monkeypatch):
    monkeypatch.setattr(explore_mod, "PROGRESS_EVERY", 0.0)  # report at once, then every 256 states
    lines = []
    res = run_checker(_prog(), progress=lines.append)
    assert res.verdict == "SAFE", res.report()
    assert lines, "no progress line"
    assert "states explored" in lines[0] and "frontier" in lines[0] and "states/s" in lines[0], lines[0]


def test_progress_to_stderr_with_true(monkeypatch, capsys):
    monkeypatch.setattr(explore_mod, "PROGRESS_EVERY", 0.0)
    run_checker(_prog(), progress=True)
    err = capsys.readouterr().err
    assert "exhaustive checker:" in err and "states/s" in err


def test_silent_by_default(monkeypatch, capsys):
    monkeypatch.setattr(explore_mod, "PROGRESS_EVERY", 0.0)
    run_checker(_prog())
    captured = capsys.readouterr()
    assert "states explored" not in captured.err and "states explored" not in captured.out


def test_persistent_gemm_s8_reduced_state_count():
    # chain compression (docs/checker.md): ~9.7k stored states, was 30.6k before it
    res = run_checker(_prog(8))
    assert res.verdict == "SAFE", res.report()
    assert res.states < 12000, res.states
