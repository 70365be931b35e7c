"""CooperativeGroup for examples, without importing MLIR when only checking on the CPU."""
from __future__ import annotations


class _ThreadGroup:
    """Same shape as ``cutlass.pipeline.CooperativeGroup(Agent.Thread, size)``."""

    def __init__(self, size: int):
        self.size = size

    def __repr__(self) -> str:
        return f"CooperativeGroup(Thread, {self.size})"


def thread_group(size: int = 1):
    try:
        from cutlass import pipeline

        return pipeline.CooperativeGroup(pipeline.Agent.Thread, size)
    except Exception:  # noqa: BLE001 - CuTe DSL missing: checking still works
        return _ThreadGroup(size)
