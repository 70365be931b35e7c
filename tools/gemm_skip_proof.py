"""The exhaustive proof of the skip ping-pong GEMM (pingpong_shared, skip=True: the owner alone
waits for and releases a tile's stages, the other warp group ``ring.skip(count=k_tiles)``s them)
at the ring depth the kernel runs with. The CI test (tests/test_gemm_persistent.py) proves the
same schedule with a 3-stage ring (about 58k states); the 6-stage proof (1.65M states, about
4 minutes on one core) is this command:

    PYTHONPATH=src .venv/bin/python tools/gemm_skip_proof.py --stages 6

Exit status 0 only for a SAFE verdict for every k_tiles >= 1 and units_per_cta >= 1.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass is imported)
import gemm_persistent as gp  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, default=6, help="ab_stages (the ring depth); the kernel runs 6")
    args = ap.parse_args(argv)
    t0 = time.time()
    mgr = gp.build(gp.PersistentGemm(schedule="pingpong_shared", skip=True, ab_stages=args.stages), verbose=False,
                   progress=True, cache_verdict=False)
    res = mgr.result.checker
    report = res.report()
    print(f"gemm_skip_proof: pingpong_shared skip=True ab_stages={args.stages}: {res.verdict}, {res.states} states, "
          f"{time.time() - t0:.1f} s")
    for line in report.splitlines():
        if "Loop lengths proven" in line or line.startswith(("BFS", "Result")):
            print(" ", line.strip())
    ok = res.verdict == "SAFE" and "every k_tiles >= 1" in report and "every units_per_cta >= 1" in report
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
