"""The GEMM floor (issue 25): ``warpsched.ops.gemm`` as a model calls it (``config="auto"``, weights as
``w.t()``) against the faster of ``torch.matmul`` (cuBLAS) and quack-kernels' CuTe DSL GEMM, in device
time, on small and odd shapes: M in {1, 16, 32, 64, 1000} and N, K that are not tile multiples.

    python3 bench/gemm_floor.py [--rounds 3] [--shapes 16x4096x4096,...] [--candidates [--every]] [--swap]
                                [--stream] [--extra JSON] [--quack-tuned]

Correctness first: every side on every shape with fresh random inputs, ours into a NaN-poisoned output,
relative Frobenius error against the fp64 product (< 1e-2). Time: each side a CUDA graph of back-to-back
launches (``_graphs.graph_ms``: triton's do_bench median over replays), sides in a balanced order (``_eager.round_order``) over
``--rounds`` rounds, median. The table gives ours against the faster peer (the floor: >= 0.95x) and the
configuration the autotuner chose. ``--candidates`` also times every autotune candidate for the shapes
below the floor (what a better choice would give; ``--every``: for every shape), and the ``--extra``
configurations, each checked against fp64 first; ``--swap`` adds the swap-AB configurations (``SWAP`` and the
tuner's swapped forms: the weight's rows on WGMMA's M, the tokens on N) to that listing, each first checked
against fp64 with a NaN-poisoned output on every shape with M <= 64; ``--stream`` checks the stream-K
configurations (``STREAM``) and the wave-fit tiles the same way on M > 64 and on shapes with long share chains,
a second launch bitwise equal. quack runs ``tuned=False`` (its heuristic) unless ``--quack-tuned`` (its
autotuner: minutes per shape). Run on a Hopper machine set up as in docs/gpu.md; quack-kernels is optional (its
column stays empty without it)."""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from _eager import round_order  # noqa: E402
from _graphs import graph_ms  # noqa: E402
from warpsched import ops  # noqa: E402
from warpsched.kernels.gemm import autotune as tune  # noqa: E402
from warpsched.kernels.gemm import host as gemm_host  # noqa: E402

SHAPES = [  # M x N x K: decode-sized M over model widths, then N / K off the tile grid
    (1, 4096, 4096), (16, 4096, 4096), (32, 4096, 4096), (1000, 4096, 4096),
    (1, 14336, 4096), (16, 14336, 4096), (32, 14336, 4096),
    (16, 4096, 14336), (32, 4096, 14336), (16, 6144, 4096), (16, 28672, 4096),
    (1, 5000, 1000), (16, 1000, 1000), (32, 3000, 1736), (64, 4104, 2056),
    (1000, 1000, 1000), (1000, 3000, 1736), (1000, 2056, 4104), (1000, 14336, 4096), (16, 128256, 4096),
]
FLOOR = 0.95
SWAP = [dict(schedule="cooperative", tile_mn=(64, 32), swap_ab=True, split_k=1),
        dict(schedule="cooperative", tile_mn=(128, 32), swap_ab=True, split_k=1),
        dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, swap_ab=True, split_k=1),
        # swapped with K split in the kernel (one launch): more CTAs where the weight's rows leave SMs idle
        dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, swap_ab=True, split_k="auto",
             split_reduce="parallel"),
        dict(schedule="cooperative", tile_mn=(128, 32), swap_ab=True, split_k="auto", split_reduce="parallel")]
QUACK_SKIP = set()  # shapes quack refused or got wrong: left out of its column
TOL = 1e-2


def quack_gemm(tuned):
    try:
        from quack.gemm_interface import gemm
    except Exception as e:  # noqa: BLE001 - not installed: the column stays empty
        print(f"quack unavailable ({type(e).__name__}: {e})", flush=True)
        return None
    return lambda a, b: gemm(a, b, tuned=tuned)


