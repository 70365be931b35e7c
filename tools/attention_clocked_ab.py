"""Attention kernel variants A / B at locked clocks: each variant's kernel alone (and FlashAttention-4's) timed by
Nsight Compute with the SM clock locked to base and the caches flushed before every launch, so that two kernels
are compared by the work they do per clock, free of the power-limit and neighbour effects that spread two equal
kernels by about 2% in the alternating benchmark (docs/attention.md, "Where a side runs in the round").

    python3 tools/attention_clocked_ab.py --variants default,again,es [--shapes 16x16x1024:64:causal,...] [--repeat 6]
    python3 tools/attention_clocked_ab.py --forward --variants "default:default=1,again:default=1,b176:tuned=1;block_n=176"

Backward (the default): the variants are ``bench/attention_bwd_check.py``'s (``VARIANTS``; ``default`` is what a
call runs). ``--forward``: the forward kernel, variants in ``bench/attention_sweep.py``'s ``--variants`` form
(``name:key=value;...``, resolved by ``attention_correctness.resolve_variant``: ``default=1`` is what
``ops.attention`` runs on the shape, ``tuned=1`` the head dim's tuned options), FA4's forward beside them. Per shape
the script runs itself under ``ncu --clock-control base --cache-control all --metrics gpu__time_duration.sum``:
the child launches every side ``--repeat`` times in rotated order between cudaProfilerStart / Stop, and the
parent reads the durations back in launch order. Printed per shape: each side's median µs, and each variant's
median time over the first variant's, paired by repetition (above 1: slower). Clocks locked to base are not the
clocks a call runs at: the ratio is per clock, the alternating benchmark says what a user sees.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from attention_sweep import parse_shape as parse_heads  # noqa: E402  (BxHxS or BxH/HkxS, as the sweep reads it)

SHAPES = "8x32x2048:128:causal,4x16x4096:128:full,16x16x1024:64:causal,4x16x4096:64:full,16x16x1024:128:full"
# ours (every variant) and FA4's main kernel, not the backward's pre- / post-passes
KERNELS = {"backward": r"regex:FlashAttentionBackward(_object|Sm90)",
           "forward": r"regex:forwardFlashAttention_object|FlashAttentionForwardSm90"}


def parse_shape(text):
    """``BxHxS:D:causal|full`` (GQA: ``BxH/HkxS:...``, H query heads over Hk K / V heads) -> (B, H, Hk, S, D,
    causal)."""
    dims, d, mask = text.split(":")
    if mask not in ("causal", "full"):
        raise SystemExit(f"shape {text!r}: the mask is 'causal' or 'full'")
    return parse_heads(dims) + (int(d), mask == "causal")


def rotated(names, rep):
    """The side order of repetition ``rep``: the list rotated by ``rep`` places."""
    k = rep % len(names)
    return names[k:] + names[:k]


def forward_sides(args, q, k, v, causal):
    """``--forward``: {name: launch} of the forward variants (each writing its own O / LSE) that apply here."""
    from attention_correctness import parse_variants, resolve_variant
    from warpsched.kernels.attention import host as att

    D, S = q.shape[3], q.shape[2]
    sides = {}
    for name, options in parse_variants(args.variants).items():
        resolved = resolve_variant(att, options, D, causal, S, S)
        if resolved is not None:
            sides[name] = att.prepare(q, k, v, causal=causal, **resolved)[0]
    if not args.no_fa4:
        try:
            import torch
            from flash_attn.cute import flash_attn_func

            qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

            def fa4():
                with torch.no_grad():
                    flash_attn_func(qt, kt, vt, causal=causal)
            sides["FA4"] = fa4
        except Exception as e:  # noqa: BLE001
            print(f"FA4 left out: {type(e).__name__}: {e}", file=sys.stderr)
    return sides


def child(args):
    """Under ncu: build every side, warm it, then launch them ``repeat`` times in rotated order; write the launch
    order (one side name per profiled kernel) to ``args.order``."""
    sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "src")]
    import torch

    from warpsched import ops

    B, H, Hk, S, D, causal = parse_shape(args.shape)
    torch.manual_seed(0)
    q, dout = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(B, Hk, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    if args.forward:
        return launch_all(forward_sides(args, q, k, v, causal), args)
    from attention_bwd_check import variants_for
    from warpsched.kernels.attention import backward_host as bwd

    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    wanted = args.variants.split(",")
    sides, shared = {}, {}  # shared: per Q block size, the first such side's dQaccum / dK / dV, reused
    for name, options in variants_for(D, causal):
        if name not in wanted:
            continue
        block = options.get("block_m", bwd.default_options(D).get("block_m"))
        launch, dq_acc, dk, dv = bwd.prepare_backward(q, k, v, out, dout, lse, causal=causal,
                                                      **dict(options, **shared.get(block, {})))
        shared.setdefault(block, {"dq_acc": dq_acc, "dk": dk, "dv": dv})
        sides[name] = launch
    if not args.no_fa4:
        try:
            from attention_bwd_profile import fa4_backward  # tools/, this script's folder

            sides["FA4"] = fa4_backward(q, k, v, dout, causal)
        except Exception as e:  # noqa: BLE001
            print(f"FA4 left out: {type(e).__name__}: {e}", file=sys.stderr)
    launch_all(sides, args)


def launch_all(sides, args):
    """Warm every side, then launch them ``args.repeat`` times in rotated order between cudaProfilerStart /
    Stop, writing the launch order to ``args.order``."""
    import torch

    names = list(sides)
    for fn in sides.values():
        fn()
    torch.cuda.synchronize()
    order = []
    torch.cuda.cudart().cudaProfilerStart()
    for rep in range(args.repeat):
        for name in rotated(names, rep):
            sides[name]()
            order.append(name)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    with open(args.order, "w") as f:
        json.dump(order, f)


def durations(report):
    """Kernel durations (µs, launch order) from an ncu report's raw page."""
    text = subprocess.run(["ncu", "-i", report, "--csv", "--page", "raw", "--metrics", "gpu__time_duration.sum"],
                          check=True, capture_output=True, text=True).stdout
    rows = list(csv.reader(io.StringIO(text)))
    col = rows[0].index("gpu__time_duration.sum")
    unit = rows[1][col]  # the units row: ns, us (usecond) or ms
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
    return [float(r[col].replace(",", "")) * scale for r in rows[2:] if len(r) > col]


