"""``skip(count=K)`` at compile time: the periods of K's loop group and the idle loops.

``builder`` is the program builder (model._Builder): its groups and key ids.
"""
from __future__ import annotations

import math

from ...model.ir import Section


def _lcm(xs) -> int:
    out = 1
    for x in xs:
        out = out * max(1, x) // math.gcd(out, max(1, x))
    return out


def bulk_periods(builder, execs) -> None:
    """skip(count=K) reads K's end once, so the group's gap may shrink only by whole cycles of
    the skipped cursors (2 x stages x stride: the same stage and parity), as with a skipping
    member; a loop of that group whose every step is guarded off by a when_true /
    when_false value it does not produce itself runs as one step (``Instr.idle_guards``)."""
    for e in execs:
        for ins in e.program:
            a = ins.action if ins.kind == "step" else None
            if a is None or a.bulk is None:
                continue
            g = builder.groups[a.bulk[0]]
            cycles = [2 * e.cursors[c].num_stages * e.cursors[c].stride for c in a.advance]
            g.gap_period = _lcm([g.lcm, g.gap_period] + cycles)
            g.jump_period = _lcm([g.jump_period] + cycles)
    for e in execs:
        if e.uses_empty:  # an if_empty() block reads the loop's trip count, which an idle exit does not decide
            continue
        heads = [i for i, ins in enumerate(e.program) if ins.kind == "loop_head"
                 and builder.groups[ins.group].jumpers]
        for h in heads:
            body = [x for x in e.program[h + 1:e.program[h].target] if x.kind == "step"]
            idle = []
            for x in body:
                if x.action.keys:
                    idle = None
                    break
                kg = tuple((e.keys.index(builder.key_ids[repr(g.key)]), g.kind == "when_true")
                           for g in x.guards if g.kind in ("when_true", "when_false"))
                if not kg:
                    idle = None
                    break
                idle.append(kg)
            e.program[h].idle_guards = tuple(idle) if idle else None
            _pre_idle(builder, e, h)


def _pre_idle(builder, e, h) -> None:
    """The idle guards read one key that this task produces once per tile, unguarded, before
    the loop: its value for a later tile is known as soon as another task produced it."""
    head, idle = e.program[h], e.program[h].idle_guards
    kids = {pos for g in idle or () for pos, _ in g}
    tiles = [i for i, ins in enumerate(e.program) if ins.kind == "tile_head"]
    if len(kids) != 1 or not tiles:
        return
    kid = e.keys[next(iter(kids))]
    prods = [i for i, ins in enumerate(e.program) if ins.kind == "step" and kid in ins.action.keys]
    if len(prods) == 1 and tiles[0] < prods[0] < h and not e.program[prods[0]].guards \
            and e.program[prods[0]].action.step.section is Section.HEAD:
        e.pre_idle = (kid, head.group, head.member, tiles[0], prods[0], idle)
