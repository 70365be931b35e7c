"""Zero overhead: hand-written CuTe DSL kernels (bench/handwritten/) vs the same kernels
written as warpsched programs (examples/hopper/), in one run, one table.

  python3 bench/zero_overhead.py 2>&1 | tee bench/results/zero.log

For the TMA copy and the TMA+WGMMA GEMM:
  * PTX instruction counts (mbarrier init / arrive / try_wait / expect_tx, TMA, wgmma, setmaxnreg)
    of the very objects that are timed;
  * runtime: triton.testing.do_bench median, ROUNDS alternating rounds (hw, ws, hw, ws, ...); the
    ratio is median(ws) / median(hw); "noise" is the hand-written kernel's own round-to-round spread
    (max/min of its round medians);
  * the TMA copy's bandwidth against torch ``dst.copy_(src)`` on the same bytes (bytes read + written).
"""
from __future__ import annotations

import importlib.util
import os
import statistics
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import torch  # noqa: E402
import triton.testing  # noqa: E402

ROUNDS = 5
PATTERNS = ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx", "cp.async.bulk.tensor",
            "wgmma.mma_async", "setmaxnreg"]
MBAR = PATTERNS[:4]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


hw_copy = load("hw_tma_copy", os.path.join(ROOT, "bench", "handwritten", "tma_copy.py"))
hw_gemm = load("hw_wgmma_gemm", os.path.join(ROOT, "bench", "handwritten", "wgmma_gemm.py"))
ws_copy = load("ws_tma_copy", os.path.join(ROOT, "examples", "hopper", "tma_copy.py"))
ws_gemm = load("ws_wgmma_gemm", os.path.join(ROOT, "examples", "hopper", "wgmma_gemm.py"))


def counts(ptx):
    lines = ptx.splitlines()
    return {p: sum(p in line for line in lines) for p in PATTERNS}


def timed(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median")


def rounds(fns):
    out = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, fn in fns.items():
            out[k].append(timed(fn))
    return {k: (statistics.median(v), max(v) / min(v)) for k, v in out.items()}


TABLE = []


def compare(kernel, shape, hw_ptx, ws_ptx, res, extra=""):
    ch, cw = counts(hw_ptx), counts(ws_ptx)
    same = all(ch[p] == cw[p] for p in MBAR)
    (th, nh), (tw, _) = res["hw"], res["ws"]
    TABLE.append((kernel, shape, ch, cw, same, th, tw, tw / th, nh, extra))
    print(f"{kernel} {shape}: hw {th * 1e3:.1f}us ws {tw * 1e3:.1f}us ratio {tw / th:.3f} (hw noise {nh:.3f}) "
          f"mbarrier counts {'equal' if same else 'DIFFER'} {extra}", flush=True)


def run_copy():
    cfg = dict(num_stages=3, store_lag=1)
    for dt, shape in ((torch.bfloat16, (16384, 8192)), (torch.float32, (8192, 8192))):
        x = torch.randn(shape, device="cuda").to(dt)
        y_hw, y_ws, y_t = torch.full_like(x, float("nan")), torch.full_like(x, float("nan")), torch.empty_like(x)
        f_hw = hw_copy.tma_copy(x, y_hw, options=hw_copy.PTX_OPTIONS, **cfg)
        f_ws = ws_copy.copy(x, y_ws, **cfg)
        torch.cuda.synchronize()
        ok = torch.equal(x, y_hw) and torch.equal(x, y_ws)
        res = rounds({"hw": f_hw, "ws": f_ws, "torch": lambda: y_t.copy_(x)})
        nbytes = 2 * x.numel() * x.element_size()
        bw_ws, bw_t = nbytes / res["ws"][0] / 1e6, nbytes / res["torch"][0] / 1e6
        hw_ptx = hw_copy.get_compiled(x, y_hw, options=hw_copy.PTX_OPTIONS, **cfg)[0].artifacts.PTX
        ws_ptx = ws_copy.compiled_for(x, y_ws, **cfg).artifacts.PTX
        compare("TMA copy", f"{str(dt).split('.')[-1]}[{shape[0]}x{shape[1]}]", hw_ptx, ws_ptx, res,
                f"ws {bw_ws:.0f} GB/s = {bw_ws / bw_t:.3f} x torch copy ({bw_t:.0f} GB/s); "
                f"{'both bit-exact' if ok else 'COPY MISMATCH'}")


def run_gemm():
    for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        c_hw = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        c_ws = torch.full_like(c_hw, float("nan"))
        c_t = torch.empty_like(c_hw)
        f_hw = hw_gemm.gemm(a, b, c_hw, options=hw_gemm.PTX_OPTIONS)
        f_ws = ws_gemm.gemm(a, b, c_ws)
        torch.cuda.synchronize()
        ref = a.double() @ b.double().T
        err = float((c_ws.double() - ref).norm() / ref.norm())
        same_bits = torch.equal(c_hw, c_ws)
        res = rounds({"hw": f_hw, "ws": f_ws, "torch": lambda: torch.matmul(a, b.T, out=c_t)})
        fl = 2 * M * N * K
        tf_ws, tf_t = fl / res["ws"][0] / 1e9, fl / res["torch"][0] / 1e9
        hw_ptx = hw_gemm.get_compiled(a, b, c_hw, options=hw_gemm.PTX_OPTIONS)[0].artifacts.PTX
        ws_ptx = ws_gemm.compiled_for(a, c_ws).artifacts.PTX
        compare("WGMMA GEMM", f"bf16 {M}x{N}x{K}", hw_ptx, ws_ptx, res,
                f"ws {tf_ws:.0f} TFLOP/s, torch {tf_t:.0f} TFLOP/s; ws rel err {err:.1e}; "
                f"{'ws == hw bitwise' if same_bits else 'ws != hw bitwise'}")


def main():
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  rounds {ROUNDS}", flush=True)
    run_copy()
    run_gemm()
    print("\n| kernel | shape | mbarrier init/arrive/try_wait/expect_tx hw | ws | equal | TMA hw/ws | wgmma hw/ws "
          "| setmaxnreg hw/ws | hw (us) | warpsched (us) | ws/hw | hw noise | notes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kernel, shape, ch, cw, same, th, tw, ratio, nh, extra in TABLE:
        mb = lambda c: "/".join(str(c[p]) for p in MBAR)  # noqa: E731
        print(f"| {kernel} | {shape} | {mb(ch)} | {mb(cw)} | {'yes' if same else 'NO'} | "
              f"{ch['cp.async.bulk.tensor']}/{cw['cp.async.bulk.tensor']} | {ch['wgmma.mma_async']}/"
              f"{cw['wgmma.mma_async']} | {ch['setmaxnreg']}/{cw['setmaxnreg']} | {th * 1e3:.1f} | {tw * 1e3:.1f} | "
              f"{ratio:.3f} | {nh:.3f} | {extra} |")


if __name__ == "__main__":
    main()
