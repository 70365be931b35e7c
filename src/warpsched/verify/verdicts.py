"""Caches of exhaustive-checker verdicts, keyed by program fingerprint.

A kernel is traced again on every ``cute.compile``; its program, and so its verdict, is the
same each time. ``VERDICTS`` keeps results for the life of the Python process (``runs`` counts
checker runs, ``hits`` the verdicts served from it). ``DISK`` keeps SAFE verdicts across
processes, so a new process compiling the same kernel does not search again: one small JSON per
(warpsched source, program), under ``cachedir.cache_dir()/verdicts``. The key includes a hash of
every warpsched source file, so a verdict is reused only by the exact code that produced it;
only SAFE results without findings are stored (anything else is searched again and shown in
full). ``WARPSCHED_VERDICT_CACHE=0`` turns the disk layer off.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from typing import Any, List, Optional

from ..cachedir import cache_dir

ENV_DISK = "WARPSCHED_VERDICT_CACHE"


class VerdictCache:
    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._entries: "OrderedDict[str, Any]" = OrderedDict()
        self.runs = 0
        self.hits = 0
        self.looked_up: List[str] = []  # fingerprints asked for, in order (what was checked)

    def get(self, fingerprint: str) -> Optional[Any]:
        self.looked_up.append(fingerprint)
        result = self._entries.get(fingerprint)
        if result is not None:
            self._entries.move_to_end(fingerprint)
            self.hits += 1
        return result

    def put(self, fingerprint: str, result: Any) -> None:
        """A result the checker just computed (counted in ``runs``)."""
        self.runs += 1
        self.remember(fingerprint, result)

    def remember(self, fingerprint: str, result: Any) -> None:
        """Keep ``result`` (e.g. one read from disk: no checker run)."""
        self._entries[fingerprint] = result
        self._entries.move_to_end(fingerprint)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def __contains__(self, fingerprint: str) -> bool:
        return fingerprint in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.runs = self.hits = 0
        self.looked_up = []


_CODE_VERSION: Optional[str] = None


def code_version() -> str:
    """sha256 over warpsched's own source files (path and bytes): any change to the checker, the
    model or the lowering gives another key, so a stored verdict never outlives its code."""
    global _CODE_VERSION
    if _CODE_VERSION is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.sha256()
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as fh:
                    h.update(fh.read())
        _CODE_VERSION = h.hexdigest()
    return _CODE_VERSION


class DiskVerdicts:
    """SAFE verdicts on disk (see the module docstring). Unreadable, foreign or corrupt files are
    misses; a write that fails is skipped: the cache never decides anything, it only saves a search."""

    def __init__(self):
        self.hits = 0  # verdicts served from disk in this process

    def enabled(self) -> bool:
        return os.environ.get(ENV_DISK, "1") != "0"

    def path(self, fingerprint: str) -> str:
        return os.path.join(cache_dir(), "verdicts", f"{code_version()[:16]}-{fingerprint}.json")

    def load(self, fingerprint: str):
        if not self.enabled():
            return None
        try:
            with open(self.path(fingerprint)) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        if (not isinstance(data, dict) or data.get("fingerprint") != fingerprint or data.get("code") != code_version()
                or data.get("verdict") != "SAFE"):
            return None
        from .checker.report import CheckerResult

        self.hits += 1
        return CheckerResult("SAFE", int(data.get("states", 0)), float(data.get("seconds", 0.0)), [], None,
                             str(data.get("text", "")), str(data.get("loop_note", "")))

    def store(self, fingerprint: str, result) -> bool:
        if not self.enabled() or result.verdict != "SAFE" or result.findings:
            return False
        data = {"fingerprint": fingerprint, "code": code_version(), "verdict": "SAFE", "states": result.states,
                "seconds": result.seconds, "text": result.text, "loop_note": result.loop_note}
        path = self.path(fingerprint)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
        except OSError:
            return False
        return True


VERDICTS = VerdictCache()
DISK = DiskVerdicts()

__all__ = ["DISK", "VERDICTS", "DiskVerdicts", "VerdictCache", "code_version"]
