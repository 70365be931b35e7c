"""Where a kernel's instructions and warp stalls go, from Nsight Compute's per-instruction SASS table:
executed instructions and stall samples per opcode, and the most-stalled instructions with their
neighbours. Each kernel of the export is summarized on its own.

    ncu -i report.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 tools/ncu_sass_summary.py sass.csv [--top 25] [--context 4] [--stalled 3] [--by-count] [--reasons]

Read next to docs/attention.md "Head dim 256": the doubled MUFU.EX2 count and the PRMTs showed there,
and the stall samples on ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` at the top of the softmax.
"""
from __future__ import annotations

import argparse
import collections
import csv
import re


def kernels(path):
    """[(kernel name, [row dict, ...])] from one ``--page source --csv`` export (a "Kernel Name" line
    before each kernel's table)."""
    out, header, name = [], None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                name, header = row[1], None
                out.append((name, []))
            elif row and row[0] == "Address":
                header = row
            elif header and len(row) >= len(header) - 1:
                out[-1][1].append(dict(zip(header, row)))
    return out


def opcode(source):
    """The opcode of a SASS line, without its predicate (``@!P0 BRA`` -> ``BRA``)."""
    text = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return text.split()[0] if text else "?"


def count(d, key):
    """A row's integer column (blank in the export: 0)."""
    return int(d.get(key) or 0)


def summarize(rows, top, context, stalled=3):
    executed, stalls = collections.Counter(), collections.Counter()
    for d in rows:
        executed[opcode(d["Source"])] += count(d, "Instructions Executed")
        stalls[opcode(d["Source"])] += count(d, "Warp Stall Sampling (All Samples)")
    total, samples = sum(executed.values()) or 1, sum(stalls.values()) or 1
    print(f"  executed instructions {total / 1e6:.1f} M, stall samples {samples}")
    print("  | opcode | executed (M) | share | stall samples |\n  |---|---|---|---|")
    for op, n in executed.most_common(top):
        print(f"  | {op} | {n / 1e6:.2f} | {100 * n / total:.1f}% | {100 * stalls[op] / samples:.1f}% |")
    ranked = sorted(range(len(rows)), key=lambda i: -count(rows[i], "Warp Stall Sampling (All Samples)"))
    for i in ranked[:stalled]:
        print(f"  most stalled: {100 * count(rows[i], 'Warp Stall Sampling (All Samples)') / samples:.1f}% of samples")
        for d in rows[max(0, i - context): i + context + 1]:
            mark = ">" if d is rows[i] else " "
            print(f"   {mark} {count(d, 'Instructions Executed'):>10} {d['Source'].strip()[:90]}")


def by_count(rows, top=8):
    """Stall samples grouped by how often each instruction ran: in a warp-specialized kernel the count names
    the code (a math warp group's step loop runs 4 x steps times a CTA, its prologue / epilogue 4 times, a
    producer warp's loop steps times), so the groups say which role's which part waits, and on what."""
    reasons = [k for k in (rows[0] if rows else {}) if k.startswith("stall_") and "Not Issued" not in k]
    groups = collections.defaultdict(collections.Counter)
    for d in rows:
        for r in reasons:
            groups[count(d, "Instructions Executed")][r[6:]] += count(d, r)
    total = sum(sum(c.values()) for c in groups.values()) or 1
    print(f"  stall samples by execution count ({total} samples; the top {top} counts):")
    for ran, c in sorted(groups.items(), key=lambda kv: -sum(kv[1].values()))[:top]:
        n = sum(c.values())
        print(f"    ran {ran:>9}: {100 * n / total:5.1f}%  " + ", ".join(
            f"{r} {100 * v / total:.1f}%" for r, v in c.most_common(4) if v))


def by_reason(rows, top=6):
    """Each stall reason's samples over the kernel, most first, with the opcodes that hold them: "wait" on
    ``MUFU.EX2`` (a run of exponentials issued back to back) reads differently from "long_sb" on ``BRA`` (an mbarrier
    try-wait loop) or "barrier" on ``WARPGROUP.DEPBAR`` (a retire)."""
    reasons = [k for k in (rows[0] if rows else {}) if k.startswith("stall_") and "Not Issued" not in k]
    per = {r: collections.Counter() for r in reasons}
    for d in rows:
        for r in reasons:
            per[r][opcode(d["Source"])] += count(d, r)
    total = sum(sum(c.values()) for c in per.values()) or 1
    print(f"  stall samples by reason ({total} samples), with the opcodes that hold them:")
    for r, c in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(c.values())
        if n:
            print(f"    {r[6:]:<16} {n:>7} ({100 * n / total:4.1f}%): " + ", ".join(
                f"{op} {v}" for op, v in c.most_common(top) if v))


def regions(rows, ran, least=10):
    """The stall samples of the instructions that ran exactly ``ran`` times, summed over each contiguous stretch
    of them in the listing (gaps of up to 3 other instructions bridged, none across an EXIT): a stretch is one
    piece of one role's code, e.g. a warp group's epilogue, so the list says where its once-per-CTA time goes.
    Stretches with fewer than ``least`` samples are left out."""
    runs = []
    for i, d in enumerate(rows):
        if count(d, "Instructions Executed") != ran:
            continue
        s = count(d, "Warp Stall Sampling (All Samples)")
        if runs and i - runs[-1][1] <= 4 and not rows[runs[-1][1]]["Source"].strip().startswith("EXIT"):
            runs[-1][1], runs[-1][2] = i, runs[-1][2] + s
        else:
            runs.append([i, i, s])
    total = sum(r[2] for r in runs)
    print(f"  instructions that ran {ran} times: {total} stall samples in {len(runs)} stretches")
    for first, last, n in runs:
        if n >= least:
            print(f"    [{first:>5}-{last:>5}] {n:>6}  {rows[first]['Source'].strip()[:44]} ... "
                  f"{rows[last]['Source'].strip()[:44]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="ncu --page source --csv --print-source sass exports")
    ap.add_argument("--top", type=int, default=25, help="opcodes listed")
    ap.add_argument("--context", type=int, default=4, help="instructions shown around each most-stalled one")
    ap.add_argument("--stalled", type=int, default=3, help="most-stalled instructions shown")
    ap.add_argument("--by-count", action="store_true", help="also the stall samples grouped by how often each "
                    "instruction ran, with their reasons (which warp role's which code waits)")
    ap.add_argument("--reasons", action="store_true", help="also the stall samples per reason, with the opcodes "
                    "that hold them (two kernels' differences by kind of wait)")
    ap.add_argument("--regions", type=int, metavar="RAN", help="also the stall samples of the instructions that "
                    "ran exactly RAN times, by contiguous stretch of code (e.g. 4 x CTAs: a warp group's "
                    "prologue and epilogue)")
    args = ap.parse_args()
    for path in args.csv:
        for name, rows in kernels(path):
            print(f"== {path}: {name[:100]}")
            summarize(rows, args.top, args.context, args.stalled)
            if args.by_count:
                by_count(rows)
            if args.reasons:
                by_reason(rows)
            if args.regions:
                regions(rows, args.regions)


if __name__ == "__main__":
    main()
