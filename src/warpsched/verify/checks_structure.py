"""Structure: task declarations, captured domains, stage roles, the dependency graph and
schedule coverage. (Named work dispatch is enforced at capture time by model/schedule.py.)"""
from __future__ import annotations

from typing import Any, Iterable, List

from ..errors import Finding
from ..model.ir import DomainLoop, ScheduleResult, StepKind
from ..model.schedule import ScheduleFunction
from ..model.source import caller_location
from ..model.task import Task
from .findings_util import (F, as_list, declared, dedupe, graph_items, in_list, is_int, is_pos_int,
                            is_resource, rname, steps, targets, tname)
from .program import Program
from ..model.resources import PdlLaunchBarrier, PdlWaitBarrier

DOMAIN = "captured domain validity"
ROLES = "resource stage roles"
REALIZABLE = "dependency graph realizable"
IN_GRAPH = "every resource in the graph"
COVERAGE = "schedule resource coverage"
TASKS = "task declaration"


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    out += _tasks(program)
    out += _domains(program)
    out += _roles(program)
    out += _graph(program)
    out += _coverage(program)
    return dedupe(out)


# ------------------------------------------------------------------ tasks
def _tasks(program: Program) -> List[Finding]:
    out = []
    tasks = program.tasks if isinstance(program.tasks, list) else []
    if not tasks:
        out.append(F(TASKS, "the program has no tasks", expected="at least one Task",
                     fix="pass tasks=[Task(...), ...] to TaskManager"))
    good = []
    for t in tasks:
        if not isinstance(t, Task):
            out.append(F(TASKS, f"tasks= contains {type(t).__name__} {t!r:.60}, not a Task",
                         expected="warpsched.Task instances", fix="wrap the schedule in Task(name=..., ...)"))
            continue
        if not (is_int(t.warp_idx) and t.warp_idx >= 0):
            out.append(F(TASKS, f"warp_idx={t.warp_idx!r} is not a non-negative int", task=t,
                         location=t.location, expected="an int >= 0", fix="give the task's first warp index"))
        elif not is_pos_int(t.num_warps):
            out.append(F(TASKS, f"num_warps={t.num_warps!r} is not a positive int", task=t, location=t.location,
                         expected="an int >= 1", fix="give the number of warps the task runs on"))
        else:
            good.append(t)
        for attr in ("src_resources", "dst_resources"):
            for r in declared(t, attr):
                if not is_resource(r):
                    out.append(F(TASKS, f"{attr} contains {type(r).__name__} {r!r:.60}, not a MemoryResource",
                                 task=t, location=t.location, expected="MemoryResource instances",
                                 fix="list the resource objects the schedule is called with"))
    names = {}
    for t in tasks:
        if isinstance(t, Task):
            names.setdefault(tname(t), []).append(t)
    for n, ts in names.items():
        if len(ts) > 1:
            out.append(F(TASKS, f"{len(ts)} tasks are named {n!r}", task=n, location=ts[1].location,
                         expected="unique task names", fix="give every task its own name="))
    good.sort(key=lambda t: t.warp_idx)
    for a, b in zip(good, good[1:]):
        if b.warp_idx < a.warp_end:
            out.append(F(TASKS, f"warps [{b.warp_idx}, {b.warp_end}) of {b.name!r} overlap "
                         f"[{a.warp_idx}, {a.warp_end}) of {a.name!r}", task=b, location=b.location,
                         expected=f"warp_idx >= {a.warp_end} (tasks own disjoint warp ranges)",
                         fix="move the task to free warps"))
    limit = program.options.max_threads_per_block
    if good and max(t.warp_end for t in good) * 32 > limit:
        last = max(good, key=lambda t: t.warp_end)
        out.append(F(TASKS, f"the tasks span {last.warp_end} warps = {last.warp_end * 32} threads",
                     task=last, location=last.location, expected=f"at most {limit // 32} warps ({limit} threads)",
                     fix="use fewer warps per task"))
    return out


# ------------------------------------------------------------------ domains
_BAD_BOUND = (str, bytes, float, complex, list, tuple, dict, set, type(None))


