"""The README's test command, as .ci/run runs it, ends with pytest's "N passed" summary line.

It is run here on a two-test file with the repository's pytest configuration, so a `-q` in
both the command and pyproject's addopts (which makes -qq and drops the summary) is caught.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_block(n: int) -> str:
    """The n-th ```bash block of the README (1-based), as .ci/run extracts it."""
    blocks, cur, inside = [], [], False
    for line in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().splitlines():
        if line == "```bash":
            inside, cur = True, []
        elif line == "```" and inside:
            inside = False
            blocks.append("\n".join(cur))
        elif inside:
            cur.append(line)
    return blocks[n - 1]


def test_readme_test_command_ends_with_a_passed_summary(tmp_path):
    cmd = shlex.split(readme_block(2))
    assert cmd[:4] == [".venv/bin/python", "-m", "pytest", "tests"], cmd
    (tmp_path / "test_two.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    # the same command on a tiny suite, with the repository's configuration (pyproject.toml)
    argv = [sys.executable, "-m", "pytest", str(tmp_path / "test_two.py"), *cmd[4:],
            "-c", os.path.join(ROOT, "pyproject.toml"), "--rootdir", ROOT, "-p", "no:cacheprovider"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert re.match(r"^=*\s*2 passed\b", last), proc.stdout


def test_readme_fingerprint_is_the_gemm_examples():
    """The README's verdict line shows the bundled gemm example's fingerprint, which no longer depends on
    where the package lives: it is the one every checkout and install prints."""
    from warpsched.examples import gemm

    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    shown = re.search(r"ACCEPTED example gemm: .*; program ([0-9a-f]{16})\)", text)
    assert shown, "README lost the verdict line of `warpsched check --example gemm`"
    assert shown.group(1) == gemm.build(verbose=False).fingerprint[:16]


def test_readme_runs_the_quick_tier_in_parallel_and_ci_runs_both_tiers():
    """The README's command is the quick tier on two processes; .ci/run runs it as written and then the
    same command with -m slow, so every test runs in CI."""
    cmd = shlex.split(readme_block(2))
    m = cmd.index("-m", 4)  # pytest's -m (the first is python's)
    assert cmd[cmd.index("-n") + 1] == "2" and cmd[m + 1] == "not slow", cmd
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    assert """QUICK='-m "not slow"'""" in ci and 'SLOW_CMD="${TEST_CMD/"$QUICK"/-m slow}"' in ci
    assert 'run_tests "$TEST_CMD"' in ci and 'run_tests "$SLOW_CMD"' in ci
    # the substitution .ci/run makes, done by bash on the README's command
    slow = subprocess.run(["bash", "-c", 'TEST_CMD=$1; QUICK=\'-m "not slow"\'; echo "${TEST_CMD/"$QUICK"/-m slow}"',
                           "_", readme_block(2)], capture_output=True, text=True, check=True).stdout.split()
    assert slow == cmd[:m] + ["-m", "slow"] + cmd[m + 2:], slow
