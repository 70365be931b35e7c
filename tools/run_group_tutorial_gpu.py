"""H200: the Hopper-runnable configurations of CUTLASS's TS tutorial 07_01 (Merge copy), ported to
warpsched, run with random inputs and poisoned outputs (issue 27).

    python3 tools/run_group_tutorial_gpu.py

Configurations (sm_90a): ``07_01`` (default: SmemA AsyncAsync + SmemB TmaAsync in one Merge group,
the mix the collapsed barrier sizes from the AsyncAsync member) and ``07_01 --no-tma`` (AsyncAsync +
AsyncAsync). The tutorial is tools/third_party/cutlass_ts_07_01_merge_copy.py (unmodified),
ported the way a user ports it (``warpsched.compat.port_imports``); the reference TS 4.8.1 does not
compile it (its DSL front end fails), so there is no reference run. Also run: the test suite's own
merge program (tests/port_programs/merge_mix_copy.py) with and without TMA.

Each case runs in its own interpreter under a watchdog (a hang is reported as HANG, not waited
for); outputs are filled with NaN first, and the check is bitwise equality with the input plus no
NaN left. Prints one PASS / FAIL / HANG line per case and a summary; exit status 1 on any failure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIAL = os.path.join(ROOT, "tools", "third_party", "cutlass_ts_07_01_merge_copy.py")
PROGRAM = os.path.join(ROOT, "tests", "port_programs", "merge_mix_copy.py")
MARK = "@@GROUP@@"
# (name, source, TMA for B, sizes: elements for the tutorial, tiles of 128 for the test program)
CASES = [
    ("07_01 (TMA B)", "tutorial", True, (1024, 128 * 37, 128 * 200)),
    ("07_01 --no-tma", "tutorial", False, (1024, 128 * 37, 128 * 200)),
    ("merge_mix_copy (TMA B)", "program", True, (1, 37, 200)),
    ("merge_mix_copy (no TMA)", "program", False, (1, 37, 200)),
]


def _ported_module(path: str, name: str):
    import importlib.util

    sys.path.insert(0, os.path.join(ROOT, "src"))
    from warpsched.compat import port_imports

    with open(path) as f:
        text = port_imports(f.read())
    assert "cutlass.experimental.task_scheduling" not in text
    dst = os.path.join(tempfile.mkdtemp(prefix="ws_group_"), os.path.basename(path))
    with open(dst, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, dst)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def child(source: str, tma: bool, size: int) -> dict:
    """One case: compile, run once, compare. Returns {'ok', 'detail', 'compile_s'}."""
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    import torch
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    torch.manual_seed(size + 7 * tma)
    if source == "tutorial":
        mod = _ported_module(TUTORIAL, "ported_07_01")
        mod.use_tma_for_b = tma  # what --no-tma sets
        n = size
        a = torch.randn(n, dtype=torch.float16, device="cuda")
        b = torch.randn(1, n, dtype=torch.float16, device="cuda")
        da = torch.full_like(a, float("nan"))
        db = torch.full_like(b, float("nan"))
        args = [from_dlpack(t).mark_layout_dynamic() for t in (a, b, da, db)]
        t0 = time.perf_counter()
        fn = cute.compile(mod.host_function, *args, n // mod.tile_m)
        compile_s = time.perf_counter() - t0
        fn(*args)
    else:
        mod = _ported_module(PROGRAM, "ported_merge_mix")
        mod.USE_TMA = tma
        tiles = size
        a = torch.randn(tiles * mod.TILE, dtype=torch.float16, device="cuda")
        b = torch.randn(tiles, mod.TILE, dtype=torch.float16, device="cuda")
        da = torch.full_like(a, float("nan"))
        db = torch.full_like(b, float("nan"))
        args = [from_dlpack(t, assumed_align=16) for t in (a, b, da, db)]
        t0 = time.perf_counter()
        fn = cute.compile(mod.merge_host, *args, tiles)
        compile_s = time.perf_counter() - t0
        fn(*args)
    torch.cuda.synchronize()
    ok_a = bool(torch.equal(da, a)) and not bool(torch.isnan(da).any())
    ok_b = bool(torch.equal(db, b)) and not bool(torch.isnan(db).any())
    bad = []
    for name, got, want in (("A", da, a), ("B", db, b)):
        if not torch.equal(got.view(-1), want.view(-1)):
            wrong = (got.view(-1) != want.view(-1)) | torch.isnan(got.view(-1))
            bad.append(f"{name}: {int(wrong.sum())} of {got.numel()} wrong, first at {int(wrong.nonzero()[0])}")
    return {"ok": ok_a and ok_b, "detail": "; ".join(bad) or "bitwise equal, no NaN left",
            "compile_s": round(compile_s, 2)}


def run_case(source: str, tma: bool, size: int, timeout: int) -> dict:
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", source, str(int(tma)), str(size)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "status": "HANG", "detail": f"no result in {timeout} s (watchdog)"}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            r = json.loads(line[len(MARK):])
            r["status"] = "PASS" if r["ok"] else "FAIL"
            return r
    tail = [ln for ln in (p.stderr or p.stdout).strip().splitlines() if ln.strip()][-3:]
    return {"ok": False, "status": "ERROR", "detail": " | ".join(tail)[:400]}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        source, tma, size = argv[1], bool(int(argv[2])), int(argv[3])
        try:
            res = child(source, tma, size)
        except BaseException as e:  # noqa: BLE001 - reported by the parent
            res = {"ok": False, "detail": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
        print(MARK + json.dumps(res), flush=True)
        return 0
    timeout = int(os.environ.get("GROUP_TIMEOUT", "60"))
    t_all = time.perf_counter()
    results = []
    print(f"{'case':26s} {'size':>7s}  {'status':6s} {'compile s':>9s}  detail")
    for name, source, tma, sizes in CASES:
        for size in sizes:
            r = run_case(source, tma, size, timeout)
            unit = "elems" if source == "tutorial" else "tiles"
            print(f"{name:26s} {size:>7d}  {r['status']:6s} {r.get('compile_s', ''):>9}  {r['detail']} "
                  f"({unit})", flush=True)
            results.append(r)
    passed = sum(r["ok"] for r in results)
    print(f"\n{passed}/{len(results)} cases PASS in {time.perf_counter() - t_all:.0f} s "
          f"({'ALL PASS' if passed == len(results) else 'FAILURES'})")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
