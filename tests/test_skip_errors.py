"""Every misuse of ``ring.skip()`` is rejected like any other mistake: the task, the resource, the
schedule call's file:line, what was expected and the fix -- through TaskManager and through
``warpsched check`` (no traceback)."""
from __future__ import annotations

import io
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import Buf, async_cfg, task  # noqa: E402
from test_checks_support import Gmem  # noqa: E402
from test_cli import cli, verdict_line  # noqa: E402
from warpsched import (PdlWaitBarrier, PipelineGroup, PipelineGroupMode, ScheduleError, TaskManager,  # noqa: E402
                       ValidationError, domain_loop, schedule)

HERE = os.path.basename(__file__)


def _line(marker: str) -> int:
    """The line of this file that carries ``# <marker>`` (the call a finding must point at)."""
    with open(__file__) as f:
        return next(i for i, ln in enumerate(f, 1) if f"# {marker}" in ln and "_line(" not in ln)


def _rejected(tasks, graph):
    with pytest.raises(ValidationError) as info:
        TaskManager(tasks=tasks, resource_dependency_graph=graph, out=io.StringIO())
    for f in info.value.findings:
        f.rendered = str(info.value)  # what the user reads, for the text checks
    return info.value.findings


def _finding(findings, text):
    hits = [f for f in findings if text in f.message]
    assert hits, [f.message for f in findings]
    return hits[0]


def _assert_complete(f, task_name, resource_name, marker):
    assert getattr(f.task, "name", f.task) == task_name, f
    assert getattr(f.resource, "name", f.resource) == resource_name, f
    assert os.path.basename(f.location.file) == HERE and f.location.line == _line(marker), f.location
    assert f.expected and f.fix, f
    block = [b for b in f.rendered.split("\n\n") if f.message in b][0]  # this finding's block
    for part in (f"'{task_name}'", f"'{resource_name}'", f"{HERE}:{_line(marker)}", "expected:", "fix:"):
        assert part in block, (part, block)


def _ring_program(*, producer_skips=False, skip_while_held=False, other=None, skipper=False):
    ring = Buf(name="Ring", pipeline_config=async_cfg())

    @schedule
    def prod(b):
        with domain_loop(0, 4, 1):
            b.acquire()
            b.fill()
            b.commit()
            if producer_skips:
                b.skip()  # producer-skip

    @schedule
    def cons(b, *more):
        with domain_loop(0, 4, 1):
            b.wait()
            b.read()
            if skip_while_held:
                b.skip()  # held-skip
            b.release()
            for o in more:
                o.skip()  # unpipelined-skip

    @schedule
    def only_skips(b):
        with domain_loop(0, 4, 1):
            b.skip()  # skipper-skip

    more = [other] if other is not None else []
    tasks = [task("Producer", prod(ring), dst=[ring]), task("Consumer", cons(ring, *more), src=[ring] + more, warp=1)]
    if skipper:
        tasks.append(task("Skipper", only_skips(ring), src=[ring], warp=2))
    return tasks, {ring: [], **{o: [] for o in more}}


def test_skip_on_a_ring_the_task_produces():
    f = _finding(_rejected(*_ring_program(producer_skips=True)), "Ring.skip() in a task that never waits for")
    _assert_complete(f, "Producer", "Ring", "producer-skip")
    assert "drop the skip" in f.fix


def test_skip_while_holding_a_waited_stage():
    f = _finding(_rejected(*_ring_program(skip_while_held=True)), "Ring.skip() while the stage waited at")
    _assert_complete(f, "Consumer", "Ring", "held-skip")
    assert "release the waited stage first" in f.fix


def test_skip_in_a_task_that_never_waits_or_releases():
    f = _finding(_rejected(*_ring_program(skipper=True)),
                 "Ring.skip() in a task that never waits for and releases Ring")
    _assert_complete(f, "Skipper", "Ring", "skipper-skip")


@pytest.mark.parametrize("other", [Gmem(name="Out"), PdlWaitBarrier(name="Pdl")], ids=["memory", "pdl"])
def test_skip_on_a_resource_without_stages(other):
    f = _finding(_rejected(*_ring_program(other=other)), f"{other.name}.skip() but {other.name} has no pipeline_config")
    _assert_complete(f, "Consumer", other.name, "unpipelined-skip")
    assert f"drop the {other.name}.skip() call" in f.fix
    assert ("PipelineConfig" in f.fix) == isinstance(other, Gmem)  # a PDL barrier never has stages


