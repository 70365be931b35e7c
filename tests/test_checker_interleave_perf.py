"""The per-role interleaved pipeline (examples/interleaved.py:build_per_role) is proven within the
default state cap, and the reduction that makes it so (docs/checker.md: "Decided loop ends are
rounded") is exact: cross-checked against the search without it."""
from __future__ import annotations

import importlib
import itertools

import pytest

from warpsched import Task, TaskManager, domain_loop, schedule, trip_count
from warpsched.examples import interleaved
from warpsched.verify.checker import run_checker
from warpsched.verify.checker.loops import _round_end
from warpsched.verify.checker.model import LoopGroup

loops_mod = importlib.import_module("warpsched.verify.checker.loops")


def _per_role(num_stages=8, late_read=False, num_tiles=interleaved.NUM_TILES):
    tm = interleaved.build_per_role(verbose=False, exhaustive_deadlock_race_check=False, num_stages=num_stages,
                                    num_tiles=num_tiles)
    if not late_read:
        return tm.program
    tiles = next(r for r in tm.resource_dependency_graph if r.name == "tiles")
    partials = next(r for r in tm.resource_dependency_graph if r.name == "partials")

    @schedule
    def wait_only(tiles, partials):  # bug: hands the tile over before reading it
        with domain_loop(0, interleaved.NUM_TILES, interleaved.WAIT_LANES):
            tiles.wait()
            partials.acquire()
            partials.write()
            partials.commit()
            tiles.read()

    old = {t.name: t for t in tm.tasks}
    tasks = [old["Producer"],
             Task(name="WaitTask", src_resources=[tiles], dst_resources=[partials], warp_idx=4, num_warps=4,
                  schedule=wait_only(tiles, partials)),
             old["ReleaseTask"]]
    return TaskManager(tasks=tasks, resource_dependency_graph=tm.resource_dependency_graph, verbose=False,
                       exhaustive_deadlock_race_check=False, skip_validation=True).program


def test_per_role_seed_config_is_proven_safe_within_the_default_cap():
    res = run_checker(_per_role())  # TaskManager's default max_states=200000
    assert res.verdict == "SAFE", res.report()
    # was INCOMPLETE at the cap (200000 states, about 14 s); 145254 states with rounded ends
    assert res.states < 160_000, res.states


def test_late_read_race_is_found():
    """The wait warps commit their partial before reading the tile: the release task can free
    the stage while a wait warp still reads it, and the producer's next TMA write races."""
    res = run_checker(_per_role(late_read=True))
    assert res.verdict == "UNSAFE"
    races = [f for f in res.findings if f.severity == "error" and "race" in f.message]
    assert races, res.report()
    assert any("Producer writes tiles" in f.message and "WaitTask.w" in f.message for f in races), \
        [f.message for f in races]


def test_rounded_loop_ends_agree_with_the_unrounded_search(monkeypatch):
    """Same verdict, never more states, for runtime tile counts (rounding only applies to
    undecided ends: an exact count is decided from the start)."""
    for tiles, verdict in ((trip_count("tiles", divisibility=4), "SAFE"), (trip_count("tiles"), "UNSAFE")):
        prog = _per_role(num_stages=4, num_tiles=tiles)
        monkeypatch.setattr(loops_mod, "ROUND_ENDS", True)
        rounded = run_checker(prog)
        monkeypatch.setattr(loops_mod, "ROUND_ENDS", False)
        plain = run_checker(prog)
        assert rounded.verdict == plain.verdict == verdict
        assert rounded.states <= plain.states


@pytest.mark.parametrize("starts,steps", [([0, 0, 0], [4, 4, 4]), ([0, 1], [2, 2]), ([0, 0], [1, 3]),
                                          ([0, 2, 1], [4, 4, 3]), ([0], [1])])
def test_rounded_loop_end_is_the_same_decision_for_every_member(starts, steps):
    grp = LoopGroup(0, "g", list(range(len(starts))), list(steps), starts=list(starts))
    for bound in range(0, 40):
        r = _round_end(bound, grp)
        assert r >= bound
        for start, step in zip(starts, steps):
            for v in itertools.islice(itertools.count(start, step), 30):
                assert (v >= bound) == (v >= r), (bound, r, start, step, v)
    assert _round_end(1, LoopGroup(0, "g", [0, 1], [4, 4], starts=[0, 0])) == 4
    assert _round_end(5, LoopGroup(0, "g", [0, 1], [2, 2], starts=[0, 1])) == 5
