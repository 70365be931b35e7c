"""Task: a contiguous warp range bound to one captured schedule."""
from __future__ import annotations

from typing import Any, List, Optional

from .source import SourceLoc, caller_location


class Task:
    """Subclass to provide dynamic-domain providers (methods passed as ``domain_loop`` bounds)."""

    def __init__(self, *, name: Optional[str] = None, src_resources: Optional[List[Any]] = None,
                 dst_resources: Optional[List[Any]] = None, warp_idx: int = 0, num_warps: int = 1,
                 schedule: Any = None, num_registers: Optional[int] = None):
        self.name = name or type(self).__name__
        self.src_resources = list(src_resources or [])
        self.dst_resources = list(dst_resources or [])
        self.warp_idx = warp_idx
        self.num_warps = num_warps
        self.schedule = schedule
        self.num_registers = num_registers
        self.location: SourceLoc = caller_location()

    @property
    def warp_end(self) -> int:
        return self.warp_idx + self.num_warps

    @property
    def header(self) -> str:
        return f"{self.name}[{self.warp_idx}:{self.warp_end})"

    def uses(self, resource: Any) -> bool:
        return any(r is resource for r in self.src_resources + self.dst_resources)

    def reads(self, resource: Any) -> bool:
        return any(r is resource for r in self.src_resources)

    def writes(self, resource: Any) -> bool:
        return any(r is resource for r in self.dst_resources)

    def __repr__(self) -> str:
        return f"Task({self.header})"
