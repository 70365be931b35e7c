"""The shared-ring ping-pong GEMM (schedule="pingpong_shared") on the H200: correctness on ragged
shapes and odd tile counts per CTA, then timing against torch.matmul (cuBLAS), the cooperative
128x256 kernel and the two-ring ping-pong, alternating, median of the rounds.

  python3 tools/gemm_pp_shared.py 2>&1 | tee bench/results/gemm_pp_shared.log
  ... --sides coop128x256,ppskip_s2 --rounds 3 --limit 100   (torch is always timed; the first side is the
  reference of the last column)

Every check is fresh random bf16 inputs, a NaN-poisoned C, and the relative Frobenius error against
an fp64 reference (< 1e-2, any non-finite value fails), once launched directly and once through a
CUDA graph (the path that is timed). Timing: ``--rounds`` rounds, the sides in a rotated order each
round, each a triton do_bench median over CUDA-graph replays of back-to-back launches; the table
gives each side's median over the rounds. The work runs in a child process with a time limit, so a
hanging kernel ends the run with what was printed so far instead of hanging it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/: timing helpers, sweep configurations
from gemm_sweep_configs import CONFIGS  # noqa: E402  (the sweep's configurations: one definition of each)


def _sweep(name):
    return {k: v for k, v in CONFIGS[name].items() if k != "split_k"}  # the launcher passes split_k=1


SIDES = {
    "coop128x256": _sweep("coop128x256"),
    "pp128x128": _sweep("pp128x128"),
    "pps128x128": dict(schedule="pingpong_shared", tile_mn=(128, 128)),
    "pps128x128g16": dict(schedule="pingpong_shared", tile_mn=(128, 128), group=16),
    "pps64x256": dict(schedule="pingpong_shared", tile_mn=(64, 256)),
    "pps128x128s4": dict(schedule="pingpong_shared", tile_mn=(128, 128), ab_stages=4),  # lookahead sensitivity
    # skip=True: the owner alone releases, the other warp group skips (ring.skip(count=k_tiles))
    "ppskip_s2": dict(schedule="pingpong_shared", tile_mn=(128, 128), skip=True, ab_stages=2),
    "ppskip_s6": dict(schedule="pingpong_shared", tile_mn=(128, 128), skip=True, ab_stages=6),  # proof: 1.65M states
    # wider tiles per warp group (176 / 192 accumulator registers a thread; 128x224 spills at 232):
    # cuBLAS's 176-column tile at 1024 x 14336 x 4096, 4 or 5 stages; 192 divides N = 128256
    "ppskip176_s4": _sweep("pps128x176"),
    "ppskip176_s5": _sweep("pps128x176s5"),
    "ppskip192_s4": _sweep("pps128x192"),
    "coop128x224": _sweep("coop128x224"),
    "coop128x176": _sweep("coop128x176"),
}
DEFAULT_SIDES = ["coop128x256", "pp128x128", "pps128x128", "pps128x128g16", "pps64x256", "pps128x128s4"]
# the shared-ring variants: every ragged shape
CHECKED = ["pps128x128", "pps64x256", "ppskip_s2", "ppskip_s6", "ppskip176_s4", "ppskip176_s5", "ppskip192_s4"]
# M = 1; N not a tile multiple; K % 64 != 0; K < one tile; one tile (Mma1 never owns one); tile counts
# that give some CTAs an odd number of tiles (the last without a partner) and others an even one
RAGGED = [(1, 8, 8), (1, 4096, 4096), (129, 264, 72), (200, 136, 40), (128, 128, 64), (127, 4104, 4096),
          (3000, 5000, 1000), (1000, 2056, 4104), (3968, 4224, 200), (128 * 133, 128, 136), (2048, 128 * 67, 520)]
TIMED = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (16384, 4096, 4096), (1024, 4096, 14336)]
TOL = 1e-2


def child(args):
    import torch
    import triton.testing
    from _graphs import graph_ms, launch_poisoned, print_ratio_table, rel_error, time_rounds

    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import gemm_persistent as gp
    from warpsched.verify.verdicts import DISK, VERDICTS

    dev = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs",
          flush=True)

    def inputs(M, N, K):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        return a, b

    def launcher(side, a, b, c):
        if side == "torch":
            bt = b.t()
            return lambda: torch.mm(a, bt, out=c)
        return lambda: gp.gemm(a, b, c, **SIDES[side], split_k=1)  # reads the current stream (graph capture)

    def check(side, M, N, K, graph=False):
        a, b = inputs(M, N, K)
        ref = torch.mm(a.double(), b.double().t())
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        launch_poisoned(torch, launcher(side, a, b, c), c, graph)
        err = rel_error(torch, c, ref)
        ok = err < TOL  # False for NaN
        print(f"check {side:14s} {M}x{N}x{K}{' graph' if graph else ''}: {'ok' if ok else 'FAIL'} err {err:.2e}",
              flush=True)
        return ok

    sides_run = args.sides.split(",")
    unknown = [s for s in sides_run if s not in SIDES]
    if unknown:
        print(f"unknown side(s) {unknown}: choose from {sorted(SIDES)}", flush=True)
        return 1
    # compile (the first call traces, checks and compiles; report the checker's verdict)
    for side in sides_run:
        t0 = time.time()
        a, b = inputs(256, 264, 1024)
        c = torch.empty(256, 264, device=dev, dtype=torch.bfloat16)
        launcher(side, a, b, c)()
        torch.cuda.synchronize()
        verdict = gp.verdict_for(a, c, **SIDES[side])
        print(f"compile {side}: {time.time() - t0:.1f} s, checker {verdict} (program {VERDICTS.looked_up[-1]}, "
              f"verdicts from disk so far: {DISK.hits}), "
              f"{gp.PersistentGemm(**SIDES[side]).describe()}", flush=True)
    failures = 0
    checked = [s for s in CHECKED if s in sides_run]
    for shape in RAGGED:
        for side in checked:
            failures += not check(side, *shape)
    for shape in RAGGED[4:7]:
        for side in checked:
            failures += not check(side, *shape, graph=True)
    timed = [tuple(int(x) for x in t.split("x")) for t in args.shapes.split(",")] if args.shapes else TIMED
    for shape in timed:
        for side in sides_run:
            failures += not check(side, *shape, graph=side != "torch")
    print(f"correctness: {failures} failure(s)", flush=True)

    sides = ["torch"] + sides_run
    results = {}
    for M, N, K in timed:
        a, b = inputs(M, N, K)
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        runs = {s: launcher(s, a, b, c) for s in sides}
        est = 2.0 * M * N * K / 600e12 * 1e3
        results[(M, N, K)] = time_rounds((M, N, K), runs, args.rounds, lambda run: graph_ms(
            torch, triton.testing.do_bench, run, est, args.rep_ms))
    print_ratio_table(results, sides_run)
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep-ms", type=int, default=40)
    p.add_argument("--limit", type=int, default=220, help="seconds the child may run")
    p.add_argument("--sides", default=",".join(DEFAULT_SIDES), help=f"comma-separated, of {sorted(SIDES)}")
    p.add_argument("--shapes", default="", help="timed shapes MxNxK,... (default: the five of TIMED)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        sys.exit(1 if child(args) else 0)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rounds", str(args.rounds), "--rep-ms",
           str(args.rep_ms), "--sides", args.sides, "--shapes", args.shapes]
    from _graphs import run_child
    run_child(cmd, args.limit)


if __name__ == "__main__":
    main()
