"""Checker output: the printable report, timelines and findings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ...errors import Finding
from ..program import name_of
from .compiled import Op
from .engine import CUR, Engine
from . import tripcounts
from .explore import Exploration, Problem, representative_run

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
    "unconsumed": ("make every consumer wait for (and release) each stage produced, on every path: match the "
                   "producer's and each consumer's trip counts and guards, or drop the extra acquire / commit"),
    # Violation("fault"): a skip(count=K) run twice in one tile, or (text 'checker: ...') an early
    # idle exit (Engine._pre_idle) the loop head found wrong, an error of the checker itself
    "fault": ("call ring.skip(count=K) once per work tile, before or after the domain loop (a fault "
              "starting with 'checker:' is an error of the checker itself: please report it)"),
}
TITLES = {"deadlock": "DEADLOCK", "race": "RACE", "pdl": "PDL ORDER VIOLATION", "over-arrival": "BARRIER OVER-ARRIVAL",
          "unconsumed": "UNCONSUMED COMMIT", "fault": "FAULT"}


@dataclass
class CheckerResult:
    verdict: str  # SAFE | UNSAFE | INCOMPLETE
    states: int
    seconds: float
    findings: List[Finding] = field(default_factory=list)
    exploration: Optional[Exploration] = None
    text: str = ""
    loop_note: str = ""
    runs: List[Tuple[Engine, Exploration]] = field(default_factory=list, repr=False)  # one per independent part

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

    def counterexamples(self) -> List[Tuple[Finding, "Timeline"]]:
        """Each reported problem's finding with its counterexample as a structured timeline."""
        errors = [f for f in self.findings if f.severity == "error"]
        out = []
        for p, f in zip(self.exploration.problems if self.exploration else [], errors):
            if getattr(p, "timeline", None) is not None:
                out.append((f, p.timeline))
        return out

    def representative(self, iterations: Optional[int] = None) -> List["Timeline"]:
        """One complete interleaving per independent part, for display (a SAFE verdict covers
        all of them). Loops run ``iterations`` times (default: the most stages of any pipeline
        + 1, at most 6), so the stages fill and drain; the shortest complete path of the search
        is the fallback."""
        out = []
        for engine, exp in self.runs:
            n = iterations or min(6, 1 + max((b.stage + 1 for b in engine.c.barriers), default=1))
            run = representative_run(engine, n)
            if run is None and exp.shortest_complete is not None:
                run = (exp.shortest_complete, None)
            if run is not None:
                out.append(timeline_of(engine, run[0], final=run[1]))
        return out


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
        if a.after_open:
            stage = (stage - a.stride) % a.num_stages
        text += f"[{stage}]" if a.op is Op.WORK else f"[{stage}/p{parity}]"
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


@dataclass
class TimelineRow:
    executor: int
    text: str
    location: Any  # SourceLocation of the schedule call, or None
    kind: str  # acquire|commit|wait|release|work|loop|tile|hw|skip|fault|blocked|done|other
    stage: Optional[int] = None
    parity: Optional[int] = None
    completed: List[Tuple[str, str, int, int]] = field(default_factory=list)  # (pipeline, full|empty, stage, phase)
    full: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # pipeline -> per stage: 1 full, 0 empty
    call: str = ""  # the schedule call as written ("SmemAB.acquire()"), or the loop / hardware event


@dataclass
class Timeline:
    """An interleaving as data (for the HTML report): one lane per executor (task, or warp of
    an interleaved task), one row per step; barrier phase completions and the number of full
    stages per pipeline come from the barrier states along the path, not from the steps."""
    lanes: List[str]
    pipelines: List[Tuple[str, int]]  # (name, stages)
    rows: List[TimelineRow]
    fault: Optional[int] = None  # first row at fault: the violating step, or a deadlock's first blocked step


def _kind(engine: Engine, e, what, pc) -> str:
    if what == "violation":
        return "fault"
    for prefix in ("hw", "loop", "tile"):
        if what.startswith(prefix + ":"):
            return prefix
    if what == "skip":
        return "skip"
    ins = engine.execs[e].program[pc]
    if ins.kind != "step":
        return "other"
    op = ins.action.op
    if op in ("acquire", "commit", "wait", "release", "work"):
        return op
    return "other"  # try_ probes, PDL, tokens


_ARRIVES = {"full": ("commit", "hw", "work"), "empty": ("release", "hw", "work")}


