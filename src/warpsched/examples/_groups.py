"""CooperativeGroup for the bundled examples (``warpsched.threads``)."""
from __future__ import annotations

from ..cooperative import threads


def thread_group(size: int = 1):
    return threads(size)
