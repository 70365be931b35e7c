"""A standalone HTML report (no assets): the verdict and what was verified (check families,
the exhaustive checker's search), findings, the counterexample or a representative
interleaving as a lane chart, tasks, dependency graph (SVG), schedules and the text printout."""
from __future__ import annotations

import html
from typing import Any, Dict, List, Optional, Sequence

from ..errors import Finding
from ..model.ir import Section
from ..verify.program import Program, name_of
from . import timeline_html

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
.verdict{font-weight:bold;padding:.5em .8em;border-radius:4px;display:inline-block}
.ok{background:#e3f6e3;color:#185c18} .bad{background:#fde4e4;color:#8a1414}
.unproven{background:#fff1d6;color:#7a4b00}
.note{color:#555;font-size:.9em;margin:.3em 0}
.facts td:first-child{font-weight:bold;white-space:nowrap}
.st-applied{color:#185c18} .st-not{color:#777} .st-skipped{color:#8a5a00;font-weight:bold}
.big{font-size:1.1em;font-weight:bold} .SAFE{color:#185c18} .UNSAFE{color:#8a1414} .INCOMPLETE,.off{color:#8a5a00}
table{border-collapse:collapse;font-size:.88em} td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f2f2f2} .loc{color:#666;font-family:monospace;font-size:.9em}
.sec-prologue,.sec-epilogue{background:#f3ecfb} .sec-head{background:#eef5fd} .sec-tail{background:#fdf5e8}
.error{color:#8a1414;font-weight:bold} .warning{color:#8a5a00;font-weight:bold}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em}
.wide{max-width:100%;max-height:80vh;overflow:auto;border:1px solid #ddd}
table.sched th{position:sticky;top:0;z-index:1} table.sched td{min-width:170px;max-width:260px;overflow-wrap:anywhere}
td.what{max-width:42vw} td.what pre{max-height:24em;overflow:auto}
summary{cursor:pointer;color:#2a5db0;font-size:.9em}
.tag{font-family:monospace;color:#555}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


# ------------------------------------------------------------------ dependency graph
def _layers(program: Program) -> Dict[int, int]:
    """Depth of each resource in the graph (sources at 0); cycles are cut."""
    depth: Dict[int, int] = {}

    def visit(r, stack):
        if id(r) in depth:
            return depth[id(r)]
        if id(r) in stack:
            return 0
        stack.add(id(r))
        ups = [u for u in program.upstream(r) if u is not r]
        d = 1 + max((visit(u, stack) for u in ups), default=-1)
        stack.discard(id(r))
        depth[id(r)] = d
        return d

    for r in program.resources:
        visit(r, set())
    return depth


def graph_svg(program: Program) -> str:
    resources = program.resources
    if not resources:
        return "<p>(no resources)</p>"
    depth = _layers(program)
    columns: Dict[int, List[Any]] = {}
    for r in resources:
        columns.setdefault(depth[id(r)], []).append(r)
    w, h, gx, gy = 170, 44, 70, 26
    pos = {}
    for col, rs in sorted(columns.items()):
        for row, r in enumerate(rs):
            pos[id(r)] = (20 + col * (w + gx), 20 + row * (h + gy))
    width = 40 + (max(columns) + 1) * (w + gx)
    height = 40 + max(len(v) for v in columns.values()) * (h + gy)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="12">',
           '<defs><marker id="arr" markerWidth="10" markerHeight="8" refX="9" refY="4" orient="auto">'
           '<path d="M0,0 L10,4 L0,8 z" fill="#555"/></marker></defs>']
    for down, ups in program.graph.items():
        for up in ups or []:
            if id(up) not in pos or id(down) not in pos:
                continue
            x1, y1 = pos[id(up)]
            x2, y2 = pos[id(down)]
            if up is down:  # ping-pong self-edge
                out.append(f'<path d="M{x1 + w - 30},{y1} C{x1 + w - 10},{y1 - 22} {x1 + w + 14},{y1 + 4} '
                           f'{x1 + w},{y1 + 14}" fill="none" stroke="#555" marker-end="url(#arr)"/>')
                continue
            out.append(f'<line x1="{x1 + w}" y1="{y1 + h / 2}" x2="{x2}" y2="{y2 + h / 2}" stroke="#555" '
                       'marker-end="url(#arr)"/>')
    for r in resources:
        x, y = pos[id(r)]
        cfg = getattr(r, "pipeline_config", None)
        sub = f"{cfg.pipeline_type.value} x{cfg.num_stages}" if cfg is not None else type(r).__name__
        fill = "#eef5fd" if cfg is not None else "#f7f7f7"
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="#888"/>')
        out.append(f'<text x="{x + w / 2}" y="{y + 18}" text-anchor="middle" font-weight="bold">'
                   f'{_e(name_of(r))}</text>')
        out.append(f'<text x="{x + w / 2}" y="{y + 34}" text-anchor="middle" fill="#555">{_e(sub)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _edges_table(program: Program) -> str:
    rows = []
    for down, ups in program.graph.items():
        for up in ups or []:
            readers = ", ".join(t.name for t in program.consumers_of(up)) or "-"
            writers = ", ".join(t.name for t in program.producers_of(down)) or "-"
            rows.append(f"<tr><td>{_e(name_of(up))}</td><td>{_e(name_of(down))}</td>"
                        f"<td>{_e(readers)}</td><td>{_e(writers)}</td></tr>")
    if not rows:
        return "<p>(the dependency graph is empty)</p>"
    return ("<table><tr><th>upstream</th><th>downstream (depends on upstream)</th><th>tasks reading upstream"
            "</th><th>tasks writing downstream</th></tr>" + "".join(rows) + "</table>")


# ------------------------------------------------------------------ tasks and schedules
def _tasks_table(program: Program) -> str:
    rows = []
    for t in program.tasks:
        rows.append(f"<tr><td>{_e(t.name)}</td><td>[{t.warp_idx}:{t.warp_end})</td><td>{_e(t.num_registers)}</td>"
                    f"<td>{_e(', '.join(name_of(r) for r in t.src_resources))}</td>"
                    f"<td>{_e(', '.join(name_of(r) for r in t.dst_resources))}</td>"
                    f"<td class='loc'>{_e(t.location)}</td></tr>")
    return ("<table><tr><th>task</th><th>warps</th><th>registers</th><th>src_resources</th>"
            "<th>dst_resources</th><th>declared at</th></tr>" + "".join(rows) + "</table>")


def _step_cell(step) -> str:
    tags = step.section.tag + "".join(g.tag for g in step.guards)
    guards = " ".join(g.describe() for g in step.guards)
    args = ", ".join([f"{k}={v!r}" for k, v in step.token_args.items()]
                     + [f"{k}={v!r}" for k, v in step.const_args.items()])
    rets = ", ".join(repr(t) for t in step.returns)
    text = f"{_e(step.resource_name)}.{_e(step.method)}({_e(args)})"
    if rets:
        text = f"{_e(rets)} = " + text
    return (f"<td class='sec-{step.section.value}' title='{_e(guards)}'><span class='tag'>{_e(tags) or '&nbsp;'}"
            f"</span> {text}<br><span class='loc'>{_e(step.kind.label)} #{step.call_idx} @ "
            f"{_e(step.location)}</span></td>")


def schedules_table(program: Program) -> str:
    cols = [list(program.steps_of(t)) for t in program.tasks]
    if not cols:
        return "<p>(no tasks)</p>"
    head = "".join(f"<th>{_e(t.header)}</th>" for t in program.tasks)
    loops = []
    for t in program.tasks:
        s = program.schedule_of(t)
        bits = []
        if s is not None and s.work_tile_loop is not None:
            bits.append(f"work_tile_loop({name_of(s.work_tile_loop.work_queue)}) @ {s.work_tile_loop.location}")
        if s is not None and s.domain_loop is not None:
            d = s.domain_loop
            bound = lambda b: getattr(b, "__name__", repr(b))  # noqa: E731
            bits.append(f"domain_loop({bound(d.start)}, {bound(d.end)}, {bound(d.step)}) @ {d.location}")
        loops.append("<td class='loc'>" + "<br>".join(_e(b) for b in bits or ["(no loops)"]) + "</td>")
    rows = ["<tr>" + "".join(loops) + "</tr>"]
    for i in range(max(len(c) for c in cols)):
        rows.append("<tr>" + "".join(_step_cell(c[i]) if i < len(c) else "<td></td>" for c in cols) + "</tr>")
    legend = ("<p class='loc'>Rows are each task's captured steps in program order (not an interleaving). "
              "Sections: " + ", ".join(f"<span class='sec-{s.value}'>{s.value}</span>" for s in Section)
              + ". Tags: P prologue, H head, T tail, E epilogue, F first_iter, L last_iter, N every(n), "
              "?/! when_true/when_false, S skippable, 0 if_empty().</p>")
    return legend + "<div class='wide'><table class='sched'><tr>" + head + "</tr>" + "".join(rows) + \
        "</table></div>"


# ------------------------------------------------------------------ findings
def findings_table(findings: Sequence[Finding]) -> str:
    if not findings:
        return "<p>No findings.</p>"
    rows = []
    for i, f in enumerate(findings, 1):
        where = f.location if f.location is not None and f.location.line else None
        src = f"<br><code>{_e(f.location.text)}</code>" if where is not None and f.location.text else ""
        detail = (f"<details><summary>details (text)</summary><pre>{_e(f.detail)}</pre></details>"
                  if f.detail else "")
        rows.append(f"<tr><td>{i}</td><td class='{_e(f.severity)}'>{_e(f.severity)}</td><td>{_e(f.check)}</td>"
                    f"<td>{_e(f.task)}</td><td>{_e(f.resource)}</td><td class='loc'>{_e(where)}{src}</td>"
                    f"<td class='what'>{_e(f.message)}{detail}</td><td>{_e(f.expected)}</td><td>{_e(f.fix)}</td></tr>")
    return ("<table><tr><th>#</th><th>severity</th><th>check</th><th>task</th><th>resource</th><th>at</th>"
            "<th>what</th><th>expected</th><th>fix</th></tr>" + "".join(rows) + "</table>")


# ------------------------------------------------------------------ what was verified
def _checker_section(verdict, program: Optional[Program]) -> str:
    checker = verdict.checker
    if checker is None:
        status = verdict.checker_status or "not run"
        cls = "off" if status.startswith("off") else "INCOMPLETE"
        why = ("Deadlocks, races and the PDL order across tasks were <b>not</b> checked: "
               "nothing about them is proven." if status.startswith("off") else
               "The static checks found errors, so the exhaustive search did not run.")
        return f"<p class='big {cls}'>Exhaustive checker: {_e(status)}</p><p>{why}</p>"
    rows = [("result", f"<span class='big {_e(checker.verdict)}'>{_e(checker.verdict)}</span>"),
            ("states explored", f"{checker.states:,}"), ("time", f"{checker.seconds:.2f} s")]
    if program is not None:
        o = program.options
        rows.append(("limits", f"max_states={o.max_states:,}, max_seconds="
                     f"{'none' if o.max_seconds is None else f'{o.max_seconds:g}'}"))
    note = checker.loop_note or ""
    if note.startswith("Loop lengths proven: "):
        proven = note[len("Loop lengths proven: "):].split("\n")[0].split("; ")
        label = "loop / tile lengths proven" if checker.verdict == "SAFE" else "loop / tile lengths searched"
        rows.append((label, "<br>".join(_e(p) for p in proven)))
    if "Independent parts" in note:
        rows.append(("independent parts", _e(note.split("Independent parts checked separately: ", 1)[1])))
    meaning = {"SAFE": "every interleaving of every task, for every loop and tile length listed, completes "
                       "without deadlock, race, PDL order violation or barrier over-arrival.",
               "UNSAFE": "a counterexample was found; its timeline is below.",
               "INCOMPLETE": f"the search stopped ({_e(_stop_text(verdict))}) before covering every "
                             "interleaving: nothing is proven (verdict UNPROVEN, exit code 3). Raise "
                             "--max-states / --max-seconds."}
    rows.append(("meaning", meaning.get(checker.verdict, "")))
    return "<table class='facts'>" + "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _stop_text(verdict) -> str:
    for d in verdict.details:
        if d.startswith("exhaustive checker: INCOMPLETE") and "(" in d:
            return d.split("(", 1)[1].split(")", 1)[0]
    return "state or time limit"


def _families_table(verdict) -> str:
    if not verdict.families:
        return "<p>No static check family ran: the schedule could not be captured.</p>"
    rows = []
    for f in verdict.families:
        cls = {"applied": "st-applied", "not applicable": "st-not"}.get(f.status, "st-skipped")
        rows.append(f"<tr><td>{_e(f.title)}</td><td class='loc'>{_e(f.module)}</td><td class='{cls}'>"
                    f"{_e(f.status)}</td><td>{f.findings}</td><td>{_e(f.reason)}</td></tr>")
    applied = sum(f.applied for f in verdict.families)
    return (f"<p class='note'>{applied} of {len(verdict.families)} static check families applied to this "
            "program (a family whose subject is absent is listed as not applicable).</p>"
            "<table><tr><th>family</th><th>module</th><th>status</th><th>findings</th><th>why not</th></tr>"
            + "".join(rows) + "</table>")


def _interleavings(verdict) -> List[str]:
    checker = verdict.checker
    if checker is None:
        return []
    parts: List[str] = []
    examples = checker.counterexamples()
    if examples:
        parts.append("<h2>Counterexample</h2>")
        for n, (f, tl) in enumerate(examples, 1):
            parts.append(f"<h3 class='error'>{_e(f.message)}</h3><p class='loc'>at {_e(f.location)} (task "
                         f"{_e(f.task)}, resource {_e(f.resource)})</p><p class='note'>{_e(f.fix)}</p>")
            parts.append(timeline_html.timeline_table(tl, anchor_id=f"fault-{n}"))
    elif checker.verdict == "SAFE":
        try:
            runs = checker.representative()
        except Exception as e:  # noqa: BLE001 - an illustration: the report is still written without it
            runs = []
            parts.append(f"<p class='note'>(representative interleaving unavailable: {_e(type(e).__name__)})</p>")
        if runs:
            parts.append("<h2>A representative interleaving</h2><p class='note'>One complete run out of every "
                         "interleaving the checker proved (each task runs until it blocks, then the next takes over; "
                         "loops run a few iterations of the checker's loop model, which stands for the trip counts "
                         "listed above, so the stages fill and drain). It illustrates; the SAFE verdict covers all of "
                         "them.</p>")
            for i, tl in enumerate(runs, 1):
                if len(runs) > 1:  # independent parts are checked (and drawn) separately
                    parts.append(f"<h3>Independent part {i} of {len(runs)}: {_e(', '.join(tl.lanes))}</h3>")
                parts.append(timeline_html.timeline_table(tl))
    return parts


# ------------------------------------------------------------------ page
def render_html(*, title: str, verdict_text: str, verdict, program: Optional[Program],
                findings: Sequence[Finding], printout: str = "") -> str:
    cls = {"ACCEPTED": "ok", "UNPROVEN": "unproven"}.get(verdict.word, "bad")
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{_CSS}{timeline_html.CSS}</style></head><body>", f"<h1>warpsched report: {_e(title)}</h1>",
             f"<p class='verdict {cls}'>{_e(verdict_text)}</p>"]
    if verdict.summary:
        parts.append(f"<p class='note'>{_e(verdict.summary)}</p>")
    if program is not None:
        parts += ["<h2>Exhaustive checker</h2>", _checker_section(verdict, program)]
        parts += _interleavings(verdict)  # the counterexample first: it explains the findings
    parts += ["<h2>Findings</h2>", findings_table(findings)]
    if program is None:
        parts.append("<p>No program was built (the schedule could not be captured), so nothing was verified and "
                     "there is no graph or schedule table.</p>")
    else:
        parts += ["<h2>Static check families</h2>", _families_table(verdict),
                  "<h2>Tasks</h2>", _tasks_table(program),
                  "<h2>Dependency graph</h2>", graph_svg(program), _edges_table(program),
                  "<h2>Schedules</h2>", schedules_table(program)]
        if printout:
            parts += ["<h2>Text printout</h2>", f"<pre>{_e(printout)}</pre>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def _printout(manager) -> str:
    program = getattr(manager, "program", None)
    if program is None:
        return ""
    from .printout import register_summary, schedule_table

    try:
        text = schedule_table(program) + "\n\n" + register_summary(program)
    except Exception as e:  # noqa: BLE001 - the report must still be written
        return f"(printout unavailable: {type(e).__name__}: {e})"
    checker = getattr(getattr(manager, "result", None), "checker", None)
    return text + ("\n\n" + checker.report() if checker is not None else "")


def _verdict_text(verdict, findings: Sequence[Finding], tasks: int) -> str:
    n_err = sum(f.severity == "error" for f in findings)
    n_warn = len(findings) - n_err
    return (f"{verdict.word}: {tasks} task{'s' if tasks != 1 else ''}, {n_err} error{'s' if n_err != 1 else ''}, "
            f"{n_warn} warning{'s' if n_warn != 1 else ''} (exit code {verdict.exit_code})")


def render_report(outcome: Any, verdict=None) -> str:
    """From the CLI's Outcome (target, findings, manager, rejected) and its Verdict."""
    from .verdict import judge

    manager = getattr(outcome, "manager", None)
    if verdict is None:
        verdict = judge(rejected=outcome.rejected, errors=sum(f.severity == "error" for f in outcome.findings),
                        manager=manager, checker_off=getattr(outcome, "checker_off", None))
    program = getattr(manager, "program", None)
    tasks = len(manager.tasks) if manager is not None else 0
    return render_html(title=outcome.target, verdict_text=_verdict_text(verdict, outcome.findings, tasks),
                       verdict=verdict, program=program, findings=outcome.findings, printout=_printout(manager))


def render_manager(manager) -> str:
    """The same page for a TaskManager (``TaskManager._repr_html_`` in Jupyter)."""
    from .verdict import judge

    findings = list(manager.result.findings) if manager.result is not None else []
    errors = sum(f.severity == "error" for f in findings)
    verdict = judge(rejected=False, errors=errors, manager=manager)
    title = "TaskManager(" + ", ".join(t.header for t in manager.program.tasks) + ")"
    return render_html(title=title, verdict_text=_verdict_text(verdict, findings, len(manager.tasks)),
                       verdict=verdict, program=manager.program, findings=findings, printout=_printout(manager))
