"""Schedule capture: ``@schedule`` records resource calls into the IR; nothing executes.

Plain Python ``for`` / ``if`` in the body run at capture time and unroll. Runtime control
flow is only expressed with the context managers here: ``domain_loop``, ``work_tile_loop``,
``skippable()``, ``first_iter()``, ``last_iter()``, ``every()``, ``when_true`` / ``when_false``.
"""
from __future__ import annotations

import dis
import functools
import re
import sys
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Tuple

from ..errors import user_facing
from .capture import ACTIVE as _ACTIVE
from .capture import fail as _fail
from .tripcount import TripCount
from .ir import (SYNC_VERBS, DomainLoop, Guard, ScheduleResult, Section, Step, StepKind, Token,
                 WorkTileLoop)
from .pipeline_group import PipelineGroup
from .resources import MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, WorkQueue, work_spec_of
from .source import PORT_MARKER, SourceLoc, caller_globals, caller_location

def _current(what: str) -> "_Capture":
    if not _ACTIVE:
        _fail("schedule capture", f"{what} used outside a @schedule function",
              fix="call it inside the body of a function decorated with @schedule")
    return _ACTIVE[-1]


class _Capture:
    def __init__(self, name: str):
        self.name = name
        self.steps: List[Step] = []
        self.section = Section.HEAD
        self.guards: List[Guard] = []
        self.domain_loop: Optional[DomainLoop] = None
        self.loop_open = False
        self.work_tile_loop: Optional[WorkTileLoop] = None
        self.wtl_open = False
        self.tokens: set = set()
        self._call_counts: Dict[Tuple[int, StepKind, Section], int] = {}

    def record(self, kind: StepKind, resource: Any, method: str, location: SourceLoc, *,
               token_args=None, const_args=None, via_group=None, spec=None, unpack: Optional[int] = None):
        for name, tok in (token_args or {}).items():
            if tok not in self.tokens:
                _fail("value routing", f"value {tok!r} passed as {name}= to {method}() is used before it is "
                      "produced in this schedule", location=location, resource=getattr(resource, "name", None),
                      fix="produce the value earlier in the same schedule (a consumer work with returns=)")
        key = (id(resource), kind, self.section)
        call_idx = self._call_counts.get(key, 0)
        self._call_counts[key] = call_idx + 1
        step = Step(index=len(self.steps), kind=kind, resource=resource, method=method, section=self.section,
                    guards=tuple(self.guards), location=location, token_args=dict(token_args or {}),
                    const_args=dict(const_args or {}), via_group=via_group, call_idx=call_idx)
        step.returns = self._make_tokens(step, spec, unpack)
        self.tokens.update(step.returns)
        self.steps.append(step)
        return step

    def _make_tokens(self, step: Step, spec, unpack: Optional[int]) -> Tuple[Token, ...]:
        if step.kind.is_sync:
            return ()
        rname = step.resource_name
        if spec is not None and spec.returns:
            slots = spec.slot_names(step.resource)
            return tuple(Token(s, rname, step.method, step.index, i) for i, s in enumerate(slots))
        count = unpack if unpack else 1
        return tuple(Token(None, rname, step.method, step.index, i) for i in range(count))


def _unpack_count(frame) -> Optional[int]:
    """How many values the caller unpacks the call result into (``a, b = r.m()``), if any."""
    try:
        for ins in dis.get_instructions(frame.f_code):
            if ins.offset > frame.f_lasti:
                return ins.arg if ins.opname == "UNPACK_SEQUENCE" else None
    except Exception:  # noqa: BLE001 - bytecode introspection is best effort
        return None
    return None


# CuTe DSL's own modules: its front ends probe the values a schedule body handles (hasattr-style lookups
# such as ``_mutable_ref`` or ``ir_value`` under FrontendNext); those lookups are not schedule calls.
_DSL_FILE = re.compile(r"[/\\](nvidia_cutlass_dsl|dsl_packages)[/\\]|[/\\]cutlass[/\\](base_dsl|cute|_mlir)[/\\]")


def _is_probe(attr: str, frame) -> bool:
    """Whether ``attr`` is looked up by Python's protocols or by the DSL's front end, not by the schedule."""
    if attr.startswith("__") and attr.endswith("__"):
        return True
    return frame is not None and bool(_DSL_FILE.search(frame.f_code.co_filename))


