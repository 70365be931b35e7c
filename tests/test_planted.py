"""The planted-bug kernels (tools/planted) and their GPU runner, on the CPU: every planted bug is
found by warpsched and its fixed twin accepted, every variant compiles for sm_90a, the watchdog kills
a hung worker, and the tables come out of given outcomes (the hardware outcomes are injected here)."""
from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "planted"))

import cases as C  # noqa: E402
import planted_gpu as G  # noqa: E402
import variants as V  # noqa: E402

CLASSES = ["missing commit", "consumer waiting more than produced", "wrong arrival count (cooperative-group size)",
           "wrong num_bytes", "lane collision from a wrong interleave stride",
           "phase error that appears only after num_stages iterations", "SMEM aliasing race",
           "WGMMA stage released before wgmma.wait_group", "PDL launch before wait", "a bug only on a skipped tile",
           "a bug only on one when_true branch", "a dynamic-domain bug that appears only at some runtime trip counts",
           "a split-consumer whose wait-only task skips a wait on one path"]


@pytest.fixture(scope="module")
def verdicts():
    return G.verdicts()


def test_every_bug_class_of_the_issue_has_a_case():
    assert [c.bug_class for c in C.CASES if c.lowering_patch is None] == CLASSES


@pytest.mark.parametrize("key", [c.key for c in C.CASES])
def test_bug_found_and_twin_accepted(key, verdicts):
    case, v = C.case(key), verdicts[key]
    assert v["fixed"]["verdict"] == "SAFE" and v["fixed"]["checker"] == "SAFE"
    if case.lowering_patch is not None:  # a lowering variant: the program (and so the verdict) is the same
        assert v["bug"]["verdict"] == "SAFE"
        return
    assert v["bug"]["verdict"] in ("REJECTED", "UNSAFE"), v["bug"]
    base = os.path.basename(case.base)
    assert v["bug"]["where"].split(":")[0].endswith(base)
    line = int(v["bug"]["where"].rsplit(":", 1)[1])
    assert 1 <= line <= len(open(os.path.join(ROOT, case.base)).read().splitlines())
    if case.key == "num_bytes":  # the checker assumes a TMA copy delivers num_bytes: the static check finds it
        assert v["bug"]["checker"] == "SAFE" and v["bug"]["check"] == "pipeline thread counts and bytes"
    else:
        assert v["bug"]["checker"] == "UNSAFE", v["bug"]  # the exhaustive checker alone finds it too


def test_edits_keep_line_numbers_and_refuse_a_stale_edit():
    for case in C.CASES:
        base = open(os.path.join(ROOT, case.base)).read().splitlines()
        edited = V.edited_source(case.base, V.edits_of(case, "bug")).splitlines()
        assert edited[:len(base)] != base or not case.bug
        assert len(edited) in (len(base), len(base) + 2)  # + the delay helper's import
    with pytest.raises(V.EditError):
        V.edited_source(C.RELU, [(123, "not on this line", "x")])


@pytest.mark.parametrize("key", [c.key for c in C.CASES])
def test_both_variants_compile_for_sm90a(key):
    case = C.case(key)
    bug, fixed = V.compile_cpu(case, "bug"), V.compile_cpu(case, "fixed")
    assert ".entry" in bug and ".entry" in fixed
    if case.lowering_patch == "no_task_sync":  # the named barrier before the leader's commit is gone
        assert bug.count("bar.sync \t15") + 1 == fixed.count("bar.sync \t15") or \
            bug.count("bar.sync") < fixed.count("bar.sync")
    if case.common:  # the injected delay is a clock64 spin loop
        assert "clock64" in bug and "clock64" in fixed


FAKE_WORKER = textwrap.dedent("""
    import json, sys, time
    for job in sys.argv[1:]:
        print("@@ START", job, flush=True)
        if "slowcompile" in job:
            time.sleep(100)
        print("@@ COMPILED", flush=True)
        if "hang" in job:
            time.sleep(100)
        if "crash" in job:
            sys.exit(1)
        bad = 3 if "wrong" in job else 0
        print("@@ RESULT", job, json.dumps({"launches": 10, "bad": bad, "detail": "max|y-x|=1"}), flush=True)
""")


