"""Correctness + timing of the hand-written CuTe DSL Hopper kernels on the GPU.

  python3 bench/handwritten/run_gpu.py 2>&1 | tee bench/results/log.txt

* fresh random inputs (torch.randn) for every check, outputs poisoned with NaN first;
* copy: bit-exact comparison; GEMM: ||C - ref|| / ||ref|| against an fp64 reference
  (torch.matmul's own bf16 error printed beside it);
* timing: triton.testing.do_bench, median (p20/p80 printed too);
* copy GB/s counts bytes read + bytes written; baseline torch `dst.copy_(src)`;
  GEMM TFLOP/s = 2MNK / t; baseline torch.matmul(a, b.T, out=...) (cuBLAS);
* PTX instruction counts from the very objects that were timed (compiled with --keep-ptx).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import triton.testing

import tma_copy
import wgmma_gemm

PTX_PATTERNS = ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx",
                "cp.async.bulk.tensor", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group",
                "wgmma.mma_async", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
                "setmaxnreg", "stmatrix", "bar.sync"]


def count_ptx(ptx):
    lines = ptx.splitlines()
    return {p: sum(p in l for l in lines) for p in PTX_PATTERNS}


def bench(fn, warmup=25, rep=200):
    fn()
    torch.cuda.synchronize()
    q = triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.2, 0.5, 0.8])
    return q[1], q[0], q[2]  # median, p20, p80 (ms)


ROWS = []


def row(kind, name, shape, ok, err, t, tref, unit_val, unit_ref, unit):
    ROWS.append((kind, name, shape, ok, err, t, tref, unit_val, unit_ref, unit))
    print(f"  {kind:5s} {name:28s} {shape:22s} {'OK ' if ok else 'BAD'} err={err:.2e} "
          f"t={t[0]*1e3:9.1f}us [{t[1]*1e3:.1f},{t[2]*1e3:.1f}] ref={tref[0]*1e3:9.1f}us "
          f"{unit_val:8.1f} vs {unit_ref:8.1f} {unit}  ratio={unit_val/unit_ref:.3f}", flush=True)


def run_copy(args, ptx_counts):
    print("== TMA copy ==", flush=True)
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    variants = {  # persistent, balanced grid (see tma_copy.py)
        "32KiBx3st,lag1,2cta/sm": dict(num_stages=3, store_lag=1, max_ctas=2 * nsm),
        "32KiBx6st,lag2,1cta/sm": dict(num_stages=6, store_lag=2, max_ctas=nsm),
        "16KiBx12st,lag6,1cta/sm": dict(num_stages=12, store_lag=6, max_ctas=nsm, tile_rows_bytes=16384),
        "32KiBx3st,1 tile/CTA(grid=all)": dict(num_stages=3, store_lag=1, max_ctas=1 << 30),
    }
    cases = [(torch.bfloat16, (16384, 8192), True), (torch.float32, (8192, 8192), True),
             (torch.bfloat16, (5000, 3000), True), (torch.float32, (4097, 1020), True),
             (torch.bfloat16, (3, 8), False), (torch.float32, (1, 4), False)]
    for vname, kw in variants.items():
        kw = dict(kw)
        tile_bytes = kw.pop("tile_rows_bytes", 32768)
        for dt, shape, timed in cases:
            esz = torch.tensor([], dtype=dt).element_size()
            kw_dt = dict(kw, tile_mn=(tile_bytes // (256 * esz), 256))
            name = f"{vname}"
            sh = f"{str(dt).split('.')[-1]}[{shape[0]}x{shape[1]}]"
            try:
                ok = True
                for _ in range(2):  # two fresh draws
                    x = torch.randn(shape, device="cuda", dtype=torch.float32).to(dt)
                    y = torch.full_like(x, float("nan"))
                    launch = tma_copy.tma_copy(x, y, options=tma_copy.PTX_OPTIONS, **kw_dt)
                    torch.cuda.synchronize()
                    ok &= bool(torch.equal(x, y))
                key = f"copy {str(dt).split('.')[-1]} {vname}"
                if key not in ptx_counts:
                    f, _, _ = tma_copy.get_compiled(x, y, options=tma_copy.PTX_OPTIONS, **kw_dt)
                    ptx_counts[key] = count_ptx(f.artifacts.PTX)
                nbytes = 2 * x.numel() * x.element_size()
                if timed:
                    t = bench(launch)
                    y2 = torch.empty_like(x)
                    tref = bench(lambda: y2.copy_(x))
                else:
                    t = tref = (float("nan"),) * 3
                row("copy", name, sh, ok, 0.0 if ok else 1.0, t, tref,
                    nbytes / t[0] / 1e6, nbytes / tref[0] / 1e6, "GB/s")
                del x, y
            except Exception as e:  # keep going, report
                print(f"  copy {name} {sh} FAILED: {type(e).__name__}: {str(e)[:400]}", flush=True)
                ROWS.append(("copy", name, sh, False, float("nan"), (0, 0, 0), (0, 0, 0), 0, 1, "FAIL"))


def run_gemm(args, ptx_counts):
    print("== WGMMA GEMM ==", flush=True)
    cases = [((4096, 4096, 4096), torch.bfloat16, True), ((8192, 8192, 8192), torch.bfloat16, True),
             ((4096, 4096, 4096), torch.float32, True), ((3000, 5000, 1000), torch.bfloat16, True),
             ((129, 264, 72), torch.bfloat16, False), ((7, 8, 8), torch.float32, False),
             ((6144, 6144, 6144), torch.bfloat16, True)]
    for (M, N, K), cdt, timed in cases:
        sh = f"{M}x{N}x{K}->{str(cdt).split('.')[-1]}"
        try:
            errs = []
            for _ in range(2):  # two fresh draws
                a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
                c = torch.full((M, N), float("nan"), device="cuda", dtype=cdt)
                launch = wgmma_gemm.gemm(a, b, c, options=wgmma_gemm.PTX_OPTIONS)
                torch.cuda.synchronize()
                ref = a.double() @ b.double().T
                nan = int(torch.isnan(c).sum())
                errs.append(float((c.double() - ref).norm() / ref.norm()) if nan == 0 else float("inf"))
                tm_err = float((torch.matmul(a, b.T).double() - ref).norm() / ref.norm())
            err = max(errs)
            ok = err < (2e-2 if cdt == torch.bfloat16 else 1e-4)
            print(f"  gemm {sh}: rel err {errs} (torch bf16 matmul: {tm_err:.2e}), nan={nan}", flush=True)
            key = f"gemm ->{str(cdt).split('.')[-1]}"
            if key not in ptx_counts:
                f, *_ = wgmma_gemm.get_compiled(a, b, c, options=wgmma_gemm.PTX_OPTIONS)
                ptx_counts[key] = count_ptx(f.artifacts.PTX)
            flops = 2 * M * N * K
            if timed:
                t = bench(launch)
                c2 = torch.empty(M, N, device="cuda", dtype=cdt)
                if cdt == torch.bfloat16:
                    tref = bench(lambda: torch.matmul(a, b.T, out=c2))
                else:  # cuBLAS bf16 in, fp32 out is not exposed by torch.matmul; time bf16 out
                    c3 = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                    tref = bench(lambda: torch.matmul(a, b.T, out=c3))
            else:
                t = tref = (float("nan"),) * 3
            row("gemm", "tma+wgmma 128x256x64 ws g16", sh, ok, err, t, tref,
                flops / t[0] / 1e9, flops / tref[0] / 1e9, "TFLOP/s")
            del a, b, c, ref
        except Exception as e:
            print(f"  gemm {sh} FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)
            ROWS.append(("gemm", "tma+wgmma", sh, False, float("nan"), (0, 0, 0), (0, 0, 0), 0, 1, "FAIL"))


def sweep():
    """Tuning sweep: each config timed twice, interleaved with the torch baseline."""
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print("== copy sweep (median us: ours x2 | torch x2) ==", flush=True)
    cfgs = [("32K x3 lag1 2/sm", 32768, dict(num_stages=3, store_lag=1, max_ctas=2 * nsm)),
            ("32K x3 lag1 2/sm chunked", 32768, dict(num_stages=3, store_lag=1, max_ctas=2 * nsm, chunked=True)),
            ("32K x6 lag2 1/sm chunked", 32768, dict(num_stages=6, store_lag=2, max_ctas=nsm, chunked=True)),
            ("32K x1 lag0 6/sm", 32768, dict(num_stages=1, store_lag=0, max_ctas=6 * nsm)),
            ("32K x2 lag0 3/sm", 32768, dict(num_stages=2, store_lag=0, max_ctas=3 * nsm)),
            ("16K x2 lag0 6/sm", 16384, dict(num_stages=2, store_lag=0, max_ctas=6 * nsm)),
            ("32K x3 lag1 grid=all", 32768, dict(num_stages=3, store_lag=1, max_ctas=1 << 30))]
    if os.environ.get("SWEEP_COPY_OLD"):
      cfgs = [("32K x6 lag2 1/sm", 32768, dict(num_stages=6, store_lag=2, max_ctas=nsm)),
            ("32K x6 lag4 1/sm", 32768, dict(num_stages=6, store_lag=4, max_ctas=nsm)),
            ("32K x3 lag1 2/sm", 32768, dict(num_stages=3, store_lag=1, max_ctas=2 * nsm)),
            ("32K x3 lag2 2/sm", 32768, dict(num_stages=3, store_lag=2, max_ctas=2 * nsm)),
            ("16K x12 lag6 1/sm", 16384, dict(num_stages=12, store_lag=6, max_ctas=nsm)),
            ("16K x6 lag3 2/sm", 16384, dict(num_stages=6, store_lag=3, max_ctas=2 * nsm)),
            ("32K x2 lag1 3/sm", 32768, dict(num_stages=2, store_lag=1, max_ctas=3 * nsm)),
            ("32K x6 lag2 grid=all", 32768, dict(num_stages=6, store_lag=2, max_ctas=1 << 30)),
            ("32K x3 lag1 grid=all", 32768, dict(num_stages=3, store_lag=1, max_ctas=1 << 30))]
    for dt, shape in [(torch.bfloat16, (16384, 8192)), (torch.float32, (8192, 8192))]:
        x = torch.randn(shape, device="cuda", dtype=torch.float32).to(dt)
        y = torch.full_like(x, float("nan"))
        nbytes = 2 * x.numel() * x.element_size()
        for name, tb, kw in cfgs:
            kw = dict(kw, tile_mn=(tb // (256 * x.element_size()), 256))
            try:
                y.fill_(float("nan"))
                launch = tma_copy.tma_copy(x, y, **kw)
                torch.cuda.synchronize()
                ok = bool(torch.equal(x, y))
                ts = []
                for _ in range(2):
                    ts.append(bench(launch)[0])
                    ts.append(bench(lambda: y.copy_(x))[0])
                print(f"  {str(dt).split('.')[-1]:8s} {name:22s} ok={ok} ours {ts[0]*1e3:6.1f} {ts[2]*1e3:6.1f} | "
                      f"torch {ts[1]*1e3:6.1f} {ts[3]*1e3:6.1f}  -> {nbytes/min(ts[0],ts[2])/1e6:.0f} vs "
                      f"{nbytes/min(ts[1],ts[3])/1e6:.0f} GB/s", flush=True)
            except Exception as e:
                print(f"  {name} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    if os.environ.get("SWEEP_COPY_ONLY"):
        return
    print("== gemm sweep (median us: ours x2 | torch x2) ==", flush=True)
    for (M, N, K) in [(4096, 4096, 4096), (8192, 8192, 8192), (3000, 5000, 1000), (2048, 2048, 2048)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        c2 = torch.empty_like(c)
        ref = torch.matmul(a, b.T).float()
        for kw in [dict(tile_mn=(128, 256), group_m=8), dict(tile_mn=(128, 256), group_m=16),
                   dict(tile_mn=(128, 128), group_m=8)]:
            try:
                c.fill_(float("nan"))
                launch = wgmma_gemm.gemm(a, b, c, **kw)
                torch.cuda.synchronize()
                err = float((c.float() - ref).norm() / ref.norm())
                ts = []
                for _ in range(2):
                    ts.append(bench(launch)[0])
                    ts.append(bench(lambda: torch.matmul(a, b.T, out=c2))[0])
                fl = 2 * M * N * K
                print(f"  {M}x{N}x{K} {str(kw):40s} err_vs_torch={err:.1e} ours {ts[0]*1e3:7.1f} {ts[2]*1e3:7.1f} | "
                      f"torch {ts[1]*1e3:7.1f} {ts[3]*1e3:7.1f} -> {fl/min(ts[0],ts[2])/1e9:.0f} vs "
                      f"{fl/min(ts[1],ts[3])/1e9:.0f} TFLOP/s", flush=True)
            except Exception as e:
                print(f"  {kw} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["copy", "gemm"], default=None)
    ap.add_argument("--sweep", action="store_true", help="tuning sweep only")
    args = ap.parse_args()
    if args.sweep:
        return sweep()
    print(f"device: {torch.cuda.get_device_name()}  SMs: {torch.cuda.get_device_properties(0).multi_processor_count}"
          f"  torch {torch.__version__}  triton {triton.__version__}", flush=True)
    t0 = time.time()
    ptx_counts = {}
    if args.only in (None, "copy"):
        run_copy(args, ptx_counts)
    if args.only in (None, "gemm"):
        run_gemm(args, ptx_counts)
    print(f"\n(total {time.time() - t0:.1f} s)")
    print("\n## PTX instruction counts (lines containing the pattern)")
    keys = list(ptx_counts)
    print("| pattern | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for p in PTX_PATTERNS:
        print(f"| {p} | " + " | ".join(str(ptx_counts[k][p]) for k in keys) + " |")
    print("\n## Results (median of do_bench; [p20,p80] in the log above)")
    print("| kernel | variant | shape | correct | err | ours | torch | ours/torch |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, name, sh, ok, err, t, tref, uv, ur, unit in ROWS:
        if unit == "FAIL":
            print(f"| {kind} | {name} | {sh} | FAIL | - | - | - | - |")
        elif t[0] != t[0]:  # untimed
            print(f"| {kind} | {name} | {sh} | {'yes' if ok else 'NO'} | {err:.1e} | (untimed) | | |")
        else:
            print(f"| {kind} | {name} | {sh} | {'yes' if ok else 'NO'} | {err:.1e} | "
                  f"{uv:.1f} {unit} ({t[0]*1e3:.1f} us) | {ur:.1f} {unit} ({tref[0]*1e3:.1f} us) | {uv/ur:.3f} |")


if __name__ == "__main__":
    main()
