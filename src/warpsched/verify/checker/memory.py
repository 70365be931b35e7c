"""Which bytes a (resource, stage) touch covers, and which touches overlap.

A pipelined resource's stage ``s`` occupies the ``s``-th equal slice of each of its SMEM /
TMEM allocations; an unpipelined resource touches its whole allocations. Different
resources overlap when their byte (or TMEM column) ranges intersect: through an SMEM alias
group (phases share a base offset), or TMEM allocations whose column ranges overlap. When
the layout has not been computed yet, two allocations overlap when they sit in different
phases of one alias group (whole allocations, no stage slicing). A pipelined resource
with no declared allocation still has one abstract slot per stage, so a producer writing
stage ``s`` while a consumer reads stage ``s`` is seen as well.

In a CTA pair each resource has a twin for the peer CTA's copy (``in_cta``): the same layout
in the peer's own SMEM / TMEM, overlapping nothing of the leader's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

Interval = Tuple[str, int, int]  # (space, lo, hi) or ('alloc', id, 0)


class RegionMap:
    def __init__(self, program):
        self.program = program
        self.allocs: Dict[int, List[Tuple[str, Any]]] = {}
        self.names: Dict[int, str] = {}
        self.stages: Dict[int, int] = {}
        self._alias: Dict[int, Tuple[int, int]] = {}  # id(alloc) -> (group, phase)
        smem = program.smem_allocator
        for gi, group in enumerate(getattr(smem, "alias_groups", None) or []):
            for pi, phase in enumerate(group):
                for a in phase:
                    self._alias[id(a)] = (gi, pi)
        for r in program.resources:
            out: List[Tuple[str, Any]] = []
            for space, getter in (("smem", "get_smem_requirements"), ("tmem", "get_tmem_requirements")):
                try:
                    reqs = getattr(r, getter)() or []
                except Exception:  # noqa: BLE001 - a user's requirement hook may need a kernel context
                    reqs = []
                out.extend((space, a) for a in reqs)
            self.allocs[id(r)] = out
            self.names[id(r)] = getattr(r, "display_name", None) or getattr(r, "name", None) or type(r).__name__
            cfg = getattr(r, "pipeline_config", None)
            self.stages[id(r)] = cfg.num_stages if cfg is not None else 1
        self._cache: Dict[Tuple, bool] = {}
        self.twins: Dict[int, int] = {}  # the peer CTA's region id -> the leader's
        self.pairs: List[Tuple[str, str]] = self._alias_pairs()

    def in_cta(self, rid: int, cta: int) -> int:
        """The region id of resource ``rid``'s copy in CTA ``cta`` of a pair (0: the leader's own)."""
        if not cta:
            return rid
        twin = ~rid  # ids are non-negative: the complement never collides
        if twin not in self.twins:
            self.twins[twin] = rid
            self.allocs[twin] = [(space + "@peer", a) for space, a in self.allocs.get(rid, [])]
            self.names[twin] = f"{self.names.get(rid, '?')}@peer"
            self.stages[twin] = self.stages.get(rid, 1)
            for space, a in self.allocs[twin]:
                if id(a) in self._alias:  # the peer's alias groups are its own
                    g, ph = self._alias[id(a)]
                    self._alias[~id(a)] = (("peer", g), ph)
        return twin
    def has_region(self, res) -> bool:
        return bool(self.allocs.get(id(res)))

    def _intervals(self, rid: int, stage: int) -> List[Interval]:
        out: List[Interval] = []
        n = self.stages.get(rid, 1)
        peer = rid in self.twins
        for space, a in self.allocs.get(rid, []):
            off = getattr(a, "offset", None)
            if space.startswith("smem"):
                size = a.size_bytes
            else:
                size = int(getattr(a, "columns", 0))
            if off is None:
                out.append(("alloc", ~id(a) if peer else id(a), 0))
                continue
            if stage >= 0 and n > 1 and size % n == 0:
                lo = off + stage * (size // n)
                out.append((space, lo, lo + size // n))
            else:
                out.append((space, off, off + size))
        return out

    def overlap(self, a: Tuple[int, int], b: Tuple[int, int]) -> bool:
        """Do touches ``a`` and ``b`` ((resource id, stage or -1)) share any byte?"""
        key = (a, b) if a <= b else (b, a)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._overlap(a, b)
            self._cache[key] = hit
        return hit

    def _overlap(self, a, b) -> bool:
        (ra, sa), (rb, sb) = a, b
        if ra == rb:
            return sa < 0 or sb < 0 or sa == sb
        for ia in self._intervals(ra, sa):
            for ib in self._intervals(rb, sb):
                if ia[0] == "alloc" or ib[0] == "alloc":
                    if ia[0] == ib[0] == "alloc" and ia[1] == ib[1]:
                        return True
                    ga = self._alias.get(ia[1]) if ia[0] == "alloc" else None
                    gb = self._alias.get(ib[1]) if ib[0] == "alloc" else None
                    if ga and gb and ga[0] == gb[0] and ga[1] != gb[1]:
                        return True
                    continue
                if ia[0] == ib[0] and ia[1] < ib[2] and ib[1] < ia[2]:
                    return True
        return False

    def _alias_pairs(self) -> List[Tuple[str, str]]:
        ids = [rid for rid, al in self.allocs.items() if al]
        out = []
        for i, x in enumerate(ids):
            for y in ids[i + 1:]:
                if self._overlap((x, -1), (y, -1)):
                    out.append((self.names[x], self.names[y]))
        return out

    def label(self, region: Tuple[int, int]) -> str:
        rid, stage = region
        name = self.names.get(rid, "?")
        return name if stage < 0 else f"{name} stage {stage}"