class _ResourceProxy:
    """Stands in for a resource inside a schedule body and records every call."""

    def __init__(self, resource: Any, via_group: Optional[PipelineGroup] = None):
        object.__setattr__(self, "_res", resource)
        object.__setattr__(self, "_group", via_group)

    def __getattr__(self, attr: str):
        res = self._res
        if _is_probe(attr, sys._getframe(1)) and getattr(res, attr, _MISSING) is _MISSING:
            raise AttributeError(attr)
        name = getattr(res, "name", None) or type(res).__name__
        kind = _verb_kind(res, attr)
        spec = work_spec_of(getattr(type(res), attr, None))
        if kind is None and spec is None:
            value = getattr(type(res), attr, _MISSING)
            if value is _MISSING:
                inst = getattr(res, attr, _MISSING)
                if inst is not _MISSING and not callable(inst):
                    return inst
                _fail("named work dispatch", f"{name}.{attr}() is not a method of {type(res).__name__}",
                      resource=name, expected="a @producer_work / @consumer_work method or a sync verb "
                      "(acquire, try_acquire, commit, wait, try_wait, release)",
                      fix=f"declare {attr} on {type(res).__name__} with @producer_work or @consumer_work")
            if callable(value) and not isinstance(value, property):
                _fail("named work dispatch", f"{name}.{attr}() is not a work method or sync verb",
                      resource=name, expected="a method decorated with @producer_work or @consumer_work",
                      fix=f"decorate {type(res).__name__}.{attr} with @producer_work or @consumer_work, "
                      "or call it from inside a work method")
            return getattr(res, attr)

        def call(*args, **kwargs):
            frame = sys._getframe(1)
            loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno)
            cap = _current(f"{name}.{attr}()")
            k = kind
            if k is None:
                k = _work_kind(spec)
            if k is StepKind.ConsumerSkip and not args and set(kwargs) == {"count"}:
                # skip(count=K): K stages at once, K the trip count another task's loop runs
                cap.record(k, res, attr, loc, const_args=dict(kwargs), via_group=self._group)
                return None
            if k.is_sync and (args or kwargs):
                _verb_args(name, attr, args, kwargs, loc)
            token_args, const_args = _split_args(spec, args, kwargs, loc, name, attr)
            step = cap.record(k, res, attr, loc, token_args=token_args, const_args=const_args,
                              via_group=self._group, spec=spec, unpack=_unpack_count(frame))
            if not step.returns:
                return None
            if spec is not None and spec.returns and spec.returns_single:
                return step.returns[0]
            return step.returns if len(step.returns) > 1 or (spec and spec.returns) else step.returns[0]

        call.__name__ = attr
        return call

    def __setattr__(self, attr, value):
        _fail("schedule capture", f"assigning {attr!r} on a resource inside a schedule has no effect at runtime",
              fix="set resource fields before capturing the schedule, or inside a work method")

    def __repr__(self):
        return f"<schedule proxy of {self._res!r}>"


_MISSING = object()


def _verb_args(name: str, attr: str, args, kwargs, loc: SourceLoc, group: bool = False) -> None:
    got = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    what = "one stage (call it once per stage passed)" if attr == "skip" else "the next stage"
    more = f" (or {name}.skip(count=K) once, K a loop's trip_count)" if attr == "skip" else ""
    fix = f"call {name}.{attr}() with no arguments{more}"
    if group and attr == "skip":  # a group has no skip of its own (see checks_bracketing): per member
        more = ""
        fix = (f"skip on each member, with no arguments ({name}.<member>.skip() per stage) or with a count "
               f"({name}.<member>.skip(count=K) once)")
    _fail("schedule capture", f"{name}.{attr}({got}) takes no arguments in a schedule", location=loc,
          resource=name, expected=f"{name}.{attr}(): a sync verb always acts on {what}", fix=fix)