def _domains(program: Program) -> List[Finding]:
    out = []
    for t in program.tasks:
        if not isinstance(t, Task):
            continue
        s = t.schedule
        if not isinstance(s, ScheduleResult):
            hint = ("call the @schedule function: schedule=my_schedule(res, ...)" if isinstance(s, ScheduleFunction)
                    else "pass schedule=<@schedule function>(resources...)")
            out.append(F(DOMAIN, f"schedule= is {type(s).__name__}, not a captured schedule", task=t,
                         location=t.location, expected="the ScheduleResult returned by calling a @schedule function",
                         fix=hint))
            continue
        d = s.domain_loop
        if d is None:
            continue
        for name in ("start", "end", "step"):
            b = getattr(d, name)
            if DomainLoop.is_provider(b) and not isinstance(b, bool):
                if not _is_task_method(t, b):
                    out.append(F(DOMAIN, f"domain {name} {getattr(b, '__qualname__', b)!r} is not a method of "
                                 f"task class {type(t).__name__}", task=t, location=d.location,
                                 expected=f"a method defined on {type(t).__name__} (a dynamic domain provider)",
                                 fix=f"subclass Task and define the provider on it, or pass a static int {name}"))
            elif isinstance(b, _BAD_BOUND) or isinstance(b, bool) or (isinstance(b, float)):
                out.append(F(DOMAIN, f"domain {name}={b!r} is not an int, a runtime value or a task method",
                             task=t, location=d.location, expected="an int, a runtime integer, or a Task method",
                             fix="pass integer bounds, or a Task method for a per-tile bound"))
        if type(d.step) is int and d.step == 0:
            out.append(F(DOMAIN, "domain_loop step is 0: the loop can never advance", task=t, location=d.location,
                         expected="a non-zero step", fix="use step=1 (or the lane count for domain-lane interleaving)"))
    return out + _shared_counts(program)


def _bound_key(b: Any):
    """Equal keys: the same bound (an int's value, a trip_count's symbol and offset, else the object)."""
    if type(b) is int:
        return ("int", b)
    root = getattr(b, "root", None)
    if root is not None and hasattr(b, "offset"):
        return ("sym", id(root), b.offset)
    return ("obj", id(b))


def _shared_counts(program: Program) -> List[Finding]:
    """Loops declaring one ``count=`` symbol are checked for one trip count: their bounds must be the
    same range (domain-lane siblings: the same end and step, a lane start each), or their real trip
    counts can differ while the checker proves them equal."""
    out, first = [], {}
    for t in program.tasks:
        d = getattr(getattr(t, "schedule", None), "domain_loop", None)
        c = getattr(d, "count", None) if d is not None else None
        if c is None or type(c) is int:
            continue
        key = _bound_key(c)
        lanes = type(d.start) is int and type(d.step) is int and 0 <= d.start < d.step
        mine = (_bound_key(d.end), _bound_key(d.step), None if lanes else _bound_key(d.start))
        if key not in first:
            first[key] = (t, d, mine)
            continue
        t0, d0, theirs = first[key]
        if mine != theirs:
            out.append(F(DOMAIN, f"domain_loop({d.start!r}, {d.end!r}, {d.step!r}) declares count={c!r} like "
                         f"{t0.name!r}'s domain_loop({d0.start!r}, {d0.end!r}, {d0.step!r}) at {d0.location}, but the "
                         "bounds differ, so the two loops can run different trip counts", task=t, location=d.location,
                         expected="the same start, end and step in every loop sharing a count symbol",
                         fix="give both loops the same bounds, or declare a separate count"))
    return out


def _is_task_method(task: Task, fn: Any) -> bool:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return False
    attr = getattr(type(task), name, None)
    target = getattr(fn, "__func__", fn)
    return attr is not None and (attr is target or getattr(attr, "__func__", None) is target
                                 or getattr(attr, "__wrapped__", None) is target)


# ------------------------------------------------------------------ roles
def _roles(program: Program) -> List[Finding]:
    out = []
    for t in program.tasks:
        if not isinstance(t, Task):
            continue
        src, dst = declared(t, "src_resources"), declared(t, "dst_resources")
        self_edges = {id(k) for k, vs in graph_items(program) if any(v is k for v in vs)}
        open_prod = set()  # resources whose producer bracket is open (ping-pong reads inside it)
        for s in steps(program, t):
            for r in targets(s):
                if s.kind is StepKind.ProducerAcquire:
                    open_prod.add(id(r))
                elif s.kind is StepKind.ProducerCommit:
                    open_prod.discard(id(r))
                side = s.kind.side
                if side is None or s.kind.is_aux:  # PDL verbs and auxiliary work: declared anywhere
                    if not in_list(r, src + dst):
                        out.append(F(ROLES, f"{s.method}() on {rname(r)} but task {tname(t)!r} does not declare it",
                                     task=t, resource=r, location=s.location,
                                     expected=f"{rname(r)} in src_resources or dst_resources",
                                     fix=f"add {rname(r)} to the task's src_resources (reads) or dst_resources"))
                    continue
                want, lst = ("dst_resources", dst) if side == "producer" else ("src_resources", src)
                if in_list(r, lst):
                    continue
                if side == "consumer" and id(r) in self_edges and id(r) in open_prod and in_list(r, dst):
                    continue  # ping-pong producer reads the current contents inside its acquire/commit
                role = "producer" if side == "producer" else "consumer"
                out.append(F(ROLES, f"{role} operation {s.method}() on {rname(r)}, which task {tname(t)!r} does not "
                             f"list in {want}", task=t, resource=r, location=s.location,
                             expected=f"{rname(r)} in {want} ({role} stages belong to {want})",
                             fix=f"add {rname(r)} to {want}, or move the {s.method}() call to a task that "
                             f"{'writes' if side == 'producer' else 'reads'} it"))
    return out


