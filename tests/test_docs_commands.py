"""The docs run as written: every verdict line a page shows (``warpsched: ACCEPTED|REJECTED|UNPROVEN
TARGET: ...``, with its task and finding counts, check families and program fingerprint) is produced
again by the ``warpsched check`` command the page gives for that target, run here on the CPU. A "..."
in a shown line stands for text the page left out. Pages: README.md and docs/*.md."""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil

import pytest

from warpsched import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                               if f.endswith(".md"))
VERDICT = re.compile(r"^warpsched: (ACCEPTED|REJECTED|UNPROVEN) (.+?): .*$")
COMMAND = re.compile(r"warpsched check ([^`|\n]*)")



def _first_kernel_bad(tmp):
    """docs/first_kernel.md's mistake, made as the page says: the consumer loops ``rows + 1`` times."""
    src = open(os.path.join(ROOT, "examples", "hopper", "first_kernel.py"), encoding="utf-8").read()
    head, tail = src.split("def scale_schedule(", 1)
    assert tail.count("domain_loop(0, rows)") >= 1
    bad = head + "def scale_schedule(" + tail.replace("domain_loop(0, rows)", "domain_loop(0, rows + 1)", 1)
    (tmp / "first_kernel_bad.py").write_text(bad, encoding="utf-8")
    shutil.copy(os.path.join(ROOT, "examples", "hopper", "_common.py"), tmp)  # what the example imports


# programs a page makes from a repository file in its own text: how to make them here
WRITTEN_BY_THE_PAGE = {"first_kernel_bad.py": _first_kernel_bad}


def _shown():
    """(page, line number, shown verdict line, the check's arguments) for every verdict line."""
    out = []
    for page in PAGES:
        lines = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines()
        for i, line in enumerate(lines):
            m = VERDICT.match(line.strip())
            if not m:
                continue
            target = m.group(2)
            want = ["--example", target[len("example "):]] if target.startswith("example ") else [target]
            args = None  # the nearest command for this target (the page's first lines for the README's)
            for j in sorted(range(len(lines)), key=lambda j: abs(j - i)):
                for c in COMMAND.findall(lines[j]):
                    cand = [a for a in shlex.split(c.strip().rstrip(").,:")) if a]
                    if all(w in cand for w in want):
                        args = cand
                        break
                if args is not None:
                    break
            out.append((page, i + 1, line.strip(), target, args))
    return out


SHOWN = _shown()


def _pattern(shown: str) -> re.Pattern:
    return re.compile("^" + ".*".join(re.escape(part) for part in shown.split("...")) + "$")


def test_the_pages_show_verdicts():
    """The scan finds what it is meant to check (a scan that found nothing would check nothing)."""
    assert len(SHOWN) >= 12 and {p for p, *_ in SHOWN} >= {"README.md", "docs/patterns.md", "docs/first_kernel.md"}


@pytest.mark.parametrize("page, line, shown, target, args", SHOWN, ids=[f"{p}:{n}" for p, n, *_ in SHOWN])
def test_a_shown_verdict_is_what_the_command_prints(page, line, shown, target, args, monkeypatch, tmp_path):
    assert args is not None, f"{page}:{line} shows a verdict for {target} but no `warpsched check` command for it"
    if target in WRITTEN_BY_THE_PAGE:
        WRITTEN_BY_THE_PAGE[target](tmp_path)
        monkeypatch.chdir(tmp_path)
    else:
        monkeypatch.chdir(ROOT)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(["check", *args])
    printed = [ln for ln in buf.getvalue().splitlines() if VERDICT.match(ln)]
    assert printed, f"`warpsched check {' '.join(args)}` printed no verdict line (exit {code})"
    assert _pattern(shown).match(printed[-1]), (f"{page}:{line} shows\n  {shown}\nbut `warpsched check "
                                                f"{' '.join(args)}` prints\n  {printed[-1]}")
