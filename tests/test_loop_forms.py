"""One definition of a loop's iterations and guards (issue 30), checked three ways on a grid.

For every ``domain_loop(start, end, step)`` with start, end, step in -7..7 (step != 0), with a
head, a tail (and a call under ``if_empty()`` after it) and every kind of iteration guard, the calls that run, in
order, are computed by

- an interpreter of the IR written here from Python's ``range`` and ts_schedules.rst's guard
  definitions (the oracle: it imports nothing from warpsched's loop code);
- the exhaustive checker's own transition function (``Engine._raw``) stepping the one task;
- the lowering's loop and guard code (``TaskEmitter._sections`` / ``_predicate``) run with Python
  ``for`` / ``if`` in place of ``scf.for`` / ``scf.if``, recording each work call with the loop
  value it sees; ``scf.for`` must only ever get a positive step;
- the static checks' unrolled executions (``checks_traces.executions``).

All four must agree, and so must the loop values. A persistent variant wraps the loop in a
work-tile loop of two tiles (the checker resets the loop each tile).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import Queue, program, task  # noqa: E402
from warpsched import MemoryResource, TileSchedulerConfig, consumer_work, domain_loop, schedule  # noqa: E402
from warpsched import work_tile_loop  # noqa: E402
from warpsched.model.iteration import static_trip_count  # noqa: E402
from warpsched.verify.checker.engine import Engine  # noqa: E402
from warpsched.verify.checker.model import compile_program  # noqa: E402
from warpsched.verify.checks_traces import _trip_counts, executions  # noqa: E402

# (name, kind, period, start): the guards of the loop body, in body order
GUARDS = [("body", None, 0, 0), ("first", "first_iter", 0, 0), ("last", "last_iter", 0, 0),
          ("e1s2", "every", 1, 2), ("e2s0", "every", 2, 0), ("e2s1", "every", 2, 1), ("e3s2", "every", 3, 2)]
RANGE = range(-7, 8)
FORMS = [(a, b, c) for a in RANGE for b in RANGE for c in RANGE if c != 0]


@dataclass(kw_only=True)
class Marks(MemoryResource):
    """One work method per call site, so a trace names which call ran."""

    @consumer_work
    def head(self, stage_info):
        pass

    @consumer_work
    def tail(self, stage_info):
        pass

    @consumer_work
    def empty(self, stage_info):  # after the loop, under if_empty()
        pass

    @consumer_work
    def body(self, stage_info):
        pass

    @consumer_work
    def first(self, stage_info):
        pass

    @consumer_work
    def last(self, stage_info):
        pass

    @consumer_work
    def e1s2(self, stage_info):
        pass

    @consumer_work
    def e2s0(self, stage_info):
        pass

    @consumer_work
    def e2s1(self, stage_info):
        pass

    @consumer_work
    def e3s2(self, stage_info):
        pass


def _loop_body(m, d):
    for name, kind, period, start in GUARDS:
        call = getattr(m, name)
        if kind is None:
            call()
        elif kind == "every":
            with d.every(period, start=start):
                call()
        else:
            with getattr(d, kind)():
                call()


def _build(form, tiles=None):
    m = Marks(name="M")

    @schedule
    def flat(m):
        m.head()
        with domain_loop(*form) as d:
            _loop_body(m, d)
        m.tail()
        with d.if_empty():
            m.empty()

    @schedule
    def persistent(m, q):
        with work_tile_loop(q, tile_count=tiles):
            m.head()
            with domain_loop(*form) as d:
                _loop_body(m, d)
            m.tail()
            with d.if_empty():
                m.empty()
            q.wait()
            q.get_and_advance_work_tile()
            q.release()

    if tiles is None:
        return program([task("T", flat(m), src=[m])]), m
    q = Queue(name="Q", tile_scheduler_config=TileSchedulerConfig(num_tiles=tiles))
    return program([task("T", persistent(m, q), src=[m, q])]), m


# ------------------------------------------------------------------ the oracle
def _oracle(form, tiles=None, cap=None):
    """(method, loop value or None) for every call, from range() and the documented guard rules.
    ``cap``: only the first ``cap`` iterations run (the static checks' bounded unrolling)."""
    values = list(range(*form))[:cap]
    n = len(values)
    out = []
    for _tile in range(tiles or 1):
        out.append(("head", None))
        for count, value in enumerate(values):
            for name, kind, period, start in GUARDS:
                fires = (kind is None or (kind == "first_iter" and count == 0)
                         or (kind == "last_iter" and count == n - 1)
                         or (kind == "every" and count >= start and (count - start) % period == 0))
                if fires:
                    out.append((name, value))
        out.append(("tail", None))
        if n == 0:  # if_empty(): the loop ran no iteration
            out.append(("empty", None))
    return out


# ------------------------------------------------------------------ the checker
def _checker_trace(prog):
    """The work calls the checker's transition function runs for the one task, in order (without
    the lifting of exact counts far from their end, an abstraction the bulk-diff tests check)."""
    engine = Engine(compile_program(prog), exact_lift=False)
    st = engine.initial()
    ex = engine.execs[0]
    out = []
    for _ in range(100_000):
        if engine.is_done(st, 0):
            return out
        succ = engine._raw(st, 0)
        assert len(succ) == 1, f"an exact trip count must leave the checker one transition, got {len(succ)}"
        label, st = succ[0]
        ins = ex.program[label[2]]
        if ins.kind == "step" and label[1] not in ("skip", "return"):
            step = ins.action.step
            if step.resource_name == "M":
                out.append(step.method)
    raise AssertionError("the checker's walk did not end")


# ------------------------------------------------------------------ the lowering
def _lowered_trace(prog, monkeypatch):
    """The work calls the lowering emits, with the loop value each sees, control flow run in Python."""
    pytest.importorskip("cutlass")
    from warpsched.lower import loops
    from warpsched.protocol.plan import SyncPlan

    def py_for(env, keys, start, stop, step, body, *, unroll=1):
        assert type(step) is int and step > 0, f"scf.for got step {step!r}: it needs a positive step"
        for j in range(start, stop, step):
            body(j, dict(env))

    def py_if(env, keys, pred, then, otherwise=None):
        assert isinstance(pred, bool), f"a compile-time loop gave a runtime predicate {pred!r}"
        if pred:
            then(env)
        elif otherwise is not None:
            otherwise(env)

    monkeypatch.setattr(loops, "dyn_for", py_for)
    monkeypatch.setattr(loops, "dyn_if", py_if)
    out = []

    class Recorder(loops.TaskEmitter):
        def _step(self, env, s, frame):
            if s.resource_name == "M":
                out.append((s.method, frame.loop_offset))

        def _tile_loop(self, env, wtl, frame):  # the tile loop is runtime code: run its tiles here
            for _ in range(wtl.tile_count):
                self._sections(env, frame)

    lowering = SimpleNamespace(program=prog, plan=SyncPlan(prog), producer_tail=False, pipes={})
    Recorder(lowering, prog.tasks[0]).emit()
    return out


def _static_trace(prog):
    """The calls of the static checks' one execution, and the iterations it unrolls (a bounded,
    representative count: every guard's period, at most the real trip count)."""
    sched = prog.tasks[0].schedule
    runs = list(executions(sched))
    assert len(runs) == 1
    return [s.method for s, _ in runs[0] if s.resource_name == "M"], _trip_counts(sched)[0]


# ------------------------------------------------------------------ the grid
def test_the_grid_covers_every_kind_of_loop():
    counts = [static_trip_count(*f) for f in FORMS]
    assert len(FORMS) == 15 * 15 * 14
    assert sum(c == 0 for c in counts) > 1000  # empty ranges, both directions
    assert any(f[2] < 0 and c >= 5 for f, c in zip(FORMS, counts))  # reversed loops long enough for every guard
    assert any(abs(f[2]) > 1 and (f[1] - f[0]) % f[2] for f, c in zip(FORMS, counts) if c)  # steps that overshoot


@pytest.mark.parametrize("chunk", range(7))
def test_checker_lowering_and_static_checks_agree_with_range(chunk, monkeypatch):
    for form in FORMS[chunk::7]:
        prog, _ = _build(form)
        expected = _oracle(form)
        assert _checker_trace(prog) == [m for m, _ in expected], form
        assert _lowered_trace(prog, monkeypatch) == expected, form
        static, unrolled = _static_trace(prog)
        assert unrolled == min(len(range(*form)), 11), form  # every(3, start=2): 2 * (3 + 2) + 1
        assert static == [m for m, _ in _oracle(form, cap=unrolled)], form


@pytest.mark.parametrize("form", [(5, 0, -1), (7, -7, -3), (-7, 7, 4), (0, 0, 1), (3, 4, -1), (6, -1, -2)])
def test_inside_a_work_tile_loop(form, monkeypatch):
    prog, _ = _build(form, tiles=2)
    expected = _oracle(form, tiles=2)
    assert _checker_trace(prog) == [m for m, _ in expected]
    assert _lowered_trace(prog, monkeypatch) == expected


# ------------------------------------------------------------------ reversed loops between tasks
def _copy(prod_form, cons_form):
    """A producer and a consumer of one AsyncAsync ring, each with its own loop form."""
    from test_checker_builders import Buf, async_cfg

    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=2))

    @schedule
    def prod(b):
        with domain_loop(*prod_form):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(*cons_form):
            b.wait()
            b.read()
            b.release()

    return program([task("Producer", prod(buf), dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)])


