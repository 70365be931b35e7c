"""In-process cache of exhaustive-checker verdicts, keyed by program fingerprint.

A kernel is traced again on every ``cute.compile``; its program, and so its verdict, is the
same each time. The cache lives as long as the Python process (nothing is written to disk:
a verdict depends on the warpsched version that produced it). ``runs`` counts checker runs,
``hits`` the verdicts served from the cache.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, List, Optional


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
        self.runs += 1
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


VERDICTS = VerdictCache()

__all__ = ["VERDICTS", "VerdictCache"]
