"""Is a CuTe DSL trace in progress? (a TaskManager built inside ``@cute.kernel`` / ``@cute.jit``)"""
from __future__ import annotations

import sys


def inside_dsl_trace() -> bool:
    """True while CuTe DSL is tracing: MLIR has a current insertion point. Never imports
    CuTe DSL itself: a process that has not imported it is not tracing."""
    if "cutlass" not in sys.modules:
        return False
    try:
        from cutlass._mlir import ir

        return ir.InsertionPoint.current is not None
    except Exception:  # noqa: BLE001 - "no current insertion point" is a ValueError; any failure means no trace
        return False
