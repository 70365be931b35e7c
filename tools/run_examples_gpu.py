"""Run every Hopper warpsched example on the GPU against a torch reference.

  python3 tools/run_examples_gpu.py 2>&1 | tee bench/results/gpu.log

Each case: fresh random inputs (two draws), output poisoned with NaN first, compared with a
torch reference (copies bit-exact; GEMM relative Frobenius error against fp64). Sizes
include ragged shapes. Timed cases use triton.testing.do_bench (median).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

import torch  # noqa: E402

ROWS = []


def bench(fn):
    import triton.testing

    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def record(example, shape, ok, err, ms=None, ref_ms=None, unit="", val=None, ref_val=None, note=""):
    ROWS.append((example, shape, ok, err, ms, ref_ms, unit, val, ref_val, note))
    t = f" t={ms * 1e3:.1f}us ({val:.1f} {unit}) torch={ref_ms * 1e3:.1f}us ({ref_val:.1f} {unit})" if ms else ""
    print(f"  {example:22s} {shape:28s} {'OK ' if ok else 'BAD'} err={err:.2e}{t} {note}", flush=True)


def guarded(example, shape, fn):
    try:
        fn()
    except Exception as e:  # keep going, report
        traceback.print_exc()
        record(example, shape, False, float("nan"), note=f"FAILED {type(e).__name__}: {str(e)[:200]}")


def run_grid_stride():
    import grid_stride_copy as ex

    for n, timed in ((1, False), (1000, False), (12345677, True), (64 << 20, True)):
        def case():
            ok = True
            for _ in range(2):
                x = torch.randn(n, device="cuda")
                y = torch.full_like(x, float("nan"))
                launch = ex.copy(x, y)
                torch.cuda.synchronize()
                ok &= bool(torch.equal(x, y))
            ms = ref = None
            if timed:
                ms = bench(launch)
                y2 = torch.empty_like(x)
                ref = bench(lambda: y2.copy_(x))
            nb = 2 * n * 4
            record("grid_stride_copy", f"f32[{n}]", ok, 0.0 if ok else 1.0, ms, ref, "GB/s",
                   nb / ms / 1e6 if ms else None, nb / ref / 1e6 if ref else None)
        guarded("grid_stride_copy", f"f32[{n}]", case)


def run_tma_copy():
    import tma_copy as ex

    cases = [(torch.bfloat16, (16384, 8192), True), (torch.float32, (8192, 8192), True),
             (torch.bfloat16, (5000, 3000), False), (torch.float32, (4097, 1020), False),
             (torch.bfloat16, (3, 8), False)]
    for dt, shape, timed in cases:
        name = f"{str(dt).split('.')[-1]}[{shape[0]}x{shape[1]}]"

        def case():
            ok = True
            for _ in range(2):
                x = torch.randn(shape, device="cuda").to(dt)
                y = torch.full_like(x, float("nan"))
                launch = ex.copy(x, y)
                torch.cuda.synchronize()
                ok &= bool(torch.equal(x, y))
            ms = ref = None
            if timed:
                ms = bench(launch)
                y2 = torch.empty_like(x)
                ref = bench(lambda: y2.copy_(x))
            nb = 2 * x.numel() * x.element_size()
            record("tma_copy", name, ok, 0.0 if ok else 1.0, ms, ref, "GB/s", nb / ms / 1e6 if ms else None,
                   nb / ref / 1e6 if ref else None)
        guarded("tma_copy", name, case)


def run_persistent():
    import persistent_copy as ex

    for rows, cols, extra in ((256, 1024, 4), (1000, 4096, 7), (7, 128, 0), (4096, 8192, 16)):
        name = f"f32[{rows}x{cols}] +{extra} tiles"

        def case():
            ok = True
            for _ in range(2):
                x = torch.randn(rows, cols, device="cuda")
                y = torch.full_like(x, float("nan"))
                ex.copy(x, y, overlaunch_tiles=extra)
                torch.cuda.synchronize()
                ok &= bool(torch.equal(x, y))
            record("persistent_skip_copy", name, ok, 0.0 if ok else 1.0)
        guarded("persistent_skip_copy", name, case)


def run_dynamic():
    import dynamic_copy as ex

    for rows, cols, ctas in ((256, 1024, 3), (1000, 4096 + 77, 5), (7, 128, 1), (64, 128 * 700, 132)):
        name = f"f32[{rows}x{cols}] {ctas} CTAs"

        def case():
            ok = True
            for _ in range(2):
                x = torch.randn(rows, cols, device="cuda")
                y = torch.zeros_like(x)  # y += x: a tile run twice (or never) is wrong
                counter = ex.copy(x, y, ctas)
                torch.cuda.synchronize()
                tiles = -(-cols // ex.TILE)
                drawn = int(counter.item())  # one fetch per tile run: the tiles past the grid, a miss per CTA
                ok &= bool(torch.equal(x, y)) and drawn == tiles
            record("dynamic_copy", name, ok, 0.0 if ok else float((x - y).abs().max()), note=f"counter {drawn}")
        guarded("dynamic_copy", name, case)

    def no_cluster():
        # launched without a cluster, the kernel must stop at its first tile (the check's trap: a launch failure),
        # not fault part-way as an illegal instruction; in its own process, since a trap ends the CUDA context
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:  # CuTe DSL reads a jit function's source from its file
            script = os.path.join(tmp, "no_cluster.py")
            with open(script, "w") as f:
                f.write(_NO_CLUSTER)
            r = subprocess.run([sys.executable, script], cwd=os.path.join(ROOT, "examples", "hopper"),
                               capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        trapped = "unspecified launch failure" in out and "illegal instruction" not in out
        record("dynamic_copy", "launched without a cluster", r.returncode != 0 and trapped, 0.0,
               note=f"exit {r.returncode}, {'trapped' if trapped else 'NOT the check'}; "
                    + next((line[:160] for line in reversed(out.splitlines()) if "Error" in line), ""))
    guarded("dynamic_copy", "launched without a cluster", no_cluster)


_NO_CLUSTER = """
import os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "..", "..", "src")]
import torch, cutlass, cutlass.cute as cute
import _common, dynamic_copy as ex
@cute.jit
def host(mx: cute.Tensor, my: cute.Tensor, mc: cute.Tensor, ctas: cutlass.Int32, stream):
    ex.dynamic_copy_kernel(mx, my, mc).launch(grid=[ctas, 1, 1], block=[(ex.COPY_WARPS + 1) * 32, 1, 1], stream=stream)
