"""PDL ordering, the static part: a launch must not come before the program's wait, and
a task doing work on a resource that depends on a PdlWaitBarrier must wait first -- or, when it
only reads a pipelined resource, every task that fills it must (``ordered_through_fill``).

Cross-task orderings (a launch in one task racing a wait in another) are left to the
exhaustive checker. ``assume_pdl_wait_completed=True`` says the wait is emitted outside
warpsched, so every wait requirement is then considered met.
"""
from __future__ import annotations

from typing import Iterable, List, Optional

from ..errors import Finding
from ..model.ir import ScheduleResult, Step, StepKind
from ..model.resources import PdlWaitBarrier
from ..model.task import Task
from .checks_traces import condition
from .findings_util import F, SECTION_ORDER, dedupe, graph_items, rname, steps, targets
from .program import Program

PDL = "pdl ordering"
_CONDITIONAL = {"when_true", "when_false", "skippable", "loop_empty"}


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


def _first_use(program: Program, t: Task, down) -> Optional[Step]:
    """The task's first non-auxiliary work, acquire or wait on ``down`` (None: it does not use it)."""
    work = [s for s in steps(program, t) if (s.kind.is_work or s.kind in (StepKind.ProducerAcquire,
                                                                         StepKind.ConsumerWait))
            and not s.kind.is_aux and any(x is down for x in targets(s))]
    return min(work, key=lambda s: (SECTION_ORDER[s.section], s.index)) if work else None


def _waits_before(program: Program, t: Task, u, first: Step) -> bool:
    return any(s.kind is StepKind.PdlWait and s.resource is u and _precedes(s, first)
               and not any(g.kind in _CONDITIONAL for g in s.guards) for s in steps(program, t))


def _fills(program: Program, t: Task, down) -> bool:
    return any(s.kind in (StepKind.ProducerAcquire, StepKind.ProducerWork, StepKind.ProducerCommit)
               and any(x is down for x in targets(s)) for s in steps(program, t))


def ordered_through_fill(program: Program, t: Task, down, u) -> Optional[List[Task]]:
    """The tasks that fill ``down`` when ``t`` only reads it through its pipeline and every one of
    them calls ``u.wait_griddep()`` unconditionally before it first fills it: each stage ``t`` waits
    for was written after that wait, so ``t`` is ordered after the predecessor grid through the
    full barrier (transitively) and needs no wait of its own. None otherwise. The exhaustive
    checker reads the same rule (its reads of such a resource are not PDL-dependent)."""
    if getattr(down, "pipeline_config", None) is None or _fills(program, t, down):
        return None
    fillers = [x for x in program.tasks if isinstance(x, Task) and x is not t and _fills(program, x, down)]
    if not fillers:
        return None
    for x in fillers:
        first = _first_use(program, x, down)
        if first is None or not _waits_before(program, x, u, first):
            return None
    return fillers


def _dependents(program: Program, tasks: List[Task]) -> List[Finding]:
    out = []
    for down, ups in graph_items(program):
        pdl_ups = [u for u in ups if isinstance(u, PdlWaitBarrier)]
        if not pdl_ups:
            continue
        for t in tasks:
            first = _first_use(program, t, down)
            if first is None:
                continue
            for u in pdl_ups:
                if _waits_before(program, t, u, first) or ordered_through_fill(program, t, down, u):
                    continue
                fillers = [x.name for x in tasks if x is not t and _fills(program, x, down)]
                also = (f"; the task(s) that fill it ({', '.join(repr(n) for n in fillers)}) do not all call "
                        f"{rname(u)}.wait_griddep() before filling it either, so the full barrier does not order "
                        "it after the predecessor grid" if fillers and not _fills(program, t, down) else "")
                out.append(F(PDL, f"{rname(down)} depends on {rname(u)} but task {t.name!r} uses it at "
                             f"{first.resource_name}.{first.method}() without calling {rname(u)}.wait_griddep() "
                             f"first{also}", task=t, resource=down, location=first.location,
                             expected=f"{rname(u)}.wait_griddep() earlier in the same task, unconditionally"
                             + (", or in every task that fills it" if fillers and not _fills(program, t, down)
                                else ""),
                             fix=(f"call {rname(u)}.wait_griddep() at the start of the schedule of "
                                  f"{', '.join(repr(n) for n in fillers)} (before it fills {rname(down)}), or of "
                                  f"{t.name!r}" if also else
                                  f"call {rname(u)}.wait_griddep() at the start of the schedule (list {rname(u)} in "
                                  "src_resources)")))
    return out
