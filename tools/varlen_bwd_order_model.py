"""A list-scheduling model of the packed attention backward's unit orders (CPU, no GPU).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/varlen_bwd_order_model.py [--sms 132]

For each batch of ``bench/attention_varlen.py``: 132 SMs take the grid's CTAs in order as they free up (one CTA
an SM, as the backward runs), a unit costs its step count plus one (its prologue and dK / dV store) and a CTA
without a step a half. Printed: the makespan over the ideal (total cost / SMs) for the head-major order (the
default), ``lpt`` (key block 0 of every head first) and ``live_units`` (``live_units.SequenceOrderTable``, here
its Python twin). The units and their steps are the kernel's own (``BackwardUnits`` run on Python ints), so the
model orders what the kernel runs. It counts neither L2 nor the tail of a unit's last steps: ``lpt`` models
well and measures badly (docs/attention.md, "Where the packed backward's time goes").
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from attention_varlen import BATCHES  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import live_units  # noqa: E402


def unit_costs(lengths, H, Hk, D, causal, order):
    """The grid's CTAs in launch order, each its cost (steps + 1, or 0.5 without a step)."""
    options = {"live": dict(live_units=True), "lpt": dict(lpt=True), "default": {}}[order]
    cls = ab.FlashAttentionBackwardVarlenLive if order == "live" else ab.FlashAttentionBackwardVarlen
    options.pop("live_units", None)
    g = cls(head_dim=D, causal=causal, **options)
    g.cu_q = g.cu_k = [0] + list(itertools.accumulate(lengths))
    table = None
    if order == "live":
        entries = live_units.reference_sequence_order(lengths, Hk, g.block_n)
        table = [len(entries), 0] + [w for b, h, j in entries for w in (b, h << live_units.KEY_BITS | j)]
        table += [0] * (live_units.backward_table_size(sum(lengths), len(lengths), Hk, g.block_n) - len(table))
    g.grid_setup(max(lengths), max(lengths), H, Hk, len(lengths), table)
    return [s + 1 if s else 0.5 for s in (g.steps_of(u) for u in range(g.num_units))]


def makespan_over_ideal(costs, sms):
    free = [0.0] * sms
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free) / (sum(costs) / sms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=132, help="SMs taking CTAs (H200: 132)")
    args = ap.parse_args()
    orders = ("default", "lpt", "live")
    print("| batch | H/Hk | D | causal | " + " | ".join(orders) + " |")
    print("|---|---|---|---|" + "---|" * len(orders))
    for name, lengths, H, Hk, D, causal in BATCHES:
        cells = [f"{makespan_over_ideal(unit_costs(lengths, H, Hk, D, causal, o), args.sms):.3f}x" for o in orders]
        print(f"| {name} | {H}/{Hk} | {D} | {causal} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