def measure(shape, args):
    """{side: [µs per repetition]} for one shape, from one ncu run of the child."""
    with tempfile.TemporaryDirectory() as tmp:
        order_path, report = os.path.join(tmp, "order.json"), os.path.join(tmp, "ab")
        cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "base", "--cache-control", "all",
               "--kernel-name", KERNELS["forward" if args.forward else "backward"], "--metrics",
               "gpu__time_duration.sum", "-f", "-o", report, sys.executable, os.path.abspath(__file__), "--child",
               "--shape", shape, "--variants", args.variants, "--repeat", str(args.repeat), "--order", order_path]
        cmd += (["--no-fa4"] if args.no_fa4 else []) + (["--forward"] if args.forward else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(order_path):
            tail = "\n".join((run.stdout + run.stderr).splitlines()[-15:])
            raise SystemExit(f"ncu run for {shape} failed (exit {run.returncode}):\n{tail}")
        order = json.load(open(order_path))
        times = durations(report + ".ncu-rep")
    if len(times) != len(order):
        raise SystemExit(f"{shape}: {len(times)} profiled kernels for {len(order)} launches: a side launched "
                         f"more or fewer than one main kernel")
    per_side = {}
    for name, t in zip(order, times):
        per_side.setdefault(name, []).append(t)
    return per_side


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=None, help="backward: attention_bwd_check.py VARIANTS names, comma-"
                    "separated (default: default,again); --forward: name:key=value;... as attention_sweep.py's "
                    "(default: default:default=1,again:default=1); the first is the baseline of the ratios")
    ap.add_argument("--forward", action="store_true", help="the forward kernel instead of the backward")
    ap.add_argument("--shapes", default=SHAPES, help="BxHxS:D:causal|full (GQA: BxH/HkxS:...), "
                    "comma-separated")
    ap.add_argument("--repeat", type=int, default=6, help="launches of each side per shape")
    ap.add_argument("--no-fa4", action="store_true", help="leave FlashAttention-4's kernel out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    ap.add_argument("--order", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variants is None:
        args.variants = "default:default=1,again:default=1" if args.forward else "default,again"
    if args.child:
        return child(args)
    base = args.variants.split(",")[0].split(":")[0]
    print("kernel µs at base clock (median of the repetitions); ratio: the side's time over "
          f"{base!r}'s in the same repetition, median and range (above 1: slower)")
    print("| shape | side | µs | / base (median) | min - max |\n|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        per_side = measure(shape, args)
        for name, ts in per_side.items():
            if name == base or base not in per_side:
                ratio = "" if name == base else "(no base)"
                print(f"| {shape} | {name} | {statistics.median(ts):.1f} | {ratio} | |")
                continue
            r = [t / b for t, b in zip(ts, per_side[base])]
            print(f"| {shape} | {name} | {statistics.median(ts):.1f} | {statistics.median(r):.4f} | "
                  f"{min(r):.4f} - {max(r):.4f} |", flush=True)


if __name__ == "__main__":
    main()