def test_watchdog_kills_a_hung_worker_and_resumes(tmp_path):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    t0 = time.time()
    res = G.run_jobs(["a:fixed:0", "b:hang:0", "c:wrong:0", "d:crash:0", "e:fixed:0", "f:slowcompile:0"],
                     deadline=time.time() + 90, hang_s=1.5, compile_s=6.0, cmd=[sys.executable, str(script)])
    assert time.time() - t0 < 60
    assert res["a:fixed:0"]["outcome"] == "correct"
    assert res["b:hang:0"]["outcome"] == "hang" and "killed" in res["b:hang:0"]["detail"]
    assert res["c:wrong:0"]["outcome"] == "wrong" and res["c:wrong:0"]["detail"].startswith("3/10")
    assert res["d:crash:0"]["outcome"] == "error"
    assert res["e:fixed:0"]["outcome"] == "correct"  # a fresh worker picked up after the crash
    assert res["f:slowcompile:0"]["outcome"] == "not run"


def test_budget_marks_the_rest_not_run(tmp_path):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    res = G.run_jobs(["x:hang:0", "y:fixed:0"], deadline=time.time() + 1.5, hang_s=10.0, compile_s=10.0,
                     cmd=[sys.executable, str(script)])
    assert res["x:hang:0"]["outcome"] == "not run" and res["y:fixed:0"]["outcome"] == "not run"


def test_table_from_injected_outcomes(verdicts):
    hw = {}
    for c in C.CASES:
        for i, _ in enumerate(c.runs):
            hw[f"{c.key}:fixed:{i}"] = {"outcome": "correct", "detail": "1/1 launches correct"}
            hw[f"{c.key}:bug:{i}"] = {"outcome": "hang", "detail": "no progress for 8 s after the launch: worker killed"}
    text = G.report(verdicts, hw, {}, 1.0, "NVIDIA H200 (fake)")
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert len(rows) == len(C.CASES)
    first = rows[0]
    assert "missing commit" in first and verdicts["missing_commit"]["bug"]["where"] in first and "**hang**" in first
    assert first.count("n=8: correct") == 1  # the fixed twin's cell


SAMPLE_RACECHECK = """========= Warning: Race reported between Write access at relu_kernel+0x4d0 in /x/relu_pipeline.py:86
=========     and Read access at relu_kernel+0x9f0 in /x/relu_pipeline.py:90 [896 hazards]
=========
"""


def test_sanitizer_reports_are_parsed_per_job():
    r = G.parse_sanitizer("racecheck", SAMPLE_RACECHECK)
    assert (r["hazards"], r["records"], r["errors"], r["warnings"]) == (896, 1, 0, 1)
    assert r["sites"] == ["relu_pipeline.py:86", "relu_pipeline.py:90"]
    s = G.parse_sanitizer("synccheck", "========= Error: Barrier error detected. Divergent thread(s) in warp\n")
    assert s["errors"] == 1
    r.update(result="correct", detail="1/1 launches correct")
    s.update(result="wrong", detail="1/1 launches wrong")
    table = G.render_sanitize({"relu_leader_no_sync:bug:0": {"racecheck": r, "synccheck": s}})
    assert "896 hazards in 1 report(s) (0 errors, 1 warnings" in table and "1 errors; output wrong" in table


def test_worker_output_between_markers_is_kept_per_job(tmp_path):
    script = tmp_path / "noisy_worker.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        for job in sys.argv[1:]:
            print("@@ START", job, flush=True)
            print("@@ COMPILED", flush=True)
            print("========= Warning: Race reported for", job, "[7 hazards]", flush=True)
            print("@@ RESULT", job, json.dumps({"launches": 1, "bad": 0, "detail": ""}), flush=True)
    """))
    res = G.run_jobs(["p:fixed:0", "q:bug:0"], deadline=time.time() + 60, hang_s=5.0, compile_s=20.0,
                     cmd=[sys.executable, str(script)])
    assert "for q:bug:0" in res["q:bug:0"]["output"] and "p:fixed" not in res["q:bug:0"]["output"]
    assert G.parse_sanitizer("racecheck", res["p:fixed:0"]["output"])["hazards"] == 7


def test_results_json_round_trip(tmp_path, verdicts):
    out = tmp_path / "planted.md"
    data = {"verdicts": verdicts, "hardware": {}, "sanitize": {}}
    (tmp_path / "planted.json").write_text(json.dumps(data, default=str))
    out.write_text(G.report(verdicts, {}, {}, 0.0, "CPU only"))
    assert "| 14 |" in out.read_text()


@pytest.mark.parametrize("i", range(len(C.SANITIZE_EXTRA)))
def test_sanitizer_extras_are_accepted_programs_that_compile(i):
    import warnings

    label, base, launcher, run, edits = C.SANITIZE_EXTRA[i]
    mod = V.load(base, "fixed", edits)
    kw = {"mode": run.kwargs["mode"]} if launcher == "icopy" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mod.build(verbose=False, **kw).result.checker.verdict == "SAFE"
        assert ".entry" in V.for_kernel(mod).compile_for_cpu(**kw).artifacts.PTX
