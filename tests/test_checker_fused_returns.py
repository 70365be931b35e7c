"""A synchronous call's return is taken together with the wait / acquire after it (checker/macro.py,
docs/checker.md "Returns taken with the next wait"): same verdicts and problem kinds as the search
that interleaves every return, never more states, and a deadlock with parked tasks is shown with
the returns they owe."""
from __future__ import annotations

import importlib

import pytest

from warpsched import Task, TaskManager, domain_loop, schedule, trip_count
from warpsched.examples import interleaved, split_consumer
from warpsched.verify.checker import run_checker

from test_checker_interleave_perf import _per_role

macro = importlib.import_module("warpsched.verify.checker.macro")


def _both(monkeypatch, prog):
    monkeypatch.setattr(macro, "FUSE_RETURNS", True)
    fused = run_checker(prog)
    monkeypatch.setattr(macro, "FUSE_RETURNS", False)
    plain = run_checker(prog)
    return fused, plain


def _kinds(res):
    return {k for k, v in res.exploration.counts.items() if v}


def _program(tm):
    return tm.program


PROGRAMS = {
    "per-role 8 tiles": lambda: _per_role(num_stages=4, num_tiles=8),
    "per-role any multiple of 4": lambda: _per_role(num_stages=4, num_tiles=trip_count("tiles", divisibility=4)),
    "per-role any count (deadlock)": lambda: _per_role(num_stages=4, num_tiles=trip_count("tiles")),
    "per-role late read (race)": lambda: _per_role(num_stages=8, late_read=True),
    "per-role wait and release in one task": lambda: _program(interleaved.build_per_role(
        verbose=False, exhaustive_deadlock_race_check=False, num_stages=4, num_tiles=8, same_task=True, skip_validation=True)),
    "split consumer (umma)": lambda: _program(split_consumer.build(verbose=False, exhaustive_deadlock_race_check=False)),
    "split consumer (hopper)": lambda: _program(split_consumer.build_hopper(verbose=False,
                                                                            exhaustive_deadlock_race_check=False)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_fused_returns_keep_every_verdict(monkeypatch, name):
    fused, plain = _both(monkeypatch, PROGRAMS[name]())
    assert fused.verdict == plain.verdict, (name, fused.report())
    assert _kinds(fused) == _kinds(plain), name
    assert fused.states <= plain.states, (fused.states, plain.states)
    if name.startswith("per-role") and plain.verdict == "SAFE":
        assert fused.states < plain.states  # the wait warps' returns are where the states were


def test_the_late_read_race_is_still_found_with_its_window():
    res = run_checker(_per_role(late_read=True))
    race = next(p for p in res.exploration.problems if p.kind == "race")
    assert race.replayed
    assert "Producer writes tiles" in race.text and "WaitTask.w" in race.text


def _never_releases_partials():
    """Per-role, but the release task never releases partials: each wait warp reads its second tile,
    then blocks on partials.acquire with its read's return still owed (parked)."""
    tm = interleaved.build_per_role(verbose=False, exhaustive_deadlock_race_check=False, num_stages=8)
    tiles = next(r for r in tm.resource_dependency_graph if r.name == "tiles")
    partials = next(r for r in tm.resource_dependency_graph if r.name == "partials")

    @schedule
    def release_only(partials, tiles):
        with domain_loop(0, interleaved.NUM_TILES, 1):
            partials.wait()
            partials.drain()
            tiles.release()

    old = {t.name: t for t in tm.tasks}
    tasks = [old["Producer"], old["WaitTask"],
             Task(name="ReleaseTask", src_resources=[partials, tiles], warp_idx=1, num_warps=1,
                  schedule=release_only(partials, tiles))]
    return TaskManager(tasks=tasks, resource_dependency_graph=tm.resource_dependency_graph, verbose=False,
                       exhaustive_deadlock_race_check=False, skip_validation=True).program


def test_a_deadlock_with_parked_tasks_shows_the_returns_they_owe(monkeypatch):
    fused, plain = _both(monkeypatch, _never_releases_partials())
    assert fused.verdict == plain.verdict == "UNSAFE"
    assert _kinds(fused) == _kinds(plain) == {"deadlock"}
    assert fused.states < plain.states
    dead = next(p for p in fused.exploration.problems if p.kind == "deadlock")
    assert dead.replayed
    owed = [label for _, label in dead.path if label[1] == "return" and not label[3]]
    assert owed, "the counterexample ends with the returns the parked wait warps owe"
    assert all(label[1] == "return" for _, label in dead.path[-len(owed):])
    # the final state is the real deadlock: no window open, every wait warp blocked on partials
    assert all(es[4] is None for es in dead.final[0])
    blocked = [text for text, _ in dead.blocked]
    assert any(t.startswith("WaitTask.w") and "partials.empty" in t for t in blocked), blocked
    detail = next(f for f in fused.findings if f.severity == "error").detail
    assert "return .read()" in detail
