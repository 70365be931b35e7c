"""Malformed schedules raise ScheduleError at capture, naming the check, the call and its line."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from warpsched import (MemoryResource, PipelineConfig, PipelineGroup, PipelineGroupMode, ScheduleError, TaskLocalVariable, ValidationError, WorkQueue,
                       consumer_work, domain_loop, producer_work, schedule, when_false, when_true, work_tile_loop)

N = 4


def line_of(text: str, after: int = 0) -> int:
    with open(__file__) as fh:
        hits = [i for i, ln in enumerate(fh, 1) if text in ln and "line_of(" not in ln and i > after]
    assert hits, text
    return hits[0]


def cfg():
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=32, consumer_group=32)


@dataclass(kw_only=True)
class Res(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()
    plain_field: int = 7

    @consumer_work(returns=val)
    def load(self, stage_info): ...

    @producer_work
    def store(self, stage_info, val=None): ...

    def helper(self):  # not a work method
        return 1


def capture_error(fn, *args) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        fn(*args)
    err = info.value
    assert isinstance(err, ValidationError) and isinstance(err, ValueError)
    assert len(err.findings) == 1 and err.finding is err.findings[0]
    assert err.finding.location.file == __file__
    assert f"{__file__.rsplit('/', 1)[-1]}:{err.finding.line}" in str(err)  # the message names file:line
    return err


# ------------------------------------------------------------------ two domain loops
@schedule
def two_loops(r):
    with domain_loop(0, N, 1):
        r.load()
    with domain_loop(0, N, 1):  # second loop
        r.load()


def test_two_domain_loops():
    f = capture_error(two_loops, Res(name="r")).finding
    assert f.check == "schedule capture" and "at most one domain_loop" in f.message
    assert f.line == line_of("with domain_loop(0, N, 1):  # second loop")
    assert str(line_of("def two_loops") + 1) in f.expected  # points at the first loop too
    assert f.fix


# ------------------------------------------------------------------ guard outside its loop
@schedule
def bad_guard_schedule(smem_a):
    with domain_loop(0, N, 1) as d:
        smem_a.acquire()
        smem_a.store()
        smem_a.commit()
    with d.first_iter():                  # illegal: outside the domain loop
        smem_a.try_acquire()


@schedule
def last_iter_outside(smem_a):
    with domain_loop(0, N, 1) as d:
        smem_a.store()
    with d.last_iter():  # closed loop
        smem_a.store()


def test_guard_outside_its_loop():
    f = capture_error(bad_guard_schedule, Res(name="smem_a", pipeline_config=cfg())).finding
    assert f.check == "schedule capture" and "outside its domain_loop" in f.message
    assert f.line == line_of("with d.first_iter():                  # illegal")
    f = capture_error(last_iter_outside, Res(name="smem_a")).finding
    assert f.check == "schedule capture" and f.line == line_of("with d.last_iter():  # closed loop")


def test_guard_of_another_schedules_loop():
    handles = []

    @schedule
    def first(r):
        with domain_loop(0, N, 1) as d:
            handles.append(d)
            r.load()

    @schedule
    def second(r):
        with domain_loop(0, N, 1):
            with handles[0].every(2):  # a handle from another capture
                r.load()

    first(Res(name="r"))
    f = capture_error(second, Res(name="r")).finding
    assert f.check == "schedule capture" and f.line == line_of("with handles[0].every(2):")


def test_every_needs_positive_period():
    @schedule
    def bad_every(r):
        with domain_loop(0, N, 1) as d:
            with d.every(0):  # zero period
                r.load()

    f = capture_error(bad_every, Res(name="r")).finding
    assert f.check == "schedule capture" and f.line == line_of("with d.every(0):  # zero period")


# ------------------------------------------------------------------ not a work method or sync verb
@schedule
def calls_helper(r):
    with domain_loop(0, N, 1):
        r.helper()  # undecorated


@schedule
def calls_missing(r):
    with domain_loop(0, N, 1):
        r.no_such_method()


def test_not_a_work_method():
    f = capture_error(calls_helper, Res(name="r")).finding
    assert f.check == "named work dispatch" and "helper" in f.message and f.resource == "r"
    assert f.line == line_of("r.helper()  # undecorated")
    assert "@producer_work" in f.fix or "@consumer_work" in f.fix
    f = capture_error(calls_missing, Res(name="r")).finding
    assert f.check == "named work dispatch" and "no_such_method" in f.message
    assert f.line == line_of("r.no_such_method()")


def test_plain_fields_stay_readable():
    seen = []

    @schedule
    def reads_field(r):
        seen.append(r.plain_field)  # trace-time Python may read configuration
        r.load()

    assert len(reads_field(Res(name="r")).steps) == 1 and seen == [7]


# CuTe DSL's FrontendNext probes the values a traced body handles (getattr(value, "_mutable_ref", None),
# getattr(val, "ir_value", None)) from its own modules; a probe stands in for that code here.
_DSL_PROBE = {}
exec(compile("def probe(value, attr):\n    return getattr(value, attr, None)\n",
             "/site/nvidia_cutlass_dsl/python_packages/cutlass/base_dsl/pyir_entrypoints.py", "exec"), _DSL_PROBE)


def test_dsl_front_end_probes_are_not_schedule_calls():
    seen = []

    @schedule
    def probed(r, group):
        seen.extend(_DSL_PROBE["probe"](x, a) for x in (r, group) for a in ("_mutable_ref", "ir_value"))
        r.load()

    r = Res(name="r", pipeline_config=cfg())
    group = PipelineGroup(name="g", members=[r], mode=PipelineGroupMode.Merge)
    assert len(probed(r, group).steps) == 1 and seen == [None] * 4
    # the same lookups from the user's own code are still named mistakes
    f = capture_error(calls_missing, Res(name="r")).finding
    assert f.check == "named work dispatch"


def test_sync_verb_takes_no_arguments():
    @schedule
    def verb_with_args(r):
        r.acquire(3)  # verbs take no arguments

    f = capture_error(verb_with_args, Res(name="r", pipeline_config=cfg())).finding
    assert f.check == "schedule capture" and f.line == line_of("r.acquire(3)  # verbs take no arguments")


# ------------------------------------------------------------------ token used before it is produced
def test_token_from_another_schedule():
    tokens = []

    @schedule
    def producer_side(r):
        tokens.append(r.load())

    @schedule
    def consumer_side(r):
        r.store(val=tokens[0])  # a value this schedule never produced

    producer_side(Res(name="a"))
    f = capture_error(consumer_side, Res(name="b")).finding
    assert f.check == "value routing" and "used before it is produced" in f.message
    assert f.line == line_of("r.store(val=tokens[0])  # a value this schedule never produced")


def test_token_from_an_earlier_capture_of_the_same_schedule():
    kept = []

    @schedule
    def routed(r, previous):
        v = r.load()
        kept.append(v)
        r.store(val=previous if previous is not None else v)  # reuse across captures

    r = Res(name="r")
    routed(r, None)
    f = capture_error(routed, r, kept[0]).finding
    assert f.check == "value routing" and f.line == line_of("r.store(val=previous if previous")


# ------------------------------------------------------------------ when_true on a non-token
@schedule
def when_true_on_bool(r):
    with domain_loop(0, N, 1):
        with when_true(True):  # a Python bool, not a runtime value
            r.load()


@schedule
def when_false_on_resource(r):
    with when_false(r):  # a resource, not a value
        r.load()


def test_condition_must_be_a_token():
    f = capture_error(when_true_on_bool, Res(name="r")).finding
    assert f.check == "schedule capture" and "when_true" in f.message and "bool" in f.message
    assert f.line == line_of("with when_true(True):  # a Python bool")
    f = capture_error(when_false_on_resource, Res(name="r")).finding
    assert f.check == "schedule capture" and f.line == line_of("with when_false(r):  # a resource")


# ------------------------------------------------------------------ work_tile_loop placement
@schedule
def wtl_inside_domain(r, wq):
    with domain_loop(0, N, 1):
        with work_tile_loop(wq):  # must enclose the domain loop
            r.load()


@schedule
def two_work_tile_loops(r, wq):
    with work_tile_loop(wq):
        r.load()
    with work_tile_loop(wq):  # a second one
        r.load()


def test_work_tile_loop_inside_domain_loop():
    f = capture_error(wtl_inside_domain, Res(name="r"), WorkQueue(name="wq")).finding
    assert f.check == "schedule capture" and "work_tile_loop" in f.message
    assert f.line == line_of("with work_tile_loop(wq):  # must enclose the domain loop")
    f = capture_error(two_work_tile_loops, Res(name="r"), WorkQueue(name="wq")).finding
    assert f.check == "schedule capture" and f.line == line_of("with work_tile_loop(wq):  # a second one")


def test_skippable_outside_its_work_tile_loop():
    @schedule
    def late_skippable(r, wq):
        with work_tile_loop(wq) as wtwl:
            r.load()
        with wtwl.skippable():  # after the loop closed
            r.load()

    f = capture_error(late_skippable, Res(name="r"), WorkQueue(name="wq")).finding
    assert f.check == "schedule capture" and f.line == line_of("with wtwl.skippable():  # after the loop closed")


# ------------------------------------------------------------------ other misuse
def test_assigning_on_a_resource_in_a_schedule():
    @schedule
    def assigns(r):
        r.plain_field = 3  # no runtime effect

    f = capture_error(assigns, Res(name="r")).finding
    assert f.check == "schedule capture" and f.line == line_of("r.plain_field = 3  # no runtime effect")


def test_resource_passed_as_a_work_argument():
    @schedule
    def passes_resource(r, other):
        r.store(val=other)  # resources do not flow through work arguments

    f = capture_error(passes_resource, Res(name="r"), Res(name="o")).finding
    assert f.check == "schedule capture" and f.line == line_of("r.store(val=other)  # resources do not flow")


def test_domain_loop_outside_a_schedule():
    with pytest.raises(ScheduleError) as info:
        with domain_loop(0, N, 1):  # not inside @schedule
            pass
    assert info.value.finding.check == "schedule capture"
    assert info.value.finding.line == line_of("with domain_loop(0, N, 1):  # not inside @schedule")


def test_work_on_a_closed_over_resource_is_refused():
    r = Res(name="r")

    @schedule
    def uses_closure(param):
        param.load()
        r.load()  # the resource object itself: would execute, not record

    f = capture_error(uses_closure, Res(name="p")).finding
    assert f.check == "schedule capture" and "resource object itself" in f.message
    assert f.line == line_of("r.load()  # the resource object itself")
    assert r.load(None) is None  # outside a capture a work method still runs normally
