"""Which steps are executor-local, which bytes are private, and which executors are
independent of each other (checked separately)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .compiled import SYNC_OPS, Op


def _is_local(act, regions) -> bool:
    """Steps whose effect is private to the executor: reordering them with any other
    executor's step changes no shared state, so exploring one order is enough."""
    if act.keys:
        return False
    if act.op is Op.NOP or act.op is Op.SKIP:  # a skip moves this executor's own cursors only
        return True
    if act.op is Op.WORK:
        return ((not act.regions or act.private) and not act.pdl_dependent and act.wgmma_wait < 0
                and act.deliver_base < 0 and not act.tx_deliver and not act.hold_open and not act.wgmma
                and not act.wgmma_operand)
    return False


def _mark_private(execs, regions) -> None:
    """Flag touches whose bytes no other executor can overlap (their windows cannot race)."""
    touched = []
    for ex in execs:
        keys = set()
        for ins in ex.program:
            a = ins.action
            if a is None or not a.regions:
                continue
            stages = _stages(ex.cursors[a.cursor]) if a.cursor is not None else {-1}
            for rid, sl in a.regions:
                keys.update((rid, st) for st in (stages if sl is None else {sl}))
        touched.append(keys)
    for ex in execs:
        others = [k for o in execs if o.index != ex.index for k in touched[o.index]]
        # the bytes this executor's own wgmma reads (they run on past the call): a write of them by the
        # same executor is checked against its open WGMMA windows, so it is neither private nor local
        wgmma_read = {(rid, st) for ins in ex.program if ins.action is not None
                      and (ins.action.wgmma or ins.action.wgmma_operand)
                      for rid, sl in ins.action.regions
                      for st in (_stages(ex.cursors[ins.action.cursor]) if sl is None and ins.action.cursor
                                 is not None else {sl if sl is not None else -1})}
        for ins in ex.program:
            a = ins.action
            if a is None or not a.regions:
                continue
            mine = [k for k in touched[ex.index] if k[0] in {rid for rid, _ in a.regions}]
            # same-resource stage conflicts are caught by the bracket holds; call windows are
            # only needed where another resource's bytes overlap (aliasing)
            a.private = not any(regions.overlap(m, o) for m in mine for o in others
                                if o[0] != m[0] or a.unheld)
            if a.private and a.write and any(regions.overlap(m, w) for m in mine for w in wgmma_read):
                a.private = False
            ins.local = _is_local(a, regions)


def _stages(cur):
    return {(cur.lane + k * cur.stride) % cur.num_stages for k in range(cur.num_stages)}


def components(comp) -> List[List[Tuple[int, Optional[int], int]]]:
    """Split executors into independent parts: two executors are coupled when they may touch
    one mbarrier, overlapping bytes, one when_true key, or PDL. Independent parts are checked
    separately (their product adds no behaviour), so their trip counts need no correlation."""
    n = len(comp.executors)
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        parent[find(a)] = find(b)

    owners: Dict[Any, int] = {}
    touched: List[Tuple[int, Tuple[int, int]]] = []
    pdl = None
    for ex in comp.executors:
        for ins in ex.program:
            a = ins.action
            if a is None:
                continue
            stages = _stages(ex.cursors[a.cursor]) if a.cursor is not None else {0}
            keys = []
            for base in (a.barrier_base if a.op in SYNC_OPS else -1, a.deliver_base) + a.also_bases:
                if base >= 0:
                    keys.extend(("bar", base + st) for st in stages)
            keys.extend(("key", k) for k in a.keys)
            for k in keys:
                if k in owners:
                    union(ex.index, owners[k])
                else:
                    owners[k] = ex.index
            for rid, sl in a.regions:
                for st in (stages if sl is None else {sl}):
                    touched.append((ex.index, (rid, st)))
            if a.op in (Op.PDL_WAIT, Op.PDL_LAUNCH) or a.pdl_dependent:
                if pdl is None:
                    pdl = ex.index
                union(ex.index, pdl)
        for k in ex.keys:
            if ("key", k) in owners:
                union(ex.index, owners[("key", k)])
            else:
                owners[("key", k)] = ex.index
    for i, (ea, ra) in enumerate(touched):
        for eb, rb in touched[i + 1:]:
            if find(ea) != find(eb) and comp.regions.overlap(ra, rb):
                union(ea, eb)
    parts: Dict[int, List[Tuple[int, Optional[int], int]]] = {}
    for ex in comp.executors:
        parts.setdefault(find(ex.index), []).append((id(ex.task), ex.lane_warp, ex.cta))
    return list(parts.values())


__all__ = ["components"]
