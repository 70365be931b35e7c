"""FlashAttention forward sweep on the H200: warpsched's kernel against every torch SDPA backend.

  python3 bench/attention_sweep.py 2>&1 | tee bench/results/attention_sweep.log

Shapes: B x H x S in {4x16x4096, 2x16x8192, 16x16x1024, 1x32x16384} x D in {64, 128} x {non-causal,
causal}, bf16, S_q = S_k. Sides: ``warpsched`` (examples/hopper/attention.py) and torch SDPA
restricted to one backend each (cuDNN, flash, efficient; a backend that refuses a shape is
listed as n/a), and FlashAttention-4's CuTe DSL forward (``flash_attn.cute``, side ``fa4``) where it
is installed, counted among the backends (the best of them is the ratio's denominator; a last line
gives each warpsched side's geomean against FA4 alone). TFLOP/s = 4 B H S^2 D / time, halved for
causal. Timing: ``--rounds`` rounds, the sides in a balanced order (reversed every other round), each a triton do_bench
median; the table reports each side's median over the rounds and warpsched's ratio to the best
backend; the last lines give the geomean ratio and the worst shape. Runs in a child with a timeout
(``--timeout``).

Variants (``--variants "qring:q_stages=2,n192:block_n=192;hd=64"``) are timed in the same
rounds as the default and the backends, with their own ratio to the best backend and to the
default (``hd=64`` restricts a variant to that head dim, ``causal_only=1`` to the causal shapes, ``full_only=1``
to the others,
``tuned=1`` starts it from the default's options for the head dim and mask: ``nofence:tuned=1;pv_wait_fence=0``;
``default=1`` from the options the default runs on that shape, sequence-length choices included, so
``again:default=1`` times the default a second time: a control for a close A / B).
``--shapes 16x16x1024,4x16x4096``, ``--dims`` and ``--backends`` keep a GPU run short (a GQA shape is written
``BxH/HkxS``: ``4x32/8x2048``, H query heads over Hk K / V heads, SDPA called with ``enable_gqa``);
``--only-passed FILE`` (written by ``attention_correctness.py --passed-out FILE``) times only the
variants that passed there.

``--backward`` adds, in the same run and for the same inputs, each side's backward (TFLOP/s = 2.5x the
forward's FLOPs, the field's convention) and a second table: warpsched's whole call
(``ops.attention_backward``: pre-pass, kernel, dQ post-pass) from its forward's O and LSE, and the SDPA
backends' and FA4's backward through autograd (``retain_graph``: their forward is not timed); each
side's dQ is compared with warpsched's before it is timed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.path.join(ROOT, "src"))

SHAPES = [(4, 16, 16, 4096), (2, 16, 16, 8192), (16, 16, 16, 1024), (1, 32, 32, 16384)]  # B, H, H_kv, S
BACKENDS = ("cudnn", "flash", "efficient", "fa4")  # fa4: FlashAttention-4's CuTe DSL forward, when installed


from attention_correctness import parse_variants, resolve_variant  # noqa: E402  (one spelling of --variants for both)


def sdpa_kinds():
    """The torch SDPA backends a side name stands for (``BACKENDS`` but fa4)."""
    from torch.nn.attention import SDPBackend

    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def sides(q, k, v, causal, variants):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from warpsched.kernels.attention import host as att

    out = {}
    o = q.new_empty(q.shape)
    lse = q.new_empty(q.shape[:3], dtype=__import__("torch").float32)
    launch, _, _ = att.prepare(q, k, v, causal=causal, out=o, lse=lse)
    launch()
    out["warpsched"] = launch  # the compiled kernel on converted arguments: no host checks timed
    o_default = o.clone()  # every variant writes the default's O and LSE (equal kernels write the same memory)
    for name, options in variants.items():
        options = resolve_variant(att, options, q.shape[3], causal, q.shape[2], k.shape[2])
        if options is None:  # hd= / causal_only / full_only: not this shape
            continue
        try:
            launch2, _, _ = att.prepare(q, k, v, causal=causal, out=o, lse=lse, **options)
            launch2()
            err = float((o.float() - o_default.float()).abs().max())
            flag = "" if err <= 2e-2 else "  MISMATCH (more than bf16 rounding apart)"
            print(f"  ws-{name} {options}: max |ws-{name} - warpsched| = {err:.3g}{flag}", flush=True)
            out[f"ws-{name}"] = launch2
        except Exception as e:  # noqa: BLE001 - a configuration may not fit this shape
            print(f"  ws-{name}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:160]})", flush=True)
    kinds = sdpa_kinds()

    def sdpa(kind):
        def fn():
            with sdpa_kernel([kind]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
        return fn

    for name in BACKENDS:
        try:
            fn = fa4_forward(q, k, v, causal) if name == "fa4" else sdpa(kinds[name])
            ref = fn()
            out[name] = fn
            err = float((ref.float() - o_default.float()).abs().max())
            print(f"  {name}: max |warpsched - {name}| = {err:.3g}", flush=True)
        except Exception as e:  # noqa: BLE001 - a backend may refuse a shape
            print(f"  {name}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
    return out


def backward_sides(q, k, v, causal, backends):
    """{side: one backward call} on one random upstream gradient (``--backward``)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from warpsched import ops

    dout = torch.randn_like(q)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    fns = {"warpsched": lambda: ops.attention_backward(q, k, v, out, dout, lse, causal=causal)}
    dq = fns["warpsched"]()[0]
    kinds = sdpa_kinds()
    for name in backends:
        try:
            if name == "fa4":  # (B, S, H, D) copies, as fa4_forward
                from flash_attn.cute import flash_attn_func

                x = tuple(t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
                res = flash_attn_func(*x, causal=causal)
                o, g = (res[0] if isinstance(res, tuple) else res), dout.transpose(1, 2).contiguous()
            else:
                x = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
                with sdpa_kernel([kinds[name]]):
                    o = F.scaled_dot_product_attention(*x, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
                g = dout
            fn = (lambda o=o, x=x, g=g: torch.autograd.grad(o, x, g, retain_graph=True))
            theirs = fn()[0]
            theirs = theirs.transpose(1, 2) if name == "fa4" else theirs
            err = float((theirs.float() - dq.float()).abs().max())
            print(f"  backward {name}: max |dQ warpsched - dQ {name}| = {err:.3g}", flush=True)
            fns[name] = fn
        except Exception as e:  # noqa: BLE001 - a backend may refuse a shape
            print(f"  backward {name}: n/a ({type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
    return fns


def timed(fns, rounds, flops):
    """{side: TFLOP/s}: ``rounds`` rounds in a balanced order (``_eager.round_order``: every side's mean position
    the same after an even number of rounds), each a do_bench median; the median round."""
    from triton.testing import do_bench

    from _eager import design_rounds, round_order

    times = {n: [] for n in fns}
    for r in range(design_rounds(len(fns), rounds)):
        for n in round_order(fns, r):
            times[n].append(do_bench(fns[n], warmup=10, rep=40, return_mode="median"))
    return {n: flops / (statistics.median(t) * 1e-3) / 1e12 for n, t in times.items()}


def table(rows, cols, title):
    print(f"\n{title}\n| shape | warpsched | " + " | ".join(cols) + " | best | ratio |")
    print("|---|---|" + "---|" * len(cols) + "---|---|")
    for r in rows:
        cells = [f"{r['tflops'][n]:.0f}" if n in r["tflops"] else "n/a" for n in ("warpsched",) + cols]
        print(f"| {r['shape']} | " + " | ".join(cells) + f" | {r['best']} | {r['ratio']:.2f}x |")


def row(name, tf):
    best = max((n for n in tf if n in BACKENDS), key=lambda n: tf[n], default=None)
    return dict(shape=name, tflops=tf, best=best, ratio=tf["warpsched"] / tf[best] if best else float("nan"))


def fa4_forward(q, k, v, causal):
    """FlashAttention-4's forward (``flash_attn.cute.flash_attn_func``) on (B, S, H, D) copies made once,
    returning O in SDPA's (B, H, S, D) view; raises where the package is not installed."""
    from flash_attn.cute import flash_attn_func

    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def fn():
        res = flash_attn_func(qt, kt, vt, causal=causal)
        return (res[0] if isinstance(res, tuple) else res).transpose(1, 2)
    return fn


def run(rounds, shapes, dims, variants, backends=BACKENDS, budget=0.0, backward=False):
    import time

    import torch

    rows, rows_bwd, start = [], [], time.time()
    for B, H, Hk, S in shapes:
        for D in dims:
            for causal in (False, True):
                if budget and time.time() - start > budget:
                    print(f"{B}x{H}x{S} d{D} {'causal' if causal else 'full'}: not run (--budget {budget:.0f} s "
                          "spent)", flush=True)
                    continue
                torch.manual_seed(0)
                q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                k, v = (torch.randn(B, Hk, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                heads = f"{H}" if Hk == H else f"{H}/{Hk}"
                name = f"{B}x{heads}x{S} d{D} {'causal' if causal else 'full'}"
                print(name, flush=True)
                fns = {n: f for n, f in sides(q, k, v, causal, variants).items() if n not in BACKENDS or n in backends}
                flops = 4 * B * H * S * S * D / (2 if causal else 1)
                rows.append(row(name, timed(fns, rounds, flops)))
                print("  " + json.dumps(rows[-1]), flush=True)
                del fns
                if backward:
                    rows_bwd.append(row(name, timed(backward_sides(q, k, v, causal, backends), rounds, 2.5 * flops)))
                    print("  backward " + json.dumps(rows_bwd[-1]), flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    extra = tuple(f"ws-{n}" for n in variants)
    table(rows, tuple(backends) + extra, "forward (TFLOP/s)")
    print_summaries(rows, extra)
    if backward:
        table(rows_bwd, tuple(backends), "backward (TFLOP/s, 2.5x the forward's FLOPs; warpsched: the whole call)")
        print_summaries(rows_bwd, ())


def geomean_and_worst(got, ratio):
    """(geomean of ``ratio(row)`` over ``got``, worst ratio, its shape)."""
    ratios = [ratio(r) for r in got]
    worst = min(range(len(got)), key=lambda i: ratios[i])
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), ratios[worst], got[worst]["shape"]


def print_summaries(rows, extra):
    """The last lines: each warpsched side's geomean and worst ratio to the best backend (and its geomean
    against the default), then against FA4 alone where it ran."""
    for side in ("warpsched",) + extra:
        got = [r for r in rows if r["best"] and side in r["tflops"]]
        if got:
            geo, worst, shape = geomean_and_worst(got, lambda r: r["tflops"][side] / r["tflops"][r["best"]])
            vs_default, _, _ = geomean_and_worst(got, lambda r: r["tflops"][side] / r["tflops"]["warpsched"])
            print(f"{side}: geomean ratio to the best backend {geo:.3f}x over {len(got)} shapes; worst {worst:.2f}x "
                  f"({shape}); geomean vs the default {vs_default:.3f}x")
    for side in ("warpsched",) + extra:
        got = [r for r in rows if "fa4" in r["tflops"] and side in r["tflops"]]
        if got:
            geo, worst, shape = geomean_and_worst(got, lambda r: r["tflops"][side] / r["tflops"]["fa4"])
            print(f"{side} / FA4: geomean {geo:.3f}x over {len(got)} shapes; worst {worst:.2f}x ({shape})")


def parse_shape(text):
    """``BxHxS`` or, with GQA, ``BxH/HkxS`` (H query heads over Hk K / V heads) -> (B, H, Hk, S)."""
    b, h, s = text.split("x")
    h, _, hk = h.partition("/")
    return int(b), int(h), int(hk or h), int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--quick", action="store_true", help="4x16x4096 only")
    ap.add_argument("--variants", default="", help="extra warpsched configurations timed alongside, e.g. "
                    "'simple:overlap=0,n176:block_n=176' (reported, not in the ratio)")
    ap.add_argument("--shapes", default="", help="BxHxS list, e.g. 16x16x1024,4x16x4096 (default: all); GQA: "
                    "BxH/HkxS, e.g. 4x32/8x2048")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--budget", type=float, default=0, help="seconds: start no shape after this (0: none)")
    ap.add_argument("--only-passed", default="", help="JSON {variant: passed} from attention_correctness.py")
    ap.add_argument("--backward", action="store_true", help="also each side's backward, a second table")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.only_passed and not args.child:
        with open(args.only_passed) as f:
            ok = json.load(f)
        keep = [item for item in filter(None, args.variants.split(",")) if ok.get(item.partition(":")[0])]
        dropped = sorted(set(parse_variants(args.variants)) - set(parse_variants(",".join(keep))))
        print(f"variants kept: {[k.partition(':')[0] for k in keep]}; dropped (not passed): {dropped}", flush=True)
        args.variants = ",".join(keep)
    shapes = SHAPES[:1] if args.quick else SHAPES
    if args.shapes:
        shapes = [parse_shape(s) for s in args.shapes.split(",")]
    if args.child:
        run(args.rounds, shapes, tuple(int(d) for d in args.dims.split(",")), parse_variants(args.variants),
            tuple(b for b in args.backends.split(",") if b), args.budget, args.backward)
        return
    cmd = [sys.executable, __file__, "--child", "--rounds", str(args.rounds), "--variants", args.variants,
           "--shapes", args.shapes, "--dims", args.dims, "--backends", args.backends,
           "--budget", str(args.budget)] + (["--quick"] if args.quick else []) + (
        ["--backward"] if args.backward else [])
    try:
        sys.exit(subprocess.run(cmd, timeout=args.timeout).returncode)
    except subprocess.TimeoutExpired:
        print(f"sweep TIMEOUT after {args.timeout} s")
        sys.exit(124)


if __name__ == "__main__":
    main()
