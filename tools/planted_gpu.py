"""Planted bugs on the H200: does the hardware agree with the checker?

  python3 tools/planted_gpu.py --sanitize --out bench/results/planted_h200.md
  python3 tools/planted_gpu.py --cpu          # no GPU: checker verdicts + CPU compile of every variant

For every case of tools/planted/cases.py (a bug class, a real Hopper kernel with the bug, its
fixed twin) it records the checker's verdict (computed on the CPU: the first finding's check and
file:line, and the exhaustive checker's verdict on its own), then runs both variants on the GPU and
compares with torch: *correct*, *wrong result* (how many launches of how many), *hang* or *error*.

Watchdog: kernels run in a worker child process that reports each step on stdout; the parent kills
the worker's process group when a launch stays silent for --hang-s seconds (a hung kernel cannot
wedge the machine: the driver tears the context down with the process) and starts a fresh worker
for the remaining jobs. Compilation gets its own, longer allowance. Races get help to show: a
busy-wait in one role (the case's ``common`` edits, in both variants) and many launches.

--sanitize also runs ``compute-sanitizer --tool racecheck`` and ``--tool synccheck`` on the
sanitize cases (both variants) and the small accepted kernels of ``SANITIZE_EXTRA`` and summarises
their hazards / errors. --budget-s stops starting new jobs when the whole run would exceed it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "planted"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import cases as C  # noqa: E402

MARK = "@@"
COMPILE_S = 180.0  # a job's allowance until its first kernel is compiled
HANG_S = 8.0  # silence after a launch that counts as a hang
TICK_EVERY = 10  # launches between progress marks


# ====================================================================== jobs
def jobs(only=None) -> List[str]:
    """Job ids ``key:variant:run``; per case the fixed twin first, so a hung bug cannot cost the twin."""
    out = []
    for c in C.CASES:
        if only and only not in c.key:
            continue
        for which in ("fixed", "bug"):
            out += [f"{c.key}:{which}:{i}" for i in range(len(c.runs))]
    return out


def sanitize_jobs(only=None) -> List[str]:
    out = []
    for c in C.CASES:
        if c.sanitize and (not only or only in c.key):
            out += [f"{c.key}:fixed:0", f"{c.key}:bug:0"]
    if not only:
        out += [f"extra:{i}" for i in range(len(C.SANITIZE_EXTRA))]
    return out


def describe(job: str) -> Tuple[str, str, str]:
    """(case or kernel label, variant, run label)."""
    if job.startswith("extra:"):
        label, _, _, run, _ = C.SANITIZE_EXTRA[int(job.split(":")[1])]
        return label, "accepted", run.label
    key, which, i = job.split(":")
    return key, which, C.case(key).runs[int(i)].label


# ====================================================================== worker (child, GPU)
def _say(*parts):
    print(MARK, *parts, flush=True)


def worker(job_ids: List[str], launches_override: Optional[int] = None) -> int:
    import cutlass.cute as cute
    import torch

    import variants as V

    original_compile = cute.compile

    def compile_and_say(*a, **kw):
        f = original_compile(*a, **kw)
        _say("COMPILED")
        return f

    cute.compile = compile_and_say
    modules: Dict[Tuple, object] = {}
    for job in job_ids:
        _say("START", job)
        try:
            if job.startswith("extra:"):
                label, base, launcher, run, edits = C.SANITIZE_EXTRA[int(job.split(":")[1])]
                key = ("extra", job)
                if key not in modules:
                    modules[key] = V.for_kernel(V.load(base, "fixed", edits))
                mod, patch = modules[key], None
            else:
                key, which, i = job.split(":")
                case = C.case(key)
                run, launcher = case.runs[int(i)], case.launcher
                if (key, which) in modules:
                    _say("COMPILED")  # the module's kernel was compiled by an earlier run of this variant
                else:
                    modules[(key, which)] = V.for_kernel(V.load(case, which))
                mod, patch = modules[(key, which)], (case.lowering_patch if which == "bug" else None)
            n = launches_override or run.launches
            bad, detail = 0, ""
            with V.lowering_patch(patch):
                for k in range(n):
                    ok, detail_k = C.LAUNCHERS[launcher](mod, torch, **run.kwargs)
                    if not ok:
                        bad += 1
                        detail = detail or detail_k
                    if (k + 1) % TICK_EVERY == 0:
                        _say("TICK", job, k + 1)
            _say("RESULT", job, json.dumps({"launches": n, "bad": bad, "detail": detail}))
        except Exception as e:  # noqa: BLE001 - report and stop: a CUDA error poisons the context
            tb = traceback.format_exc().strip().splitlines()
            _say("RESULT", job, json.dumps({"error": f"{type(e).__name__}: {str(e)[:300]}", "where": tb[-3:]}))
            return 3
    return 0


# ====================================================================== parent: watchdog
def run_jobs(job_ids: List[str], deadline: float, hang_s: float = HANG_S, compile_s: float = COMPILE_S,
             cmd=None, log=None) -> Dict[str, dict]:
    """Run jobs in worker children; returns job -> outcome dict (``outcome``: correct | wrong | hang |
    error | not run)."""
    results: Dict[str, dict] = {}
    output: Dict[str, List[str]] = {}  # job -> the worker's other output lines while it ran (sanitizer reports)
    todo = list(job_ids)
    while todo:
        if time.time() >= deadline:
            for j in todo:
                results[j] = {"outcome": "not run", "detail": "time budget spent"}
            break
        argv = (cmd or [sys.executable, os.path.abspath(__file__), "--worker"]) + todo
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
        fd = proc.stdout.fileno()
        pending = b""  # bytes read but not yet split into lines (select sees the pipe, not a buffer)
        lines: List[str] = []
        current, compiled, last = None, False, time.time()
        buf = ""
        while True:
            limit = hang_s if compiled else compile_s
            hang_left, budget_left = limit - (time.time() - last), deadline - time.time()
            if budget_left <= 0:
                if current is not None:
                    results[current] = {"outcome": "not run", "detail": "time budget spent during the job"}
                    todo.remove(current)
                _kill(proc)
                break
            if hang_left <= 0:
                if current is not None:
                    results[current] = ({"outcome": "hang", "detail": f"no progress for {limit:.0f} s after the "
                                         "launch: worker killed"} if compiled else
                                        {"outcome": "not run", "detail": f"not compiled within {limit:.0f} s"})
                    todo.remove(current)
                _kill(proc)
                break
            remaining = min(hang_left, budget_left)
            if not lines:
                ready, _, _ = select.select([fd], [], [], max(0.05, remaining))
                if not ready:
                    continue
                chunk = os.read(fd, 65536)
                if chunk:
                    pending += chunk
                    *done, pending = pending.split(b"\n")
                    lines += [d.decode(errors="replace") + "\n" for d in done]
                    continue
                if pending:
                    lines.append(pending.decode(errors="replace") + "\n")
                    pending = b""
                    continue
                line = ""
            else:
                line = lines.pop(0)
            if line == "":  # the worker exited
                proc.wait()
                if current is not None and current not in results:
                    results[current] = {"outcome": "error", "detail": f"worker exited ({proc.returncode})" +
                                        (f": {buf.strip()[-300:]}" if buf.strip() else "")}
                    todo.remove(current)
                break
            if log is not None:
                log.write(line)
            if not line.startswith(MARK):
                buf = (buf + line)[-2000:]
                if current is not None:
                    output.setdefault(current, []).append(line)
                continue
            parts = line.split(maxsplit=3)
            tag = parts[1]
            last = time.time()
            if tag == "START":
                current, compiled, buf = parts[2], False, ""
            elif tag == "COMPILED":
                compiled = True
            elif tag == "RESULT":
                job, payload = parts[2], json.loads(parts[3])
                results[job] = _outcome(payload)
                if job in todo:
                    todo.remove(job)
                current, compiled = None, False
        if proc.poll() is None:
            _kill(proc)
    for job, text in output.items():
        if job in results:
            results[job]["output"] = "".join(text)
    return results


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _outcome(payload: dict) -> dict:
    if "error" in payload:
        return {"outcome": "error", "detail": payload["error"]}
    n, bad = payload["launches"], payload["bad"]
    if bad:
        return {"outcome": "wrong", "detail": f"{bad}/{n} launches wrong ({payload['detail']})"}
    return {"outcome": "correct", "detail": f"{n}/{n} launches correct"}


# ====================================================================== sanitizer
RECORD = re.compile(r"^=+ (Error|Warning): (.*)$")
HAZARDS = re.compile(r"\[(\d+) hazards?\]")
SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def parse_sanitizer(tool: str, text: str) -> dict:
    """One job's compute-sanitizer records (racecheck in its default analysis report: one record per
    pair of racing source sites, '[N hazards]'; synccheck: one record per error)."""
    records = [m for m in (RECORD.match(ln) for ln in text.splitlines()) if m]
    out = {"tool": tool, "errors": sum(1 for m in records if m.group(1) == "Error"),
           "warnings": sum(1 for m in records if m.group(1) == "Warning")}
    if tool == "racecheck":
        hz = [int(x) for x in HAZARDS.findall(text)]
        m = SUMMARY.search(text)
        out["hazards"] = sum(hz) if hz else (int(m.group(1)) if m else 0)
        out["records"] = len(records)
        sites = re.findall(r"(?:Write|Read) access at \S+ in (\S+)", text)
        out["sites"] = sorted(set(os.path.basename(x) for x in sites))[:6]
    return out


def sanitize(job_ids: List[str], deadline: float, outdir: Optional[str], hang_s: float = 90.0) -> Dict[str, dict]:
    """Run the jobs under each tool (one sanitizer process per tool, fresh after a hang); per job the
    parsed records, the run's outcome, and the raw output in ``outdir``."""
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    out: Dict[str, dict] = {j: {} for j in job_ids}
    if not os.path.exists(exe):
        for j in job_ids:
            out[j] = {t: {"tool": t, "missing": exe} for t in ("racecheck", "synccheck")}
        return out
    for tool in ("racecheck", "synccheck"):
        cmd = [exe, "--tool", tool, sys.executable, os.path.abspath(__file__), "--worker", "--launches", "1"]
        res = run_jobs(job_ids, deadline, hang_s=hang_s, compile_s=COMPILE_S, cmd=cmd)
        for job in job_ids:
            r = res.get(job, {"outcome": "not run", "detail": ""})
            text = r.get("output", "")
            parsed = parse_sanitizer(tool, text) if r["outcome"] in ("correct", "wrong") else {"tool": tool}
            parsed.update(result=r["outcome"], detail=r["detail"])
            out[job][tool] = parsed
            if outdir:
                os.makedirs(outdir, exist_ok=True)
                with open(os.path.join(outdir, f"{job.replace(':', '_')}.{tool}.log"), "w") as f:
                    f.write(text)
    return out


