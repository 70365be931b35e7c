"""``warpsched prove``: the exhaustive checker run on every program of the kernels warpsched ships
(``warpsched.kernels.shipped``), its SAFE verdicts written into the package's proof manifest
(``warpsched.verify.manifest``), so that a user's first ``ops.gemm`` or ``ops.attention`` compiles
without a search. ``--check`` only reports what is missing (exit 1), which is what the test suite runs.
"""
from __future__ import annotations

import sys
import time
from typing import Dict, List, Tuple

from .verify.manifest import MANIFEST, checker_version


def shipped_fingerprints() -> Dict[str, List[str]]:
    """fingerprint -> the labels of the shipped configurations with that program (built on the CPU, static
    checks only)."""
    from .kernels.shipped import programs

    out: Dict[str, List[str]] = {}
    for label, build in programs().items():
        mgr = build(verbose=False, exhaustive_deadlock_race_check=False)
        out.setdefault(mgr.fingerprint, []).append(label)
    return out


def missing(fingerprints: Dict[str, List[str]]) -> List[Tuple[str, List[str]]]:
    """The shipped programs the manifest does not hold for the current checker."""
    entries = MANIFEST.data()["entries"] if MANIFEST.current() else {}
    return [(fp, labels) for fp, labels in fingerprints.items() if fp not in entries]


def prove(check_only: bool = False, again: bool = False, max_states: int = 5_000_000, out=None) -> int:
    """Prove what is missing (``again``: everything) and rewrite the manifest; 0 on success, 1 when
    ``check_only`` finds programs missing or a shipped program is not SAFE. ``out``: stdout by default."""
    from .kernels.shipped import programs

    out = out or sys.stdout
    t0 = time.perf_counter()
    shipped = shipped_fingerprints()
    todo = list(shipped.items()) if again else missing(shipped)
    print(f"warpsched prove: {len(shipped)} distinct programs in {sum(map(len, shipped.values()))} shipped "
          f"configurations; {len(todo)} to prove (checker {checker_version()[:12]})", file=out)
    if check_only:
        for fp, labels in todo:
            print(f"  missing: {fp[:16]} {labels[0]}" + (f" (+{len(labels) - 1} more)" if len(labels) > 1 else ""),
                  file=out)
        if todo:
            print("warpsched prove: the manifest is out of date; run `warpsched prove` and commit "
                  "src/warpsched/proofs/manifest.json", file=out)
        return 1 if todo else 0
    entries = {} if again or not MANIFEST.current() else dict(MANIFEST.data()["entries"])
    builders = programs()
    for i, (fp, labels) in enumerate(todo, 1):
        mgr = builders[labels[0]](verbose=False, progress=False, cache_verdict=False, max_states=max_states)
        result = mgr.result.checker
        print(f"  [{i}/{len(todo)}] {result.verdict} {result.states} states {result.seconds:.1f} s  {labels[0]}",
              file=out, flush=True)
        if result.verdict != "SAFE":
            print(f"warpsched prove: {labels[0]} is {result.verdict}: a shipped kernel must be proven SAFE",
                  file=out)
            return 1
        entries[fp] = {"verdict": "SAFE", "states": result.states, "seconds": round(result.seconds, 3),
                       "loop_note": result.loop_note, "text": result.text, "kernels": sorted(labels)}
    for fp, labels in shipped.items():  # labels follow the configurations; stale programs are dropped
        if fp in entries:
            entries[fp]["kernels"] = sorted(labels)
    entries = {fp: e for fp, e in entries.items() if fp in shipped}
    MANIFEST.write(entries)
    import os

    print(f"warpsched prove: wrote {MANIFEST.path} ({len(entries)} programs, {os.path.getsize(MANIFEST.path)} "
          f"bytes) in {time.perf_counter() - t0:.1f} s", file=out)
    return 0