def _trip_line(res):
    return [ln for f in res.findings for ln in (f.detail or "").splitlines() if ln.startswith("trip counts")]


@pytest.mark.parametrize("prod_form,cons_form", [((0, 5, 1), (5, 0, -1)), ((4, -1, -1), (0, 10, 2)),
                                                  ((9, -6, -3), (-2, 3, 1)), ((0, 0, 1), (3, 3, -1))])
def test_equal_counts_in_any_direction_are_safe(prod_form, cons_form):
    from warpsched.verify.checker import run_checker

    res = run_checker(_copy(prod_form, cons_form))
    assert res.verdict == "SAFE", res.report()


def test_reversed_consumer_one_short_is_rejected_with_its_counts():
    from warpsched.verify.checker import run_checker

    res = run_checker(_copy((0, 5, 1), (5, 1, -1)))  # 5 commits, 4 waits
    assert res.verdict == "UNSAFE"
    assert any("Producer: 5 iteration(s)" in ln and "Consumer: 4 iteration(s)" in ln for ln in _trip_line(res)), \
        res.report()


def test_reversed_loops_with_a_runtime_bound():
    """``domain_loop(K, 0, -1)`` runs K times, ``(K - 1, -1, -1)`` too, ``(K + 1, 0, -1)`` once more;
    ``(0, K, -1)`` is empty for every K >= 1 (the checker takes it as any count: it is a runtime start)."""
    from warpsched import trip_count
    from warpsched.verify.checker import run_checker

    K = trip_count("K")
    assert run_checker(_copy((0, K, 1), (K, 0, -1))).verdict == "SAFE"
    assert run_checker(_copy((K - 1, -1, -1), (0, K, 1))).verdict == "SAFE"
    assert "every K >= 1" in run_checker(_copy((0, K, 1), (K - 1, -1, -1))).report()
    more = run_checker(_copy((0, K, 1), (K + 1, 0, -1)))
    assert more.verdict == "UNSAFE" and any("(K)" in ln for ln in _trip_line(more)), more.report()
    assert run_checker(_copy((0, K, 1), (0, K, -1))).verdict == "UNSAFE"