# ====================================================================== verdicts and tables
def verdicts(only=None) -> Dict[str, dict]:
    import variants as V

    out = {}
    for c in C.CASES:
        if only and only not in c.key:
            continue
        out[c.key] = {"bug": V.verdict(c, "bug"), "fixed": V.verdict(c, "fixed")}
    return out


def _verdict_cell(v: dict) -> str:
    if v["verdict"] in ("REJECTED", "UNSAFE"):
        return f"{v['verdict']}: {v['check']} @ `{v['where']}`"
    return v["verdict"]


def _checker_cell(v: dict) -> str:
    if v.get("checker_where"):
        kind = v["checker_message"].split(":")[0]
        return f"{v['checker']} ({kind}) @ `{v['checker_where']}`"
    return v.get("checker", "")


def _hw_cell(case, which: str, hw: Dict[str, dict]) -> str:
    cells = []
    for i, run in enumerate(case.runs):
        r = hw.get(f"{case.key}:{which}:{i}")
        if r is None:
            cells.append(f"{run.label}: not run")
            continue
        word = {"correct": "correct", "wrong": "**wrong result**", "hang": "**hang**", "error": "**error**",
                "not run": "not run"}[r["outcome"]]
        cells.append(f"{run.label}: {word} ({r['detail']})" if r["outcome"] != "correct" or run.launches > 1
                     else f"{run.label}: {word}")
    return "; ".join(cells)


