"""A new user's first ``ops.gemm`` on a shape it has never seen: the wall time of the first call (check,
tune, compile, launch) and of the calls after it, in a fresh process with empty warpsched and CuTe DSL
caches, and how many exhaustive proof searches the first call ran (0 when the manifest that ``warpsched
prove`` ships holds every program it compiles).

    python3 bench/first_call.py [--shape 1000 3000 1736]

Each configuration mode ("default": one compile; "auto": the autotuner compiles and times its
candidates) runs in its own child process, so neither sees the other's caches.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(mode: str, M: int, N: int, K: int) -> None:
    t0 = time.perf_counter()
    import torch

    import warpsched.manager as manager
    from warpsched import ops
    from warpsched.verify.manifest import MANIFEST

    searches = []
    run_checker = manager.run_checker

    def counted(program, **kw):
        t = time.perf_counter()
        out = run_checker(program, **kw)
        searches.append((out.states, time.perf_counter() - t))
        return out

    manager.run_checker = counted
    t_import = time.perf_counter() - t0
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out = ops.gemm(a, b, config=mode)
    torch.cuda.synchronize()
    t_first = time.perf_counter() - t1
    ref = (a.double() @ b.double())
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    later = []
    for _ in range(20):
        t = time.perf_counter()
        ops.gemm(a, b, config=mode)
        torch.cuda.synchronize()
        later.append(time.perf_counter() - t)
    later.sort()
    print(json.dumps({"mode": mode, "import_s": t_import, "first_s": t_first, "later_us": later[10] * 1e6,
                      "searches": len(searches), "search_states": [s for s, _ in searches],
                      "search_s": sum(t for _, t in searches), "manifest_hits": MANIFEST.hits, "rel_err": err}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", nargs=3, type=int, default=(1000, 3000, 1736), metavar=("M", "N", "K"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    M, N, K = args.shape
    if args.child:
        child(args.child, M, N, K)
        return 0
    print(f"ops.gemm first call, bf16 {M}x{N}x{K}, fresh process and caches")
    print("| config | import s | first call s | proof searches (states, s) | manifest hits | later calls us | rel err |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for mode in ("default", "auto"):
        env = dict(os.environ, WARPSCHED_CACHE_DIR=tempfile.mkdtemp(prefix="ws_cache_"),
                   CUTE_DSL_CACHE_DIR=tempfile.mkdtemp(prefix="cute_cache_"))
        t = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--child", mode, "--shape", str(M), str(N), str(K)],
                           env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
        if p.returncode or line is None:
            print(f"| {mode} | child failed (rc {p.returncode}, {wall:.0f} s) |\n{p.stderr[-3000:]}")
            bad += 1
            continue
        r = json.loads(line)
        bad += r["rel_err"] > 1e-2
        print(f"| {mode} | {r['import_s']:.1f} | {r['first_s']:.1f} | {r['searches']} ({r['search_states']}, "
              f"{r['search_s']:.1f}) | {r['manifest_hits']} | {r['later_us']:.0f} | {r['rel_err']:.1e} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
