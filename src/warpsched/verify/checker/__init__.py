"""The exhaustive interleaving checker.

``run_checker(program)`` executes the sync plan of ``warpsched.protocol.plan``
for every interleaving of every task (and every trip count of every loop), and reports
deadlocks, physical access races on aliased SMEM / TMEM, PDL order violations and barrier
over-arrivals, each with the shortest counterexample timeline. See docs/checker.md.
"""
from __future__ import annotations

import gc
import sys
import time

from ...errors import Finding
from ..program import Program
from .engine import Engine
from .explore import Exploration, explore
from .model import compile_program
from .parts import components
from .report import CHECK, CheckerResult, pair_note, problem_finding, render, stop_reason


def _loop_note(comp) -> str:
    parts = []
    for g in comp.groups:
        who = ", ".join(comp.executors[m].name for m in dict.fromkeys(g.members))
        parts.append(f"{g.label} [{who}]: {g.describe}")
    return ("Loop lengths proven: " + "; ".join(parts)) if parts else ""


def _merge(results):
    out = Exploration()
    for r in results:
        out.states += r.states
        out.complete += r.complete
        for k, v in r.counts.items():
            out.counts[k] += v
        out.problems.extend(r.problems)
        out.hit_cap |= r.hit_cap
        out.hit_time |= r.hit_time
        out.unbounded |= r.unbounded
        out.truncated |= r.truncated
    return out


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_checker(program: Program, progress=False) -> CheckerResult:
    """``progress``: False (silent, the default), True (a line to stderr about every 2 s once
    the search has run 2 s: states explored, frontier size, states/s), or a callable taking
    that line."""
    t0 = time.perf_counter()
    report = progress if callable(progress) else (_stderr_line if progress else None)
    whole = compile_program(program)
    parts = components(whole)
    max_states = program.options.max_states
    max_seconds = getattr(program.options, "max_seconds", None)
    deadline = t0 + max_seconds if max_seconds else None
    runs = []
    # the search allocates many small acyclic tuples: the cyclic collector would only rescan
    # the growing state table (about 10% of the run time, more in a process already holding
    # many objects), so it is paused; state tuples form no cycles, nothing leaks
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for part in parts:
            comp = whole if len(parts) == 1 else compile_program(program, include=set(part))
            budget = max(1, max_states - sum(r.states for _, r in runs))
            engine = Engine(comp)
            run = explore(engine, budget, report, deadline)
            if engine.exact_lifted and (any(run.counts.values()) or run.unconfirmed):
                # the problem may come from the superset an exact count far from its end is
                # checked as (loops._normalize): decide it on the exact count alone
                engine = Engine(comp, exact_lift=False)
                run = explore(engine, budget, report, deadline)
            runs.append((engine, run))
    finally:
        if gc_was_on:
            gc.enable()
    exp = _merge([r for _, r in runs])
    engine_of = {id(p): eng for eng, r in runs for p in r.problems}
    findings = [problem_finding(engine_of[id(p)], p) for p in exp.problems]
    unsafe = any(exp.counts.values())
    if unsafe:
        verdict = "UNSAFE"
    elif exp.hit_cap or exp.hit_time or exp.unbounded:
        verdict = "INCOMPLETE"
    else:
        verdict = "SAFE"
    note = _loop_note(whole)
    if pair_note(whole):
        note += "\n  " + pair_note(whole)
    if len(parts) > 1:
        note += ("\n  Independent parts checked separately: " +
                 "; ".join("[" + ", ".join(ex.name for ex in eng.execs) + "]" for eng, _ in runs))
    if verdict == "INCOMPLETE":
        findings.append(Finding(
            check=CHECK, severity="warning",
            message=("exhaustive checker stopped before covering every interleaving "
                     f"({stop_reason(exp, max_states, max_seconds)}, {exp.states} states); "
                     "the schedule is NOT proven safe"),
            location=program.tasks[0].location if program.tasks else None,
            expected="a complete search (Result: SAFE)",
            fix=("raise TaskManager(max_states=..., max_seconds=...) (warpsched check --max-states / "
                 "--max-seconds), or reduce the number of tasks / stages to check")))
    for msg in dict.fromkeys(whole.problems):  # the whole program's: every part's, once each
        findings.append(Finding(check=CHECK, severity="warning", message=f"not modelled: {msg}"))
    seconds = time.perf_counter() - t0
    exp.seconds = seconds
    text = render(runs, exp, verdict, note, [f for f in findings if f.severity == "error"], max_states,
                  max_seconds)
    return CheckerResult(verdict, exp.states, seconds, findings, exp, text, note, runs=runs)


__all__ = ["CheckerResult", "run_checker"]
