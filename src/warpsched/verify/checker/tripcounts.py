"""The trip counts and tile counts a counterexample ran with, in words a person can check.

Counted from the counterexample's own steps (iterations each task started, tiles it entered)
and completed from the final state's loop decisions (a decided end says how many iterations a
task still had to run), so a deadlock reads e.g. "Producer: 3 iterations (2 run)".
"""
from __future__ import annotations

from .loops import EXITED


def _steps(path):
    for _state, label in path:
        yield label[0], label[1]
        for what, _pc, _cur in (label[3] if len(label) > 3 else ()):
            yield label[0], what


def summary(engine, path, final) -> str:
    """One line: each looping task's trip count in this counterexample, and the tile count.
    ``final``: the state the problem was found in (explore's replay computed it)."""
    started = {}  # executor -> iterations started in its current tile
    tiles = {}
    for e, what in _steps(path):
        if what.startswith("loop:") and what != "loop:exit":
            started[e] = started.get(e, 0) + 1
        elif what in ("tile:run", "tile:skipped"):
            tiles[e] = tiles.get(e, 0) + 1
            started[e] = 0
    parts = []
    for e, ex in enumerate(engine.execs):
        heads = [ins for ins in ex.program if ins.kind == "loop_head"]
        if not heads:
            continue
        ins = heads[0]
        grp = engine.c.groups[ins.group]
        run = started.get(e, 0)
        total = None
        if final is not None:
            ri = engine._record_index(final, e)
            recs = final[4]
            rec = final[5] if ri is None else (recs[ri] if 0 <= ri < len(recs) else None)
            if rec is not None:  # None: the task left its last tile, whose record is gone
                dec, bound, nvs = rec[1][ins.group]
                v = nvs[ins.member]
                if v == EXITED:
                    total = run
                elif dec:
                    total = run + max(0, -(-(bound - v) // ins.step))
        sym = f" ({grp.symbol})" if grp.symbol not in ("N", "compile-time") else ""
        off = grp.offsets[ins.member] if ins.member < len(grp.offsets) else 0
        if sym and off:  # a loop to K - 1 (or K + 1): name the expression and where it is written
            d = getattr(getattr(ex.task, "schedule", None), "domain_loop", None)
            where = f", domain_loop at {d.location}" if d is not None else ""
            sym = f" ({grp.symbol} {'+' if off > 0 else '-'} {abs(off)}{where})"
        if total is None:
            parts.append(f"{ex.name}: {run} iteration(s) run, more undecided{sym}")
        elif total == run:
            parts.append(f"{ex.name}: {total} iteration(s){sym}")
        else:
            parts.append(f"{ex.name}: {total} iteration(s){sym}, {run} run")
    if tiles:
        parts.append("work tiles entered: " + ", ".join(f"{engine.execs[e].name} {n}" for e, n in tiles.items()))
    lifted = " (an exact count far from its end is checked up to whole periods)" if engine.exact_lifted else ""
    return ("trip counts in this counterexample: " + "; ".join(parts) + lifted) if parts else ""
