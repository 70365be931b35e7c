"""Checker speed for before/after comparisons on a shared machine: the CPU seconds (process
time, min of N runs) of run_checker on the checker_scaling.py programs, one row per K.

Wall-clock seconds (checker_scaling.py's table) swing by 2x when other jobs share the CPUs;
process time of the best of N runs does not, so a change's effect on the checker is visible.

    PYTHONPATH=src .venv/bin/python tools/checker_speed.py --variant b --stages 8 --repeat 3
    PYTHONPATH=src .venv/bin/python tools/checker_speed.py --per-role --repeat 3   # K = tile count
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import checker_scaling  # noqa: E402
from warpsched import trip_count  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="b", choices=["a", "b"])
    ap.add_argument("--stages", type=int, default=8)
    ap.add_argument("--ks", nargs="+", default=["any", "4", "8", "16", "32", "64", "128", "1024"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-role", action="store_true",
                    help="the per-role interleaved example instead (K: tiles, 'any' = a multiple of 4)")
    a = ap.parse_args(argv)
    if a.per_role and a.ks == ap.get_default("ks"):
        a.ks = ["any", "16"]
    what = f"per-role example, S={a.stages}" if a.per_role else f"variant {a.variant}, S={a.stages}"
    print(f"# run_checker CPU seconds, min of {a.repeat}; {what}")
    print(f"{'K':>5} {'verdict':8} {'states':>7} {'cpu s':>7}")
    for k in a.ks:
        best, res = None, None
        for _ in range(a.repeat):
            if a.per_role:
                prog = checker_scaling.build_per_role(k, a.stages)
            else:
                prog = checker_scaling.build_program(a.variant, a.stages, trip_count("K") if k == "any" else int(k))
            t0 = time.process_time()
            res = run_checker(prog)
            dt = time.process_time() - t0
            best = dt if best is None else min(best, dt)
        print(f"{k:>5} {res.verdict:8} {res.states:>7} {best:7.3f}", flush=True)


if __name__ == "__main__":
    main()
