"""PDL ordering, the static part: a launch must not come before the program's wait, and
a task doing work on a resource that depends on a PdlWaitBarrier must wait first.

Cross-task orderings (a launch in one task racing a wait in another) are left to the
exhaustive checker. ``assume_pdl_wait_completed=True`` says the wait is emitted outside
warpsched, so every wait requirement is then considered met.
"""
from __future__ import annotations

from typing import Iterable, List

from ..errors import Finding
from ..model.ir import ScheduleResult, Step, StepKind
from ..model.resources import PdlWaitBarrier
from ..model.task import Task
from .checks_traces import condition
from .findings_util import F, SECTION_ORDER, dedupe, graph_items, rname, steps, targets
from .program import Program

PDL = "pdl ordering"
_CONDITIONAL = {"when_true", "when_false", "skippable"}


def check(program: Program) -> Iterable[Finding]:
    if program.options.assume_pdl_wait_completed:
        return []
    tasks = [t for t in program.tasks if isinstance(t, Task) and isinstance(t.schedule, ScheduleResult)]
    out: List[Finding] = []
    waits = [(t, s) for t in tasks for s in steps(program, t) if s.kind is StepKind.PdlWait]
    launches = [(t, s) for t in tasks for s in steps(program, t) if s.kind is StepKind.PdlLaunch]
    fix_wait = ("call pdl_wait.wait_griddep() before it (or pass assume_pdl_wait_completed=True when the wait is "
                "emitted outside warpsched)")
    for t, s in launches:
        own = [w for w in waits if w[0] is t]
        if not waits:
            out.append(F(PDL, f"{rname(s.resource)}.launch_griddep() but no task ever calls wait_griddep(): dependent "
                         "grids would launch before this grid waited for its predecessor", task=t, resource=s.resource,
                         location=s.location, expected="a PdlWaitBarrier.wait_griddep() before the launch",
                         fix=fix_wait))
            continue
        before = [w for _, w in own if _precedes(w, s)]
        if own and not before:
            out.append(F(PDL, f"{rname(s.resource)}.launch_griddep() runs before this task's wait_griddep() at "
                         f"{own[0][1].location}", task=t, resource=s.resource, location=s.location,
                         expected="wait_griddep() first, launch_griddep() after the work that unblocks dependents",
                         fix="move launch_griddep() after wait_griddep() (usually to the end of the schedule)"))
        mine = {condition(g) for g in s.guards}
        if all(_conditional(w, mine) for _, w in waits):
            w = waits[0][1]
            out.append(F(PDL, f"{rname(s.resource)}.launch_griddep() is unconditional but every wait_griddep() is "
                         f"conditional (e.g. {w.location} under {', '.join(g.describe() for g in w.guards)}): a "
                         "skipped path launches without waiting", task=t, resource=s.resource, location=s.location,
                         expected="an unconditional wait_griddep() (outside skippable()/when_*)",
                         fix="move wait_griddep() out of the conditional block"))
    out += _dependents(program, tasks)
    return dedupe(out)


def _precedes(a: Step, b: Step) -> bool:
    return (SECTION_ORDER[a.section], a.index) < (SECTION_ORDER[b.section], b.index)


def _conditional(w: Step, launch_conds) -> bool:
    return any(g.kind in _CONDITIONAL and condition(g) not in launch_conds for g in w.guards)


def _dependents(program: Program, tasks: List[Task]) -> List[Finding]:
    out = []
    for down, ups in graph_items(program):
        pdl_ups = [u for u in ups if isinstance(u, PdlWaitBarrier)]
        if not pdl_ups:
            continue
        for t in tasks:
            st = steps(program, t)
            work = [s for s in st if (s.kind.is_work or s.kind in (StepKind.ProducerAcquire, StepKind.ConsumerWait))
                    and not s.kind.is_aux and any(x is down for x in targets(s))]
            if not work:
                continue
            first = min(work, key=lambda s: (SECTION_ORDER[s.section], s.index))
            for u in pdl_ups:
                waits = [s for s in st if s.kind is StepKind.PdlWait and s.resource is u and _precedes(s, first)
                         and not any(g.kind in _CONDITIONAL for g in s.guards)]
                if not waits:
                    out.append(F(PDL, f"{rname(down)} depends on {rname(u)} but task {t.name!r} uses it at "
                                 f"{first.resource_name}.{first.method}() without calling {rname(u)}.wait_griddep() "
                                 "first", task=t, resource=down, location=first.location,
                                 expected=f"{rname(u)}.wait_griddep() earlier in the same task, unconditionally",
                                 fix=f"call {rname(u)}.wait_griddep() at the start of the schedule (list {rname(u)} in "
                                 "src_resources)"))
    return out

