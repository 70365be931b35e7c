"""Static checks. Each family is a module with ``check(program) -> Iterable[Finding]``;
``CHECK_FAMILIES`` lists them in the order their findings are reported."""
from __future__ import annotations

import importlib
from typing import List, Optional

from ..errors import Finding
from .program import Options, Program

# Module names under warpsched.verify, in reporting order.
CHECK_FAMILIES = [
    "checks_structure",  # captured domains, stage roles, graph, coverage, named dispatch
    "checks_bracketing",  # work bracketing, try-before-blocking, value routing, DMA ordering
    "checks_persistent",  # WorkQueue placement, skip predicate
    "checks_pipelines",  # thread counts and bytes, leader routing, CTA layout, interleaving
    "checks_patterns",  # ping-pong, split-consumer, head/loop overlap
    "checks_groups",  # pipeline groups
    "checks_resources",  # SMEM/TMEM capacity, registers
    "checks_pdl",  # PDL ordering
]


def run_static_checks(program: Program, coverage: Optional[list] = None) -> List[Finding]:
    """Every family's findings; ``coverage``, when given, receives one ``coverage.FamilyRun``
    per family (applied / not applicable / skipped, and why)."""
    from .coverage import classify

    findings: List[Finding] = []
    for name in CHECK_FAMILIES:
        module = importlib.import_module(f"{__name__}.{name}")
        found = list(module.check(program))
        findings.extend(found)
        if coverage is not None:
            coverage.append(classify(name, program, len(found)))
    return findings


__all__ = ["CHECK_FAMILIES", "Options", "Program", "run_static_checks"]
