"""The HTML report's content: the checker verdict (states, time, loop lengths), the check
families, the counterexample / representative interleaving as a lane chart, and the same page
from TaskManager._repr_html_ (the rendering itself is tested in test_report_browser.py)."""
from __future__ import annotations

import os
import re
import warnings

import pytest

import warpsched
from warpsched.cli import main

import _report_programs as programs

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "_report_programs.py")


def report(tmp_path, capsys, name, *args):
    out = tmp_path / f"{name}.html"
    rc = main(["check", f"{PROGRAMS}:{name}", "-q", "--html", str(out), *args])
    capsys.readouterr()
    return rc, out.read_text()


def line_of(fn, text):
    import inspect

    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(src) if text in ln)


def lanes(page):
    """Lane names of the first timeline table."""
    table = page[page.index("<table class='tl'>"):]
    head = table[:table.index("</thead>")]
    return re.findall(r"<th>([^<]+)</th>", head)


def test_safe_report_shows_the_proof_and_a_representative_interleaving(tmp_path, capsys):
    rc, page = report(tmp_path, capsys, "build_safe")
    assert rc == 0
    assert "ACCEPTED: 2 tasks, 0 errors, 0 warnings (exit code 0)" in page
    assert "<span class='big SAFE'>SAFE</span>" in page
    assert re.search(r"<td>states explored</td><td>\d+</td>", page) and re.search(r"<td>time</td><td>[\d.]+ s</td>",
                                                                                   page)
    assert "<td>loop / tile lengths proven</td><td>domain end (compile-time) [Load, Mma]: exactly 8" in page
    assert "A representative interleaving" in page and "Counterexample" not in page
    assert lanes(page) == ["Load", "Mma"]
    # the stages fill: some row shows both stages of tiles full, and the wgmma retire comes before the release
    assert "<span class='on'></span><span class='on'></span>" in page
    body = page[page.index("A representative interleaving"):]
    assert body.index("tiles.retire()") < body.index("tiles.release()")
    assert f"_report_programs.py:{line_of(programs.mma, 'tiles.wgmma()')}" in body
    # which families ran, and why the others did not
    assert "5 of 8 static check families applied" in page and "no PipelineGroup" in page


def test_unsafe_report_draws_the_counterexample_with_the_step_at_fault(tmp_path, capsys):
    rc, page = report(tmp_path, capsys, "build_race")
    assert rc == 1
    assert "REJECTED: 2 tasks, 1 error, 0 warnings (exit code 1)" in page
    assert "<span class='big UNSAFE'>UNSAFE</span>" in page and "loop / tile lengths searched" in page
    assert "<h2>Counterexample</h2>" in page and "physical access race: Load writes tiles stage 0" in page
    fault = page[page.index("id='fault-1'"):]
    fault = fault[:fault.index("</tr>")]
    acquire = line_of(programs.load, "tiles.acquire()")
    assert "at fault: tiles.acquire()" in fault and f"_report_programs.py:{acquire}" in fault
    assert "jump to step 16, at fault" in page
    assert page.index("<h2>Counterexample</h2>") < page.index("<h2>Findings</h2>")


def test_deadlock_report_shows_blocked_and_finished_lanes(tmp_path, capsys):
    rc, page = report(tmp_path, capsys, "build_deadlock")
    assert rc == 1
    fault = page[page.index("id='fault-1'"):]
    assert "blocked: ProducerAcquire on tiles.empty[0]" in fault and "k-done" in fault and "finished" in fault


def test_no_checker_report_says_nothing_was_proven(tmp_path, capsys):
    rc, page = report(tmp_path, capsys, "build_race", "--no-checker")
    assert rc == 0  # the static checks cannot see the race: only the exhaustive checker does
    assert "Exhaustive checker: off (--no-checker)" in page
    assert "Deadlocks, races and the PDL order across tasks were <b>not</b> checked" in page
    assert "Counterexample" not in page and "A representative interleaving" not in page


def test_unproven_report(tmp_path, capsys):
    rc, page = report(tmp_path, capsys, "build_safe", "--max-states", "4")
    assert rc == 3
    assert "<p class='verdict unproven'>UNPROVEN: 2 tasks, 0 errors, 1 warning (exit code 3)</p>" in page
    assert "the search stopped (hit max_states=4)" in page


def test_wide_program_keeps_a_lane_per_task_in_a_scrolling_chart(tmp_path, capsys):
    rc, page = report(tmp_path, capsys, "build_wide")
    assert rc == 0
    assert lanes(page) == ["Producer"] + [f"Consumer{i}" for i in range(7)]
    assert "<div class='tl-wrap'>" in page and "<div class='wide'><table class='sched'>" in page


def test_repr_html_is_the_same_report():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        m = programs.build_safe(verbose=False)
    page = m._repr_html_()
    assert page.startswith("<!DOCTYPE html>")
    for text in ("ACCEPTED: 2 tasks, 0 errors, 0 warnings (exit code 0)", "<h2>Exhaustive checker</h2>",
                 "<span class='big SAFE'>SAFE</span>", "A representative interleaving", "<h2>Static check families</h2>",
                 "<h2>Dependency graph</h2>", "<h2>Schedules</h2>", "Load[0:1)", "Mma[4:8)"):
        assert text in page, text
    assert lanes(page) == ["Load", "Mma"]
    m = programs.build_race(verbose=False, skip_validation=True)  # UNSAFE issued as warnings: still a report
    page = m._repr_html_()
    assert "REJECTED" in page and "<h2>Counterexample</h2>" in page


@pytest.mark.parametrize("name", ["build_safe", "build_race"])
def test_report_is_one_standalone_file(tmp_path, capsys, name):
    _, page = report(tmp_path, capsys, name)
    assert "<script" not in page and "src=" not in page and "href='http" not in page
