"""Stage-rotation and phase-flip symmetry of pipelines.

Shifting every cursor and every stage-indexed barrier of one pipeline by the same multiple
of its strides' lcm, and flipping the pipeline's phase bits together with its cursors'
parities, maps reachable states to reachable states and keeps every verdict (a wait passes
iff phase != parity; a stage is compared only with itself). So each state is stored in a
canonical form: the first cursor of each pipeline at a stage below the lcm, with parity 0.
This is what makes the state count independent of how far the rings have turned (e.g.
of K mod 2S). It is applied only to pipelines whose bytes alias no other resource, since
stage s of an aliased resource overlaps a particular slice of the other one.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from ...model.pipeline_group import PipelineGroup
from .engine import ASYNC, CUR, PEND, SYNC
from .wgmma import WG_TAGS
from .model import Compiled, _lcm


class Family:
    def __init__(self, owners, num_stages):
        self.owners = owners
        self.S = num_stages
        self.L = 1
        self.slots: List[Tuple[int, int]] = []  # (executor, cursor slot)
        self.bars: List[int] = []
        self.rids = set()
        self.ref = None
        self.perm: Dict[int, Dict[int, int]] = {}
        self.wraps: Dict[int, Dict[int, int]] = {}


def families(comp: Compiled) -> List[Family]:
    # owners linked through pipeline groups share one stage numbering
    link: Dict[int, int] = {}
    objs: Dict[int, object] = {}

    def find(x):
        while link.get(x, x) != x:
            x = link[x]
        return x

    for b in comp.barriers:
        objs[id(b.owner)] = b.owner
        link.setdefault(id(b.owner), id(b.owner))
        if isinstance(b.owner, PipelineGroup):
            for m in b.owner.members:
                objs[id(m)] = m
                link.setdefault(id(m), id(m))
                link[find(id(m))] = find(id(b.owner))
    for ex in comp.executors:
        for c in ex.cursors:
            objs[id(c.owner)] = c.owner
            link.setdefault(id(c.owner), id(c.owner))
            if isinstance(c.owner, PipelineGroup):
                for m in c.owner.members:
                    link.setdefault(id(m), id(m))
                    link[find(id(m))] = find(id(c.owner))
    fams: Dict[int, Family] = {}
    twin_of = {rid: twin for twin, rid in comp.regions.twins.items()}
    for oid in list(link):
        root = find(oid)
        fam = fams.get(root)
        if fam is None:
            fam = fams[root] = Family([], 0)
        fam.owners.append(objs[oid])
        fam.rids.add(oid)
        if oid in twin_of:  # the peer CTA's copy of its bytes rotates with it
            fam.rids.add(twin_of[oid])
    out = []
    aliased = {rid for rid in comp.regions.allocs if _has_partner(comp, rid)}
    for fam in fams.values():
        bars = [b for b in comp.barriers if id(b.owner) in fam.rids]
        if not bars or fam.rids & aliased:
            continue
        stages = {max(x.stage for x in bars if x.owner is b.owner) + 1 for b in bars}
        if len(stages) != 1:
            continue
        fam.S = stages.pop()
        fam.bars = [b.index for b in bars]
        strides = []
        for ex in comp.executors:
            for c in ex.cursors:
                if id(c.owner) in fam.rids:
                    fam.slots.append((ex.index, c.slot))
                    strides.append(c.stride)
        if not fam.slots:
            continue
        fam.L = _lcm(strides)
        if fam.S % fam.L:
            continue
        fam.ref = fam.slots[0]
        base = {}
        for b in bars:
            base.setdefault((id(b.owner), b.kind, b.cta), b.index - b.stage)
        for r in range(0, fam.S, fam.L):
            fam.perm[r] = {b.index: base[(id(b.owner), b.kind, b.cta)] + (b.stage - r) % fam.S for b in bars}
            fam.wraps[r] = {b.index: int(b.stage < r) for b in bars}
        # the same, as lists aligned with fam.bars (the hot path in Canon)
        fam.perm_list = {r: [p[b] for b in fam.bars] for r, p in fam.perm.items()}
        fam.wraps_list = {r: [w[b] for b in fam.bars] for r, w in fam.wraps.items()}
        out.append(fam)
    return out


def _has_partner(comp: Compiled, rid: int) -> bool:
    return any(other != rid and comp.regions.overlap((rid, -1), (other, -1)) for other in comp.regions.allocs
               if comp.regions.allocs.get(other))


class Canon:
    def __init__(self, comp: Compiled):
        self.fams = families(comp)
        self.n = len(comp.executors)

    def __call__(self, st):
        execs, bars, hw = st[0], st[1], st[2]
        changed = False
        for fam in self.fams:
            e0, s0 = fam.ref
            stage, parity, _ = execs[e0][CUR][s0]
            r = stage - stage % fam.L
            f = parity
            if not r and not f:
                continue
            if not changed:
                execs = list(execs)  # executor tuples, replaced one by one where they change
                bars = list(bars)
                changed = True
            S = fam.S
            old = [bars[b] for b in fam.bars]
            for v, pb, w in zip(old, fam.perm_list[r], fam.wraps_list[r]):
                # a stage that wraps below 0 is one lap earlier: its phase flips
                bars[pb] = (v[0] ^ f ^ w, v[1], v[2])
            for e, slot in fam.slots:
                x = execs[e]
                curs = list(x[CUR])
                s_, p_, d_ = curs[slot]
                curs[slot] = ((s_ - r) % S, p_ ^ f ^ (s_ < r), d_)
                execs[e] = x[:CUR] + (tuple(curs),) + x[CUR + 1:]
            if r:
                perm = fam.perm[r]
                rids = fam.rids

                def rot(reg):
                    return (reg[0], (reg[1] - r) % S) if reg[0] in rids and reg[1] >= 0 else reg

                for i, x in enumerate(execs):
                    if not (x[ASYNC] or x[PEND] or x[SYNC] is not None):
                        continue
                    x = list(x)
                    if x[ASYNC]:
                        x[ASYNC] = tuple((rot(w[0]),) + w[1:] for w in x[ASYNC])
                    if x[SYNC] is not None:
                        x[SYNC] = (rot(x[SYNC][0]), x[SYNC][1])
                    if x[PEND]:
                        x[PEND] = tuple((perm.get(b, b), n, tuple(rot(g) for g in regs)) for b, n, regs in x[PEND])
                    execs[i] = tuple(x)
                if hw:
                    hw = tuple(sorted((perm.get(b, b), e, rot(reg)) for b, e, reg in hw))
        # windows other than wgmma groups (kept in issue order: wait_group retires the oldest) are sets:
        # store them sorted
        fixed = None
        for i, x in enumerate(execs):
            w = x[ASYNC]
            if len(w) > 1:
                if len(w) == 2 and w[0][2] not in WG_TAGS and w[1][2] not in WG_TAGS:
                    if w[0] <= w[1]:
                        continue
                    nw = (w[1], w[0])
                else:
                    wg = tuple(v for v in w if v[2] in WG_TAGS)
                    rest = tuple(sorted(v for v in w if v[2] not in WG_TAGS))
                    nw = rest + wg
                    if nw == w:
                        continue
                if fixed is None:
                    fixed = list(execs)
                fixed[i] = x[:ASYNC] + (nw,) + x[ASYNC + 1:]
        if fixed is not None:
            execs = fixed
            changed = True
        if not changed:
            return st
        return (tuple(execs), tuple(bars), hw) + st[3:]
