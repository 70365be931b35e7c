"""Where warpsched keeps what it caches on disk (autotune choices, checker verdicts):
``$WARPSCHED_CACHE_DIR``, else ``$XDG_CACHE_HOME/warpsched``, else ``~/.cache/warpsched``."""
from __future__ import annotations

import os

ENV_CACHE_DIR = "WARPSCHED_CACHE_DIR"


def cache_dir() -> str:
    if os.environ.get(ENV_CACHE_DIR):
        return os.environ[ENV_CACHE_DIR]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "warpsched")


__all__ = ["ENV_CACHE_DIR", "cache_dir"]
