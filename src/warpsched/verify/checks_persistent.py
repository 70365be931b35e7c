"""Persistent kernels: WorkQueue placement and the skip_if predicate."""
from __future__ import annotations

import inspect
from typing import Iterable, List

from ..errors import Finding
from ..model.enums import PipelineType
from ..model.ir import ScheduleResult, Section, StepKind
from ..model.resources import WorkQueue
from ..model.task import Task
from .findings_util import F, config_of, dedupe, good_config, rname, steps, targets
from .program import Program

PLACEMENT = "workqueue placement"
SKIP = "persistent skip predicate"

_EPILOGUE_KINDS = {StepKind.ConsumerTryWait, StepKind.ConsumerWait, StepKind.QueueAdvance, StepKind.ConsumerRelease}
_FETCH_KINDS = {StepKind.ProducerTryAcquire, StepKind.ProducerAcquire, StepKind.QueueFetch,
                StepKind.ProducerCommit}


def check(program: Program) -> Iterable[Finding]:
    tasks = [t for t in program.tasks if isinstance(t, Task) and isinstance(t.schedule, ScheduleResult)]
    out: List[Finding] = []
    persistent = [t for t in tasks if t.schedule.work_tile_loop is not None]
    if persistent:
        for t in tasks:
            if t.schedule.work_tile_loop is None:
                out.append(F(PLACEMENT, f"task {t.name!r} is not persistent but {persistent[0].name!r} is "
                             f"(work_tile_loop at {persistent[0].schedule.work_tile_loop.location})", task=t,
                             location=t.schedule.location, expected="all tasks persistent, or none",
                             fix="wrap this task's schedule in the same work_tile_loop(wq) as the other tasks"))
    queues = []
    for t in persistent:
        wtl = t.schedule.work_tile_loop
        wq = wtl.work_queue
        if not isinstance(wq, WorkQueue):
            out.append(F(PLACEMENT, f"work_tile_loop() over {type(wq).__name__}, not a WorkQueue", task=t,
                         resource=rname(wq), location=wtl.location, expected="a WorkQueue resource",
                         fix="pass the kernel's WorkQueue to work_tile_loop()"))
            continue
        if all(q is not wq for q in queues):
            queues.append(wq)
        out += _skip_if(t, wq, wtl)
    if len(queues) > 1:
        for t in persistent:
            wq = t.schedule.work_tile_loop.work_queue
            if wq is not queues[0] and isinstance(wq, WorkQueue):
                out.append(F(PLACEMENT, f"task {t.name!r} loops over {rname(wq)} but other tasks loop over "
                             f"{rname(queues[0])}", task=t, resource=wq, location=t.schedule.work_tile_loop.location,
                             expected=f"one WorkQueue ({rname(queues[0])}) for every persistent task",
                             fix="use the same WorkQueue in every task's work_tile_loop"))
    for t in tasks:
        out += _placement(program, t)
    for q in queues:
        out += _queue_kind(program, q, persistent)
    return dedupe(out)


def _placement(program: Program, t: Task) -> List[Finding]:
    out = []
    sched = t.schedule
    wtl = sched.work_tile_loop
    has_loop = sched.domain_loop is not None
    advances = []
    for s in steps(program, t):
        qs = [r for r in targets(s) if isinstance(r, WorkQueue)]
        if not qs:
            continue
        q = qs[0]
        n = rname(q)
        if wtl is None:
            out.append(F(PLACEMENT, f"{n}.{s.method}() in a schedule without work_tile_loop()", task=t, resource=q,
                         location=s.location, expected="WorkQueue calls only inside work_tile_loop(wq)",
                         fix=f"wrap the schedule in work_tile_loop({n}) or drop the queue calls"))
            continue
        if s.kind not in _EPILOGUE_KINDS | _FETCH_KINDS:
            continue
        if s.section in (Section.PROLOGUE, Section.EPILOGUE):
            where = "before" if s.section is Section.PROLOGUE else "after"
            out.append(F(PLACEMENT, f"{n}.{s.method}() runs {where} the work_tile_loop, not once per tile", task=t,
                         resource=q, location=s.location, expected="inside work_tile_loop, after the domain loop",
                         fix="move the queue epilogue into the work-tile tail"))
        elif has_loop and s.section is not Section.TAIL:
            part = "main loop (once per domain iteration)" if s.section is Section.LOOP else "head"
            out.append(F(PLACEMENT, f"{n}.{s.method}() is in the {part} instead of the work-tile tail", task=t,
                         resource=q, location=s.location,
                         expected="the queue epilogue after the domain_loop, inside work_tile_loop",
                         fix="dedent the wait / get_and_advance_work_tile / release calls out of the domain loop"))
        other_guards = [g for g in s.guards if g.kind != "skippable"]
        if any(g.kind == "skippable" for g in s.guards):
            out.append(F(PLACEMENT, f"{n}.{s.method}() is inside skippable(): a skipped tile never advances the "
                         "queue", task=t, resource=q, location=s.location,
                         expected="queue bookkeeping outside wtwl.skippable()",
                         fix="keep only the data work inside skippable(); run the queue epilogue on every tile"))
        elif other_guards:
            out.append(F(PLACEMENT, f"{n}.{s.method}() is guarded by {other_guards[0].describe()}: the queue must advance "
                         "on every tile", task=t, resource=q, location=s.location,
                         expected="unconditional queue bookkeeping", fix="move it out of the guard"))
        if s.kind is StepKind.QueueAdvance:
            advances.append(s)
    if wtl is not None and isinstance(wtl.work_queue, WorkQueue):
        n = rname(wtl.work_queue)
        if not advances:
            out.append(F(PLACEMENT, f"persistent task {t.name!r} never calls {n}.get_and_advance_work_tile()",
                         task=t, resource=wtl.work_queue, location=wtl.location,
                         expected="the queue epilogue once per work tile: try_wait / wait / "
                         "get_and_advance_work_tile / release",
                         fix=f"add {n}.wait(); {n}.get_and_advance_work_tile(); {n}.release() after the domain loop"))
        elif len([s for s in advances if s.section is not Section.LOOP]) > 1:
            out.append(F(PLACEMENT, f"{n}.get_and_advance_work_tile() is called {len(advances)} times per tile",
                         task=t, resource=wtl.work_queue, location=advances[1].location,
                         expected="exactly once per work tile", fix="keep a single queue epilogue"))
    return out


