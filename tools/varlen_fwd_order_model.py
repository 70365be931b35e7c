"""A CTA-load model of the packed attention forward's unit orders (CPU, no GPU).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/varlen_fwd_order_model.py [--ctas 132] [--ahead 2]
        [--lpt-heads 0,1,4]

For each batch of ``bench/attention_varlen.py`` and two batches of equal sequences: the most loaded CTA's K/V
tiles over the mean (1.00: every CTA the same work), a unit costing its K/V tile count plus one (its Q load and O
store). Static orders deal work tile t to CTA t % ctas, as the persistent kernel does: ``table`` (each head's
table, causal from its end), ``pairs`` (``causal_pairs``: zigzag pairs, ``units._paired_live_coords``; causal
only). ``queued``: each CTA claims the next unit of the table order as it starts one, ``--ahead`` units beyond
the one it runs (``dynamic_units``: its queue's stages; 0 is list scheduling, a claim when free); ``lpt N``: the
queue handing out the longest-first table in groups of N K/V heads (``lpt_units`` with ``lpt_heads=N``; 0: all
heads). The units, their order and their tile counts are the kernel's own (``unit_coords`` / ``kv_tiles_of`` on
Python ints). It counts no L2: an order that runs many heads at once (``lpt_units``, static) models well and
measured badly (docs/attention.md, "Variable-length batches").
"""
from __future__ import annotations

import argparse
import collections
import heapq
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from attention_varlen import BATCHES  # noqa: E402
from warpsched.kernels.attention import live_units, varlen  # noqa: E402

EQUAL = [("16 x 2048 (equal)", [2048] * 16, 16, 16, 128, True), ("8 x 4096 (equal)", [4096] * 8, 16, 4, 64, True)]


def unit_costs(lengths, heads, kv_heads, hd, ctas, causal=True, **options):
    """The kernel's units in work-tile order, each its K/V tiles plus one (the static options, ``options`` over
    them; with ``lpt_units`` the longest-first table, each level in the order ``reference_levels`` gives)."""
    options = dict(varlen.static_varlen_options(hd, causal, max(lengths), heads // kv_heads), max_ctas=ctas,
                   **options)
    g = varlen.forward_kernel(hd, causal, **options)
    g.cu_q = g.cu_k = [0] + list(itertools.accumulate(lengths))
    if options.get("lpt_units"):
        g.unit_table = live_units.reference_longest_first_table(lengths, g.block_m, causal,
                                                                live_units.levels_for(max(lengths), g.block_m))
    else:
        g.unit_table = live_units.reference_table(lengths, g.block_m)
    g.grid_setup(max(lengths), max(lengths), heads, kv_heads, len(lengths), live=g.unit_table[0])
    return [g.kv_tiles_of(t) + 1 for t in range(g.num_units)], g.ctas


def static_load(costs, ctas):
    load = [0] * ctas
    for t, c in enumerate(costs):
        load[t % ctas] += c
    return max(load) / (sum(load) / ctas)


def dynamic_load(costs, ctas, ahead=1):
    """Each CTA starts with unit ``cta`` and, as it starts a unit, claims units of the shared order until it holds
    ``ahead`` beyond that one (0: it claims one when it is free)."""
    n = min(ctas, len(costs))
    claimed = [collections.deque([costs[c]]) for c in range(n)]
    taken, end = n, [0] * n
    starts = [(0, c) for c in range(n)]
    while starts:
        at, c = heapq.heappop(starts)
        if not claimed[c] and ahead == 0 and taken < len(costs):  # free: list scheduling claims now
            claimed[c].append(costs[taken])
            taken += 1
        if not claimed[c]:
            end[c] = at
            continue
        cost = claimed[c].popleft()
        while len(claimed[c]) < ahead and taken < len(costs):
            claimed[c].append(costs[taken])
            taken += 1
        heapq.heappush(starts, (at + cost, c))
    return max(end) / (sum(costs) / ctas)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctas", type=int, default=132, help="persistent CTAs (the H200's SMs)")
    ap.add_argument("--ahead", type=int, default=2, help="units a CTA claims beyond the one it runs (queued)")
    ap.add_argument("--lpt-heads", default="0,1,4", help="queued longest-first columns: K/V heads per group")
    args = ap.parse_args()
    ctas, lpt = args.ctas, [int(x) for x in args.lpt_heads.split(",") if x]
    queued = dict(dynamic_units=args.ahead or 1, load_fetches_units=True, causal_pairs=False)
    print(f"| batch | mask | H/Hk | D | table | pairs | queued, {args.ahead} ahead | "
          + " | ".join(f"lpt {n}" for n in lpt) + " |\n|" + "---|" * (7 + len(lpt)))
    for name, lengths, heads, kv_heads, hd, causal in BATCHES + EQUAL:
        table, n = unit_costs(lengths, heads, kv_heads, hd, ctas, causal, causal_pairs=False)
        pairs = unit_costs(lengths, heads, kv_heads, hd, ctas, causal, causal_pairs=True)[0] if causal else None
        cells = [f"{static_load(table, n):.3f}", f"{static_load(pairs, n):.3f}" if pairs else "-",
                 f"{dynamic_load(table, n, args.ahead):.3f}"]
        for heads_per in lpt:
            costs, _ = unit_costs(lengths, heads, kv_heads, hd, ctas, causal, lpt_units=True, lpt_heads=heads_per,
                                  **queued)
            cells.append(f"{dynamic_load(costs, n, args.ahead):.3f}")
        print(f"| {name} | {'causal' if causal else 'full'} | {heads}/{kv_heads} | {hd} | " + " | ".join(cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
