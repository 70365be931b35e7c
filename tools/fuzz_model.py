"""Longer fuzz run of the model (the suite's tests/test_fuzz_model.py runs a bounded one).

Builds random, often malformed programs (resources, pipeline configs, schedules, graphs,
groups, tasks, allocators) and constructs a TaskManager for each. Every outcome must be
acceptance or warpsched's own ValidationError / ScheduleError; anything else is an
internal error, counted and shown with its last frame.

    .venv/bin/python tools/fuzz_model.py [--examples 5000] [--mode random|mutated] [--exhaustive] [--seed 0]

``--mode random`` draws whole programs from scratch (mostly malformed); ``--mode mutated``
starts from a valid GEMM-shaped program and applies 1-3 mutations (almost-right programs).

``--exhaustive`` also runs the exhaustive checker on programs the static checks accept
(bounded to 2000 states each), and on every accepted program with a ``skip(count=...)`` whose
counts are exact, the unreduced reference search too (``loops.BULK_REDUCTIONS = False``): the
verdicts must agree (an on/off disagreement is counted like an internal error). A symbolic
count's reference search is unbounded: those are counted, not compared (tools/bulk_diff.py
compares them against exact instances).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import _bulk_programs as bulk  # noqa: E402
import test_fuzz_model as fuzz  # noqa: E402
from warpsched.model import schedule as _schedule  # noqa: E402
from warpsched.model.ir import StepKind  # noqa: E402
from warpsched.verify.checker.model import compile_program  # noqa: E402

_recorded_kinds: set = set()  # the step kinds the current case's schedules recorded (skip coverage)
_record = _schedule._Capture.record


def _counting_record(self, kind, *args, **kwargs):
    _recorded_kinds.add(kind)
    return _record(self, kind, *args, **kwargs)


_schedule._Capture.record = _counting_record


def bulk_skip_kind(program):
    """None (no skip(count=...)), 'exact' or 'symbolic' (a bulk skip reads a symbolic count)."""
    comp = compile_program(program)
    steps = [i.action for e in comp.executors for i in e.program if i.kind == "step" and i.action.step.kind
             is StepKind.ConsumerSkip and "count" in i.action.step.const_args]
    if not steps:
        return None
    sym = any(a.bulk is not None and comp.groups[a.bulk[0]].exact is None for a in steps)
    return "symbolic" if sym else "exact"


def compare_on_off(program):
    """(kind, disagreement or None) for a program the static checks accept (its checker verdict
    may be anything): the verdict with the bulk-skip reductions on and off."""
    kind = bulk_skip_kind(program)
    if kind != "exact":
        return kind, None
    on = bulk.run(program)
    off = bulk.run(program, reduced=False)
    if "INCOMPLETE" in (on.verdict, off.verdict):
        return "incomplete", None
    return kind, bulk.disagreement({"k_kind": "exact"}, on, [off])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=5000)
    ap.add_argument("--exhaustive", action="store_true", help="also run the exhaustive checker")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", choices=["random", "mutated"], default="random")
    args = ap.parse_args(argv)

    outcomes: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    samples = {}
    with_skip: collections.Counter = collections.Counter()  # outcomes of cases whose schedules call skip()
    compared: collections.Counter = collections.Counter()  # statically valid bulk-skip programs, by count kind
    disagreements = []

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        _recorded_kinds.clear()
        try:
            build = fuzz.build_and_check if args.mode == "random" else fuzz.build_mutated
            programs = []
            outcome = build(data, exhaustive=args.exhaustive, programs=programs)
            outcomes[outcome] += 1
            if args.exhaustive and programs:
                kind, why = compare_on_off(programs[0])
                if kind is not None:
                    compared[kind] += 1
                if why:
                    disagreements.append(why)
            if StepKind.ConsumerSkip in _recorded_kinds:
                with_skip[outcome] += 1
        except Exception as e:  # noqa: BLE001 - counting internal errors is the point
            frame = traceback.extract_tb(e.__traceback__)[-1]
            key = (type(e).__name__, os.path.relpath(frame.filename, ROOT), frame.lineno)
            errors[key] += 1
            samples.setdefault(key, traceback.format_exc())
            outcomes["internal error"] += 1

    t0 = time.time()
    run()
    elapsed = time.time() - t0
    cases = sum(outcomes.values())
    print(f"fuzz_model: {cases} {args.mode} cases in {elapsed:.1f} s (seed {args.seed}, exhaustive checker "
          f"{'on' if args.exhaustive else 'off'})")
    print(f"  accepted: {outcomes['accepted']}  rejected (ValidationError/ScheduleError): {outcomes['rejected']}")
    print(f"  with a skip() step: {sum(with_skip.values())} (accepted {with_skip['accepted']}, "
          f"rejected {with_skip['rejected']})")
    if args.exhaustive:
        print(f"  statically valid with a skip(count=...): exact counts {compared['exact']} (checked with the "
              f"reductions on and off), symbolic {compared['symbolic']}, incomplete {compared['incomplete']}")
        print(f"  on/off disagreements: {len(disagreements)}")
        for why in disagreements[:10]:
            print(f"    {why}")
    print(f"  internal errors: {sum(errors.values())}")
    for key, n in errors.most_common():
        print(f"    {n:>5} x {key[0]} at {key[1]}:{key[2]}")
        print("      " + samples[key].strip().splitlines()[-1])
    return 1 if errors or disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
