"""The exhaustive interleaving checker.

``run_checker(program)`` executes the barrier protocol of ``warpsched.protocol.barriers``
for every interleaving of every task (and every trip count of every loop), and reports
deadlocks, physical access races on aliased SMEM / TMEM, PDL order violations and barrier
over-arrivals, each with the shortest counterexample timeline. See docs/checker.md.
"""
from __future__ import annotations

import time

from ...errors import Finding
from ..program import Program
from .engine import Engine
from .explore import explore
from .model import compile_program
from .report import CHECK, CheckerResult, problem_finding, render


def _loop_note(comp) -> str:
    parts = []
    for g in comp.groups:
        who = ", ".join(comp.executors[m].name for m in dict.fromkeys(g.members))
        what = "tiles" if g.label == "work tiles" else "iterations"
        parts.append(f"{g.label} [{who}]: every count >= 1 of {what}")
    return ("Loop lengths proven: " + "; ".join(parts)) if parts else ""


def run_checker(program: Program) -> CheckerResult:
    t0 = time.perf_counter()
    comp = compile_program(program)
    engine = Engine(comp)
    max_states = program.options.max_states
    exp = explore(engine, max_states)
    findings = [problem_finding(engine, p) for p in exp.problems]
    unsafe = any(exp.counts.values())
    if unsafe:
        verdict = "UNSAFE"
    elif exp.hit_cap or exp.unbounded:
        verdict = "INCOMPLETE"
    else:
        verdict = "SAFE"
    note = _loop_note(comp)
    if verdict == "INCOMPLETE":
        findings.append(Finding(
            check=CHECK, severity="warning",
            message=("exhaustive checker stopped before covering every interleaving "
                     f"({exp.states} states, max_states={max_states}); the schedule is NOT proven safe"),
            location=program.tasks[0].location if program.tasks else None,
            expected="a complete search (Result: SAFE)",
            fix="raise TaskManager(max_states=...), or reduce the number of tasks / stages to check"))
    for msg in comp.problems:
        findings.append(Finding(check=CHECK, severity="warning", message=f"not modelled: {msg}"))
    seconds = time.perf_counter() - t0
    exp.seconds = seconds
    text = render(engine, exp, verdict, note, [f for f in findings if f.severity == "error"], max_states)
    return CheckerResult(verdict, exp.states, seconds, findings, exp, text, note)


__all__ = ["CheckerResult", "run_checker"]
