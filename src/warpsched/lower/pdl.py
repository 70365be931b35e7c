"""Programmatic dependent launch: ``griddepcontrol.wait`` / ``griddepcontrol.launch_dependents``."""
from __future__ import annotations

import cutlass.cute as cute

from ..model.ir import StepKind


def emit_pdl(kind: StepKind) -> None:
    if kind is StepKind.PdlWait:
        cute.arch.griddepcontrol_wait()
    elif kind is StepKind.PdlLaunch:
        cute.arch.griddepcontrol_launch_dependents()
