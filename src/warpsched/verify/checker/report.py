"""Checker output: the printable report, timelines and findings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ...errors import Finding
from ..program import name_of
from .engine import CUR, Engine
from . import tripcounts
from .explore import Exploration, Problem

CHECK = "exhaustive interleaving"
RULE = "=" * 72
THIN = "-" * 72
CELL = 30
HEAD_ROWS, TAIL_ROWS = 60, 120  # a longer counterexample timeline shows its start and its end

FIXES = {
    "deadlock": ("make every wait / acquire matched by the commit / release that completes its barrier phase: "
                 "check missing commits, trip counts, arrival counts (cooperative-group sizes) and strides"),
    "race": ("order the two accesses through a pipeline (wait before reading, release only after the hardware "
             "is done: wgmma wait / UMMA commit), or stop aliasing the allocations"),
    "pdl": "execute wait_griddep() before the launch and before reading predecessor-grid results",
    "over-arrival": ("size the cooperative group to the arrivals one operation makes "
                     "(signaling warps x threads x CTAs, see protocol.barriers.arrivals_per_op)"),
}
TITLES = {"deadlock": "DEADLOCK", "race": "RACE", "pdl": "PDL ORDER VIOLATION", "over-arrival": "BARRIER OVER-ARRIVAL"}


@dataclass
class CheckerResult:
    verdict: str  # SAFE | UNSAFE | INCOMPLETE
    states: int
    seconds: float
    findings: List[Finding] = field(default_factory=list)
    exploration: Optional[Exploration] = None
    text: str = ""
    loop_note: str = ""

    @property
    def deadlocks(self) -> int:
        return self.exploration.counts["deadlock"] if self.exploration else 0

    @property
    def races(self) -> int:
        return self.exploration.counts["race"] if self.exploration else 0

    @property
    def pdl_violations(self) -> int:
        return self.exploration.counts["pdl"] if self.exploration else 0

    @property
    def is_safe(self) -> bool:
        return self.verdict == "SAFE"

    def report(self) -> str:
        return self.text


def describe(engine: Engine, curs, e, what, pc) -> str:
    ex = engine.execs[e]
    ins = ex.program[pc]
    if what.startswith("hw:"):
        return f"hw: {what[3:]} +arrive"
    if what.startswith("loop:"):
        return {"exit": "loop exit", "last": "iter (last)", "more": "iter", "first": "iter"}[what[5:]]
    if what.startswith("tile:"):
        return {"exit": "no more tiles", "run": "next tile", "skipped": "next tile (skipped)"}[what[5:]]
    if ins.kind != "step":
        return what
    a = ins.action
    text = f"{a.step.kind.label}({a.step.resource_name}"
    if a.step.kind.is_work or a.step.kind.is_aux:
        text += f".{a.step.method}"
    text += ")"
    if what == "return":
        return f"return .{a.step.method}()"
    if a.cursor is not None:
        stage, parity, _ = curs[a.cursor]
        if a.side.endswith("/after-open"):
            stage = (stage - a.stride) % a.num_stages
        text += f"[{stage}]" if a.op == "work" else f"[{stage}/p{parity}]"
    if what == "skip":
        return "(off) " + text
    if what == "violation":
        return "!! " + text
    if ":" in what:
        text += " ->" + what.split(":", 1)[1]
    return text


def timeline(engine: Engine, path) -> str:
    names = [ex.name for ex in engine.execs]
    rows = []
    for state, label in path:
        e = label[0]
        steps = [(label[1], label[2], state[0][e][CUR])] + list(label[3] if len(label) > 3 else ())
        for what, pc, curs in steps:
            if what == "jump":
                continue
            ins = engine.execs[e].program[pc]
            loc = ins.action.step.location if ins.kind == "step" else None
            rows.append((e, describe(engine, curs, e, what, pc), loc))
    width = [max(len(n), 4) for n in names]
    for e, cell, _ in rows:
        width[e] = min(CELL, max(width[e], len(cell)))
    head = "  t  " + "  ".join(n[:width[i]].ljust(width[i]) for i, n in enumerate(names))
    lines = [f"timeline ({len(rows)} steps):", head,
             "  ─  " + "  ".join(("─" * min(len(n), width[i])).ljust(width[i]) for i, n in enumerate(names))]
    for t, (e, cell, loc) in enumerate(rows):
        if HEAD_ROWS <= t < len(rows) - TAIL_ROWS:  # long exact counts: the start and the end
            if t == HEAD_ROWS:
                lines.append(f"  ... {len(rows) - HEAD_ROWS - TAIL_ROWS} steps of the same loops elided ...")
            continue
        cells = [("·" if i != e else cell[:width[i]]).ljust(width[i]) for i in range(len(names))]
        lines.append(f"{t:>3}  " + "  ".join(cells) + (f"  @ {loc}" if loc is not None and loc.line else ""))
    return "\n".join(lines)


def problem_finding(engine: Engine, p: Problem) -> Finding:
    ex = engine.execs[p.exec_index]
    step = p.step
    resource = step.resource_name if step is not None else None
    lines = [timeline(engine, p.path)]
    counts = tripcounts.summary(engine, p.path)
    if counts:
        lines.append(counts)
    if p.kind == "deadlock":
        lines.append("blocked:")
        lines.extend(f"  {txt}  @ {st.location}" for txt, st in p.blocked)
        message = "deadlock: " + (p.blocked[0][0] if p.blocked else "every task is blocked")
        expected = "some task can always make progress until every task finishes"
    elif p.kind == "race":
        message = f"physical access race: {p.text}"
        expected = "no two tasks touch overlapping bytes at once while one of them writes"
    elif p.kind == "pdl":
        message = f"PDL order violation: {p.text}"
        expected = "wait_griddep() executed first on every path, including skipped tiles"
    else:
        message = f"barrier protocol error: {p.text}"
        b = engine.c.barriers[p.barrier] if p.barrier is not None else None
        expected = f"at most {b.init} arrival(s) per phase of {b.label}" if b else None
    if p.barrier is not None and p.kind != "over-arrival":
        lines.append(f"barrier: {engine.c.barriers[p.barrier].label}")
    return Finding(check=CHECK, message=message, task=ex.task.name, resource=resource,
                   location=step.location if step is not None else ex.task.location, expected=expected,
                   fix=FIXES[p.kind], severity="error", detail="\n".join(lines))


def render(runs, exp: Exploration, verdict: str, loop_note: str, findings: List[Finding],
           max_states: int) -> str:
    out = [RULE, "Exhaustive interleaving checker — BFS exploration (barrier-level, every declared loop length)", RULE]
    engine = runs[0][0] if runs else None
    execs = [ex for eng, _ in runs for ex in eng.execs]
    if not execs:
        out.append("  no task has a schedule: nothing to explore")
    for i, ex in enumerate(execs):
        ops = [f"{ins.action.step.kind.label}({ins.action.step.resource_name})" for ins in ex.program
               if ins.kind == "step"]
        shown = ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "")
        out.append(f"  Task {i} ({ex.name}): [{shown}]")
    pairs = engine.regions.pairs if engine is not None else []
    if pairs:
        out.append("  Alias pairs:")
        out.extend(f"    {a} <-> {b}" for a, b in pairs)
    if loop_note:
        out.append("  " + loop_note)
    out.append(THIN)
    for p, f in zip(exp.problems, findings):
        out.append(f"{TITLES[p.kind]} — {f.message}")
        out.append(f"  at {f.location}  (task {f.task}, resource {f.resource})")
        out.extend("  " + ln for ln in (f.detail or "").splitlines())
        out.append(THIN)
    c = exp.counts
    word = "BFS complete" if verdict == "SAFE" else "BFS stopped"
    if exp.truncated and verdict == "UNSAFE":
        word = "BFS stopped after the first counterexamples (counts are lower bounds)"
    out.append(RULE)
    out.append(f"{word}: {exp.states} states explored, {exp.complete} complete, {c['deadlock']} deadlock(s), "
               f"{c['race']} race(s), {c['pdl']} PDL order violation(s), {c['over-arrival']} barrier "
               f"over-arrival(s) in {exp.seconds:.3f}s")
    if verdict == "INCOMPLETE":
        why = (f"hit max_states={max_states}" if exp.hit_cap else
               "found a loop that runs unboundedly ahead of the tasks sharing its trip count")
        out.append(f"WARNING: exhaustive checker {why} before completing the search; no concrete issue was "
                   "found. This is not a proof: increase max_states (TaskManager(max_states=...)).")
    out.append(f"Result: {verdict}")
    out.append(RULE)
    return "\n".join(out)


def names(program) -> List[str]:
    return [name_of(r) for r in program.resources]
