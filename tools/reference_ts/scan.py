"""Scan the reference TS checker over pipeline depth S and main-loop length K.

Each config runs in its own subprocess (fresh interpreter, so no caching and
a hard wall-clock timeout).  Prints a table: verdict, states explored,
seconds spent in TaskManager(...) (validation + exhaustive BFS).

    .venv/bin/python tools/reference_ts/scan.py                 # a, b
    .venv/bin/python tools/reference_ts/scan.py --variants a b b_static \
        --max-states 1000000000 --timeout 60 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

_CHILD = r"""
import json, sys, resource
sys.path.insert(0, {repo!r})
from tools.reference_ts.ref_schedules import run_reference
r = run_reference({variant!r}, {S}, {K}, max_states={max_states!r}, verbose={verbose!r})
r.pop("log_tail", None)
r.pop("error", None)
r["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("@@RESULT@@" + json.dumps(r))
"""


def run_one(variant, S, K, max_states, verbose, timeout):
    code = _CHILD.format(
        repo=REPO, variant=variant, S=S, K=K, max_states=max_states, verbose=verbose
    )
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return {"verdict": "TIMEOUT", "states": None, "seconds": None,
                "wall": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            r = json.loads(line[len("@@RESULT@@"):])
            r["wall"] = wall
            return r
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
    return {"verdict": f"CRASH rc={p.returncode}: {tail[0][:120]}", "states": None,
            "seconds": None, "wall": wall}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", nargs="+", default=["a", "b"])
    ap.add_argument("--S", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--K", nargs="+", type=int, default=[4, 8, 16, 32, 64, 128])
    ap.add_argument("--max-states", type=int, default=None,
                    help="override the checker cap (reference default 1_000_000)")
    ap.add_argument("--verbose", action="store_true",
                    help="TaskManager(verbose=True) (reference default; slower BFS)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", default=None, help="write raw results here")
    a = ap.parse_args(argv)

    print(f"# reference TS scan: max_states={a.max_states or 'default(1e6)'} "
          f"verbose={a.verbose} timeout={a.timeout}s python={sys.executable}")
    hdr = f"{'var':<9}{'S':>3}{'K':>5}  {'verdict':<12}{'states':>11}{'tm_sec':>9}{'wall':>7}{'rss_MB':>8}"
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for v in a.variants:
        # Once a (variant, S) config times out, larger K only gets worse.
        for S in a.S:
            skip = False
            for K in a.K:
                if skip:
                    r = {"verdict": "TIMEOUT*", "states": None, "seconds": None,
                         "wall": None}
                else:
                    r = run_one(v, S, K, a.max_states, a.verbose, a.timeout)
                    if r["verdict"] == "TIMEOUT":
                        skip = True
                r.update(variant=v, S=S, K=K)
                rows.append(r)
                st = "-" if r.get("states") is None else str(r["states"])
                sec = "-" if r.get("seconds") is None else f"{r['seconds']:.3f}"
                wall = "-" if r.get("wall") is None else f"{r['wall']:.1f}"
                rss = "-" if r.get("maxrss_mb") is None else f"{r['maxrss_mb']:.0f}"
                print(f"{v:<9}{S:>3}{K:>5}  {r['verdict'][:40]:<12}{st:>11}{sec:>9}{wall:>7}{rss:>8}",
                      flush=True)
    print("# TIMEOUT* = not run: a smaller K with the same (variant, S) already timed out")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