# ------------------------------------------------------------------ graph
def _graph(program: Program) -> List[Finding]:
    out = []
    here = caller_location()  # the TaskManager(...) call that passed the graph
    if not isinstance(program.graph, dict):
        return [F(REALIZABLE, f"resource_dependency_graph is {type(program.graph).__name__}, not a dict", location=here,
                  expected="{downstream: [upstream, ...]}", fix="pass a dict of resource -> list of resources")]
    tasks = [t for t in program.tasks if isinstance(t, Task)]
    used = lambda r: any(t.uses(r) for t in tasks)  # noqa: E731
    reads = lambda t, r: in_list(r, declared(t, "src_resources"))  # noqa: E731
    writes = lambda t, r: in_list(r, declared(t, "dst_resources"))  # noqa: E731
    for down, raw in program.graph.items():
        ups = as_list(raw)
        if raw is not None and not isinstance(raw, (list, tuple, set, frozenset)):
            out.append(F(REALIZABLE, f"the graph value of {rname(down)} is {type(raw).__name__}, not a list",
                         resource=down, location=here, expected="a list of upstream resources",
                         fix=f"write {{{rname(down)}: [upstream, ...]}}"))
        for r in [down] + ups:
            if not is_resource(r):
                out.append(F(REALIZABLE, f"the graph names {type(r).__name__} {r!r:.60}, not a resource",
                             resource=rname(r), location=here, expected="MemoryResource keys and values",
                             fix="use the resource objects the tasks declare"))
        if not is_resource(down):
            continue
        if not used(down):
            out.append(F(REALIZABLE, f"{rname(down)} is in the dependency graph but no task uses it", resource=down,
                         location=here,
                         expected=f"a task with {rname(down)} in src_resources or dst_resources",
                         fix="remove it from the graph, or add the task that uses it"))
        for up in ups:
            if not is_resource(up):
                continue
            if not used(up):
                out.append(F(REALIZABLE, f"{rname(up)} (upstream of {rname(down)}) is in the dependency graph but no "
                             "task uses it", resource=up, location=here,
                             expected=f"a task with {rname(up)} in src_resources",
                             fix="remove it from the graph, or add the task that reads it"))
                continue
            if up is down or isinstance(up, PdlWaitBarrier) or isinstance(down, PdlLaunchBarrier):
                continue  # ping-pong self-edges and PDL ordering edges have their own checks
            if not any(reads(t, up) and writes(t, down) for t in tasks):
                readers = [t.name for t in tasks if reads(t, up)]
                writers = [t.name for t in tasks if writes(t, down)]
                out.append(F(REALIZABLE, f"edge {rname(down)} <- {rname(up)} has no backing task: no task reads "
                             f"{rname(up)} and writes {rname(down)} (readers {readers}, writers {writers})",
                             resource=down, location=here,
                             expected=f"a task with {rname(up)} in src_resources and {rname(down)} "
                             "in dst_resources", fix="fix the graph edge, or the task's resource lists"))
    in_graph = set()
    for k, vs in graph_items(program):
        in_graph.add(id(k))
        in_graph.update(id(v) for v in vs)
    for t in tasks:
        for r in declared(t, "src_resources") + declared(t, "dst_resources"):
            if not is_resource(r) or id(r) in in_graph or isinstance(r, PdlLaunchBarrier):
                continue
            in_graph.add(id(r))  # report each missing resource once
            out.append(F(IN_GRAPH, f"{rname(r)} does not appear in resource_dependency_graph", task=t, resource=r,
                         location=t.location, expected=f"{rname(r)} as a key or an upstream value",
                         fix=f"declare its edge, e.g. {{downstream: [{rname(r)}]}} or {{{rname(r)}: [upstream]}}"))
    return out


# ------------------------------------------------------------------ coverage
def _coverage(program: Program) -> List[Finding]:
    out = []
    for t in program.tasks:
        if not isinstance(t, Task) or not isinstance(t.schedule, ScheduleResult):
            continue
        touched = {id(r) for s in steps(program, t) for r in targets(s)}
        for attr in ("src_resources", "dst_resources"):
            for r in declared(t, attr):
                if is_resource(r) and id(r) not in touched:
                    out.append(F(COVERAGE, f"{rname(r)} is declared in {attr} of {tname(t)!r} but its schedule "
                                 f"{t.schedule.name!r} never uses it", task=t, resource=r, location=t.location,
                                 expected=f"a call on {rname(r)} in the schedule",
                                 fix=f"remove {rname(r)} from {attr}, or call its work/sync methods in the schedule"))
    return out

