"""Consumer work that writes the stage it holds (``WorkAttr.WRITES``): an epilogue staging its output in
operand bytes it has finished reading (the attention forward's O through its warp group's Q tile, the
backward's dK / dV through its V half).

The exhaustive checker sees a consumer hold its stage from ``wait`` to ``release``. A write inside that
bracket is ordered against the producer by the pipeline itself (the next producer write waits for the
release), but not against another consumer task holding the same stage at the same time. So a resource
with such a work and more than one consumer task declares what each consumer touches,
``consumer_footprint(task_name) -> {part: "r" | "rw"}``, and no part written by one task may appear in
another consumer's footprint. The footprints are declarations, as work attributes are (work bodies are
opaque to the checker): they must name every part of the stage the task's work methods index.
"""
from __future__ import annotations

from typing import Dict, Iterable, List

from ..errors import Finding
from ..model.enums import WorkAttr
from ..model.ir import StepKind
from ..model.resources import work_spec_of
from ..model.task import Task
from .findings_util import F, rname, steps, tasks_with
from .program import Program

WRITES = "consumer writes"
_MODES = ("r", "rw")


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    writers: Dict[int, list] = {}  # id(resource) -> [(task, step)] of its WRITES consumer works
    for t in program.tasks:
        if not isinstance(t, Task):
            continue
        for s in steps(program, t):
            if s.kind not in (StepKind.ConsumerWork, StepKind.ConsumerAux):
                continue
            spec = work_spec_of(getattr(type(s.resource), s.method, None))
            if spec is None or WorkAttr.WRITES not in spec.attrs:
                continue
            if WorkAttr.AUXILIARY in spec.attrs:  # auxiliary work may run outside the bracket: not a write
                out.append(F(WRITES, f"{rname(s.resource)}.{s.method}() is marked WRITES and AUXILIARY; an "
                             "auxiliary work may run outside the wait / release bracket, where a write races "
                             "with the producer", task=t, resource=s.resource, location=s.location,
                             expected="WRITES on a consumer work that runs inside its bracket",
                             fix="drop AUXILIARY from the writing work"))
                continue
            writers.setdefault(id(s.resource), []).append((t, s))
    for calls in writers.values():
        out += _resource(program, calls)
    return out


def _resource(program: Program, calls) -> List[Finding]:
    r = calls[0][1].resource
    # every task that may hold the stage as a consumer: waiters, and release-only or work-only halves of a
    # split consumer (their reads of the stage are as concurrent with the write as a waiter's)
    kinds = (StepKind.ConsumerWait, StepKind.ConsumerRelease, StepKind.ConsumerWork)
    consumers = [t for t in tasks_with(program, r, kinds) if isinstance(t, Task)]
    if len(consumers) < 2:
        return []  # the writer is the stage's only consumer: the pipeline orders it against the producer
    names = ", ".join(repr(t.name) for t in consumers)
    footprint = getattr(r, "consumer_footprint", None)
    t0, s0 = calls[0]
    if not callable(footprint):
        return [F(WRITES, f"{rname(r)}.{s0.method}() writes the stage that tasks {names} hold at the same time, "
                  "and nothing says which bytes each of them touches", task=t0, resource=r, location=s0.location,
                  expected=f"{rname(r)}.consumer_footprint(task_name) -> {{part: 'r' | 'rw'}} for each consumer "
                  "task, with no part one task writes in another's footprint",
                  fix=f"declare consumer_footprint on {type(r).__name__} (e.g. each warp group's own tile as its "
                  "'rw' part), or stage the output in a buffer no other consumer holds")]
    out: List[Finding] = []
    fp = {}
    for t in consumers:
        try:
            parts = footprint(t.name)
        except Exception as e:  # noqa: BLE001 - a user's declaration: report it, do not crash
            parts = e
        if not isinstance(parts, dict) or not parts or any(m not in _MODES for m in parts.values()):
            out.append(F(WRITES, f"{rname(r)}.consumer_footprint({t.name!r}) returned {parts!r}", task=t,
                         resource=r, location=s0.location,
                         expected="a non-empty dict {part name: 'r' or 'rw'} of the parts the task touches",
                         fix=f"return the parts task {t.name!r}'s work methods on {rname(r)} index"))
            continue
        fp[t.name] = parts
    if out:
        return out
    for t, s in calls:
        written = sorted(p for p, m in fp[t.name].items() if m == "rw")
        if not written:
            out.append(F(WRITES, f"{rname(r)}.{s.method}() writes the stage, but the footprint of task "
                         f"{t.name!r} declares no part it writes", task=t, resource=r, location=s.location,
                         expected=f"the part(s) {s.method}() writes marked 'rw' in consumer_footprint({t.name!r})",
                         fix="mark the written part 'rw'"))
            continue
        for o in consumers:
            shared = [p for p in written if o is not t and p in fp[o.name]]
            if shared:
                out.append(F(WRITES, f"{rname(r)}.{s.method}() in task {t.name!r} writes part "
                             f"{', '.join(map(repr, shared))} of the stage while task {o.name!r}, which holds the "
                             f"same stage, {'writes' if fp[o.name][shared[0]] == 'rw' else 'reads'} it",
                             task=t, resource=r, location=s.location,
                             expected="no part one consumer writes in another consumer's footprint",
                             fix=f"stage {s.method}()'s output in a part only task {t.name!r} touches, or release "
                             f"the stage in task {o.name!r} before the write (a separate resource)"))
    return out