x = torch.randn(64, 1024, device="cuda"); y = torch.zeros_like(x); c = torch.zeros(1, dtype=torch.int32, device="cuda")
args = (_common.to_cute(x, 1), _common.to_cute(y, 1), _common.to_cute(c), cutlass.Int32(2), _common.current_stream())
cute.compile(host, *args, options=_common.PTX_OPTIONS)(*args)
torch.cuda.synchronize()
"""


def run_varlen():
    import varlen_copy as ex

    for lens in ((5, 0, 1000, 129, 1), (4096,) * 8, tuple(range(0, 3000, 37))):
        name = f"{len(lens)} segs, {sum(lens)} elems"

        def case():
            ok = True
            for _ in range(2):
                x = torch.randn(sum(lens), device="cuda")
                y = torch.full_like(x, float("nan"))
                ex.copy(x, y, list(lens))
                torch.cuda.synchronize()
                ok &= bool(torch.equal(x, y))
            record("varlen_copy", name, ok, 0.0 if ok else 1.0)
        guarded("varlen_copy", name, case)


def gemm_case(ex, M, N, K, name, timed, **gemm_kwargs):
    """One GEMM case: two fresh draws against an fp64 reference, NaN-poisoned output, timed vs cuBLAS."""
    errs = []
    for _ in range(2):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch = ex.gemm(a, b, c, **gemm_kwargs)
        torch.cuda.synchronize()
        ref = a.double() @ b.double().T
        errs.append(float((c.double() - ref).norm() / ref.norm()) if not torch.isnan(c).any()
                    else float("inf"))
    err = max(errs)
    ms = tref = None
    if timed:
        ms = bench(launch)
        c2 = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        tref = bench(lambda: torch.matmul(a, b.T, out=c2))
    fl = 2 * M * N * K
    record("wgmma_gemm", name, err < 2e-2, err, ms, tref, "TFLOP/s", fl / ms / 1e9 if ms else None,
           fl / tref / 1e9 if tref else None)


def run_gemm():
    import wgmma_gemm as ex

    cases = [((4096, 4096, 4096), True), ((8192, 8192, 8192), True), ((3000, 5000, 1000), False),
             ((129, 264, 72), False), ((128, 256, 64), False)]
    for (M, N, K), timed in cases:
        name = f"bf16 {M}x{N}x{K}"
        guarded("wgmma_gemm", name, lambda: gemm_case(ex, M, N, K, name, timed))


def run_relu():
    import relu_pipeline as ex

    for coalesced in (False, True):
        for n in (1, 2, 7, 1000):
            name = f"f32[{n}x{ex.WIDTH}]" + (" coalesced mbarriers" if coalesced else "")

            def case():
                ok = True
                for _ in range(2):
                    x = torch.randn(n, ex.WIDTH, device="cuda")
                    y = torch.full_like(x, float("nan"))
                    z = torch.zeros_like(x)
                    ex.run(x, y, z, coalesced=coalesced)
                    torch.cuda.synchronize()
                    ry, rz = ex.reference(x)
                    ok &= bool(torch.equal(y, ry)) and bool(torch.equal(z, rz))
                record("relu_pipeline", name, ok, 0.0 if ok else 1.0)
            guarded("relu_pipeline", name, case)


def run_shared_stage():
    import shared_stage as ex

    for n in (1, 2, 7, 1000):
        name = f"f32[{n}x{ex.WIDTH}]"

        def case():
            x = torch.randn(n, ex.WIDTH, device="cuda")
            y = torch.full_like(x, float("nan"))
            ex.run(x, y)
            torch.cuda.synchronize()
            ok = bool(torch.equal(y, 2 * x))
            record("shared_stage", name, ok, 0.0 if ok else 1.0)
        guarded("shared_stage", name, case)


def run_interleaved():
    import interleaved_copy as ex

    for mode in ("warp", "domain"):
        for n in (1, 2, 3, 17, 1000):
            name = f"{mode}-lane f32[{n}x{ex.WIDTH}]"

            def case():
                ok = True
                for _ in range(2):
                    x = torch.randn(n, ex.WIDTH, device="cuda")
                    y = torch.full_like(x, float("nan"))
                    ex.copy(x, y, mode=mode)
                    torch.cuda.synchronize()
                    ok &= bool(torch.equal(x, y))
                record("interleaved_copy", name, ok, 0.0 if ok else 1.0)
            guarded("interleaved_copy", name, case)


def run_gemm_cluster():
    import wgmma_gemm as ex

    for cluster in ((2, 1), (1, 2), (2, 2)):
        for (M, N, K), timed in (((8192, 8192, 8192), cluster == (2, 1)), ((3000, 5000, 1000), False),
                                 ((129, 264, 72), False)):
            name = f"bf16 {M}x{N}x{K} cluster {cluster[0]}x{cluster[1]}"
            guarded("wgmma_gemm", name, lambda: gemm_case(ex, M, N, K, name, timed, cluster_mn=cluster))


def run_groups():
    import group_add as ex

    for mode in ("merge", "fused", "fork"):
        for shape in ((4096, 4096), (1000, 300), (5, 4)):
            name = f"{mode} f32[{shape[0]}x{shape[1]}]"

            def case():
                ok = True
                for _ in range(2):
                    x, y = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
                    z, w = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
                    ex.run(x, y, z, w, mode=mode)
                    torch.cuda.synchronize()
                    ok &= bool(torch.equal(z, x) and torch.equal(w, x)) if mode == "fork" else \
                        bool(torch.equal(z, x + y))
                record("group_add", name, ok, 0.0 if ok else 1.0)
            guarded("group_add", name, case)


def run_patterns():
    """The seed's four scheduling patterns (examples/hopper/patterns), via tools/run_patterns_gpu.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_patterns_gpu", os.path.join(ROOT, "tools",
                                                                                   "run_patterns_gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("pingpong", "split", "interleaved", "leader"):
        getattr(mod, f"run_{name}")()
    for pattern, variant, shape, ok, err, note in mod.ROWS:
        record(f"pattern:{pattern}", f"{variant} {shape}", ok, err, note=note)


