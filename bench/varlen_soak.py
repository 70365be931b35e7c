"""GPU soak of the packed forward's unit queue (``varlen.queued_varlen_options``): many launches on random
ragged batches, each O (NaN-poisoned first) compared bit for bit with the static order's
(``varlen.static_varlen_options``; ``attention_varlen.py`` checks both against fp64), and repeated launches of
the queued form (the default) on one batch compared with each other. The queue changes which CTA runs a unit,
never a unit's arithmetic, so any
difference is a fault (a unit run twice or not at all, a stage read before it was written).

    python3 bench/varlen_soak.py [--batches 60] [--repeats 20] [--seed 0]

A hang shows as the step's timeout (``tools/device_steps.sh``).
"""
from __future__ import annotations

import argparse
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from attention_varlen import _offsets  # noqa: E402
from warpsched.kernels.attention import varlen  # noqa: E402

# (head dim, causal, query heads, K/V heads): few forms, so that few kernels compile
FORMS = [(128, True, 16, 16), (64, True, 16, 4), (128, False, 8, 8)]


def random_lengths(rng):
    """1-24 sequences, with empty and one-token ones, up to 3000 tokens each."""
    pick = [0, 1, rng.randint(2, 200), rng.randint(200, 3000)]
    return [rng.choice(pick) if rng.random() < 0.5 else rng.randint(0, 3000) for _ in range(rng.randint(1, 24))]


def packed(lengths, H, Hk, D):
    """(the longest length, at least 1; the offsets; random q, k, v over the sequences packed, at least one row)."""
    total = max(sum(lengths), 1)
    q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return max(max(lengths), 1), _offsets(lengths), q, k, v


def one_batch(rng, D, causal, H, Hk):
    """A random batch: (its lengths, whether the queued form's O equals the static order's bit for bit)."""
    lengths = random_lengths(rng)
    top, cu, q, k, v = packed(lengths, H, Hk, D)
    outs = []
    for options in (varlen.queued_varlen_options(D, causal, top, H // Hk),
                    varlen.static_varlen_options(D, causal, top, H // Hk)):
        o = torch.full_like(q, float("nan"))
        varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal, options=options, out=o)
        outs.append(o)
    torch.cuda.synchronize()
    return lengths, torch.equal(outs[0][:sum(lengths)], outs[1][:sum(lengths)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=60, help="random batches per form")
    ap.add_argument("--repeats", type=int, default=20, help="launches of one batch compared with each other")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    print("| form | batches | O = the static order's | repeats bit-identical |")
    print("|---|---|---|---|")
    bad = 0
    for D, causal, H, Hk in FORMS:
        same, first = 0, None
        for _ in range(a.batches):
            lengths, equal = one_batch(rng, D, causal, H, Hk)
            same += equal
            if not equal and first is None:
                first = lengths
        # one batch, many launches of the queued form: every O bit-identical to the first
        top, cu, q, k, v = packed([rng.randint(0, 3000) for _ in range(16)], H, Hk, D)
        queued = varlen.queued_varlen_options(D, causal, top, H // Hk)
        ref = varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal, options=queued)
        repeats_ok = all(torch.equal(varlen.attention_varlen(q, k, v, cu, cu, top, top, causal=causal,
                                                             options=queued), ref) for _ in range(a.repeats))
        bad += (a.batches - same) + (not repeats_ok)
        print(f"| hd{D} {'causal' if causal else 'full'} {H}/{Hk} | {a.batches} | {same}/{a.batches}"
              f"{'' if first is None else f' (first mismatch: lengths {first})'} | "
              f"{'yes' if repeats_ok else 'NO'} ({a.repeats}) |", flush=True)
    print(f"soak: {'PASS' if not bad else f'{bad} FAILURES'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