def _verb_kind(res: Any, attr: str) -> Optional[StepKind]:
    if attr in SYNC_VERBS:
        return SYNC_VERBS[attr]
    if isinstance(res, WorkQueue):
        if attr == "get_and_advance_work_tile":
            return StepKind.QueueAdvance
        if attr == "fetch_work_tile":
            return StepKind.QueueFetch
    if isinstance(res, PdlWaitBarrier) and attr == "wait_griddep":
        return StepKind.PdlWait
    if isinstance(res, PdlLaunchBarrier) and attr == "launch_griddep":
        return StepKind.PdlLaunch
    return None


def _work_kind(spec) -> StepKind:
    if spec.role == "producer":
        return StepKind.ProducerAux if spec.auxiliary else StepKind.ProducerWork
    return StepKind.ConsumerAux if spec.auxiliary else StepKind.ConsumerWork


def _split_args(spec, args, kwargs, loc, name, attr):
    token_args: Dict[str, Token] = {}
    const_args: Dict[str, Any] = {}
    params = spec.keyword_params() if spec is not None else None
    for i, value in enumerate(args):
        pname = params[i] if params is not None and i < len(params) else f"arg{i}"
        (token_args if isinstance(value, Token) else const_args)[pname] = value
    for pname, value in kwargs.items():
        if isinstance(value, _ResourceProxy):
            _fail("schedule capture", f"{name}.{attr}() got a resource as {pname}=; work methods exchange "
                  "values through task-local variables", location=loc, resource=name,
                  fix="return the value from a @consumer_work(returns=...) method and pass that token")
        (token_args if isinstance(value, Token) else const_args)[pname] = value
    return token_args, const_args


class _GroupProxy:
    """``group.member`` gives a member proxy; ``group.verb()`` records the collapsed op."""

    def __init__(self, group: PipelineGroup):
        object.__setattr__(self, "_group", group)

    def __getattr__(self, attr: str):
        group = self._group
        member = group.member(attr)
        if member is None and _is_probe(attr, sys._getframe(1)):
            raise AttributeError(attr)
        if member is not None:
            return _ResourceProxy(member, via_group=group)
        if attr in SYNC_VERBS:
            def call(*args, **kwargs):  # arguments taken only to name the mistake, not as a TypeError
                frame = sys._getframe(1)
                loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno)
                if args or kwargs:
                    _verb_args(group.name, attr, args, kwargs, loc, group=True)
                _current(f"{group.name}.{attr}()").record(SYNC_VERBS[attr], group, attr, loc)
            return call
        _fail("named work dispatch", f"pipeline group {group.name!r} has no member or verb {attr!r}",
              resource=group.name, expected=f"one of {[m.name for m in group.members]} or a sync verb",
              fix="use group.<member>.<method>() for per-member work")


# ------------------------------------------------------------------ loops and guards
class DomainLoopHandle:
    """Returned by ``with domain_loop(...) as d``: iteration guards tied to this loop."""

    def __init__(self, cap: _Capture):
        self._cap = cap

    def _guard(self, guard: Guard, what: str):
        cap = _current(what)
        if cap is not self._cap or not cap.loop_open:
            _fail("schedule capture", f"d.{what} is used outside its domain_loop",
                  fix="keep d.first_iter() / d.last_iter() / d.every() blocks inside the domain_loop body")
        return _push_guard(cap, guard)

    def first_iter(self):
        """Runs the enclosed calls on the first iteration only."""
        return self._guard(Guard("first_iter", location=caller_location()), "first_iter()")

    def last_iter(self):
        """Runs the enclosed calls on the last iteration only."""
        return self._guard(Guard("last_iter", location=caller_location()), "last_iter()")

    def every(self, period: int, start: int = 0):
        """Runs the enclosed calls on zero-based iteration counts start, start+period, ..."""
        loc = caller_location()
        if type(period) is not int or period <= 0 or type(start) is not int or start < 0:
            _fail("schedule capture", f"d.every({period!r}, start={start!r}) needs a positive int period and a "
                  "non-negative int start", location=loc)
        return self._guard(Guard("every", period=period, start=start, location=loc), f"every({period})")

    def if_empty(self):
        """Runs the enclosed calls after the loop, when it ran no iteration (its trip count was 0).

        The counterpart of ``first_iter()`` for work that the first iteration does when there is one: a wait the
        first iteration does inside the loop (to start its GEMM before a second operand lands) is done here when
        the loop does not run, so every trip count >= 0 waits exactly once. Only after the ``domain_loop`` block
        (in the same work tile), and only for a loop with calls in its body."""
        loc = caller_location()
        cap = _current("if_empty()")
        if cap is not self._cap or cap.loop_open or cap.section is not Section.TAIL:
            where = "inside its domain_loop" if cap is self._cap and cap.loop_open else "outside the code after its loop"
            _fail("schedule capture", f"d.if_empty() is used {where}", location=loc,
                  expected="d.if_empty() after the `with domain_loop(...) as d:` block, before its work_tile_loop ends",
                  fix="open `with d.if_empty():` after the loop's block; inside the loop, d.first_iter() is the "
                      "guard for the first iteration")
        if not any(s.section is Section.LOOP for s in cap.steps):
            _fail("schedule capture", "d.if_empty() after a domain_loop with no calls in its body", location=loc,
                  expected="a loop body with at least one call (the checker reads the trip count from the loop)",
                  fix="put the loop's calls in its body, or drop the if_empty() block")
        return _push_guard(cap, Guard("loop_empty", location=loc))