RUNNERS = {"grid_stride": run_grid_stride, "tma_copy": run_tma_copy, "persistent": run_persistent,
           "varlen": run_varlen, "dynamic": run_dynamic, "relu": run_relu, "shared_stage": run_shared_stage, "interleaved": run_interleaved,
           "groups": run_groups, "gemm": run_gemm, "gemm_cluster": run_gemm_cluster, "patterns": run_patterns}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", choices=list(RUNNERS), default=None)
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    t0 = time.time()
    for name, fn in RUNNERS.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name} ==", flush=True)
        try:
            fn()
        except Exception as e:
            traceback.print_exc()
            record(name, "-", False, float("nan"), note=f"FAILED {type(e).__name__}: {str(e)[:200]}")
    print(f"\n(total {time.time() - t0:.1f} s)\n")
    print("| example | shape | correct | err | warpsched | torch | ratio |")
    print("|---|---|---|---|---|---|---|")
    for ex, sh, ok, err, ms, ref, unit, val, rval, note in ROWS:
        timing = (f"{val:.1f} {unit} ({ms * 1e3:.1f} us) | {rval:.1f} {unit} ({ref * 1e3:.1f} us) | "
                  f"{val / rval:.3f}") if ms else "(untimed) | | "
        print(f"| {ex} | {sh} | {'yes' if ok else 'NO'} | {err:.1e} | {timing} | {note}".rstrip())


if __name__ == "__main__":
    main()
