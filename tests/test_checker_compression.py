"""Chain compression keeps counterexamples concrete: every compressed step is replayed from the
real initial state (docs/checker.md, Reductions)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import test_checker_bugs as bugs  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402

CASES = {
    "missing commit": lambda: bugs._producer_consumer(commit=False),
    "extra wait": lambda: bugs._producer_consumer(extra_wait=True),
    "group too small": lambda: bugs._arrivals(32),
    "batched release": lambda: bugs._batched_release(True),
    "aliasing": lambda: bugs._aliasing(True),
    "wgmma": lambda: bugs._wgmma(True),
    "pdl": lambda: bugs._pdl(False),
    "when_false": lambda: bugs._branches(True),
}


def _prog(x):
    return x[0] if isinstance(x, tuple) else x


def test_every_counterexample_replays_concretely():
    unsafe = 0
    for name, build in CASES.items():
        res = run_checker(_prog(build()))
        if res.verdict != "UNSAFE":
            continue
        unsafe += 1
        for p in res.exploration.problems:
            assert p.replayed, f"{name}: counterexample not replayed concretely\n{res.report()}"
            assert p.path, name
    assert unsafe >= 6, unsafe
