"""Eager timing as a model runs it (host included): sides timed in alternating rounds."""
from __future__ import annotations

import os
import statistics
import time


def round_order(names, r):
    """The sides' order in round ``r``: reversed in every odd round and rotated by one every two rounds, so
    each side's mean position is the same after any even number of rounds. A fixed order biased the A / B of
    long kernels: the GPU's clock sags at its power limit over a round of heavy sides (docs/attention.md,
    "Where a side runs in the round")."""
    names = list(names)
    if os.environ.get("WS_FIXED_ORDER") == "1":  # the order before (to measure what it did)
        return names
    k = (r // 2) % len(names) if names else 0
    names = names[k:] + names[:k]
    return names[::-1] if r % 2 else names


def alternate(torch, sides, rounds=5, iters=30):
    """{name: fn} -> {name: median ms per call}: each round runs every side once to warm up, then
    ``iters`` calls between two synchronizations; the sides alternate within every round (``round_order``),
    so a drifting clock or a busy host hits them alike."""
    times = {name: [] for name in sides}
    for r in range(rounds):
        for name in round_order(sides, r):
            fn = sides[name]
            fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / iters * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def per_call_us(torch, fn, n=300):
    """(host issue µs, wall µs) per call of ``fn`` over ``n`` calls after a warm-up: the issue time stops
    when the host has queued the last call, the wall time after the device finished it."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t_host = time.perf_counter() - t0
    torch.cuda.synchronize()
    t_all = time.perf_counter() - t0
    return t_host / n * 1e6, t_all / n * 1e6


def check_then_time(doc, correctness, speed):
    """A check script's command line: ``correctness()`` (returns the failure count), then ``speed(rounds)``
    unless ``--no-time``; exits 1 on a failure."""
    import argparse
    import sys

    import torch

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-time", action="store_true", help="correctness only")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
    torch.manual_seed(0)
    bad = correctness()
    if not a.no_time:
        speed(a.rounds)
    sys.exit(1 if bad else 0)


def fa4(name="flash_attn_func"):
    """FlashAttention-4's ``flash_attn.cute.<name>`` for a side-by-side run, or None (saying why) where it
    is not installed (the private GPU carry brings it with ``make_carry.sh --with-peers``)."""
    try:
        import flash_attn.cute as fa
        return getattr(fa, name)
    except Exception as e:  # noqa: BLE001 - any import failure leaves FA4 out of the tables
        print(f"FA4 unavailable ({type(e).__name__}: {e}): its columns stay empty", flush=True)
        return None