@contextmanager
def _push_guard(cap: _Capture, guard: Guard):
    cap.guards.append(guard)
    try:
        yield
    finally:
        cap.guards.pop()


# ``unroll`` left out: 1 (no unrolling, as the TS schedules page documents), or None (the compiler
# unrolls, the reference implementation's default) in a module that ``compat.port_imports`` ported
# (it marks the module with PORT_MARKER), so a ported program keeps the code shape it had.
_UNROLL_DEFAULT = object()


@contextmanager
def domain_loop(start, end=None, step=1, *, unroll=_UNROLL_DEFAULT, count=None):
    """The schedule's loop over ``range(start, end, step)`` (``domain_loop(n)`` is ``range(n)``).

    ``unroll``: the lowering's unroll factor; None lets the compiler choose. Left out it is 1,
    except in a module ported with ``warpsched.compat.port_imports``, where it is None as in the
    reference TS (the port keeps the reference's generated code).

    Any non-zero step: ``domain_loop(5, 0, -1)`` runs 5 iterations (5, 4, 3, 2, 1), and its
    ``first_iter`` / ``last_iter`` / ``every`` guards count iterations from 0 whatever the
    start and step (model/iteration.py). After the ``with`` block, ``with d.if_empty():`` runs
    its calls only when the loop ran no iteration (docs/checker.md).

    A bound may be a ``Task`` method (a dynamic, per-work-tile domain provider), a runtime value,
    or a ``trip_count(...)``. The checker reads the trip count from the end when start and step
    are ints; with a runtime start or step (a grid-stride loop) it takes every count >= 0 unless
    ``count=`` declares the trip count itself (an int or a ``trip_count(...)``, e.g.
    ``count=trip_count("tiles_per_cta", min=1)`` when the grid never exceeds the tile count).
    Loops declaring the same ``count`` symbol share it.
    """
    loc = caller_location()
    cap = _current("domain_loop()")
    if unroll is _UNROLL_DEFAULT:
        unroll = None if caller_globals().get(PORT_MARKER) else 1
    if end is None:
        start, end = 0, start
    if count is not None and not (type(count) is int and count >= 0) and not isinstance(count, TripCount):
        _fail("schedule capture", f"domain_loop(count={count!r}) is not an int or a trip_count(...)", location=loc,
              expected="an int >= 0, or trip_count(name, min=..., divisibility=...)",
              fix="declare the loop's trip count with warpsched.trip_count, or leave count out")
    if cap.domain_loop is not None:
        _fail("schedule capture", "a schedule may contain at most one domain_loop", location=loc,
              expected=f"one domain_loop (the first is at {cap.domain_loop.location})",
              fix="merge the loops, or split the work into two tasks")
    cap.domain_loop = DomainLoop(start, end, step, unroll, loc, count=count)
    cap.section, cap.loop_open = Section.LOOP, True
    try:
        yield DomainLoopHandle(cap)
    finally:
        cap.loop_open = False
        cap.section = Section.TAIL


