"""The verdict of a check, shared by the CLI line, its exit code and the HTML report.

ACCEPTED (exit 0): no errors, and the exhaustive checker proved SAFE or was turned off on
purpose (the coverage then says so). UNPROVEN (exit 3): no errors, but the exhaustive search
stopped (max_states / max_seconds) before covering every interleaving: nothing is known about
deadlocks and races, so a CI gate must not pass it. REJECTED (exit 1): errors, including an
UNSAFE counterexample. Usage errors are the CLI's (exit 2).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

EXIT_ACCEPTED, EXIT_REJECTED, EXIT_USAGE, EXIT_UNPROVEN = 0, 1, 2, 3


@dataclass
class Verdict:
    word: str  # ACCEPTED | UNPROVEN | REJECTED
    exit_code: int
    summary: str = ""  # "static check families: 5/8 applied; exhaustive checker: SAFE"
    details: List[str] = field(default_factory=list)  # what ran, what did not and why
    families: List[Any] = field(default_factory=list)  # verify.coverage.FamilyRun
    checker: Any = None  # the checker's CheckerResult, when it ran
    checker_status: str = ""  # SAFE / UNSAFE / INCOMPLETE / off (...) / not run (...)


def judge(*, rejected: bool, errors: int, manager: Any, checker_off: Optional[str] = None) -> Verdict:
    """``checker_off``: how the caller turned the exhaustive checker off (e.g. "--no-checker");
    None: read it from the manager's options."""
    result = getattr(manager, "result", None)
    checker = getattr(result, "checker", None)
    families = list(getattr(result, "families", []) or [])
    if rejected or errors:
        word, code = "REJECTED", EXIT_REJECTED
    elif checker is not None and checker.verdict == "INCOMPLETE":
        word, code = "UNPROVEN", EXIT_UNPROVEN
    else:
        word, code = "ACCEPTED", EXIT_ACCEPTED
    v = Verdict(word, code, families=families, checker=checker)
    if result is None:  # nothing was verified: the schedule could not be captured
        return v
    if checker is not None:
        v.checker_status = checker.verdict
        stop = _stop_reason(checker, manager)
        v.details.append(f"exhaustive checker: {checker.verdict}, {checker.states} states in {checker.seconds:.2f} s"
                         + (f" ({stop})" if stop else "")
                         + _loops(checker))
    else:
        skipped = getattr(result, "checker_skipped", "")
        if skipped == "static errors first":
            v.checker_status = "not run (static errors first)"
        else:
            v.checker_status = f"off ({checker_off or skipped or 'exhaustive_deadlock_race_check=False'})"
            v.details.append(f"exhaustive checker: {v.checker_status}: deadlocks, races and PDL order across tasks "
                             "were NOT checked")
    applied = [f for f in families if f.applied]
    v.summary = f"static check families: {len(applied)}/{len(families)} applied; exhaustive checker: " \
                f"{v.checker_status}"
    for status in ("not applicable", "skipped"):
        rest = [f for f in families if f.status == status]
        if rest:
            v.details.append(f"{status}: " + ", ".join(f"{f.title} ({f.reason})" for f in rest))
    return v


def _stop_reason(checker, manager) -> str:
    if checker.verdict != "INCOMPLETE" or checker.exploration is None:
        return ""
    from ..verify.checker.report import stop_reason

    options = manager.program.options
    return stop_reason(checker.exploration, options.max_states, options.max_seconds)


def _loops(checker) -> str:
    """The checker's loop-length note: "proven" only when the search covered them all."""
    note = (checker.loop_note or "").split("\n")[0]
    if not note:
        return ""
    if checker.verdict != "SAFE":
        note = note.replace("Loop lengths proven:", "loop lengths searched:")
    return "; " + note[0].lower() + note[1:]
