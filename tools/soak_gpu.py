"""Soak: every accepted Hopper example, many launches with random shapes and inputs, vs torch.

  python3 tools/soak_gpu.py --launches 50 2>&1 | tee bench/results/soak.log

Each example runs in its own child process under a wall-clock limit, so a hang is recorded as a
hang (the child is killed) instead of wedging the run. Every launch draws a fresh shape and fresh
random inputs, poisons the output with NaN first, and compares with torch (copies bit-exact, the
GEMM by relative Frobenius error against an fp64 reference). The summary is a markdown table:
example, launches, mismatches, hangs, worst error, seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ one launch per example
def _copy_case(run, shape_fn, rng, torch):
    shape = shape_fn(rng)
    x = torch.randn(shape, device="cuda")
    y = torch.full_like(x, float("nan"))
    run(x, y)
    torch.cuda.synchronize()
    return shape, 0.0 if torch.equal(x, y) else 1.0


def case_grid_stride(rng, torch):
    import grid_stride_copy as ex
    return _copy_case(lambda x, y: ex.copy(x, y), lambda r: (r.randint(1, 1 << 22),), rng, torch)


def case_tma_copy(rng, torch):
    import tma_copy as ex
    dt = rng.choice([torch.float32, torch.bfloat16])
    rows, cols = rng.randint(1, 3000), rng.choice([8, 16, 24, 40, 128, 1000, 1024, 2056])
    x = torch.randn(rows, cols, device="cuda").to(dt)
    y = torch.full_like(x, float("nan"))
    ex.copy(x, y)
    torch.cuda.synchronize()
    return (str(dt).split(".")[-1], rows, cols), 0.0 if torch.equal(x, y) else 1.0


def case_persistent(rng, torch):
    import persistent_copy as ex
    rows, cols, extra = rng.randint(1, 2000), rng.choice([128, 1024, 4096]), rng.randint(0, 9)
    x = torch.randn(rows, cols, device="cuda")
    y = torch.full_like(x, float("nan"))
    ex.copy(x, y, overlaunch_tiles=extra)
    torch.cuda.synchronize()
    return (rows, cols, extra), 0.0 if torch.equal(x, y) else 1.0


def case_varlen(rng, torch):
    import varlen_copy as ex
    lens = [rng.choice([0, 1, rng.randint(1, 5000)]) for _ in range(rng.randint(1, 12))]
    x = torch.randn(max(1, sum(lens)), device="cuda")[:sum(lens)]
    y = torch.full_like(x, float("nan"))
    ex.copy(x, y, lens)
    torch.cuda.synchronize()
    return tuple(lens), 0.0 if torch.equal(x, y) else 1.0


def case_relu(rng, torch):
    import relu_pipeline as ex
    n = rng.randint(1, 3000)
    x = torch.randn(n, ex.WIDTH, device="cuda")
    y, z = torch.full_like(x, float("nan")), torch.zeros_like(x)
    ex.run(x, y, z, coalesced=rng.random() < 0.5)
    torch.cuda.synchronize()
    ry, rz = ex.reference(x)
    return (n,), 0.0 if (torch.equal(y, ry) and torch.equal(z, rz)) else 1.0


def case_interleaved(rng, torch):
    import interleaved_copy as ex
    n, mode = rng.randint(1, 3000), rng.choice(["warp", "domain"])
    x = torch.randn(n, ex.WIDTH, device="cuda")
    y = torch.full_like(x, float("nan"))
    ex.copy(x, y, mode=mode)
    torch.cuda.synchronize()
    return (mode, n), 0.0 if torch.equal(x, y) else 1.0


def case_groups(rng, torch):
    import group_add as ex
    mode = rng.choice(["merge", "fused", "fork"])
    shape = (rng.randint(1, 3000), rng.choice([4, 100, 300, 1024]))
    x, y = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
    z, w = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    ex.run(x, y, z, w, mode=mode)
    torch.cuda.synchronize()
    ok = (torch.equal(z, x) and torch.equal(w, x)) if mode == "fork" else torch.equal(z, x + y)
    return (mode,) + shape, 0.0 if ok else 1.0


def case_gemm(rng, torch):
    import wgmma_gemm as ex
    M, N, K = rng.randint(1, 2500), rng.choice([8, 64, 256, 1000, 2048]), rng.choice([8, 64, 72, 512, 1000])
    kw = {}
    if rng.random() < 0.3:
        kw["cluster_mn"] = rng.choice([(2, 1), (1, 2)])
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    ex.gemm(a, b, c, **kw)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    if torch.isnan(c).any():
        return (M, N, K, kw.get("cluster_mn")), float("inf")
    err = float((c.double() - ref).norm() / max(ref.norm(), 1e-30))
    return (M, N, K, kw.get("cluster_mn")), err


CASES = {"grid_stride_copy": case_grid_stride, "tma_copy": case_tma_copy, "persistent_copy": case_persistent,
         "varlen_copy": case_varlen, "relu_pipeline": case_relu, "interleaved_copy": case_interleaved,
         "group_add": case_groups, "wgmma_gemm": case_gemm}
TOLERANCE = {"wgmma_gemm": 2e-2}


def worker(name, launches, seed):
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))
    import torch

    rng = random.Random(seed)
    torch.manual_seed(seed)
    bad, worst = [], 0.0
    for i in range(launches):
        shape, err = CASES[name](rng, torch)
        worst = max(worst, err)
        if not err <= TOLERANCE.get(name, 0.0):
            bad.append({"launch": i, "shape": repr(shape), "err": err})
        print(json.dumps({"progress": i + 1}), flush=True)
    print(json.dumps({"result": {"launches": launches, "mismatches": bad, "worst": worst}}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per example before it counts as hung")
    ap.add_argument("--only", nargs="*", choices=list(CASES))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time())
    if a.worker:
        return worker(a.worker, a.launches, seed)
    print(f"soak: {a.launches} launches per example, seed {seed}", flush=True)
    rows = []
    for name in (a.only or CASES):
        t0 = time.time()
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--launches", str(a.launches),
               "--seed", str(seed)]
        done, result, note = 0, None, ""
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout).stdout
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            note = "HUNG (killed)"
        for line in out.splitlines():
            if line.startswith("{"):
                msg = json.loads(line)
                done = msg.get("progress", done)
                result = msg.get("result", result)
        if result is None and not note:
            note = "worker failed (see log)"
        mism = len(result["mismatches"]) if result else "-"
        worst = f"{result['worst']:.1e}" if result else "-"
        rows.append((name, done, mism, 1 if note.startswith("HUNG") else 0, worst, time.time() - t0, note))
        print(f"  {name:18s} launches={done} mismatches={mism} worst={worst} {note}", flush=True)
        if result and result["mismatches"]:
            print("    first mismatches:", result["mismatches"][:3], flush=True)
    print("\n| example | launches | mismatches | hangs | worst err | seconds | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.0f} | {r[6]} |")
    total_bad = sum(r[2] for r in rows if isinstance(r[2], int)) + sum(r[3] for r in rows)
    print(f"\nsoak total: {sum(r[1] for r in rows)} launches, {total_bad} mismatches or hangs")
    return 1 if total_bad or any(r[6] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
