"""A standalone HTML report: dependency graph (SVG), per-task schedules, findings. No assets."""
from __future__ import annotations

import html
from typing import Any, Dict, List, Optional, Sequence

from ..errors import Finding
from ..model.ir import Section
from ..verify.program import Program, name_of

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
.verdict{font-weight:bold;padding:.5em .8em;border-radius:4px;display:inline-block}
.ok{background:#e3f6e3;color:#185c18} .bad{background:#fde4e4;color:#8a1414}
table{border-collapse:collapse;font-size:.88em} td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f2f2f2} .loc{color:#666;font-family:monospace;font-size:.9em}
.sec-prologue,.sec-epilogue{background:#f3ecfb} .sec-head{background:#eef5fd} .sec-tail{background:#fdf5e8}
.error{color:#8a1414;font-weight:bold} .warning{color:#8a5a00;font-weight:bold}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em}
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
              "?/! when_true/when_false, S skippable.</p>")
    return legend + "<table><tr>" + head + "</tr>" + "".join(rows) + "</table>"


# ------------------------------------------------------------------ findings
def findings_table(findings: Sequence[Finding]) -> str:
    if not findings:
        return "<p>No findings.</p>"
    rows = []
    for i, f in enumerate(findings, 1):
        where = f.location if f.location is not None and f.location.line else None
        src = f"<br><code>{_e(f.location.text)}</code>" if where is not None and f.location.text else ""
        detail = f"<pre>{_e(f.detail)}</pre>" if f.detail else ""
        rows.append(f"<tr><td>{i}</td><td class='{_e(f.severity)}'>{_e(f.severity)}</td><td>{_e(f.check)}</td>"
                    f"<td>{_e(f.task)}</td><td>{_e(f.resource)}</td><td class='loc'>{_e(where)}{src}</td>"
                    f"<td>{_e(f.message)}{detail}</td><td>{_e(f.expected)}</td><td>{_e(f.fix)}</td></tr>")
    return ("<table><tr><th>#</th><th>severity</th><th>check</th><th>task</th><th>resource</th><th>at</th>"
            "<th>what</th><th>expected</th><th>fix</th></tr>" + "".join(rows) + "</table>")


# ------------------------------------------------------------------ page
def render_html(*, title: str, verdict: str, accepted: bool, program: Optional[Program],
                findings: Sequence[Finding], printout: str = "") -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>warpsched report: {_e(title)}</h1>",
             f"<p class='verdict {'ok' if accepted else 'bad'}'>{_e(verdict)}</p>",
             "<h2>Findings</h2>", findings_table(findings)]
    if program is None:
        parts.append("<p>No program was built (the schedule could not be captured), so there is no graph or "
                     "schedule table.</p>")
    else:
        parts += ["<h2>Tasks</h2>", _tasks_table(program),
                  "<h2>Dependency graph</h2>", graph_svg(program), _edges_table(program),
                  "<h2>Schedules</h2>", schedules_table(program)]
        if printout:
            parts += ["<h2>Text printout</h2>", f"<pre>{_e(printout)}</pre>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def render_report(outcome: Any) -> str:
    """From the CLI's Outcome (target, findings, manager, rejected)."""
    manager = getattr(outcome, "manager", None)
    program = getattr(manager, "program", None)
    printout = ""
    if program is not None:
        from .printout import register_summary, schedule_table

        try:
            printout = schedule_table(program) + "\n\n" + register_summary(program)
        except Exception as e:  # noqa: BLE001 - the report must still be written
            printout = f"(printout unavailable: {type(e).__name__}: {e})"
    accepted = not outcome.rejected and not any(f.severity == "error" for f in outcome.findings)
    n_err = sum(f.severity == "error" for f in outcome.findings)
    verdict = (f"ACCEPTED ({len(outcome.findings)} warning(s))" if accepted
               else f"REJECTED ({n_err} error(s), {len(outcome.findings) - n_err} warning(s))")
    return render_html(title=outcome.target, verdict=verdict, accepted=accepted, program=program,
                       findings=outcome.findings, printout=printout)
