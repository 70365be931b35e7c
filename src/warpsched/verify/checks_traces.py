"""Concrete executions of one task's schedule, for the per-task static checks.

A schedule is a step list with sections and guards; the per-task checks (bracketing,
DMA ordering) need to know which steps actually run, in which order, for a few loop
lengths, runtime condition values and skipped/unskipped tiles. This module unrolls a
bounded, representative set of such executions. It is not the exhaustive checker:
it looks at one task at a time and never interleaves tasks.
"""
from __future__ import annotations

import itertools
from typing import Dict, Iterator, List, Optional, Tuple

from ..model.ir import Guard, ScheduleResult, Section, Step
from ..model.iteration import ITERATION_GUARDS, guard_fires

MAX_KEYS_ENUMERATED = 3  # more runtime keys: only all-true / all-false


def _trip_counts(sched: ScheduleResult) -> List[int]:
    d = sched.domain_loop
    if d is None:
        return [0]
    periods = [g.period + g.start for s in sched.steps for g in s.guards if g.kind == "every"]
    enough = max([4] + [2 * p + 1 for p in periods])
    n = d.trip_count
    if n is not None:
        return [min(n, enough)]
    if any(g.kind == "loop_empty" for s in sched.steps for g in s.guards):  # its block runs at 0 iterations only
        return sorted({0, 1, 2, 3, enough})
    return sorted({1, 2, 3, enough})


def _key_assignments(sched: ScheduleResult) -> List[Dict[str, bool]]:
    keys = []
    for s in sched.steps:
        for g in s.guards:
            if g.kind in ("when_true", "when_false") and repr(g.key) not in keys:
                keys.append(repr(g.key))
    if not keys:
        return [{}]
    if len(keys) <= MAX_KEYS_ENUMERATED:
        return [dict(zip(keys, vals)) for vals in itertools.product((True, False), repeat=len(keys))]
    return [{k: True for k in keys}, {k: False for k in keys}]


def _skip_patterns(sched: ScheduleResult) -> List[Tuple[bool, ...]]:
    if sched.work_tile_loop is None:
        return [(False,)]
    if any(g.kind == "skippable" for s in sched.steps for g in s.guards):
        return [(False, False), (True, False), (False, True), (True, True)]
    return [(False, False)]


def runs(guard: Guard, i: Optional[int], n: int, keys: Dict[str, bool], skipped: bool) -> bool:
    """Whether ``guard`` runs its block at zero-based loop iteration ``i`` (None: outside the
    loop) of an ``n``-iteration loop, under runtime key values ``keys`` and a (not) skipped tile."""
    k = guard.kind
    if k in ITERATION_GUARDS:
        return i is not None and guard_fires(k, i, n, guard.period or 1, guard.start or 0)
    if k == "when_true":
        return keys.get(repr(guard.key), True)
    if k == "when_false":
        return not keys.get(repr(guard.key), True)
    if k == "skippable":
        return not skipped
    if k == "loop_empty":
        return i is None and n == 0
    return True


def executions(sched: ScheduleResult) -> Iterator[List[Tuple[Step, Optional[int]]]]:
    """Yield executions: lists of (step, loop iteration or None) in execution order."""
    by = {sec: [s for s in sched.steps if s.section is sec] for sec in Section}
    for n in _trip_counts(sched):
        for keys in _key_assignments(sched):
            for pattern in _skip_patterns(sched):
                yield _one(by, n, keys, pattern)


def _one(by, n, keys, pattern) -> List[Tuple[Step, Optional[int]]]:
    out: List[Tuple[Step, Optional[int]]] = []

    def emit(section, i, skipped):
        for s in by[section]:
            if all(runs(g, i, n, keys, skipped) for g in s.guards):
                out.append((s, i))

    emit(Section.PROLOGUE, None, False)
    for skipped in pattern:
        emit(Section.HEAD, None, skipped)
        for i in range(n):
            emit(Section.LOOP, i, skipped)
        emit(Section.TAIL, None, skipped)
    emit(Section.EPILOGUE, None, False)
    return out


def condition(g: Guard) -> Tuple:
    """A guard's condition, independent of which ``with`` block wrote it."""
    return (g.kind, g.period, g.start, repr(g.key))
