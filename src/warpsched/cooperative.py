"""Cooperative groups for pipeline configs, without a helper of your own in every kernel file.

``threads(n)`` is ``cutlass.pipeline.CooperativeGroup(Agent.Thread, n)``; ``warps(n)`` the same
group counted in warps (``threads(32 * n)``: on a side where one elected thread per warp arrives
-- a TMA producer, the async consumer of a TMA pipeline -- that means ``n`` warps arriving once
each). Both can be passed to cutlass APIs too. On a machine without CuTe DSL they return a
stand-in with the same ``size``, which is all the checks read. A pipeline config may also leave
a group out: the sync plan then derives its size from the tasks that signal that side
(docs/architecture.md).
"""
from __future__ import annotations


class ThreadGroup:
    """What ``threads(n)`` returns without CuTe DSL: the ``size`` of an ``Agent.Thread`` group."""

    def __init__(self, size: int):
        self.size = size

    def __repr__(self) -> str:
        return f"CooperativeGroup(Thread, {self.size})"


def threads(n: int = 1):
    """A cooperative group of ``n`` threads: ``CooperativeGroup(Agent.Thread, n)`` (a stand-in
    with ``.size == n`` when CuTe DSL is not installed, or for a size cutlass refuses, so the
    static checks report it as a finding)."""
    try:
        from cutlass import pipeline

        return pipeline.CooperativeGroup(pipeline.Agent.Thread, n)
    except Exception:  # noqa: BLE001 - no (working) CuTe DSL, or a size cutlass refuses (n < 1):
        return ThreadGroup(n)  # the checks read .size and report a wrong one as a finding


def warps(n: int = 1):
    """A cooperative group of ``n`` warps, i.e. ``threads(32 * n)`` (on a per-warp arrival side the
    thread count means ``n`` warps, each arriving once)."""
    return threads(32 * n)


__all__ = ["ThreadGroup", "threads", "warps"]
