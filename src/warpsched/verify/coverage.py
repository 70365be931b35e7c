"""Which static check families had something to check in a program, and why the others did not.

Every family always runs (a family must never miss a misuse because a predicate here was too
narrow); a family whose subject is absent from the program (no PipelineGroup, no PDL barrier...)
is reported as not applicable, so the verdict's "families applied" figure counts real work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from ..model.ir import StepKind
from ..model.resources import PdlLaunchBarrier, PdlWaitBarrier, WorkQueue
from .program import Program

TITLES = {
    "checks_structure": "structure",
    "checks_bracketing": "bracketing and dataflow",
    "checks_persistent": "persistent work tiles",
    "checks_pipelines": "pipelines and interleaving",
    "checks_patterns": "ping-pong / split-consumer patterns",
    "checks_groups": "pipeline groups",
    "checks_resources": "capacities, registers, WGMMA warp groups",
    "checks_pdl": "PDL ordering",
}


@dataclass
class FamilyRun:
    module: str
    status: str  # "applied" | "not applicable" | "skipped"
    reason: str = ""
    findings: int = 0

    @property
    def title(self) -> str:
        return TITLES.get(self.module, self.module)

    @property
    def applied(self) -> bool:
        return self.status == "applied"


def _steps(program: Program):
    for t in program.tasks:
        yield from program.steps_of(t)


def _pipelines(program: Program) -> bool:
    return bool(program.pipelined_resources)


def _persistent(program: Program) -> bool:
    return any(getattr(program.schedule_of(t), "work_tile_loop", None) is not None for t in program.tasks) \
        or any(isinstance(r, WorkQueue) for r in program.resources)


def _patterns(program: Program) -> bool:
    return _pipelines(program) or any(any(u is k for u in ups) for k, ups in program.graph_items())


def _pdl(program: Program) -> bool:
    return any(isinstance(r, (PdlWaitBarrier, PdlLaunchBarrier)) for r in program.resources) or \
        any(s.kind in (StepKind.PdlWait, StepKind.PdlLaunch) for s in _steps(program))


# module -> (has a subject?, what is missing when not)
SUBJECT: Dict[str, Tuple[Callable[[Program], bool], str]] = {
    "checks_persistent": (_persistent, "no work_tile_loop or WorkQueue"),
    "checks_pipelines": (_pipelines, "no resource with a pipeline_config"),
    "checks_patterns": (_patterns, "no pipelined resource or self-edge"),
    "checks_groups": (lambda p: bool(p.pipeline_groups), "no PipelineGroup"),
    "checks_pdl": (_pdl, "no PDL barrier"),
}


def classify(module: str, program: Program, findings: int) -> FamilyRun:
    if module == "checks_pdl" and program.options.assume_pdl_wait_completed:
        return FamilyRun(module, "skipped", "assume_pdl_wait_completed=True", findings)
    subject: Optional[Tuple[Callable[[Program], bool], str]] = SUBJECT.get(module)
    if subject is None or findings:
        return FamilyRun(module, "applied", "", findings)
    try:
        present = subject[0](program)
    except Exception:  # noqa: BLE001 - a malformed program: count the family as applied
        present = True
    return FamilyRun(module, "applied" if present else "not applicable", "" if present else subject[1], findings)