def test_skip_with_arguments_is_a_capture_error():
    ring = Buf(name="Ring", pipeline_config=async_cfg())
    group = PipelineGroup(name="G", members=[ring], mode=PipelineGroupMode.FusedMerge)

    @schedule
    def on_ring(b):
        b.skip(2)  # ring-args

    @schedule
    def on_group(g):
        g.skip(stages=2)  # group-args (a group's verbs took no arguments: Python's own TypeError)

    for build, marker, shown in ((lambda: on_ring(ring), "ring-args", "Ring.skip(2)"),
                                 (lambda: on_group(group), "group-args", "G.skip(stages=2)")):
        with pytest.raises(ScheduleError) as info:
            build()
        f, = info.value.findings
        assert f"{shown} takes no arguments" in f.message
        assert f.location.line == _line(marker) and os.path.basename(f.location.file) == HERE
        assert "once per stage" in f.expected and "with no arguments" in f.fix


def test_skip_on_a_group_names_the_per_member_call():
    a, b = Buf(name="A", pipeline_config=async_cfg()), Buf(name="B", pipeline_config=async_cfg())
    g = PipelineGroup(name="G", members=[a, b], mode=PipelineGroupMode.FusedMerge)

    @schedule
    def prod(a, b):
        with domain_loop(0, 4, 1):
            for r in (a, b):
                r.acquire()
                r.fill()
                r.commit()

    @schedule
    def cons(g):
        with domain_loop(0, 4, 1) as d:
            with d.every(2, start=0):
                g.wait()
                g.A.read()
                g.release()
            with d.every(2, start=1):
                g.skip()  # group-skip

    findings = _rejected([task("P", prod(a, b), dst=[a, b]), task("C", cons(g), src=[a, b], warp=1)], {a: [], b: []})
    f = _finding(findings, "G.skip() is not a collapsed op")
    assert f.location.line == _line("group-skip") and "G.<member>.skip()" in f.fix
    # the task does wait for and release A and B (through the group): no finding may say otherwise
    assert not [x for x in findings if "never waits for and releases" in x.message], findings


CLI_PROGRAM = """\
from warpsched import (MemoryResource, PipelineConfig, Task, TaskManager, consumer_work, domain_loop,
                       producer_work, schedule)
from warpsched.examples._groups import thread_group


class Ring(MemoryResource):
    @producer_work
    def fill(self, stage_info): ...

    @consumer_work
    def read(self, stage_info): ...


@schedule
def produce(ring):
    with domain_loop(0, 8, 1):
        ring.acquire()
        ring.fill()
        ring.commit()
        ring.skip()


@schedule
def consume(ring):
    with domain_loop(0, 8, 1):
        ring.wait()
        ring.read()
        ring.release()


def build(verbose=True, **manager_options):
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=thread_group(32),
                                                         consumer_group=thread_group(32))
    ring = Ring(name="ring", pipeline_config=cfg)
    tasks = [Task(name="Load", dst_resources=[ring], warp_idx=0, num_warps=1, schedule=produce(ring)),
             Task(name="Use", src_resources=[ring], warp_idx=1, num_warps=1, schedule=consume(ring))]
    return TaskManager(tasks=tasks, resource_dependency_graph={ring: []}, verbose=verbose, **manager_options)
"""


def test_cli_reports_a_skip_misuse_without_a_traceback(tmp_path):
    path = tmp_path / "skip_misuse.py"
    path.write_text(CLI_PROGRAM)
    line = CLI_PROGRAM.splitlines().index("        ring.skip()") + 1
    rc, out, err = cli("check", "-q", str(path))
    assert rc == 1, out + err
    assert "Traceback" not in out + err
    assert verdict_line(out).startswith("warpsched: REJECTED")
    assert f"skip_misuse.py:{line}" in out and "ring.skip() in a task that never waits for and releases ring" in out
    assert "task 'Load'" in out and "expected:" in out and "fix:" in out
    args = tmp_path / "skip_args.py"
    args.write_text(CLI_PROGRAM.replace("        ring.skip()", "        ring.skip(1)"))
    rc, out, err = cli("check", "-q", str(args))
    assert rc == 1 and "Traceback" not in out + err, out + err
    assert f"skip_args.py:{line}" in out and "ring.skip(1) takes no arguments" in out


