"""Static per-instruction tables the engine's hot paths look up instead of re-deciding.

Each function takes an executor's program and returns one entry per pc.
"""
from __future__ import annotations

from .compiled import OPENING_OPS, Op


def maybe_local(prog):
    """Can the instruction ever be a local step (a cheap filter in front of Engine.is_local)?"""
    return tuple(i.kind in ("jump", "loop_head", "tile_head") or (i.kind == "step" and (i.local or bool(i.guards)))
                 for i in prog)


def _passable(ins) -> bool:
    """A jump or an unguarded local step that changes nothing when passed without running it; a
    skip is local but moves the executor's cursors, so it must run."""
    return ins.kind == "jump" or (ins.kind == "step" and ins.local and not ins.guards and ins.action.op is not Op.SKIP)


def fast_forward(prog):
    """Where the fast-forward over jumps and unguarded local steps from pc lands, and the steps
    it passes: (pc, ((what, pc), ...)), or None where there is nothing to pass."""
    out = []
    for pc0 in range(len(prog)):
        pc, passed, seen = pc0, [], set()
        ins = prog[pc]
        while _passable(ins) and pc not in seen:
            seen.add(pc)
            passed.append(("jump" if ins.kind == "jump" else "step", pc))
            pc = ins.target if ins.kind == "jump" else pc + 1
            ins = prog[pc]
        out.append((pc, tuple(passed)) if passed else None)
    return out


def _merge_static(ins):
    k = ins.kind
    if k == "jump":
        return True
    if k in ("loop_head", "tile_head") or (k == "step" and ins.guards):
        return None  # depends on the state
    if k != "step":
        return False
    return action_mergeable(ins.action)


def action_mergeable(a):
    """A step that runs (its guards hold) can join a macro-step: arrivals, no-ops, work."""
    if a.keys:
        return False
    if a.op in (Op.NOP, Op.COMMIT, Op.RELEASE, Op.SKIP):
        return True
    return a.op is Op.WORK and a.wgmma_wait < 0 and not a.pdl_dependent


def merge_static(prog):
    """Engine.mergeable where it does not depend on the state (None: ask it)."""
    return tuple(_merge_static(i) for i in prog)


def wait_at(prog):
    """(cursor slot, barrier base) of an unguarded wait / acquire, else None (Engine.blocked)."""
    return tuple((i.action.cursor, i.action.barrier_base)
                 if i.kind == "step" and not i.guards and i.action.op in OPENING_OPS
                 and i.action.cursor is not None else None for i in prog)