def _causing_row(rows: List[TimelineRow], bar) -> TimelineRow:
    """The row of one atomic transition (a step and the steps merged into it) whose arrival
    completed the phase of ``bar``: the last commit (full) / release (empty) or hardware
    arrival on that pipeline and stage; the transition's last row when none matches."""
    owner = name_of(bar.owner)
    for kinds in (_ARRIVES[bar.kind][:1], _ARRIVES[bar.kind]):
        for row in reversed(rows):
            if row.kind in kinds and f"({owner}" in row.text and row.stage in (None, bar.stage):
                return row
    return rows[-1]


def _call_text(ins, what: str, text: str) -> str:
    if ins.kind != "step" or what.startswith(("hw:", "loop:", "tile:")) or what == "return":
        return text
    step = ins.action.step
    return ("(off) " if what == "skip" else "") + f"{step.resource_name}.{step.method}()"


def timeline_of(engine: Engine, path, final=None, fault: bool = False) -> Timeline:
    """``path``: [(pre-state, label)] as in Problem.path; ``final``: the state after the last
    label (None: unknown). ``fault``: the last label is the violating step."""
    bars = engine.c.barriers
    pipes: Dict[str, int] = {}
    for b in bars:
        pipes[name_of(b.owner)] = max(pipes.get(name_of(b.owner), 0), b.stage + 1)
    full = {name: [0] * n for name, n in pipes.items()}
    rows: List[TimelineRow] = []
    for i, (state, label) in enumerate(path):
        e = label[0]
        first_row = len(rows)
        steps = [(label[1], label[2], state[0][e][CUR])] + list(label[3] if len(label) > 3 else ())
        for what, pc, curs in steps:
            if what == "jump":
                continue
            ins = engine.execs[e].program[pc]
            loc = ins.action.step.location if ins.kind == "step" else None
            kind = _kind(engine, e, what, pc)
            stage = parity = None
            if ins.kind == "step" and ins.action.cursor is not None and not what.startswith(("hw:", "loop:", "tile:")):
                stage, parity, _ = curs[ins.action.cursor]
                if ins.action.side.endswith("/after-open"):
                    stage = (stage - ins.action.stride) % ins.action.num_stages
            text = describe(engine, curs, e, what, pc)
            rows.append(TimelineRow(e, text, loc, kind, stage, parity, call=_call_text(ins, what, text)))
        after = path[i + 1][0] if i + 1 < len(path) else final
        mine = rows[first_row:]
        if after is not None and mine and not (fault and i == len(path) - 1):
            for b, (old, new) in enumerate(zip(state[1], after[1])):
                if old[0] != new[0]:  # the phase bit flipped: this transition completed a phase
                    bar = bars[b]
                    _causing_row(mine, bar).completed.append((name_of(bar.owner), bar.kind, bar.stage, new[0]))
        for row in mine:
            for owner, kind, stage, _ in row.completed:
                full[owner][stage] = 1 if kind == "full" else 0
            row.full = {k: tuple(v) for k, v in full.items()}
    return Timeline([ex.name for ex in engine.execs], sorted(pipes.items()), rows,
                    len(rows) - 1 if fault and rows else None)


def _after(engine: Engine, path):
    """The state the path ends in (its last transition re-run), or None."""
    if not path:
        return None
    pre, label = path[-1]
    try:
        return next((s for lab, s in engine.successors(pre, label[0]) if lab == label), None)
    except Exception:  # noqa: BLE001 - only the drawing of the last phase completions depends on it
        return None


def _add_blocked(engine: Engine, tl: Timeline, blocked, final=None) -> None:
    """A deadlock's last rows: each blocked task's blocked step, in its own lane, and which
    tasks had already finished."""
    first = len(tl.rows)
    for text, step in blocked:
        lanes = [i for i, ex in enumerate(engine.execs)
                 if any(ins.kind == "step" and ins.action.step is step for ins in ex.program)]
        named = [i for i in lanes if text.startswith(engine.execs[i].name + " ")]
        e = (named or lanes or [0])[0]
        full = dict(tl.rows[-1].full) if tl.rows else {name: (0,) * n for name, n in tl.pipelines}
        tl.rows.append(TimelineRow(e, text, getattr(step, "location", None), "blocked", full=full,
                                   call=f"blocked: {text.split(' blocked in ', 1)[-1]}"))
    if len(tl.rows) > first:
        tl.fault = first
    if final is not None:
        full = dict(tl.rows[-1].full) if tl.rows else {}
        for e in range(len(engine.execs)):
            if engine.is_done(final, e):
                tl.rows.append(TimelineRow(e, "finished", None, "done", full=full, call="finished"))