class WorkTileLoopHandle:
    def __init__(self, cap: _Capture):
        self._cap = cap

    def skippable(self):
        """Runs the enclosed calls only on tiles that ``skip_if`` does not skip."""
        cap = _current("skippable()")
        if cap is not self._cap or not cap.wtl_open:
            _fail("schedule capture", "wtwl.skippable() is used outside its work_tile_loop",
                  fix="open skippable() inside the work_tile_loop body")
        cap.work_tile_loop.has_skippable = True
        return _push_guard(cap, Guard("skippable", location=caller_location()))


@contextmanager
def work_tile_loop(work_queue, skip_if=None, tile_count=None):
    """Persistent loop over the work tiles of ``work_queue``.

    ``tile_count``: what the checker may assume about the number of tiles one CTA runs: an int
    (exact) or a ``trip_count(...)`` with declared facts; by default every count >= 1."""
    loc = caller_location()
    cap = _current("work_tile_loop()")
    wq = work_queue._res if isinstance(work_queue, _ResourceProxy) else work_queue
    if cap.work_tile_loop is not None:
        _fail("schedule capture", "a schedule may contain at most one work_tile_loop", location=loc)
    if cap.domain_loop is not None or cap.guards:
        _fail("schedule capture", "work_tile_loop must enclose the domain_loop and sit at the top level",
              location=loc, fix="open work_tile_loop first, then the domain_loop inside it")
    for s in cap.steps:  # what came before the persistent loop runs once per CTA
        s.section = Section.PROLOGUE
    if tile_count is not None and not (type(tile_count) is int and tile_count >= 0) \
            and not isinstance(tile_count, TripCount):
        _fail("schedule capture", f"work_tile_loop(tile_count={tile_count!r}) is not an int or a trip_count(...)",
              location=loc, expected="an int >= 0, or trip_count(name, value, min=..., divisibility=...)",
              fix="declare the tile count with warpsched.trip_count, or leave it out (every count >= 1)")
    cap.work_tile_loop = WorkTileLoop(wq, skip_if, loc, tile_count=tile_count)
    cap.wtl_open = True
    try:
        yield WorkTileLoopHandle(cap)
    finally:
        cap.wtl_open = False
        cap.section = Section.EPILOGUE


def _condition(cond, key, kind: str, loc: SourceLoc) -> Guard:
    if not isinstance(cond, Token):
        _fail("schedule capture", f"{kind}() needs a value returned by a @consumer_work(returns=...) call, "
              f"got {type(cond).__name__}", location=loc,
              fix="return the condition from a work method (an auxiliary one is a good fit) and pass its token")
    if key is None:
        key = (cond.resource_name, cond.method, cond.slot or cond.position)
    return Guard(kind, key=key, token=cond, location=loc)


def when_true(cond, key=None):
    """Runs the enclosed calls when the runtime value ``cond`` is true (non-zero)."""
    loc = caller_location()
    cap = _current("when_true()")
    return _push_guard(cap, _condition(cond, key, "when_true", loc))


def when_false(cond, key=None):
    """Runs the enclosed calls when the runtime value ``cond`` is false (zero)."""
    loc = caller_location()
    cap = _current("when_false()")
    return _push_guard(cap, _condition(cond, key, "when_false", loc))


# ------------------------------------------------------------------ the decorator
class ScheduleFunction:
    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        code = fn.__code__
        self.location = SourceLoc(code.co_filename, code.co_firstlineno)

    @user_facing
    def __call__(self, *args, **kwargs) -> ScheduleResult:
        cap = _Capture(self.fn.__name__)
        proxied = [_proxy(a) for a in args]
        kw = {k: _proxy(v) for k, v in kwargs.items()}
        _ACTIVE.append(cap)
        try:
            self.fn(*proxied, **kw)
        finally:
            _ACTIVE.pop()
        params = tuple(a for a in list(args) + list(kwargs.values()))
        return ScheduleResult(self.fn.__name__, self.location, params, tuple(cap.steps), cap.domain_loop,
                              cap.work_tile_loop)

    def __repr__(self) -> str:
        return f"@schedule {self.fn.__name__}"


def _proxy(value):
    if isinstance(value, PipelineGroup):
        return _GroupProxy(value)
    if isinstance(value, MemoryResource):
        return _ResourceProxy(value)
    return value


def schedule(fn) -> ScheduleFunction:
    """Decorate a function whose body records the order of resource calls for one task."""
    return ScheduleFunction(fn)
