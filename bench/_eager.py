"""Eager timing as a model runs it (host included): sides timed in alternating rounds."""
from __future__ import annotations

import statistics
import time


def alternate(torch, sides, rounds=5, iters=30):
    """{name: fn} -> {name: median ms per call}: each round runs every side once to warm up, then
    ``iters`` calls between two synchronizations; the sides alternate within every round, so a drifting
    clock or a busy host hits them alike."""
    times = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / iters * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}