def problem_finding(engine: Engine, p: Problem) -> Finding:
    ex = engine.execs[p.exec_index]
    step = p.step
    resource = step.resource_name if step is not None else None
    lines = [timeline(engine, p.path)]
    counts = tripcounts.summary(engine, p.path, p.final)
    if counts:
        lines.append(counts)
    if p.kind == "deadlock":  # for the HTML report
        final = p.final if p.final is not None else _after(engine, p.path)
        p.timeline = timeline_of(engine, p.path, final=final)
        _add_blocked(engine, p.timeline, p.blocked, final)
    else:
        p.timeline = timeline_of(engine, p.path, fault=True)
    if p.kind == "deadlock":
        lines.append("blocked:")
        lines.extend(f"  {txt}  @ {st.location}" for txt, st in p.blocked)
        message = "deadlock: " + (p.blocked[0][0] if p.blocked else "every task is blocked")
        if len(p.blocked) > 1:  # a cross-task cycle: name every task in it (the first line is all -q shows)
            message += "; and " + "; ".join(txt.split(":")[0] for txt, _ in p.blocked[1:])
        expected = "some task can always make progress until every task finishes"
    elif p.kind == "race":
        message = f"physical access race: {p.text}"
        expected = "no two tasks touch overlapping bytes at once while one of them writes"
    elif p.kind == "pdl":
        message = f"PDL order violation: {p.text}"
        expected = "wait_griddep() executed first on every path, including skipped tiles"
    elif p.kind == "unconsumed":
        message = f"unconsumed commit: {p.text}"
        expected = "at kernel exit, every committed stage waited by each of its consumers and released"
    elif p.kind == "fault":
        message = f"schedule fault: {p.text}"
        expected = "each skip(count=K) runs once per work tile, outside the domain loop"
    else:
        message = f"barrier protocol error: {p.text}"
        b = engine.c.barriers[p.barrier] if p.barrier is not None else None
        expected = f"at most {b.init} arrival(s) per phase of {b.label}" if b else None
    if p.barrier is not None and p.kind != "over-arrival":
        lines.append(f"barrier: {engine.c.barriers[p.barrier].label}")
    return Finding(check=CHECK, message=message, task=ex.task.name, resource=resource,
                   location=step.location if step is not None else ex.task.location, expected=expected,
                   fix=FIXES[p.kind], severity="error", detail="\n".join(lines))


def stop_reason(exp: Exploration, max_states: int, max_seconds: Optional[float]) -> str:
    if exp.hit_cap:
        return f"hit max_states={max_states}"
    if exp.hit_time:
        return f"ran past max_seconds={max_seconds:g}"
    return "found a loop that runs unboundedly ahead of the tasks sharing its trip count"


def pair_note(comp) -> str:
    """What a CTA pair's verdict covers: which tasks run in both CTAs, which in the leader only."""
    if not any(ex.cta for ex in comp.executors):
        return ""
    both = {ex.task.name for ex in comp.executors if ex.cta}
    lead = [n for n in dict.fromkeys(ex.task.name for ex in comp.executors) if n not in both]
    return ("CTA pair (V = 2): both CTAs run, each with its own barriers and bytes, arrivals routed as CUTLASS's "
            "sm100 pipelines route them" + (f"; in the leader CTA only (every barrier operation CtaLeader): "
                                            f"{', '.join(lead)}" if lead else ""))


def render(runs, exp: Exploration, verdict: str, loop_note: str, findings: List[Finding],
           max_states: int, max_seconds: Optional[float] = None) -> str:
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
               f"over-arrival(s), {c['unconsumed']} unconsumed commit(s)"
               + (f", {c['fault']} fault(s)" if c.get("fault") else "") + f" in {exp.seconds:.3f}s")
    if verdict == "INCOMPLETE":
        why = stop_reason(exp, max_states, max_seconds)
        out.append(f"WARNING: exhaustive checker {why} before completing the search; no concrete issue was "
                   "found. This is not a proof: increase max_states / max_seconds (TaskManager(max_states=..., "
                   "max_seconds=...), warpsched check --max-states / --max-seconds).")
    out.append(f"Result: {verdict}")
    out.append(RULE)
    return "\n".join(out)


def names(program) -> List[str]:
    return [name_of(r) for r in program.resources]
