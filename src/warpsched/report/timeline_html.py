"""An interleaving as an HTML lane chart: one column (lane) per task, time downwards.

Each step is a chip coloured by what it does (acquire / commit / wait / release / work /
loop), with its barrier stage and phase parity and the file:line of its schedule call. A
column on the left shows, per pipeline, how many stages are full after each step and which
barrier phases the step completed. The step at fault is highlighted. Wide programs scroll
inside the chart; the step numbers, the stages column and the lane names stay in view.
"""
from __future__ import annotations

import html
import os
from typing import Any

CSS = """
.tl-wrap{max-height:75vh;overflow:auto;border:1px solid #ccc;border-radius:4px;margin:.4em 0 1em}
table.tl{border-collapse:separate;border-spacing:0;font-size:12px;width:max-content}
table.tl th,table.tl td{border:0;border-bottom:1px solid #eee;border-right:1px solid #f0f0f0;padding:2px 4px;
  vertical-align:top;background:#fff}
table.tl thead th{position:sticky;top:0;z-index:2;background:#f2f2f2;border-bottom:1px solid #bbb;
  white-space:nowrap;text-align:left}
table.tl .t{position:sticky;left:0;z-index:1;background:#fafafa;color:#777;text-align:right;min-width:2.2em}
table.tl thead th.t{z-index:3;background:#e9e9e9}
table.tl td.lane{min-width:130px;max-width:220px}
table.tl .pipe{position:sticky;left:2.2em;z-index:1;background:#fbfbfd;border-right:1px solid #ccc;
  white-space:nowrap}
table.tl thead th.pipe{z-index:3;background:#e9e9e9}
tr.fault td.pipe{background:#fff3f3}
.pipe .pn{display:inline-block;margin-right:4px;overflow:hidden;text-overflow:ellipsis;font-family:monospace;
  font-size:10.5px;font-weight:normal;vertical-align:bottom}
.chip{display:block;border-radius:4px;padding:1px 5px;border-left:4px solid #999;background:#f4f4f4;
  overflow-wrap:anywhere;line-height:1.3}
.chip .at{display:block;color:#666;font-family:monospace;font-size:10.5px}
.k-acquire{border-color:#2a6fdb;background:#e8f0fd} .k-commit{border-color:#1d8a4a;background:#e5f5eb}
.k-wait{border-color:#8a4fd1;background:#f1eafb} .k-release{border-color:#c46b00;background:#fdf1e2}
.k-work{border-color:#7a7a7a;background:#f4f4f4} .k-loop,.k-tile{border-color:#bbb;background:#fff;color:#666;
  font-style:italic} .k-hw{border-color:#0b8794;background:#e2f5f6} .k-skip{opacity:.6}
.k-other{border-color:#ccc;background:#fafafa;color:#555}
.k-fault,.k-blocked{border-color:#c01818;background:#fde4e4;color:#7a0b0b;font-weight:bold}
tr.fault td{background:#fff3f3} tr.fault td.t{background:#fde4e4;color:#8a1414;font-weight:bold}
.stage{display:inline-block;font-family:monospace;font-size:10.5px;border-radius:3px;padding:0 3px;margin-left:3px;
  background:#fff;border:1px solid #bbb;color:#333}
.bar{display:inline-flex;gap:1px;margin:3px 4px 0 0;vertical-align:top}
.bar span{width:6px;height:9px;border:1px solid #9bb;background:#fff}
.bar span.on{background:#3d8f9a;border-color:#3d8f9a}
.bar span.rf{outline:2px solid #1d8a4a;outline-offset:1px} .bar span.re{outline:2px solid #d9822b;outline-offset:1px}
.legend{font-size:12px;color:#555;margin:.3em 0;display:flex;flex-wrap:wrap;gap:.3em .5em;align-items:center}
.legend .chip{display:inline-block} .legend .li{white-space:nowrap}
.k-done{border-color:#bbb;background:#fff;color:#777;font-style:italic}
"""

