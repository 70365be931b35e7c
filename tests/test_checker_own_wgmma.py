"""A warp group's wgmma reading a tile it wrote itself and handed to another warp group (the attention
backward's ``shared_ds``: each warp group's dQ GEMM reads its own dS tile and the other's). The other warp
group's reads end at its release, which the pipeline orders before the next write; the writer's own reads
end only at its own ``wgmma.wait_group``, which nothing but program order puts before its next write. The
checker tracks them as a read window of the writer (``@producer_work(work_attrs=WorkAttr.WGMMA)``, declared
inside the producer bracket), and a write of the stage by the same task while the window is open is a race."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import Group, WgmmaWorks, program, task, tma_cfg  # noqa: E402
from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, domain_loop,  # noqa: E402
                       producer_work, schedule)
from warpsched.verify.checker import run_checker  # noqa: E402


class Tile(WgmmaWorks, MemoryResource):
    """One warp group's tile, written by it and read by both warp groups' wgmma (``operand``; the writer's
    own read: ``own_operand``, after the commit)."""

    def get_smem_requirements(self):
        return [SmemAllocation(f"s_{self.name}", dtype=2, count=64 * 64, alignment=1024)]

    @producer_work
    def store(self, stage_info): ...


class K(WgmmaWorks, MemoryResource):
    """A tile both warp groups read for the whole loop (loaded once by TMA); its ``wgmma`` is one commit
    group reading K and the tiles declared since the last group."""

    def get_smem_requirements(self):
        return [SmemAllocation("s_K", dtype=2, count=64 * 64, alignment=1024)]

    @producer_work
    def load(self, stage_info): ...


def _cfg():
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=Group(128),
                                                          consumer_group=Group(128))


def _exchange_parts(declare, pending):
    """Two warp groups swapping tiles for 4 steps: (tasks, graph, smem, the warp groups' schedule). Each
    step: store its tile, commit; one GEMM group reads the other's tile with K, a second one this warp
    group's own tile with K; then ``k.wgmma_wait(pending)`` and the other's tile released. ``declare``: where
    the writer declares its own read: "group_2" (its group, the second), "after_commit" (the first),
    "in_bracket" (before the commit), "before_any_commit", or None (not at all)."""
    tiles = [Tile(name=f"T{w}", pipeline_config=_cfg()) for w in range(2)]
    k = K(name="K", pipeline_config=tma_cfg(stages=1, cons=8, nbytes=8192))

    @schedule
    def load(k):
        k.acquire()
        k.load()
        k.commit()

    @schedule
    def wg(mine, other, k):
        k.wait()
        with domain_loop(0, 4, 1):
            if declare == "before_any_commit":
                mine.own_operand()  # declared where nothing was committed yet
            mine.acquire()
            mine.store()
            if declare == "in_bracket":
                mine.own_operand()  # declared inside the bracket
            mine.commit()
            other.wait()
            other.operand()
            if declare == "after_commit":
                mine.own_operand()
            k.wgmma()  # group 1: the other warp group's tile and K
            if declare == "group_2":
                mine.own_operand()
            k.wgmma()  # group 2: K (and this warp group's own tile)
            k.wgmma_wait(pending=pending)
            other.release()
        k.wgmma_wait()
        k.release()

    tasks = [task("Load", load(k), dst=[k], warp=0)]
    tasks += [task(f"WG{w}", wg(tiles[w], tiles[1 - w], k), src=[tiles[1 - w], k], dst=[tiles[w]], warp=4 * (w + 1),
                   warps=4) for w in range(2)]
    return tasks, {tiles[0]: [], tiles[1]: [], k: []}, SmemAllocator.for_resources(k, *tiles), wg


def _exchange(variant):
    """"safe": every read retired (``pending=0``) before the next store. "own_in_flight": ``pending=1``
    keeps the second group, which reads this warp group's own tile, in flight at the next store.
    "undeclared": the same bug without ``mine.own_operand()`` (what the checker saw before the writer's own
    reads were modelled)."""
    declare, pending = {"safe": ("group_2", 0), "own_in_flight": ("group_2", 1), "undeclared": (None, 1)}[variant]
    tasks, graph, smem, wg = _exchange_parts(declare, pending)
    return program(tasks, graph, smem=smem), wg


def test_the_writers_own_read_retired_before_its_next_store_is_safe():
    res = run_checker(_exchange("safe")[0])
    assert res.verdict == "SAFE", res.report()


def test_a_store_over_the_writers_own_wgmma_read_is_a_race():
    prog, wg = _exchange("own_in_flight")
    res = run_checker(prog)
    assert res.verdict == "UNSAFE", res.report()
    errs = [f for f in res.findings if f.severity == "error"]
    assert any("while its own WGMMA still reads" in f.message for f in errs), [f.message for f in errs]
    hit = [f for f in errs if "while its own WGMMA still reads" in f.message][0]
    # the store, or the acquire it runs with as one step (an acquire and its work are fused)
    assert hit.location.line in (_line(wg.fn, "mine.acquire()"), _line(wg.fn, "mine.store()")), hit.location
    assert "T0 stage 0" in hit.message or "T1 stage 0" in hit.message


def test_undeclared_the_same_bug_passes():
    """Why the declaration is needed: without it the checker sees only the other warp group's reads, which
    the schedule does retire before the release."""
    res = run_checker(_exchange("undeclared")[0])
    assert res.verdict == "SAFE", res.report()


def _line(fn, marker):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


# ------------------------------------------------------------------ where the declaration may stand
def _static(where):
    """The static checks' findings for the exchange with the writer's declaration ``where``."""
    import warpsched
    from warpsched import TaskManager

    tasks, graph, smem, _ = _exchange_parts(where, 0)
    try:
        TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=smem, verbose=False)
    except warpsched.ValidationError as e:
        return e.findings
    return []


def test_the_declaration_after_the_commit_is_accepted():
    assert [f for f in _static("after_commit") if f.severity == "error"] == []


def test_a_declaration_inside_the_bracket_or_before_any_commit_is_refused():
    for where, needle in (("in_bracket", "runs inside the acquire()"), ("before_any_commit", "no T0.commit()")):
        errs = [f for f in _static(where) if f.severity == "error"]
        hit = [f for f in errs if "own_operand() declares a read of the stage this task last committed" in f.message]
        assert hit and needle in hit[0].message and hit[0].fix and hit[0].expected, [f.message for f in errs]


def test_wait_group_keeps_the_newest_groups_with_their_declared_operands():
    """The window bookkeeping alone: a declaration joins the next WGMMA work's group; wait_group(N) keeps
    the newest N groups whole and every declaration whose group is not issued yet."""
    from warpsched.verify.checker.wgmma import issue_group, retire_groups

    w = issue_group((("Q", False, "wgo"),), "K")  # group 1: Q (declared) and K
    w = issue_group(w, "V")  # group 2: V
    w = w + (("dS", False, "wgo"),)  # declared for a group not issued yet
    assert [x[0] for x in retire_groups(w, 1)] == ["V", "dS"]
    assert [x[0] for x in retire_groups(w, 2)] == ["Q", "K", "V", "dS"]
    assert [x[0] for x in retire_groups(w, 0)] == ["dS"]
    hold = (("T", True, "hold"),)  # other windows are left alone
    assert retire_groups(hold + w, 0) == hold + (("dS", False, "wgo"),)
