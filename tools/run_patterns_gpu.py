"""Run the seed's four scheduling patterns (examples/hopper/patterns) on the GPU against torch.

  python3 tools/run_patterns_gpu.py 2>&1 | tee bench/results/patterns.log

Every case: two draws of fresh random inputs, the output poisoned with NaN before each launch,
compared with a torch reference of the same computation (max abs error; tolerance 1e-5 relative
for float transforms, bit-exact for copies). Prints one table at the end.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper", "patterns"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

import torch  # noqa: E402

ROWS = []


def record(pattern, variant, shape, ok, err, note=""):
    ROWS.append((pattern, variant, shape, ok, err, note))
    print(f"  {pattern:15s} {variant:24s} {shape:26s} {'OK ' if ok else 'BAD'} max|err|={err:.2e} {note}", flush=True)


def compare(out, ref, exact):
    if torch.isnan(out).any():
        return False, float("inf")
    err = float((out.double() - ref.double()).abs().max()) if out.numel() else 0.0
    if exact:
        return bool(torch.equal(out, ref)), err
    return bool(torch.allclose(out, ref, rtol=1e-5, atol=1e-5)), err


def case(pattern, variant, shape, fn):
    t0 = time.perf_counter()
    try:
        ok, err = True, 0.0
        for _ in range(2):
            o, e = fn()
            ok &= o
            err = max(err, e)
        record(pattern, variant, shape, ok, err, f"({time.perf_counter() - t0:.1f}s incl. compile)")
    except Exception as ex:  # keep going; the table says which case failed
        traceback.print_exc()
        record(pattern, variant, shape, False, float("nan"), f"FAILED {type(ex).__name__}: {str(ex)[:160]}")


def run_pingpong():
    import pingpong as ex

    for kind in ("async_async", "tma_async"):
        for rows, iters in ((1, 1), (7, 2), (1000, 5), (4096, 64)):
            def fn():
                x = torch.randn(rows, ex.WIDTH, device="cuda")
                y = torch.full_like(x, float("nan"))
                ex.run(x, y, iters, kind=kind)
                torch.cuda.synchronize()
                return compare(y, ex.reference(x, iters), exact=False)
            case("ping-pong", kind, f"f32[{rows}x32] N={iters}", fn)


def run_split():
    import split_consumer as ex

    # single CTA, then 2-CTA clusters (wait signaling All, release CtaLeader; odd tile counts leave a CTA idle)
    for variant, cluster, sizes in (
            ("TmaAsync+proxy", False, ((8, 132), (1000, 132), (65536, 132), (65536, 3))),
            ("2-CTA wait All/rel Ldr", True, ((8, 132), (24, 132), (1000, 132), (65536, 132), (65536, 6)))):
        for rows, ctas in sizes:
            def fn():
                a = torch.randn(rows, ex.WIDTH, device="cuda")
                b = torch.randn(rows, ex.WIDTH, device="cuda")
                out = torch.full_like(a, float("nan"))
                ex.run(a, b, out, max_ctas=ctas, cluster=cluster)
                torch.cuda.synchronize()
                return compare(out, ex.reference(a, b), exact=False)
            case("split-consumer", variant, f"f32[{rows}x32] ctas<={ctas}", fn)


def run_interleaved():
    import interleaved as ex

    for mode in ("warp_lane", "per_role", "domain_lane"):
        for n in (1, 3, 17, 1000, 4099):
            def fn():
                x = torch.randn(n, ex.width(mode), device="cuda")
                y = torch.full_like(x, float("nan"))
                ex.run(x, y, mode)
                torch.cuda.synchronize()
                return compare(y, ex.reference(x, mode), exact=False)
            case("interleaved", mode, f"f32[{n}x{ex.width(mode)}]", fn)


def run_leader():
    import leader_routed as ex

    # single CTA (TaskWarpLeader), then 2-CTA clusters (CtaLeader | TaskWarpLeader, parts multicast into both)
    for variant, cluster, sizes in (
            ("TaskWarpLeader x4", False, ((32, 132), (1024, 132), (131072, 132), (131072, 5))),
            ("2-CTA Cta|WarpLdr mcast", True, ((64, 132), (1024, 132), (131072, 132), (131072, 6)))):
        for rows, ctas in sizes:
            def fn():
                x = torch.randn(rows, ex.WIDTH, device="cuda")
                y = torch.full_like(x, float("nan"))
                ex.run(x, y, max_ctas=ctas, cluster=cluster)
                torch.cuda.synchronize()
                return compare(y, ex.reference(x), exact=True)
            case("leader-routed", variant, f"f32[{rows}x32] ctas<={ctas}", fn)


def main():
    only = sys.argv[1:] or ["pingpong", "split", "interleaved", "leader"]
    print("device:", torch.cuda.get_device_name(), flush=True)
    for name in only:
        globals()[f"run_{name}"]()
    print()
    print(f"| {'pattern':15s} | {'variant':24s} | {'shape':26s} | ok  | max abs err |")
    print(f"|{'-' * 17}|{'-' * 26}|{'-' * 28}|-----|-------------|")
    for pattern, variant, shape, ok, err, _ in ROWS:
        print(f"| {pattern:15s} | {variant:24s} | {shape:26s} | {'yes' if ok else 'NO '} | {err:11.2e} |")
    bad = sum(not r[3] for r in ROWS)
    print(f"\n{len(ROWS) - bad}/{len(ROWS)} cases correct")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
