"""tools/sanitize_ops_gpu.py's report, with a stand-in ``compute-sanitizer`` on PATH that prints what the real one
printed on the H100: a clean tool gives a clean row, a report names its kernel and fails the run, and a case that
failed or never ran fails it too."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "sanitize_ops_gpu.py")

CLEAN = """========= COMPUTE-SANITIZER
CASE gemm ok 1.2e-03
CASE attention_varlen ok 2.0e-03
========= ERROR SUMMARY: 0 errors
"""
REPORTED = """========= COMPUTE-SANITIZER
========= Invalid __shared__ write of size 16 bytes
=========     at kernel_cutlass_kernel_warpschedkernelsattentionforwardFlashAttentionVarlenLive_object+0x1ad0
=========     by thread (0,0,0) in block (7,0,0)
=========     Cluster needs to have at least 2 blocks
CASE gemm ok 1.2e-03
CASE attention_varlen FAILED AcceleratorError: CUDA error: unspecified launch failure
========= ERROR SUMMARY: 132 errors
"""


def _run(tmp_path, text, *args):
    fake = tmp_path / "compute-sanitizer"
    (tmp_path / "out.txt").write_text(text)
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.txt'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, TOOL, "--cases", "gemm,attention_varlen", *args], capture_output=True,
                          text=True, env=env)


def test_a_clean_tool_gives_a_clean_row(tmp_path):
    out = _run(tmp_path, CLEAN, "--tools", "memcheck")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| memcheck | ERROR SUMMARY: 0 errors | 2 / 2 | - |" in out.stdout
    assert "sanitize: clean" in out.stdout


def test_a_report_names_its_kernel_and_fails_the_run(tmp_path):
    out = _run(tmp_path, REPORTED, "--tools", "memcheck")
    assert out.returncode == 1
    row = next(line for line in out.stdout.splitlines() if line.startswith("| memcheck"))
    assert "ERROR SUMMARY: 132 errors" in row and "1 / 2 (attention_varlen FAILED)" in row
    assert "kernel_cutlass_kernel_warpschedkernelsattentionforwardFlashA" in row
    assert "Cluster needs to have at least 2 blocks" in out.stdout  # the report's tail follows the row


def test_a_case_that_never_ran_fails_a_clean_summary(tmp_path):
    out = _run(tmp_path, CLEAN.replace("CASE attention_varlen ok 2.0e-03\n", ""), "--tools", "racecheck")
    assert out.returncode == 1 and "| racecheck | ERROR SUMMARY: 0 errors | 1 / 1 |" in out.stdout


def test_unknown_cases_are_named():
    out = subprocess.run([sys.executable, TOOL, "--cases", "gemm,nope"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown cases ['nope']" in out.stderr and "attention_bwd" in out.stderr
