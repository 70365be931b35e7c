"""Warp dispatch and register reconfiguration.

Tasks are grouped by the register count of their warp groups. Each group becomes one
warp-uniform branch that first runs ``setmaxnreg`` (increase above the launch's
per-thread share, decrease below it) for every warp of its warp groups -- setmaxnreg is
warp-group wide, so idle warps of a task's warp group execute it too -- and then the
``if warp_idx in [warp_idx, warp_end)`` branch of each task (in a CTA pair, a leader-only
task also tests ``block_idx_in_cluster() % 2 == 0``).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import cutlass.cute as cute

from . import LoweringError
from .dsl import dyn_if

WARPS_PER_GROUP = 4
REGISTER_FILE = 65536


def launch_registers(num_threads: int) -> int:
    """Per-thread registers ptxas gives a kernel with a 1-block-per-SM launch bound."""
    return min(255, (REGISTER_FILE // max(1, num_threads)) // 8 * 8)


def group_registers(program) -> Dict[int, int]:
    """warp group -> register count requested by the tasks in it."""
    out: Dict[int, int] = {}
    for t in program.tasks:
        if t.num_registers is None:
            continue
        for w in range(t.warp_idx, t.warp_end):
            g = w // WARPS_PER_GROUP
            if out.get(g, t.num_registers) != t.num_registers:
                raise LoweringError(f"warp group {g} has tasks asking for {out[g]} and {t.num_registers} registers",
                                    task=t, location=t.location, fix="give every task of a warp group the same "
                                    "num_registers")
            out[g] = t.num_registers
    return out


def _in_range(warp_idx, lo: int, hi: int):
    if hi - lo == 1:
        return warp_idx == lo
    if lo == 0:
        return warp_idx < hi
    return (warp_idx >= lo) & (warp_idx < hi)


def warp_in_task(task):
    """Warp-uniform Boolean: the current warp is one of ``task``'s (``Task.is_selected()``)."""
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    return _in_range(warp_idx, task.warp_idx, task.warp_end)


def _leader_cta(v: int):
    """Warp-uniform Boolean: this CTA leads its CTA group of ``v`` CTAs."""
    return cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster()) % v == 0


def _ranges(groups: List[int]):
    """Contiguous warp ranges covering the given warp groups."""
    groups = sorted(groups)
    out, start, prev = [], groups[0], groups[0]
    for g in groups[1:]:
        if g != prev + 1:
            out.append((start * WARPS_PER_GROUP, (prev + 1) * WARPS_PER_GROUP))
            start = g
        prev = g
    out.append((start * WARPS_PER_GROUP, (prev + 1) * WARPS_PER_GROUP))
    return out


def dispatch(lowering, emit_task, *, num_threads: Optional[int] = None) -> None:
    program = lowering.program
    warp_idx = lowering.warp_idx
    regs = group_registers(program)
    num_threads = num_threads or program.num_warps * 32
    base = launch_registers(num_threads)
    by_count: Dict[Optional[int], List] = {}
    for t in program.tasks:
        by_count.setdefault(t.num_registers if regs else None, []).append(t)

    def run_tasks(tasks):
        for t in tasks:
            pred = _in_range(warp_idx, t.warp_idx, t.warp_end)
            if lowering.plan.leader_only(t):  # CTA pair: every barrier operation is CtaLeader-gated
                pred = pred & _leader_cta(lowering.plan.cta_pair)
            dyn_if({}, [], pred, lambda env, t=t: emit_task(t))

    if not regs or len(set(regs.values())) == 1 and regs and list(regs.values())[0] == base:
        run_tasks(program.tasks)
        return
    for count, tasks in by_count.items():
        if count is None:
            run_tasks(tasks)
            continue
        wgs = sorted(g for g, c in regs.items() if c == count)
        ranges = _ranges(wgs)
        pred = _in_range(warp_idx, *ranges[0])
        for r in ranges[1:]:
            pred = pred | _in_range(warp_idx, *r)

        def branch(env, count=count, tasks=tasks):
            if count > base:
                cute.arch.setmaxregister_increase(count)
            elif count < base:
                cute.arch.setmaxregister_decrease(count)
            run_tasks(tasks)

        dyn_if({}, [], pred, branch)