LEGEND = ("<div class='legend'><span class='chip k-acquire'>acquire</span><span class='chip k-commit'>commit"
          "</span><span class='chip k-wait'>wait</span><span class='chip k-release'>release</span>"
          "<span class='chip k-work'>work</span><span class='chip k-hw'>hardware arrival</span>"
          "<span class='chip k-loop'>loop / tile decision</span>{fault}"
          "<span class='li'><span class='stage'>s1 p0</span> barrier stage 1, phase parity 0</span>"
          "<span class='li'><span class='bar'><span class='on rf'></span><span class='re'></span><span></span></span>"
          "a pipeline's stages after the step: filled = full; ring = this step completed the stage's full "
          "(green) / empty (orange) barrier phase</span></div>")


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _short_loc(loc) -> str:
    if loc is None or not getattr(loc, "line", None):
        return ""
    return f"{os.path.basename(str(loc.file))}:{loc.line}"


def _chip(row, fault: bool) -> str:
    stage = ""
    if row.stage is not None:
        stage = f"<span class='stage'>s{row.stage}{'' if row.parity is None else f' p{row.parity}'}</span>"
    fault = fault and row.kind not in ("blocked", "done")  # a violating step; blocked ones say so
    kind = "fault" if fault else row.kind
    at = _short_loc(row.location)
    where = f"<span class='at' title='{_e(row.location)}'>@ {_e(at)}</span>" if at else ""
    mark = "at fault: " if fault else ""
    text = row.call or row.text
    return (f"<span class='chip k-{_e(kind)}' title='{_e(row.text)}'>{_e(mark)}{_e(text)}{stage}{where}"
            "</span>")


def _width(stages: int) -> int:
    return max(52, stages * 9 + 6)


def _pipe_cell(row, pipelines) -> str:
    """One bar per pipeline, one box per stage: filled = full (its full barrier completed a
    phase more often than its empty barrier); a ring marks the phase this step completed."""
    bars = []
    for name, stages in pipelines:
        state = row.full.get(name, ())
        done = {(stage, kind) for owner, kind, stage, _ in row.completed if owner == name}
        boxes = []
        for i in range(stages):
            cls = ("on " if i < len(state) and state[i] else "") + \
                  ("rf" if (i, "full") in done else "re" if (i, "empty") in done else "")
            boxes.append(f"<span class='{cls.strip()}'></span>")
        bars.append(f"<span class='bar' style='width:{_width(stages)}px'>{''.join(boxes)}</span>")
    tip = "; ".join(f"{owner}.{kind}[{stage}] completed phase {phase ^ 1} (now in phase {phase})"
                    for owner, kind, stage, phase in row.completed)
    return f"<td class='pipe' title='{_e(tip)}'>{''.join(bars)}</td>"


def _pipe_head(pipelines) -> str:
    names = "".join(f"<span class='pn' style='width:{_width(s)}px' title='{_e(n)}: {s} stage{'s' if s != 1 else ''}'>"
                    f"{_e(n)}</span>" for n, s in pipelines)
    return f"<th class='pipe'>{names}</th>"


def timeline_table(tl, anchor_id: str = "") -> str:
    """``tl``: a verify.checker.report.Timeline; ``anchor_id`` names the row at fault."""
    if not tl.rows:
        return "<p>(empty interleaving)</p>"
    head = "<th class='t'>#</th>" + (_pipe_head(tl.pipelines) if tl.pipelines else "") + \
        "".join(f"<th>{_e(n)}</th>" for n in tl.lanes)
    body = []
    for i, row in enumerate(tl.rows):
        fault = tl.fault is not None and i >= tl.fault
        cells = [f"<td class='t'>{i}</td>"] + ([_pipe_cell(row, tl.pipelines)] if tl.pipelines else [])
        for lane in range(len(tl.lanes)):
            cells.append(f"<td class='lane'>{_chip(row, i == tl.fault) if lane == row.executor else ''}</td>")
        anchor = f" id='{_e(anchor_id)}'" if anchor_id and i == tl.fault else ""
        body.append(f"<tr class='{'fault' if fault else ''}'{anchor}>" + "".join(cells) + "</tr>")
    jump = (f"<p class='note'><a href='#{_e(anchor_id)}'>jump to step {tl.fault}, at fault</a> "
            f"({len(tl.rows)} steps)</p>" if anchor_id and tl.fault is not None else "")
    legend = LEGEND.format(fault="<span class='chip k-fault'>at fault</span>" if tl.fault is not None else "")
    return (legend + jump + "<div class='tl-wrap'><table class='tl'><thead><tr>" + head + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")
