"""Proofs shipped with the package: the exhaustive checker's SAFE verdicts on the programs of the kernels
warpsched ships (what ``ops.gemm`` / ``ops.attention`` / ``ops.attention_backward`` compile without a
configuration of the user's), written by ``warpsched prove`` into ``warpsched/proofs/manifest.json``.

A compile checks its traced program as always (every static check runs); only the exhaustive search is
skipped when the manifest holds the program's fingerprint, proven by the same checker: the manifest
records a hash of the code that decides a verdict (``checker_version``: the model that captures the
program, the checks, the barrier protocols, the manager), and an entry proven by other code is not
used. ``tests/test_proof_manifest.py`` fails when a shipped kernel's program, or the checker, changes
without ``warpsched prove`` being run again. Fingerprints do not depend on where the package lives, so
one manifest serves every install.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Optional

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../warpsched
PATH = os.path.join(PACKAGE, "proofs", "manifest.json")
SCHEMA = 1
# what decides a verdict: the captured program (model), the checks and the search (verify), the barrier
# protocol both read (protocol) and how a TaskManager runs them; not the lowering or the kernels' bodies
VERDICT_CODE = ("model", "verify", "protocol", "manager.py", "errors.py")

_VERSION = []


def checker_version() -> str:
    """sha256 over the files in ``VERDICT_CODE`` (paths from the package top, and bytes)."""
    if not _VERSION:
        h = hashlib.sha256()
        for entry in VERDICT_CODE:
            path = os.path.join(PACKAGE, entry)
            files = [path] if os.path.isfile(path) else sorted(
                os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names
                if name.endswith(".py"))
            for f in files:
                h.update(os.path.relpath(f, PACKAGE).replace(os.sep, "/").encode())
                with open(f, "rb") as fh:
                    h.update(fh.read())
        _VERSION.append(h.hexdigest())
    return _VERSION[0]


class Manifest:
    """The shipped verdicts (read once, lazily). ``lookup`` answers only for the current checker."""

    def __init__(self, path: str = PATH):
        self.path = path
        self._data: Optional[Dict[str, Any]] = None
        self.hits = 0  # verdicts served from the manifest in this process

    def data(self) -> Dict[str, Any]:
        if self._data is None:
            try:
                with open(self.path) as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                data = {}
            if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
                data = {"schema": SCHEMA, "checker": "", "entries": {}}
            self._data = data
        return self._data

    def current(self) -> bool:
        """The manifest was proven by this checker."""
        return self.data().get("checker") == checker_version()

    def lookup(self, fingerprint: str):
        """The shipped SAFE verdict of ``fingerprint`` as a CheckerResult, or None (not shipped, or proven
        by another checker)."""
        entry = self.data()["entries"].get(fingerprint)
        if entry is None or entry.get("verdict") != "SAFE" or not self.current():
            return None
        from .checker.report import CheckerResult

        self.hits += 1
        return CheckerResult("SAFE", int(entry.get("states", 0)), float(entry.get("seconds", 0.0)), [], None,
                             str(entry.get("text", "")), str(entry.get("loop_note", "")))

    def write(self, entries: Dict[str, Dict[str, Any]]) -> None:
        """Replace the manifest with ``entries`` (fingerprint -> entry), proven by this checker."""
        data = {"schema": SCHEMA, "checker": checker_version(), "entries": dict(sorted(entries.items()))}
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=False)
            fh.write("\n")
        self._data = data


MANIFEST = Manifest()

__all__ = ["MANIFEST", "Manifest", "checker_version"]
