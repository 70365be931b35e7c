"""The HTML report rendered by a real headless browser (Debian's ``chromium``).

For a SAFE, an UNSAFE and a wide (8-lane) report: the text the browser renders
(``document.body.innerText``, read back with ``--dump-dom``), computed colours and layout
(no page-wide horizontal scrolling; the lane chart scrolls inside its frame, lanes keep their
width), and screenshots decoded here (size, verdict and fault colours present).

.ci/run installs chromium and sets WARPSCHED_REQUIRE_BROWSER=1, so there a missing browser
fails; elsewhere the tests are skipped with the install command. WARPSCHED_DOC_SCREENSHOTS=1
also copies the SAFE / UNSAFE screenshots to docs/img/ (shown in docs/report.md).
"""
from __future__ import annotations

import html
import json
import os
import shutil
import struct
import subprocess
import zlib

import pytest

from warpsched.cli import main

import _report_programs as programs
from test_report_html import line_of

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "_report_programs.py")
DOC_IMG = os.path.join(os.path.dirname(HERE), "docs", "img")

# Runs after layout; its JSON lands in the DOM that --dump-dom prints.
PROBE = """<pre id="probe"></pre><script>
(function () {
  const q = (s) => document.querySelector(s), all = (s) => Array.from(document.querySelectorAll(s));
  const wrap = q('.tl-wrap'), verdict = q('.verdict'), faultChip = q('tr.fault .k-fault, tr.fault .k-blocked');
  const facts = {
    text: document.body.innerText,
    pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth,
    verdictBg: getComputedStyle(verdict).backgroundColor,
    verdictTop: verdict.getBoundingClientRect().top,
    wrapScrolls: wrap ? wrap.scrollWidth > wrap.clientWidth : null,
    wrapHeight: wrap ? wrap.clientHeight : null,
    laneWidths: all('table.tl thead th').slice(2).map((th) => th.getBoundingClientRect().width),
    headSticky: wrap ? getComputedStyle(q('table.tl thead th')).position : null,
    faultBg: faultChip ? getComputedStyle(faultChip).backgroundColor : null,
  };
  document.getElementById('probe').textContent = JSON.stringify(facts);
})();
</script>"""


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("WARPSCHED_REQUIRE_BROWSER") == "1":
        pytest.fail("chromium is required here (WARPSCHED_REQUIRE_BROWSER=1) but not installed")
    pytest.skip("no headless browser: apt-get install -y chromium (.ci/run installs it)")


@pytest.fixture(scope="module")
def browser():
    return _browser()


def _run(browser, tmp, *args, width=1000, height=1350):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _report(tmp_path, name, *args) -> str:
    out = tmp_path / f"{name}.html"
    rel = os.path.relpath(PROGRAMS)  # the page title shows the target as given: keep it short
    main(["check", f"{PROGRAMS if rel.startswith('..') else rel}:{name}", "-q", "--html", str(out), *args])
    return str(out)


def rendered(browser, tmp_path, page: str, width=1000, height=1350) -> dict:
    probe = tmp_path / ("probe_" + os.path.basename(page))
    with open(page, encoding="utf-8") as fh:
        probe.write_text(fh.read().replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = _run(browser, tmp_path, "--dump-dom", f"file://{probe}", width=width, height=height)
    start = dom.index('<pre id="probe">') + len('<pre id="probe">')
    return json.loads(html.unescape(dom[start:dom.index("</pre>", start)]))


def screenshot(browser, tmp_path, page: str, png: str, width=1000, height=1350):
    _run(browser, tmp_path, f"--screenshot={png}", f"file://{page}", width=width, height=height)
    return decode_png(png)


def decode_png(path: str):
    """(width, height, rows of RGB(A) bytes): enough PNG (8-bit RGB / RGBA) for colour checks."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    w, h, depth, color = ihdr[:4]
    assert depth == 8 and color in (2, 6), ihdr
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def count_colour(image, rgb) -> int:
    w, h, bpp, rows = image
    target = bytes(rgb)
    return sum(sum(1 for x in range(0, w * bpp, bpp) if row[x:x + 3] == target) for row in rows[::2])


GREEN_BADGE, RED_BADGE = (227, 246, 227), (253, 228, 228)  # .ok / .bad backgrounds (and the fault chip)


def test_safe_report_renders(browser, tmp_path):
    page = _report(tmp_path, "build_safe")
    facts = rendered(browser, tmp_path, page)
    text = facts["text"]
    for s in ("ACCEPTED: 2 tasks, 0 errors, 0 warnings (exit code 0)", "Exhaustive checker", "SAFE",
              "loop / tile lengths proven", "A representative interleaving", "tiles.wgmma()", "tiles.retire()",
              "Static check families", "5 of 8 static check families applied"):
        assert s in text, s
    assert "Counterexample" not in text
    assert facts["verdictBg"] == "rgb(%d, %d, %d)" % GREEN_BADGE and facts["verdictTop"] < 200
    assert facts["pageWidth"] <= facts["viewport"], facts
    assert facts["headSticky"] == "sticky"
    image = screenshot(browser, tmp_path, page, str(tmp_path / "safe.png"))
    assert image[:2] == (1000, 1350)
    assert count_colour(image, GREEN_BADGE) > 2000  # the verdict badge is on screen
    assert count_colour(image, RED_BADGE) == 0
    _keep(tmp_path / "safe.png", "report_safe.png")


def test_unsafe_report_renders_the_counterexample(browser, tmp_path):
    page = _report(tmp_path, "build_race")
    facts = rendered(browser, tmp_path, page)
    text = facts["text"]
    acquire = line_of(programs.load, "tiles.acquire()")
    for s in ("REJECTED: 2 tasks, 1 error, 0 warnings (exit code 1)", "UNSAFE", "Counterexample",
              "physical access race: Load writes tiles stage 0 while Mma reads tiles stage 0",
              "at fault: tiles.acquire()", f"_report_programs.py:{acquire}", "jump to step 16, at fault"):
        assert s in text, s
    assert facts["verdictBg"] == "rgb(%d, %d, %d)" % RED_BADGE
    assert facts["faultBg"] == "rgb(%d, %d, %d)" % RED_BADGE
    assert facts["pageWidth"] <= facts["viewport"], facts
    image = screenshot(browser, tmp_path, page, str(tmp_path / "unsafe.png"))
    assert count_colour(image, RED_BADGE) > 2000  # badge and the row at fault
    assert count_colour(image, GREEN_BADGE) == 0
    _keep(tmp_path / "unsafe.png", "report_unsafe.png")


def test_wide_report_stays_readable(browser, tmp_path):
    """Eight lanes in a 900-px window: the chart scrolls inside its frame (not the page) and
    every lane keeps a readable width; the step column and the header stay in view."""
    page = _report(tmp_path, "build_wide")
    facts = rendered(browser, tmp_path, page, width=900, height=1000)
    assert facts["pageWidth"] <= facts["viewport"], facts
    assert facts["wrapScrolls"] is True
    assert len(facts["laneWidths"]) == 8 and min(facts["laneWidths"]) >= 125, facts["laneWidths"]
    assert facts["wrapHeight"] <= 0.8 * 1000  # a long run scrolls inside the frame too
    assert "Consumer6" in facts["text"]


def _keep(png, name):
    if os.environ.get("WARPSCHED_DOC_SCREENSHOTS") == "1":
        os.makedirs(DOC_IMG, exist_ok=True)
        shutil.copyfile(png, os.path.join(DOC_IMG, name))