def parse_shapes(text):
    return [tuple(int(x) for x in s.lower().split("x")) for s in text.split(",")] if text else SHAPES


def inputs(M, N, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)  # a weight as nn.Linear holds it
    return a, w


def rel_err(c, ref):
    if not bool(torch.isfinite(c).all()):
        return float("nan")
    return float((c.double() - ref).norm() / ref.norm())


def chosen(M, N, K):
    swap = any(c.get("swap_ab") for c in tune.candidates(M, N, K, swap=True))  # a plain GEMM's key, as ops.gemm's
    key = tune.cache_key(M, N, K, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.cuda.get_device_name(),
                         swap=swap)
    hit = tune.TuneCache().get(key)
    if not hit:
        return "?"
    tile = "x".join(map(str, hit.get("tile_mn", ())))
    extra = [f"{k}={v}" for k, v in sorted(hit.items())  # flags print (True == 1 would hide them)
             if k not in ("tile_mn", "schedule") and v is not None and (v is True or v != 1)]
    return f"{hit.get('schedule', '')[:4]} {tile}" + (" " + " ".join(extra) if extra else "")


def correctness(shapes, quack):
    bad = 0
    print("| M x N x K | ours err | torch err | quack err | result |\n|---|---|---|---|---|", flush=True)
    for i, (M, N, K) in enumerate(shapes):
        a, w = inputs(M, N, K, i)
        ref = a.double() @ w.double().t()
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        ours = rel_err(ops.gemm(a, w.t(), out=out), ref)  # tunes this shape on first use
        out.fill_(float("nan"))
        again = rel_err(ops.gemm(a, w.t(), out=out), ref)  # the kept launch plan
        theirs = rel_err(torch.matmul(a, w.t()), ref)
        q = float("nan")
        if quack:
            try:
                q = rel_err(quack(a, w.t()), ref)
            except Exception as e:  # noqa: BLE001 - a shape quack refuses: no quack time for it
                print(f"quack refused {M}x{N}x{K}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            if not q < TOL:
                QUACK_SKIP.add((M, N, K))
        ok = ours < TOL and again < TOL
        bad += not ok
        print(f"| {M}x{N}x{K} | {ours:.2e} / {again:.2e} | {theirs:.2e} | {q:.2e} | {'PASS' if ok else 'FAIL'} |",
              flush=True)
    print(f"correctness: {len(shapes) - bad}/{len(shapes)} PASS", flush=True)
    return bad


def time_shape(M, N, K, quack, rounds, rep_ms):
    a, w = inputs(M, N, K, 1000 + M)
    b = w.t()
    sides = {"torch": lambda: torch.matmul(a, b), "ours": lambda: ops.gemm(a, b)}
    if quack and (M, N, K) not in QUACK_SKIP:
        sides["quack"] = lambda: quack(a, b)
    est = {}
    for name, fn in sides.items():  # warm-up (quack compiles / tunes here) and a rough size for the graph
        fn()
        torch.cuda.synchronize()
        est[name] = do_bench(fn, warmup=5, rep=20, return_mode="median")
    times = {s: [] for s in sides}
    names = list(sides)
    for r in range(rounds):
        for s in round_order(names, r):
            times[s].append(graph_ms(torch, do_bench, sides[s], est[s], rep_ms))
    return {s: statistics.median(v) for s, v in times.items()}, times


def config_correctness(shapes, label, applies, configs_of, seed0, twice=False):
    """Configurations a shape's tuning does not pick on its own, against fp64 into NaN-poisoned outputs, on every
    shape they are for (``applies(M)``; ``configs_of(M, N)``: the list); with ``twice``, a second launch into
    another poisoned output must equal the first bit for bit. The failures' count."""
    bad = 0
    for i, (M, N, K) in enumerate(shapes):
        if not applies(M):
            continue
        a, w = inputs(M, N, K, seed0 + i)
        ref = a.double() @ w.double().t()
        for c in configs_of(M, N):
            outs, same = [], True
            try:
                for _ in range(2 if twice else 1):
                    outs.append(ops.gemm(a, w.t(), out=torch.full((M, N), float("nan"), device="cuda",
                                                                  dtype=torch.bfloat16), config=c))
                e = rel_err(outs[0], ref)
                same = bool(torch.equal(outs[0], outs[-1]))
            except Exception as ex:  # noqa: BLE001 - reported, counted as a failure
                e = f"{type(ex).__name__}: {str(ex)[:120]}"
            ok = isinstance(e, float) and e < TOL and same
            bad += not ok
            again = (", second launch " + ("bitwise equal" if same else "DIFFERS")) if twice else ""
            print(f"{label} {M}x{N}x{K} {c}: {e if isinstance(e, str) else f'{e:.2e}'}{again} "
                  f"{'PASS' if ok else 'FAIL'}", flush=True)
    return bad


STREAM = [dict(schedule="cooperative", tile_mn=(128, 256), split_k="stream"),
          dict(schedule="cooperative", tile_mn=(128, 128), split_k="stream")]
# fewer tiles than SMs, with long share chains (4 tiles of 65 K tiles over 132 CTAs: ~33 shares a tile), and
# K under one K tile (one K iteration a tile: every tile whole, a grid of one CTA per tile)
STREAM_EXTRA = [(200, 304, 4104), (1000, 1000, 40), (129, 264, 1000)]


def stream_correctness(shapes):
    """Stream-K (``STREAM``) and the wave-fit tiles where there are some (``autotune.wave_fit_tiles``) on every
    shape with M > 64 and on ``STREAM_EXTRA``: against fp64 into NaN-poisoned outputs, then a second launch
    equal to the first bit for bit (the shares of a tile always add in one order); the failures' count."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def configs(M, N):
        return STREAM + tune.wave_fit_tiles(M, N, sms, gemm_host.max_ctas)
    return config_correctness([s for s in shapes if s[0] > 64] + STREAM_EXTRA, "stream-K / wave-fit",
                              lambda M: True, configs, 300, twice=True)


def swap_correctness(shapes):
    """The swap-AB configurations on every shape with M <= 64 (their tiles put the tokens on N)."""
    return config_correctness(shapes, "swap-AB", lambda M: M <= 64, swap_configs, 100)


def swap_configs(M, N):
    """``SWAP`` and the swapped configurations the tuner tries for an M x N GEMM (its clustered and PDL forms)."""
    tuned = [c for c in tune.candidates(M, N, 4096, swap=True) if c.get("swap_ab")]
    return SWAP + [c for c in tuned if c not in SWAP]


def extra_checked(M, N, K, extra):
    """The ``--extra`` configurations that compute M x N x K within the floor's error bar of fp64 (the rest are
    printed as failures and not timed)."""
    a, w = inputs(M, N, K, 11)
    ref = (a.double() @ w.double().t())
    out = []
    for c in extra:
        try:
            got = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
            ops.gemm(a, w.t(), out=got, config=c)
            err = ((got.double() - ref).norm() / ref.norm()).item()
        except Exception as e:  # noqa: BLE001 - a configuration this shape cannot run is reported
            print(f"  extra {c}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        print(f"  extra {c}: rel. error {err:.2e} {'PASS' if err < 1e-2 else 'FAIL'}", flush=True)
        if err < 1e-2:
            out.append(c)
    return out


def candidates_table(M, N, K, rep_ms, swap=False, extra=()):
    a, w = inputs(M, N, K, 7)
    b = w.t()
    rows = []
    for c in tune.candidates(M, N, K, fp8=False, cluster_ctas=gemm_host.max_ctas) + \
            (swap_configs(M, N) if swap and M <= 64 else []) + list(extra):
        try:
            ops.gemm(a, b, config=c)
            ms = graph_ms(torch, do_bench, lambda c=c: ops.gemm(a, b, config=c), 0.02, rep_ms)
            rows.append((ms, c))
        except Exception as e:  # noqa: BLE001 - a candidate that does not run for this shape
            rows.append((float("inf"), dict(c, error=f"{type(e).__name__}: {str(e)[:80]}")))
    t = graph_ms(torch, do_bench, lambda: torch.matmul(a, b), 0.02, rep_ms)
    print(f"  candidates at {M}x{N}x{K} (torch {t * 1e3:.1f} us):", flush=True)
    for ms, c in sorted(rows, key=lambda r: r[0]):
        print(f"    {ms * 1e3:8.1f} us  x{t / ms:.3f}  {c}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep-ms", type=int, default=25, help="do_bench's rep per timing (ms)")
    ap.add_argument("--shapes", default="", help="MxNxK,... (default: the floor set)")
    ap.add_argument("--candidates", action="store_true", help="time every autotune candidate below the floor")
    ap.add_argument("--every", action="store_true", help="--candidates on every shape, not only those below the floor")
    ap.add_argument("--swap", action="store_true", help="also check and time the swap-AB configurations")
    ap.add_argument("--extra", default="[]", help="JSON list of configurations --candidates also times (each "
                    "checked against fp64 first), e.g. '[{\"schedule\": \"cooperative\", \"tile_mn\": [128, 256], "
                    "\"split_k\": 2, \"split_reduce\": \"parallel\"}]'")
    ap.add_argument("--stream", action="store_true", help="also check the stream-K and wave-fit configurations "
                    "(fp64, poisoned, bitwise-equal second launch) on M > 64 and on shapes with long share chains")
    ap.add_argument("--quack-tuned", action="store_true", help="quack's autotuner instead of its heuristic")
    ap.add_argument("--no-time", action="store_true", help="correctness only")
    a = ap.parse_args()
    shapes = parse_shapes(a.shapes)
    print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
    quack = quack_gemm(a.quack_tuned)
    if (correctness(shapes, quack) or (a.swap and swap_correctness(shapes))
            or (a.stream and stream_correctness(shapes))):
        sys.exit(1)
    if a.no_time:
        return
    print("\n| M x N x K | torch us | quack us | ours us | ours / torch | ours / quack | ours / best | "
          "chosen | rounds (us) |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    below, logs = [], []
    for M, N, K in shapes:
        med, times = time_shape(M, N, K, quack, a.rounds, a.rep_ms)
        best = min(med["torch"], med.get("quack", math.inf))
        r = best / med["ours"]
        logs.append(r)
        if r < FLOOR:
            below.append((M, N, K))
        rounds = "; ".join(f"{s} " + "/".join(f"{t * 1e3:.1f}" for t in v) for s, v in times.items())
        q = med.get("quack")
        print(f"| {M}x{N}x{K} | {med['torch'] * 1e3:.1f} | {q * 1e3 if q else float('nan'):.1f} | "
              f"{med['ours'] * 1e3:.1f} | {med['torch'] / med['ours']:.3f} | "
              f"{q / med['ours'] if q else float('nan'):.3f} | {'**' if r < FLOOR else ''}{r:.3f}"
              f"{'**' if r < FLOOR else ''} | {chosen(M, N, K)} | {rounds} |", flush=True)
    geo = math.exp(sum(math.log(x) for x in logs) / len(logs))
    print(f"\nours / best peer: geomean {geo:.3f}, lowest {min(logs):.3f}; below {FLOOR}: "
          f"{len(below)}/{len(shapes)} {['x'.join(map(str, s)) for s in below]}", flush=True)
    if a.candidates:
        extra = [dict(c, tile_mn=tuple(c["tile_mn"])) if "tile_mn" in c else c for c in json.loads(a.extra)]
        for M, N, K in (shapes if a.every else below):
            candidates_table(M, N, K, a.rep_ms, a.swap, extra_checked(M, N, K, extra))


if __name__ == "__main__":
    main()
