"""Issue 13's large-shape A/B on the H200: the cooperative 128x256 GEMM as it is, its epilogue and
cluster / raster variants, CUTLASS's CuTe DSL Hopper persistent GEMM example (the same tile, run
side by side from tools/third_party/) and torch.matmul (cuBLAS), alternating, median of the
rounds, on the five large shapes.

  export WARPSCHED_CACHE_DIR=/tmp/wscache && \\
      python3 tools/gemm_big.py 2>&1 | tee bench/results/gemm_big.log
  ... --sides coop,coop_es,cutlass --shapes 4096x4096x4096 --rounds 5     (torch is always timed; the
      first side is the reference of the last column)
  PYTHONPATH=src python3 tools/gemm_big.py --cpu     (no GPU: parses the sides and shapes and
      compiles every side for sm_90a against fake tensors, with its PTX barrier / store-wait counts)

Correctness first: every side on every timed shape (fresh random bf16 inputs, NaN-poisoned C, the
relative Frobenius error against an fp64 reference < 1e-2, any non-finite value fails; through a
CUDA graph, the path that is timed), and the epilogue variants on ragged shapes (N not a tile
multiple, M not a tile multiple, K % 64 != 0). Timing: ``--rounds`` rounds, the sides in a rotated
order each round, each a triton do_bench median over CUDA-graph replays. The work runs in a child
process with a time limit, so a hanging kernel ends the run with what was printed so far.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/: timing helpers, sweep configurations
CUTLASS_EXAMPLE = os.path.join(HERE, "third_party", "cutlass_hopper_dense_gemm_persistent.py")
COOP = dict(schedule="cooperative", tile_mn=(128, 256))
SIDES = {
    "coop": dict(COOP),  # today's coop128x256: raster m, group 8, epilogue 128x32 x 4 buffers, 2 barriers each
    "coop_es": dict(COOP, epi_sync="single"),  # one named barrier per epilogue sub-tile
    "coop_e64": dict(COOP, epi_n=64),  # 128x64 sub-tiles: 4 TMA stores per tile, 2 buffers
    "coop_e64s": dict(COOP, epi_n=64, epi_sync="single"),
    "coop_g16": dict(COOP, group=16),
    "coop_g16es": dict(COOP, group=16, epi_sync="single"),
    # 4096 x N: a group of all 32 M tiles keeps A (32 MB) in L2 and reads B once
    "coop_g32es": dict(COOP, group=32, epi_sync="single"),
    "coop_g32esl2a": dict(COOP, group=32, epi_sync="single", l2_hint="a_last"),
    "coop_c21": dict(COOP, cluster_mn=(2, 1)),  # B multicast to the CTA pair along M
    "coop_c21es": dict(COOP, cluster_mn=(2, 1), epi_sync="single"),
    "coop_c21g16es": dict(COOP, cluster_mn=(2, 1), group=16, epi_sync="single"),
    "coop256x128es": dict(schedule="cooperative", tile_mn=(256, 128), epi_sync="single"),
    # L2 eviction hints on the A / B loads (the DSL passes hint 0; CUTLASS C++ EVICT_NORMAL)
    "coop_l2n": dict(COOP, l2_hint="normal"),
    "coop_l2a": dict(COOP, l2_hint="a_last"),
    "coop_l2ab": dict(COOP, l2_hint="a_last_b_first"),
    "coop_esl2a": dict(COOP, epi_sync="single", l2_hint="a_last"),
    # 128x256x32 stages: 8 in the SMEM of 4 (more bytes in flight while the math warp groups read one)
    "coop_k32": dict(COOP, block_k=32),
    "coop_k32es": dict(COOP, block_k=32, epi_sync="single"),
    "coop_c21k32es": dict(COOP, cluster_mn=(2, 1), block_k=32, epi_sync="single"),
    # CUTLASS's example: 128x256x64, 2 consumer warp groups, 4 stages, epilogue 128x32 x 4 (swizzle 8 along M)
    "cutlass": dict(cluster_mn=(1, 1)),
    "cutlass_c21": dict(cluster_mn=(2, 1)),
}
DEFAULT_SIDES = ["coop", "coop_es", "coop_e64s", "coop_l2n", "coop_l2a", "coop_k32", "coop_k32es", "coop_g16es",
                 "coop_g32es", "coop_c21", "coop_c21es", "cutlass"]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (16384, 4096, 4096), (4096, 128256, 4096)]
# the epilogue variants' ragged checks: M, N not tile multiples, K % 64 != 0, one tile, a ragged last wave
RAGGED = [(129, 264, 72), (200, 136, 40), (127, 4104, 4096), (3000, 5000, 1000), (1000, 2056, 4104), (128, 256, 64)]
TOL = 1e-2


def parse_shapes(text):
    out = []
    for s in text.split(","):
        dims = s.lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise SystemExit(f"--shapes: {s!r} is not MxNxK (e.g. 4096x4096x4096)")
        out.append(tuple(int(d) for d in dims))
    return out


def parse_sides(text):
    sides = [s for s in text.split(",") if s]
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise SystemExit(f"--sides: unknown {unknown or text!r}; choose from {sorted(SIDES)}")
    return sides


def is_cutlass(side):
    return side.startswith("cutlass")


def load_cutlass_example():
    spec = importlib.util.spec_from_file_location("cutlass_hopper_dense_gemm_persistent", CUTLASS_EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cutlass_kernel(mod, side):
    import cutlass

    # 128x256 tile (two consumer warp groups), raster along M with swizzle 8: our coop128x256's order
    return mod.HopperWgmmaGemmPersistentKernel(cutlass.Float32, (128, 256), SIDES[side]["cluster_mn"], 8, True)


# ---------------------------------------------------------------------------------- CPU dry run
def cpu(args):
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    sys.path.insert(0, os.path.join(ROOT, "src"))
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    from warpsched.kernels.gemm import host as gp

    mod = None
    for side in args.sides:
        t0 = time.time()
        if is_cutlass(side):
            mod = mod or load_cutlass_example()
            M, N, K = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=8)

            def mkl(r, c):
                return make_fake_tensor(cutlass.BFloat16, (r, c, 1), (cute.sym_int64(divisibility=8), 1,
                                                                      cute.sym_int64(divisibility=8)), assumed_align=16)

            kern = cutlass_kernel(mod, side)
            size = SIDES[side]["cluster_mn"][0] * SIDES[side]["cluster_mn"][1]
            with tempfile.TemporaryDirectory() as dump:  # --keep-ptx writes a file: not into the work tree
                ptx = cute.compile(kern, mkl(M, K), mkl(N, K), mkl(M, N), 132 // size, make_fake_stream(),
                                   options=f"--keep-ptx --dump-dir={dump}").artifacts.PTX
            what = f"CUTLASS example 128x256 cluster {SIDES[side]['cluster_mn']}, stages {kern.ab_stage} epi {kern.epi_stage}"
        else:
            ptx = gp.compile_for_cpu(**SIDES[side]).artifacts.PTX
            what = gp.PersistentGemm(**SIDES[side]).describe()
        counts = {k: ptx.count(k) for k in ("bar.sync", "cp.async.bulk.wait_group.read", "wgmma.mma_async",
                                            "mbarrier.try_wait", "multicast::cluster")}
        print(f"cpu compile {side:14s} {time.time() - t0:5.1f} s  {what}  ptx {counts}", flush=True)
    print(f"shapes {['x'.join(map(str, s)) for s in args.shape_list]}: ok")
    return 0


# ---------------------------------------------------------------------------------- GPU child
def child(args):
    import torch
    import triton.testing
    from _graphs import graph_ms, launch_poisoned, print_ratio_table, rel_error, time_rounds

    from warpsched.kernels.gemm import host as gp
    from warpsched.verify.verdicts import VERDICTS

    dev = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs, "
          f"torch {torch.__version__}", flush=True)
    mod = load_cutlass_example() if any(is_cutlass(s) for s in args.sides) else None
    cutlass_compiled = {}

    def cutlass_launcher(side, a, b, c):
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass.cute.runtime import from_dlpack
        from cutlass.utils import HardwareInfo

        def mkl(t):  # (rows, K) row-major as the example's (rows, K, L=1): its own (l, m, k).permute(1, 2, 0)
            return from_dlpack(t.unsqueeze(0).permute(1, 2, 0), assumed_align=16).mark_layout_dynamic(leading_dim=1)

        ma, mb, mc = mkl(a), mkl(b), mkl(c)
        if side not in cutlass_compiled:
            size = SIDES[side]["cluster_mn"][0] * SIDES[side]["cluster_mn"][1]
            stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
            cutlass_compiled[side] = cute.compile(cutlass_kernel(mod, side), ma, mb, mc,
                                                  HardwareInfo().get_max_active_clusters(size), stream)
        f = cutlass_compiled[side]
        return lambda: f(ma, mb, mc, cuda.CUstream(torch.cuda.current_stream().cuda_stream))

    def launcher(side, a, b, c):
        if side == "torch":
            bt = b.t()
            return lambda: torch.mm(a, bt, out=c)
        if is_cutlass(side):
            return cutlass_launcher(side, a, b, c)
        return lambda: gp.gemm(a, b, c, **SIDES[side], split_k=1)  # reads the current stream (graph capture)

    def inputs(M, N, K):
        return (torch.randn(M, K, device=dev, dtype=torch.bfloat16),
                torch.randn(N, K, device=dev, dtype=torch.bfloat16))

    def check(sides, M, N, K, graph):
        a, b = inputs(M, N, K)
        ref = torch.mm(a.double(), b.double().t())
        bad = 0
        for side in sides:
            c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
            launch_poisoned(torch, launcher(side, a, b, c), c, graph)
            err = rel_error(torch, c, ref)
            ok = err < TOL  # False for NaN
            bad += not ok
            print(f"check {side:14s} {M}x{N}x{K}{' graph' if graph else ''}: {'ok' if ok else 'FAIL'} err {err:.2e}",
                  flush=True)
            del c
        del ref
        return bad

    for side in list(args.sides):  # compile (ours: trace, check, compile; report the checker's verdict)
        t0 = time.time()
        a, b = inputs(256, 264, 1024)
        c = torch.empty(256, 264, device=dev, dtype=torch.bfloat16)
        try:
            launcher(side, a, b, c)()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - one side that does not build must not cost the others' run
            print(f"compile {side}: FAILED ({type(e).__name__}: {str(e)[:400]}); dropped", flush=True)
            args.sides.remove(side)
            continue
        if is_cutlass(side):
            print(f"compile {side}: {time.time() - t0:.1f} s, CUTLASS example 128x256 cluster "
                  f"{SIDES[side]['cluster_mn']}", flush=True)
        else:
            verdict = gp.verdict_for(a, c, **SIDES[side])
            print(f"compile {side}: {time.time() - t0:.1f} s, checker {verdict} (program "
                  f"{VERDICTS.looked_up[-1][:12]}), {gp.PersistentGemm(**SIDES[side]).describe()}", flush=True)
    failures = 0
    variants = [s for s in args.sides if not is_cutlass(s)]
    for shape in RAGGED:
        failures += check(variants, *shape, graph=False)
    for shape in args.shape_list:
        failures += check(args.sides, *shape, graph=True)
    print(f"correctness: {failures} failure(s)", flush=True)
    if failures and not args.time_anyway:
        print("not timing: a side failed its check (--time-anyway to time regardless)", flush=True)
        return failures

    # the clocks settle under a sustained GEMM load before the first timing (the H200s throttle)
    a, b = inputs(8192, 8192, 8192)
    c = torch.empty(8192, 8192, device=dev, dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < args.warmup_s:
        for _ in range(20):
            torch.mm(a, b.t(), out=c)
        torch.cuda.synchronize()
    del a, b, c
    sides = ["torch"] + args.sides
    results = {}
    for M, N, K in args.shape_list:
        a, b = inputs(M, N, K)
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        runs = {s: launcher(s, a, b, c) for s in sides}
        est = 2.0 * M * N * K / 700e12 * 1e3
        results[(M, N, K)] = time_rounds((M, N, K), runs, args.rounds, lambda run: graph_ms(
            torch, triton.testing.do_bench, run, est, args.rep_ms))
        del a, b, c, runs
    print_ratio_table(results, args.sides, vs_ref=True)
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep-ms", type=int, default=40)
    p.add_argument("--limit", type=int, default=280, help="seconds the child may run")
    p.add_argument("--sides", default=",".join(DEFAULT_SIDES), help=f"comma-separated, of {sorted(SIDES)}")
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES), help="MxNxK,...")
    p.add_argument("--warmup-s", type=float, default=3.0, help="seconds of torch.mm load before the timings")
    p.add_argument("--time-anyway", action="store_true", help="time even when a correctness check failed")
    p.add_argument("--cpu", action="store_true", help="no GPU: compile every side for sm_90a and stop")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sides = parse_sides(args.sides)
    args.shape_list = parse_shapes(args.shapes)
    if args.cpu:
        sys.exit(cpu(args))
    if args.child:
        sys.exit(1 if child(args) else 0)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rounds", str(args.rounds), "--rep-ms",
           str(args.rep_ms), "--sides", ",".join(args.sides), "--shapes", args.shapes, "--warmup-s",
           str(args.warmup_s)] + (
        ["--time-anyway"] if args.time_anyway else [])
    from _graphs import run_child
    run_child(cmd, args.limit)


if __name__ == "__main__":
    main()
