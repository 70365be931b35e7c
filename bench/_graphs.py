"""CUDA-graph timing shared by the GEMM benchmarks: ``reps`` back-to-back launches captured in one
graph, so host launch cost stays out of every side's numbers alike."""
from __future__ import annotations

import statistics


def reps_for(est_ms):
    """Launches per graph: about a millisecond of work per replay, between 1 and 200."""
    return max(1, min(200, int(round(1.0 / max(est_ms, 1e-4)))))


def capture(torch, launch, reps):
    """A graph of ``reps`` calls of ``launch``, after one warm-up call on a side stream (the capture
    must not see a first call's compile or allocation). ``launch`` must read the current stream
    at every call, or the graph captures nothing."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            launch()
    torch.cuda.synchronize()
    return g


def graph_ms(torch, do_bench, launch, est_ms, rep_ms):
    """Milliseconds per launch: a triton ``do_bench`` median over replays of a captured graph."""
    reps = reps_for(est_ms)
    g = capture(torch, launch, reps)
    ms = do_bench(g.replay, warmup=rep_ms // 4, rep=rep_ms, return_mode="median") / reps
    del g
    return ms


def time_rounds(shape, runs, rounds, time_one):
    """Time every side of ``runs`` ({side: launch}, "torch" among them) ``rounds`` times, in a
    balanced order (``_eager.round_order``) so a drifting clock hits every side alike; print one line
    with each side's median (us, TFLOP/s, torch / side) and its rounds; return {side: median ms}."""
    from _eager import round_order

    sides = list(runs)
    times = {s: [] for s in sides}
    for r in range(rounds):
        for s in round_order(sides, r):
            times[s].append(time_one(runs[s]))
    med = {s: statistics.median(v) for s, v in times.items()}
    flop = 2.0 * shape[0] * shape[1] * shape[2]
    print(f"{'x'.join(map(str, shape))}: " + ", ".join(f"{s} {med[s] * 1e3:.1f} us ({flop / med[s] / 1e9:.0f} TF, "
                                                      f"x{med['torch'] / med[s]:.3f})" for s in sides)
          + " | rounds " + "; ".join(f"{s} " + "/".join(f"{t * 1e3:.0f}" for t in times[s]) for s in sides),
          flush=True)
    return med


def print_ratio_table(results, sides, vs_ref=False):
    """The markdown table of torch / side per shape ({shape: {side: ms}}), the last side against
    the first in the last column, and the geomeans against torch (and, with ``vs_ref``, against
    the first side)."""
    ref, last = sides[0], sides[-1]
    print("\n| M x N x K | torch TFLOP/s | " + " | ".join(f"{s}/torch" for s in sides) + f" | {last}/{ref} |")
    print("|---|---|" + "---|" * (len(sides) + 1))
    geo = {s: 1.0 for s in sides}
    for shape, med in results.items():
        flop = 2.0 * shape[0] * shape[1] * shape[2]
        for s in sides:
            geo[s] *= med["torch"] / med[s]
        print(f"| {'x'.join(map(str, shape))} | {flop / med['torch'] / 1e9:.0f} | "
              + " | ".join(f"{med['torch'] / med[s]:.3f}" for s in sides) + f" | {med[ref] / med[last]:.3f} |")
    n = len(results)
    print("geomean vs torch: " + ", ".join(f"{s} {geo[s] ** (1 / n):.3f}" for s in sides), flush=True)
    if vs_ref:
        print(f"geomean vs {ref}: " + ", ".join(f"{s} {(geo[s] / geo[ref]) ** (1 / n):.3f}" for s in sides),
              flush=True)
    return {s: geo[s] ** (1 / n) for s in sides}


def launch_poisoned(torch, launch, c, graph):
    """Fill ``c`` with NaN and launch once, either directly or (``graph``) as the replay of a
    one-launch CUDA graph captured after a warm-up call: a kernel that skips part of C leaves NaN
    there, whichever path the timing uses."""
    if graph:
        launch()  # compile / warm up outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            launch()
        c.fill_(float("nan"))
        g.replay()
    else:
        c.fill_(float("nan"))
        launch()
    torch.cuda.synchronize()


def rel_error(torch, c, ref):
    """The relative Frobenius error of ``c`` against the fp64 ``ref``; NaN if ``c`` holds a
    non-finite value (a poisoned element never written, or an overflow)."""
    if not bool(torch.isfinite(c).all()):
        return float("nan")
    return float((c.double() - ref).norm() / ref.norm())


def run_child(cmd, limit):
    """Run the benchmark's GPU work (``cmd``) in a child process stopped after ``limit`` seconds,
    so a hanging kernel ends the run with what was printed so far; exit with its status (124 if
    it was stopped)."""
    import subprocess
    import sys

    try:
        rc = subprocess.run(cmd, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        print(f"child ran past {limit} s (a hang?): stopped", flush=True)
        rc = 124
    print(f"child exit {rc}", flush=True)
    sys.exit(rc)
