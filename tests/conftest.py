"""Test-wide settings."""
import os

# The on-disk verdict cache (warpsched.verify.verdicts.DISK) would let one test run's SAFE verdicts
# answer the next run's compiles: the tests count checker runs, so it is off here (and in the
# subprocesses they start); tests/test_verdict_disk_cache.py turns it on in a temporary directory.
os.environ["WARPSCHED_VERDICT_CACHE"] = "0"
