"""Differential run of the checker's skip(count=K) reductions: random small bulk-skip programs
(ping-pong and hand-off shapes, exact and symbolic K, a third with one bug: wrong count,
unguarded skip, no turn, skip before the turn, wait or release missing, ...), each checked with
the reductions on and with the unreduced reference search (tests/_bulk_programs.py).

    PYTHONPATH=src .venv/bin/python tools/bulk_diff.py [--examples 500] [--seed 0]

Exit status 1 on any disagreement or internal error (each is printed with its configuration).
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import _bulk_programs as bp  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    verdicts: collections.Counter = collections.Counter()
    bad, errors = [], []
    t0 = time.time()
    for i in range(args.examples):
        cfg = bp.draw(rng)
        try:
            on, refs = bp.compare(cfg)
        except Exception:  # noqa: BLE001 - counting internal errors is the point
            errors.append((cfg, traceback.format_exc().strip().splitlines()[-1]))
            continue
        verdicts[(cfg["k_kind"] == "sym", bp.signature(on))] += 1
        why = bp.disagreement(cfg, on, refs)
        if why:
            bad.append((cfg, why))
    print(f"bulk_diff: {args.examples} programs in {time.time() - t0:.1f} s (seed {args.seed})")
    for (sym, sig), n in sorted(verdicts.items(), key=lambda x: -x[1]):
        print(f"  {n:>5} x {'symbolic' if sym else 'exact   '} K: {sig[0]} {', '.join(sig[1])}")
    print(f"  disagreements: {len(bad)}  internal errors: {len(errors)}")
    for cfg, why in bad + errors:
        print(f"    {why}\n      {cfg}")
    return 1 if bad or errors else 0


if __name__ == "__main__":
    sys.exit(main())