def test_a_zero_step_is_rejected_with_the_task_and_the_call():
    """A zero step is captured (the TS validation page's rejected example) and rejected by the
    domain-validity check, which names the task and the domain_loop's file:line."""
    from warpsched import TaskManager, ValidationError

    m = Marks(name="M")

    @schedule
    def zero(m):
        with domain_loop(0, 5, 0):
            m.body()

    with pytest.raises(ValidationError) as err:
        TaskManager(tasks=[task("T", zero(m), src=[m])], verbose=False)
    text = str(err.value)
    assert "domain_loop step is 0" in text and "task 'T'" in text and "test_loop_forms.py" in text, text


def test_a_python_loop_over_a_trip_count_names_domain_loop():
    """``for _ in range(K)`` in a schedule, K a trip_count: the error says to use domain_loop; the
    same count in a domain_loop is captured."""
    from warpsched import trip_count

    K = trip_count("k_tiles")
    m = Marks(name="M")

    @schedule
    def python_loop(m):
        for _ in range(K):
            m.body()

    @schedule
    def domain(m):
        with domain_loop(0, K):
            m.body()

    with pytest.raises(TypeError, match=r"with domain_loop\(0, k_tiles\):.*not `for _ in range"):
        python_loop(m)
    assert domain(m).domain_loop.end is K


def test_the_tma_factory_docstring_names_the_accepted_producer_group():
    from warpsched import PipelineConfig

    doc = PipelineConfig.create_tma_async_pipeline_cfg.__doc__
    assert "warpsched.threads(n)" in doc and "``threads(1)`` for one TMA warp" in doc
