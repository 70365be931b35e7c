"""Eager timing as a model runs it (host included): sides timed in alternating rounds."""
from __future__ import annotations

import os
import statistics
import time


def williams_rows(n):
    """A carryover-balanced order of n sides (Williams' Latin square): n rows for even n, 2n for odd n (the rows
    and their reversals). Every side takes every position equally often, and every side runs right after every
    other side equally often, so the side before another (how hot it left the GPU) biases no side."""
    step, lo, hi = [0], 1, n - 1
    while len(step) < n:
        step.append(lo)
        lo += 1
        if len(step) < n:
            step.append(hi)
            hi -= 1
    rows = [[(r + x) % n for x in step] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def order_mode():
    """``WS_ORDER``: ``williams`` (carryover-balanced, ``williams_rows``), ``fixed`` (one order every round; also
    ``WS_FIXED_ORDER=1``) or ``balanced`` (reversed every other round, rotated every two)."""
    if os.environ.get("WS_FIXED_ORDER") == "1":
        return "fixed"
    return os.environ.get("WS_ORDER", "balanced")


def design_rounds(n_sides, rounds):
    """The rounds to run for ``rounds`` asked: under ``williams`` rounded up to whole designs (``williams_rows``)."""
    if order_mode() != "williams" or n_sides < 2:
        return rounds
    period = len(williams_rows(n_sides))
    return -(-max(rounds, 1) // period) * period


def round_order(names, r):
    """The sides' order in round ``r`` (``order_mode``). ``balanced``: reversed in every odd round and rotated by
    one every two rounds, so each side's mean position is the same after any even number of rounds; but a
    rotation keeps every side's neighbours, so a side always runs after the same one or two others.
    ``williams``: row ``r`` of ``williams_rows``. A fixed order biased the A / B of long kernels: the GPU's clock
    sags at its power limit over a round of heavy sides (docs/attention.md, "Where a side runs in the round")."""
    names = list(names)
    mode = order_mode()
    if mode == "fixed" or not names:
        return names
    if mode == "williams":
        rows = williams_rows(len(names))
        return [names[i] for i in rows[r % len(rows)]]
    k = (r // 2) % len(names)
    names = names[k:] + names[:k]
    return names[::-1] if r % 2 else names


def alternate(torch, sides, rounds=5, iters=30, samples=None):
    """{name: fn} -> {name: median ms per call}: each round runs every side once to warm up, then
    ``iters`` calls between two synchronizations; the sides alternate within every round (``round_order``),
    so a drifting clock or a busy host hits them alike. ``samples``: a dict to receive every side's ms per
    round, in round order (for ``paired_ratio``)."""
    times = {} if samples is None else samples
    times.update({name: [] for name in sides})
    for r in range(design_rounds(len(sides), rounds)):
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


def paired_ratio(samples, side, base):
    """(median, min, max) over the rounds of ``base``'s time over ``side``'s in the same round (above 1: ``side``
    is faster). Pairing by round takes out what moves both sides alike (the clock over a run), which comparing
    two medians does not."""
    ratios = sorted(b / a for a, b in zip(samples[side], samples[base]))
    return statistics.median(ratios), ratios[0], ratios[-1]


def spread_line(row, samples, base="warpsched"):
    """One line for a table row: each other side's time over ``base``'s, paired by round (``paired_ratio``: median
    and range over the rounds), so a reader sees how far the row's ratio can be trusted."""
    parts = []
    for side in [n for n in samples if n != base]:
        mid, lo, hi = paired_ratio(samples, base, side)
        parts.append(f"{side} / {base} {mid:.3f}x ({lo:.3f}-{hi:.3f})")
    return f"  {row}, by round: " + "; ".join(parts)


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

