"""Test-wide settings and shared fixtures."""
import os

import pytest

# The on-disk verdict cache (warpsched.verify.verdicts.DISK) would let one test run's SAFE verdicts
# answer the next run's compiles: the tests count checker runs, so it is off here (and in the
# subprocesses they start); tests/test_verdict_disk_cache.py turns it on in a temporary directory.
os.environ["WARPSCHED_VERDICT_CACHE"] = "0"


@pytest.fixture
def checker_runs(monkeypatch):
    """Counts the exhaustive checker's runs made by TaskManager (the programs it searched); starts
    and ends with an empty in-process verdict cache."""
    import warpsched.manager as manager_mod
    from warpsched.verify.verdicts import VERDICTS

    runs = []
    real = manager_mod.run_checker

    def counting(program, progress=False):
        runs.append(program)
        return real(program, progress=progress)

    monkeypatch.setattr(manager_mod, "run_checker", counting)
    VERDICTS.clear()
    yield runs
    VERDICTS.clear()