def render_table(verd: Dict[str, dict], hw: Dict[str, dict]) -> str:
    lines = ["| # | bug class | kernel and planted bug | warpsched verdict on the bug (first finding) | "
             "exhaustive checker alone | verdict on the fixed twin | H200: bug | H200: fixed twin | help given |",
             "|---|---|---|---|---|---|---|---|---|"]
    for k, c in enumerate(C.CASES, 1):
        if c.key not in verd:
            continue
        v = verd[c.key]
        help_ = "; ".join(x for x in (c.delay, "many launches" if any(r.launches > 1 for r in c.runs) else "",
                                      c.note) if x) or "-"
        lines.append(f"| {k} | {c.bug_class} | `{c.base}`: {c.what} | {_verdict_cell(v['bug'])} | "
                     f"{_checker_cell(v['bug'])} | {_verdict_cell(v['fixed'])} | {_hw_cell(c, 'bug', hw)} | "
                     f"{_hw_cell(c, 'fixed', hw)} | {help_} |")
    return "\n".join(lines)


def render_sanitize(san: Dict[str, Dict[str, dict]]) -> str:
    lines = ["| kernel | variant | racecheck | synccheck |", "|---|---|---|---|"]
    for job, tools in san.items():
        label, which, run = describe(job)

        def cell(r):
            if not r:
                return "not run"
            if r.get("missing"):
                return f"compute-sanitizer not found ({r['missing']})"
            if r.get("result") not in ("correct", "wrong"):
                return f"{r.get('result', 'not run')} ({r.get('detail', '')})"
            run_word = "output correct" if r["result"] == "correct" else "output wrong"
            if r["tool"] == "racecheck":
                sites = f", sites {', '.join(r['sites'])}" if r.get("sites") else ""
                return (f"{r['hazards']} hazards in {r['records']} report(s) ({r['errors']} errors, {r['warnings']} "
                        f"warnings{sites}); {run_word}")
            return f"{r['errors']} errors; {run_word}"
        lines.append(f"| {label} ({run}) | {which} | {cell(tools.get('racecheck'))} | {cell(tools.get('synccheck'))} |")
    return "\n".join(lines)


