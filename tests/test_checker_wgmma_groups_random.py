"""Random WGMMA schedules against an independent reading of the hardware's commit groups.

A consumer warp group holds a tile C for the whole loop (loaded once) and, each step, waits on a stage of
two TMA rings A and B (2 stages, 4 steps, so the stages of steps 0 and 1 are loaded again), then runs a
random sequence of: a declared operand (``X.operand()``: the next WGMMA group reads X), a GEMM
(``X.wgmma()``: one commit group reading X and the declared operands), ``wgmma.wait_group(p)``; then releases
A and B. (C lets a group read a ring only through a declaration: what tells commit groups from calls.) The expected verdict comes from a direct
simulation: the groups in flight as a list of sets, ``wait_group(p)`` keeping the newest p; a release
of X in steps 0 or 1 while a group in flight (or a declaration not issued yet) reads X lets the loader
overwrite the stage under it: a race. Every random program must get exactly that verdict from the
exhaustive checker (and a clean static check), with the return-fusing reduction on and off."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import WgmmaWorks, program, task, tma_cfg  # noqa: E402
from warpsched import (MemoryResource, SmemAllocation, SmemAllocator, domain_loop, producer_work,  # noqa: E402
                       schedule)
from warpsched.verify.checker import macro, run_checker  # noqa: E402

STEPS, STAGES = 4, 2


class Ring(WgmmaWorks, MemoryResource):
    def get_smem_requirements(self):
        return [SmemAllocation(f"s_{self.name}", dtype=2, count=STAGES * 64 * 64, alignment=1024)]

    @producer_work
    def load(self, stage_info): ...


def draw_ops(rng):
    """A step's random sequence: ("operand" | "mma", "A" | "B") or ("retire", pending)."""
    ops = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(["operand", "mma", "mma", "retire"])
        if kind == "retire":
            ops.append((kind, rng.choice([0, 0, 1, 2])))
        else:  # declarations mostly of the rings, GEMMs often on C: a ring read only through a declaration
            ops.append((kind, rng.choice("AB" if kind == "operand" else "ABCC")))
    if rng.random() < 0.5:  # often the step ends as real ones do: every group retired before the releases
        ops.append(("retire", 0))
    return ops


def expected_race(ops, calls_as_groups=False):
    """The direct simulation of the module docstring; True when a release can race the loader.
    ``calls_as_groups``: the reading the checker had before (each declaration a group of its own)."""
    groups, declared = [], set()
    for step in range(STEPS):
        for kind, arg in ops:
            if kind == "operand" and calls_as_groups:
                groups.append({arg})
            elif kind == "operand":
                declared.add(arg)
            elif kind == "mma":
                groups.append(declared | {arg})
                declared = set()
            else:
                groups = groups[len(groups) - arg:] if arg else []
        for name in "AB":
            reads = any(name in g for g in groups) or name in declared
            if reads and step + STAGES < STEPS:  # this stage is loaded again by a later step
                return True
    return False


def build(ops):
    a, b = (Ring(name=n, pipeline_config=tma_cfg(stages=STAGES, cons=4, nbytes=8192)) for n in "AB")
    c = Ring(name="C", pipeline_config=tma_cfg(stages=1, cons=4, nbytes=8192))

    @schedule
    def load(a, b, c):
        c.acquire()
        c.load()
        c.commit()
        with domain_loop(0, STEPS, 1):
            a.acquire()
            a.load()
            a.commit()
            b.acquire()
            b.load()
            b.commit()

    @schedule
    def mma(a, b, c):
        res = {"A": a, "B": b, "C": c}
        c.wait()
        with domain_loop(0, STEPS, 1):
            a.wait()
            b.wait()
            for kind, arg in ops:
                if kind == "retire":
                    c.wgmma_wait(pending=arg)
                else:
                    getattr(res[arg], {"operand": "operand", "mma": "wgmma"}[kind])()
            a.release()
            b.release()
        c.wgmma_wait()
        c.release()

    return program([task("Load", load(a, b, c), dst=[a, b, c], warp=0),
                    task("MMA", mma(a, b, c), src=[a, b, c], warp=4, warps=4)],
                   {a: [], b: [], c: []}, smem=SmemAllocator.for_resources(a, b, c))


@pytest.mark.parametrize("fuse", [True, False])
def test_random_wgmma_schedules_match_the_commit_group_reading(monkeypatch, fuse):
    monkeypatch.setattr(macro, "FUSE_RETURNS", fuse)
    rng = random.Random(37)
    races = missed_before = 0
    for _ in range(150):
        ops = draw_ops(rng)
        want = expected_race(ops)
        missed_before += want and not expected_race(ops, calls_as_groups=True)  # races the old reading missed
        res = run_checker(build(ops))
        got = res.verdict
        assert got == ("UNSAFE" if want else "SAFE"), (ops, res.report())
        if want:
            races += 1
            assert any(f.severity == "error" and "race" in f.message for f in res.findings), res.report()
    assert 20 <= races <= 130 and missed_before >= 5, (races, missed_before)  # both verdicts, and the old misses


@pytest.mark.parametrize("pending,verdict", [(1, "UNSAFE"), (0, "SAFE")])
def test_a_declared_operand_is_read_while_its_group_is_kept(pending, verdict):
    """The named twin: one group reads A (declared) and B; ``wait_group(1)`` keeps it, so A is still read at
    its release. (Counting WGMMA calls, the checker kept only B's window and called this SAFE.)"""
    res = run_checker(build([("operand", "A"), ("mma", "B"), ("retire", pending)]))
    assert res.verdict == verdict, res.report()
    if verdict == "UNSAFE":
        assert any("Load writes A" in f.message and "MMA reads A" in f.message for f in res.findings), res.report()
