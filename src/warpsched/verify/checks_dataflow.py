"""Value routing: TaskLocalVariable tokens flow forward, from a consumer read into a
producer write, readers (work arguments and when_true / when_false guards) take the most
recent write, and every argument names a parameter.

(A token read before any write in the same schedule is already rejected at capture time
by model/schedule.py, with the same check name.)
"""
from __future__ import annotations

from typing import Dict, Iterable, List

from ..errors import Finding
from ..model.enums import WorkAttr
from ..model.ir import ScheduleResult, Step, StepKind, Token
from ..model.resources import work_spec_of
from ..model.task import Task
from . import checks_writes
from .checks_traces import condition, executions
from .findings_util import F, dedupe, rname, steps
from .program import Program

ROUTING = "value routing"

_CONSUMER_READS = {StepKind.ConsumerWork, StepKind.ConsumerAux, StepKind.QueueAdvance}
_PRODUCER_WRITES = {StepKind.ProducerWork, StepKind.ProducerAux, StepKind.QueueFetch}
# Guards under which a writer may not have run at all before the reader runs.
_MAY_SKIP = {"when_true", "when_false", "skippable", "last_iter", "loop_empty"}


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    for t in program.tasks:
        if isinstance(t, Task) and isinstance(t.schedule, ScheduleResult):
            out += _task(program, t)
            out += _wgmma_values(t)
    out += checks_writes.check(program)  # consumer works that write their stage: whose bytes they are
    return dedupe(out)


def _task(program: Program, t: Task) -> List[Finding]:
    out = []
    st = steps(program, t)
    by_index: Dict[int, Step] = {s.index: s for s in st}
    for s in st:
        out += _params(t, s)
        for pname, tok in s.token_args.items():
            w = by_index.get(tok.producer_index)
            if w is None:
                continue
            where = f"{tok.resource_name}.{tok.method}() at {w.location}"
            if w.kind in _PRODUCER_WRITES and s.kind in _CONSUMER_READS:
                out.append(F(ROUTING, f"{s.resource_name}.{s.method}({pname}=...) (consumer work) reads a value "
                             f"written by producer work {where}: routed the wrong way", task=t, resource=s.resource,
                             location=s.location, expected="values flow from a consumer read into a producer write",
                             fix="return the value from a @consumer_work(returns=...) method and pass it to a "
                             "@producer_work method"))
            newer = _newer_writes(st, tok, w, s.index)
            if newer:
                out.append(F(ROUTING, f"{s.resource_name}.{s.method}({pname}=...) reads {tok.slot!r} from "
                             f"{where}, but {newer[-1].location} wrote it again since", task=t, resource=s.resource,
                             location=s.location, expected=f"the most recent write of {tok.slot!r} "
                             f"({newer[-1].location})", fix="pass the token returned by the latest call"))
            mine = {condition(g) for g in s.guards}
            risky = [g for g in w.guards if condition(g) not in mine and
                     (g.kind in _MAY_SKIP or (g.kind == "every" and g.start > 0))]
            if risky:
                out.append(F(ROUTING, f"{s.resource_name}.{s.method}({pname}=...) reads a value that {where} writes "
                             f"only under {', '.join(g.describe() for g in risky)}: on other paths it is read with no "
                             "prior writer", task=t, resource=s.resource, location=s.location,
                             expected="the reader guarded at least as strictly as its writer",
                             fix="move the reader under the writer's guard, or compute the value unconditionally"))
    return out + _stale_guards(t, st, by_index)


def _newer_writes(st, tok: Token, w: Step, before: int) -> List[Step]:
    """Steps after ``w`` and before index ``before`` that write ``tok``'s slot again."""
    if tok.slot is None:
        return []
    return [k for k in st if tok.producer_index < k.index < before and k.resource is w.resource
            and k.method == w.method and k.returns and any(x.slot == tok.slot for x in k.returns)]


def _stale_guards(t: Task, st, by_index: Dict[int, Step]) -> List[Finding]:
    """A when_true / when_false reads its token where the block opens (its first step): the
    slot must not have been written again since the token was returned (the same rule as a
    work argument; TS rejects a stale condition handle)."""
    out = []
    opened = {}
    for s in st:
        for g in s.guards:
            if g.token is not None and id(g) not in opened:
                opened[id(g)] = (g, s.index)
    for g, first in opened.values():
        tok = g.token
        w = by_index.get(tok.producer_index)
        newer = _newer_writes(st, tok, w, first) if w is not None else []
        if newer:
            out.append(F(ROUTING, f"{g.describe()} reads {tok.slot!r} from {tok.resource_name}.{tok.method}() at "
                         f"{w.location}, but {newer[-1].location} wrote it again since", task=t, resource=w.resource,
                         location=g.location, expected=f"the most recent write of {tok.slot!r} "
                         f"({newer[-1].location})", fix="guard on the token returned by the latest call"))
    return out


def _params(t: Task, s: Step) -> List[Finding]:
    if not (s.kind.is_work or s.kind.is_aux) or s.is_group_op:
        return []
    spec = work_spec_of(getattr(type(s.resource), s.method, None))
    if spec is None:
        return []
    params = spec.keyword_params()
    if params is None:
        return []
    unknown = [p for p in list(s.token_args) + list(s.const_args) if p not in params]
    if not unknown:
        return []
    return [F(ROUTING, f"{rname(s.resource)}.{s.method}() has no parameter {', '.join(map(repr, unknown))}",
              task=t, resource=s.resource, location=s.location,
              expected=f"arguments among {list(params)} (after stage_info)",
              fix=f"rename the argument, or add the parameter to {type(s.resource).__name__}.{s.method}")]


def _attrs(s: Step) -> WorkAttr:
    spec = work_spec_of(getattr(type(s.resource), s.method, None)) if not s.is_group_op else None
    return spec.attrs if spec is not None else WorkAttr.NONE


def _wgmma_values(t: Task) -> List[Finding]:
    """A value handed to WGMMA work (its accumulator fragment) is written by the hardware until
    wgmma.wait_group retires that group: another call reading it before then reads registers the
    wgmma is still writing. WGMMA work chained on the same accumulator is ordered by the hardware."""
    if not any(WorkAttr.WGMMA in _attrs(s) for s in t.schedule.steps if s.kind.is_work or s.kind.is_aux):
        return []
    out = []
    for run in executions(t.schedule):
        groups: List[tuple] = []  # in-flight wgmma groups: (step, token keys)
        for s, _i in run:
            if not (s.kind.is_work or s.kind.is_aux):
                continue
            attrs = _attrs(s)
            keys = {(tok.producer_index, tok.position) for tok in s.token_args.values()}
            if WorkAttr.WGMMA_WAIT in attrs:
                pending = s.const_args.get("pending", 0)
                pending = pending if type(pending) is int and pending > 0 else 0
                groups = groups[len(groups) - pending:] if pending else []
            elif WorkAttr.WGMMA in attrs:
                groups.append((s, keys))
            else:
                busy = [g for g, k in groups if k & keys]
                if busy:
                    w = busy[-1]
                    out.append(F(ROUTING, f"{s.resource_name}.{s.method}() reads a value that WGMMA work "
                                 f"{w.resource_name}.{w.method}() at {w.location} is still writing (no "
                                 "wgmma.wait_group has retired that group)", task=t, resource=s.resource,
                                 location=s.location, expected="a WGMMA_WAIT work (wgmma.wait_group) that retires the "
                                 "group first (pending=0, or fewer pending groups than were issued since)",
                                 fix=f"call the WGMMA_WAIT work (e.g. retire(pending=0)) before {s.method}()"))
    return out
