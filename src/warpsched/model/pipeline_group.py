"""PipelineGroup: several pipelined resources sharing the barrier of one collapsed side."""
from __future__ import annotations

import weakref
from typing import Any, List, Optional

from .enums import PipelineGroupMode
from .source import SourceLoc, caller_location


# Groups whose member views (``group.smem_a``) were taken: a schedule handed ``group.smem_a`` as an
# argument sees the bare member, so ``Program.pipeline_groups`` finds the group through this set
# (weak: a group nobody holds any more is forgotten).
_VIEWED: "weakref.WeakSet[PipelineGroup]" = weakref.WeakSet()


def viewed_groups() -> List["PipelineGroup"]:
    """Live groups one of whose member views was read (``group.<member>``)."""
    return list(_VIEWED)


class PipelineGroup:
    """Merge (N producers -> 1 consumer), Fork (1 -> N) or FusedMerge (shared full barrier too).

    Members keep their own configs; the group validates them when ``TaskManager`` runs
    (compatibility findings carry this constructor's source line). Inside a schedule use
    ``group.<member_name>.verb()`` for per-member operations and ``group.verb()`` for the
    collapsed one.
    """

    def __init__(self, *, name: str, members: List[Any], mode: PipelineGroupMode = PipelineGroupMode.Merge,
                 pipeline_config: Any = None):
        self.name = name
        self.members = list(members)
        self.mode = mode
        self.pipeline_config = pipeline_config
        self.barrier_ptr = None
        self.location: SourceLoc = caller_location()

    def member(self, attr: str) -> Optional[Any]:
        for m in self.members:
            if getattr(m, "name", None) == attr:  # non-resource members are reported by the checks
                return m
        return None

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def num_stages(self) -> Optional[int]:
        cfgs = [getattr(m, "pipeline_config", None) for m in self.members]
        cfgs = [c for c in cfgs if c is not None and hasattr(c, "num_stages")]
        return cfgs[0].num_stages if cfgs else None

    @property
    def num_barriers(self) -> int:
        stages = self.num_stages or 0
        if self.mode is PipelineGroupMode.FusedMerge:
            return 2 * stages
        return (len(self.members) + 1) * stages

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        m = self.__dict__.get("members") and self.member(attr)
        if m is None:
            raise AttributeError(f"PipelineGroup {self.__dict__.get('name')!r} has no member named {attr!r}")
        _VIEWED.add(self)
        return m

    def __repr__(self) -> str:
        mode = getattr(self.mode, "value", self.mode)
        return f"PipelineGroup({self.name!r}, {mode}, {[getattr(m, 'name', m) for m in self.members]})"