def _queue_kind(program: Program, q: WorkQueue, persistent: List[Task]) -> List[Finding]:
    out = []
    cfg = config_of(q)
    fetchers = [t for t in persistent if any(s.kind in (StepKind.QueueFetch, StepKind.ProducerAcquire)
                                             and any(r is q for r in targets(s)) for s in steps(program, t))]
    if cfg is None:
        for t in fetchers:
            out.append(F(PLACEMENT, f"{rname(q)} is a static queue (no pipeline_config) but task {t.name!r} "
                         "fetches/acquires it", task=t, resource=q, location=t.schedule.work_tile_loop.location,
                         expected="no scheduler task for a static persistent queue",
                         fix="drop the acquire/fetch_work_tile/commit calls, or give the queue a ClcFetchAsync "
                         "pipeline"))
        return out
    good = good_config(q)
    if good is not None and good.pipeline_type is not PipelineType.ClcFetchAsync:
        out.append(F(PLACEMENT, f"{rname(q)} has a {good.pipeline_type.value} pipeline", resource=q,
                     location=good.location, expected="ClcFetchAsync (a CLC dynamic persistent queue) or no pipeline",
                     fix="use PipelineConfig.create_clc_fetch_async_pipeline_cfg(...)"))
    if q.counter_fed:
        out += _counter_commits(program, q, fetchers)
    if not fetchers:
        out.append(F(PLACEMENT, f"{rname(q)} is a dynamic (CLC) queue but no task fetches work tiles", resource=q,
                     location=getattr(cfg, "location", None),
                     expected="one scheduler task: acquire / fetch_work_tile / commit, then the queue epilogue",
                     fix="add a scheduler task, or drop the queue's pipeline_config for static scheduling"))
    return out


def _counter_commits(program: Program, q: WorkQueue, fetchers: List[Task]) -> List[Finding]:
    """A counter queue's fetching thread arrives on full[s] right after its store, where the plan (and so the
    checker) places the arrival at ``commit()``: the two are one point only when ``commit()`` is the task's next
    step after ``fetch_work_tile()``."""
    out = []
    for t in fetchers:
        seq = list(steps(program, t))
        for i, s in enumerate(seq):
            if s.kind is not StepKind.QueueFetch or not any(r is q for r in targets(s)):
                continue
            nxt = seq[i + 1] if i + 1 < len(seq) else None
            if nxt is None or nxt.kind is not StepKind.ProducerCommit or not any(r is q for r in targets(nxt)):
                got = "nothing" if nxt is None else f"{nxt.kind.value}"
                out.append(F(PLACEMENT, f"{rname(q)} hands out tiles by an atomic counter, and task {t.name!r} "
                             f"follows {rname(q)}.fetch_work_tile() with {got}", task=t, resource=q,
                             location=s.location, expected=f"{rname(q)}.commit() directly after fetch_work_tile() "
                             "(the fetch itself arrives on the stage's full barrier)",
                             fix=f"move the other calls after {rname(q)}.commit()"))
    return out


def _skip_if(t: Task, wq: WorkQueue, wtl) -> List[Finding]:
    fn = wtl.skip_if
    if fn is None:
        return []
    base = dict(task=t, resource=wq, location=wtl.location)
    if not callable(fn):
        return [F(SKIP, f"skip_if={fn!r:.60} is not callable", expected="a WorkQueue method (work_queue, work_tile)",
                  fix=f"pass skip_if={type(wq).__name__}.skip_work_tile_if", **base)]
    qual = getattr(fn, "__qualname__", "") or ""
    name = getattr(fn, "__name__", None)
    owner = qual.rsplit(".", 1)[0] if "." in qual else None
    if owner is not None and not owner.endswith("<locals>"):  # a method, not a nested plain function
        mro = [k.__qualname__ for k in type(wq).__mro__]
        if owner not in mro or getattr(type(wq), name or "", None) is None:
            return [F(SKIP, f"skip_if={qual} is a method of {owner}, not of the loop's work queue "
                      f"{type(wq).__name__}", expected=f"a method of {type(wq).__name__} (or one of its bases)",
                      fix=f"define the predicate on {type(wq).__name__} and pass "
                      f"{type(wq).__name__}.{name or 'skip_work_tile_if'}", **base)]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    pos = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in pos if p.default is p.empty]
    var = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    if var or (len(required) <= 2 <= len(pos)) or (len(required) <= 1 <= len(pos)):
        return []
    return [F(SKIP, f"skip_if {qual or fn!r} takes {len(required)} required argument(s)",
              expected="(work_queue, work_tile) or (work_tile)", fix="give the predicate one or two parameters",
              **base)]