def report(verd, hw, san, seconds, gpu_name) -> str:
    out = [f"# Planted bugs: warpsched's verdicts against the hardware ({gpu_name})", "",
           f"`python3 tools/planted_gpu.py` ({seconds:.0f} s). Verdicts computed on the CPU (static checks, "
           "then the exhaustive checker; the checker-alone column runs the exhaustive checker without the static "
           "checks). Hardware: each variant compared with torch; a launch silent for "
           f"{HANG_S:.0f} s is a hang (the worker process is killed).", "", render_table(verd, hw)]
    if san:
        out += ["", "## compute-sanitizer", "", render_sanitize(san)]
    return "\n".join(out) + "\n"


# ====================================================================== main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="markdown table (default bench/results/planted_h200.md, else "
                    "bench/results/planted_h200.md)")
    ap.add_argument("--cpu", action="store_true", help="no GPU: verdicts and a CPU compile of every variant")
    ap.add_argument("--sanitize", action="store_true", help="also run compute-sanitizer racecheck / synccheck")
    ap.add_argument("--only", default=None, help="only cases whose key contains this")
    ap.add_argument("--budget-s", type=float, default=470.0, help="stop starting jobs after this many seconds")
    ap.add_argument("--hang-s", type=float, default=HANG_S)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--launches", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("jobs", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.jobs, args.launches)
    t0 = time.time()
    deadline = t0 + args.budget_s
    name = "planted_cpu.md" if args.cpu else "planted_h200.md"
    out_path = args.out or (os.path.join(os.environ["OUT"], name) if os.environ.get("OUT")
                            else os.path.join(HERE, "results", name))
    print("checker verdicts (CPU) ...", flush=True)
    verd = verdicts(args.only)
    hw: Dict[str, dict] = {}
    san: Dict[str, Dict[str, dict]] = {}
    gpu = "CPU only"
    if args.cpu:
        import variants as V

        for c in C.CASES:
            if args.only and args.only not in c.key:
                continue
            for which in ("fixed", "bug"):
                V.compile_cpu(c, which)
                print(f"  compiled {c.key} {which} for sm_90a", flush=True)
    else:
        gpu = _gpu_name()
        log_path = os.path.splitext(out_path)[0] + ".log"
        os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
        with open(log_path, "w") as log:
            hw = run_jobs(jobs(args.only), deadline, hang_s=args.hang_s, log=log)
        for job, r in hw.items():
            print(f"  {job:32s} {r['outcome']:8s} {r['detail']}", flush=True)
        if args.sanitize:
            logdir = os.path.join(os.path.dirname(out_path) or ".", "sanitize")
            # a variant that hung in the plain run would only hang again under the tools
            todo = [j for j in sanitize_jobs(args.only) if hw.get(j, {}).get("outcome") != "hang"]
            san = sanitize(todo, deadline, logdir)
            for j in sanitize_jobs(args.only):
                if j not in san:
                    san[j] = {t: {"tool": t, "result": "not run", "detail": "hangs without the tools"}
                              for t in ("racecheck", "synccheck")}
            for job, tools in san.items():
                print(f"  {job:32s} {tools}", flush=True)
    text = report(verd, hw, san, time.time() - t0, gpu)
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as f:
        f.write(text)
    with open(os.path.splitext(out_path)[0] + ".json", "w") as f:
        json.dump({"verdicts": verd, "hardware": hw, "sanitize": san}, f, indent=1, default=str)
    print(text)
    return 0


def _gpu_name() -> str:
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
        return p.stdout.strip().splitlines()[0] if p.stdout.strip() else "GPU"
    except Exception:  # noqa: BLE001
        return "GPU"


if __name__ == "__main__":
    sys.exit(main())