# ------------------------------------------------------------------ skip(count=K)
def _bulk_program(where):
    """Owner consumes K stages per tile and hands over (Turn); Skipper skips them with
    ``skip(count=...)`` placed / counted as ``where`` says."""
    from test_checker_builders import Queue
    from warpsched import trip_count, work_tile_loop

    ring, turn, wq = Buf(name="Ring", pipeline_config=async_cfg()), Buf(name="Turn", pipeline_config=async_cfg(stages=1)), \
        Queue(name="WQ")
    K = trip_count("K")

    def tail(q):
        q.try_wait()
        q.wait()
        q.get_and_advance_work_tile()
        q.release()

    @schedule
    def prod(b, q):
        with work_tile_loop(q):
            with domain_loop(0, K, 1):
                b.acquire()
                b.fill()
                b.commit()
            b.acquire()
            b.fill()
            b.commit()
            tail(q)

    @schedule
    def owner(b, t, q):
        with work_tile_loop(q):
            with domain_loop(0, K, 1):
                b.wait()
                b.read()
                b.release()
            t.acquire()
            t.fill()
            t.commit()
            b.skip()
            tail(q)

    @schedule
    def skipper(b, t, q):
        if where == "prologue":
            b.skip(count=K)  # bulk-prologue
        with work_tile_loop(q):
            t.wait()
            t.read()
            t.release()
            if where == "negative":
                b.skip(count=K - 2)  # bulk-negative
            elif where == "held":
                b.wait()
                b.skip(count=K)  # bulk-held
                b.release()
            elif where != "prologue":
                b.skip(count=K)
            b.wait()
            b.read()
            b.release()
            tail(q)

    tasks = [task("Producer", prod(ring, wq), src=[wq], dst=[ring]),
             task("Owner", owner(ring, turn, wq), src=[ring, wq], dst=[turn], warp=1),
             task("Skipper", skipper(ring, turn, wq), src=[ring, turn, wq], warp=2)]
    return tasks, {ring: [], turn: [], wq: []}


def test_bulk_skip_program_is_accepted():
    tasks, graph = _bulk_program("ok")
    mgr = TaskManager(tasks=tasks, resource_dependency_graph=graph, out=io.StringIO())
    assert mgr.result.checker.verdict == "SAFE"


@pytest.mark.parametrize("where,text,marker,fix", [
    ("negative", "Ring.skip(count=K - 2) is negative for K >= 1 (count -1)", "bulk-negative", "min=2"),
    ("prologue", "Ring.skip(count=K) outside the work-tile loop", "bulk-prologue", "into the work_tile_loop body"),
    ("held", "Ring.skip(count=K) while the stage waited at", "bulk-held", "release the waited stage first"),
], ids=["negative", "prologue", "held"])
def test_bulk_skip_misuse_is_a_complete_finding(where, text, marker, fix):
    """A count that may be negative (the lowering's PipelineState.advance would move to a negative
    stage index; the checker, which keeps counts modulo the ring's cycle, would not notice), a bulk
    skip outside the work-tile loop, a bulk skip while a waited stage is held."""
    f = _finding(_rejected(*_bulk_program(where)), text)
    _assert_complete(f, "Skipper", "Ring", marker)
    assert fix in f.fix, f.fix


def test_bulk_skip_on_a_group_names_the_per_member_call():
    a, b = Buf(name="A", pipeline_config=async_cfg()), Buf(name="B", pipeline_config=async_cfg())
    g = PipelineGroup(name="G", members=[a, b], mode=PipelineGroupMode.FusedMerge)
    from warpsched import trip_count

    @schedule
    def cons(g):
        g.skip(count=trip_count("K"))  # group-bulk

    with pytest.raises(ScheduleError) as info:
        cons(g)
    f, = info.value.findings
    assert f.location.line == _line("group-bulk") and os.path.basename(f.location.file) == HERE
    assert "G.<member>.skip(count=K)" in f.fix and "G.skip(count=K) once" not in f.fix
