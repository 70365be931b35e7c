"""Task: a contiguous warp range bound to one captured schedule."""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from ..errors import Finding, ScheduleError
from .source import SourceLoc, caller_location


class Task:
    """Subclass to provide dynamic-domain providers (methods passed as ``domain_loop`` bounds).

    ``src_resources, dst_resources, warp_idx, num_warps`` may also be passed positionally, in
    that order (the reference TS signature). Reference-only keywords (``debug_print``,
    profiling) are accepted and ignored; see ``warpsched.compat.IGNORED``.
    """

    def __init__(self, src_resources: Optional[List[Any]] = None, dst_resources: Optional[List[Any]] = None,
                 warp_idx: int = 0, num_warps: int = 1, *, name: Optional[str] = None, schedule: Any = None,
                 num_registers: Optional[int] = None, **reference_only):
        if reference_only:
            from ..compat import take_extra_keywords

            take_extra_keywords("Task", reference_only, name or "")
        self.name = name or type(self).__name__
        self.src_resources = _as_list(src_resources)
        self.dst_resources = _as_list(dst_resources)
        self.warp_idx = warp_idx
        self.num_warps = num_warps
        self.schedule = schedule
        self.num_registers = num_registers
        self.location: SourceLoc = caller_location()
        self._selector: Optional[Callable[["Task"], Any]] = None  # the owning TaskManager's warp test

    @property
    def warp_end(self) -> int:
        # Malformed warp fields are reported by the checks; here they only must not crash.
        start = self.warp_idx if type(self.warp_idx) is int else 0
        count = self.num_warps if type(self.num_warps) is int and self.num_warps > 0 else 0
        return start + count

    @property
    def header(self) -> str:
        return f"{self.name}[{self.warp_idx}:{self.warp_end})"

    def bind_selector(self, selector: Callable[["Task"], Any]) -> None:
        """Set by the ``TaskManager`` that owns the task: the kernel-side warp test (the model
        imports nothing of the lowering)."""
        self._selector = selector

    def is_selected(self):
        """Inside a ``@cute.kernel``: whether the current warp belongs to this task (a warp-uniform
        runtime Boolean), e.g. to bracket code around ``TaskManager.run()`` for some tasks."""
        selector = getattr(self, "_selector", None)
        if selector is None:
            raise ScheduleError(Finding(
                check="task selection", message=f"{self.header}.is_selected() on a task no TaskManager owns",
                location=caller_location(), task=self.name, expected="a task passed to TaskManager(tasks=[...])",
                fix="build the TaskManager with this task before calling is_selected()"))
        return selector(self)

    @property
    def resources(self) -> List[Any]:
        return self.src_resources + [r for r in self.dst_resources if r not in self.src_resources]

    def uses(self, resource: Any) -> bool:
        return any(r is resource for r in self.src_resources + self.dst_resources)

    def reads(self, resource: Any) -> bool:
        return any(r is resource for r in self.src_resources)

    def writes(self, resource: Any) -> bool:
        return any(r is resource for r in self.dst_resources)

    def __repr__(self) -> str:
        return f"Task({self.header})"


def _as_list(value: Any) -> List[Any]:
    """A resource list; a lone resource (a common slip) becomes a one-element list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return [value]
