"""Compile every kernel the GPU runners launch, on the CPU (fake tensors, no GPU), with the checks
and the exhaustive checker running inside each trace; print per kernel: compile seconds, the
checker's verdict / states / seconds in the trace, whether a recompile is served from the
verdict cache, and whether the kernel's program is the CPU ``build()``'s (equal fingerprints).

  PYTHONPATH=src python3 tools/compile_examples_cpu.py [--only NAME ...]

Covers the kernels of tools/run_examples_gpu.py and tools/run_patterns_gpu.py (their
configurations; sizes are runtime values, so one compile covers every shape) plus the Blackwell
examples (sm_100a). Exit status 1 if any kernel fails to compile or checks a different program.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import warnings

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ["WARPSCHED_VERDICT_CACHE"] = "0"  # this script times the search and counts checker runs
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("examples/hopper", "examples/hopper/patterns", "examples/blackwell", "examples/blackwell/patterns"):
    sys.path.insert(0, os.path.join(ROOT, sub))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

import cutlass  # noqa: E402

import warpsched.manager as manager_mod  # noqa: E402
from warpsched.verify.verdicts import VERDICTS  # noqa: E402

# (module, compile_for_cpu kwargs, build kwargs for the same program); build None: no CPU twin to compare
CASES = [
    ("grid_stride_copy", {}, {}),
    ("tma_copy", {}, {}),
    ("tma_copy", dict(dtype=cutlass.Float32), dict(dtype=cutlass.Float32)),
    ("persistent_copy", {}, {}),
    ("varlen_copy", {}, {}),
    ("relu_pipeline", {}, {}),
    ("relu_pipeline", dict(coalesced=True), dict(coalesced_barriers=True)),
    ("shared_stage", {}, {}),
    ("interleaved_copy", dict(mode="warp"), dict(mode="warp")),
    ("interleaved_copy", dict(mode="domain"), dict(mode="domain")),
    ("group_add", dict(mode="merge"), dict(mode="merge")),
    ("group_add", dict(mode="fused"), dict(mode="fused")),
    ("group_add", dict(mode="fork"), dict(mode="fork")),
    ("wgmma_gemm", {}, {}),
    ("wgmma_gemm", dict(cluster_mn=(2, 1)), dict(cluster_mn=(2, 1))),
    ("wgmma_gemm", dict(cluster_mn=(1, 2)), dict(cluster_mn=(1, 2))),
    ("wgmma_gemm", dict(cluster_mn=(2, 2)), dict(cluster_mn=(2, 2))),
    ("pingpong", dict(kind="async_async"), dict(kind="async_async")),
    ("pingpong", dict(kind="tma_async"), dict(kind="tma_async")),
    ("split_consumer", {}, {}),
    ("split_consumer", dict(cluster=True), dict(cluster=True)),
    ("interleaved", dict(mode="warp_lane"), dict(mode="warp_lane")),
    ("interleaved", dict(mode="per_role"), dict(mode="per_role")),
    ("interleaved", dict(mode="domain_lane"), dict(mode="domain_lane")),
    ("leader_routed", {}, {}),
    ("leader_routed", dict(cluster=True), dict(cluster=True)),
    ("tcgen05_gemm", {}, {}),
    ("clc_copy", {}, {}),
    ("umma_patterns", dict(mode="warp_lane_tma_umma"), None),
    ("umma_patterns", dict(mode="domain_lane_umma"), None),
    ("tcgen05_gemm_2cta", {}, {}),
    ("umma_pairs", dict(mode="split_consumer"), dict(mode="split_consumer")),
    ("umma_pairs", dict(mode="leader_routed"), dict(mode="leader_routed")),
]

CHECKER_RUNS = []
_real = manager_mod.run_checker


def _timed(program, progress=False):
    t = time.perf_counter()
    r = _real(program, progress=progress)
    CHECKER_RUNS.append((time.perf_counter() - t, r))
    return r


def _umma_builder(mode):
    m = importlib.import_module("umma_patterns")
    return m.build_warp_lane if mode == "warp_lane_tma_umma" else m.build_domain_lane


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None, help="module names")
    args = ap.parse_args()
    manager_mod.run_checker = _timed
    warnings.simplefilter("ignore")
    bad = 0
    print(f"{'kernel':44s} {'compile':>8s} {'checker':>8s} {'states':>7s} verdict  recompile  same program as build()")
    for name, ckw, bkw in CASES:
        if args.only and name not in args.only:
            continue
        mod = importlib.import_module(name)
        label = name + (" " + ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in ckw.items()) if ckw else "")
        CHECKER_RUNS.clear()
        VERDICTS.clear()
        t0 = time.perf_counter()
        try:
            mod.compile_for_cpu(**ckw)
        except Exception as e:  # noqa: BLE001 - report and go on
            bad += 1
            print(f"{label:44s} FAILED {type(e).__name__}: {str(e)[:400]}")
            continue
        seconds = time.perf_counter() - t0
        traced = VERDICTS.looked_up[-1]
        (chk_s, res), = CHECKER_RUNS
        mod.compile_for_cpu(**ckw)
        recompile = "cached" if len(CHECKER_RUNS) == 1 and VERDICTS.hits == 1 else "RERAN"
        if bkw is None:
            builder = _umma_builder(ckw["mode"])
            same = builder(verbose=False, exhaustive_deadlock_race_check=False).fingerprint == traced
        else:
            same = mod.build(verbose=False, exhaustive_deadlock_race_check=False, **bkw).fingerprint == traced
        bad += (not same) + (recompile != "cached")
        print(f"{label:44s} {seconds:7.2f}s {chk_s:7.3f}s {res.states:7d} {res.verdict:8s} {recompile:9s}  "
              f"{'yes' if same else 'NO'} ({traced[:16]})", flush=True)
    print("all kernels compiled, checked in the trace, cached on recompile, same program as build()" if not bad
          else f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
