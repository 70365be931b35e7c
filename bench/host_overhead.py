"""What a PyTorch model pays per call: warpsched's launch path against torch, on the H200.

  python3 bench/host_overhead.py 2>&1 | tee bench/results/host_overhead.log

1. Correctness of the TVM-FFI launch path (fresh random inputs, outputs poisoned with NaN, fp64
   references): bf16 GEMMs of several shapes (single launch and split-K), fp8 with device scales
   (also captured in a CUDA graph, the scale changed, the graph replayed), attention forward.
2. Host cost per call (eager, tiny shapes: the GPU waits for the host): torch.matmul / SDPA,
   warpsched through TVM FFI, and warpsched through the JIT executor (the launch path before).
3. A Llama-3-8B SwiGLU MLP block (x @ Wg.T, x @ Wu.T, silu * up, @ Wd.T) as a model runs it,
   eager, rounds alternating torch and warpsched (config="default": no autotuning in this run).
4. Device time of the same GEMMs (CUDA graphs of 20 launches): TVM-FFI plan, JIT plan, torch.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import warpsched.ops as ops  # noqa: E402
from _eager import alternate, per_call_us  # noqa: E402
from _graphs import capture  # noqa: E402
from warpsched.kernels import _host  # noqa: E402
from warpsched.kernels.gemm import ops as gemm_ops  # noqa: E402

DEV = "cuda"


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item() if torch.isfinite(x).all() else float("nan")


def use_ffi(on: bool):
    """Switch the launch path (new plans are made with it; the kept ones, GEMM and attention, are dropped)."""
    from warpsched.kernels.attention import host as attention_host

    _host._FFI[:] = [on]
    gemm_ops._PLANS.clear()
    attention_host._PLANS.clear()


# ---------------------------------------------------------------- 1. correctness
def correctness():
    bad = 0
    print("== correctness (TVM FFI)", flush=True)
    for M, N, K in [(1, 4096, 4096), (16, 14336, 4096), (100, 1000, 1000), (128, 4096, 14336), (1000, 1000, 1000),
                    (4096, 4096, 4096)]:
        for _ in range(2):
            a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
            w = torch.randn(N, K, device=DEV, dtype=torch.bfloat16)
            out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
            ops.gemm(a, w.t(), out, config="default")
            out2 = ops.gemm(a, w.t(), config="default")  # the kept plan, a new output
            torch.cuda.synchronize()
            ref = a.double() @ w.double().t()
            e, e2 = rel(out, ref), rel(out2, ref)
            ok = e < 1e-2 and e2 < 1e-2
            bad += not ok
        print(f"  gemm bf16 {M}x{N}x{K}: {'OK ' if ok else 'BAD'} rel err {e:.1e} / kept plan {e2:.1e}", flush=True)
    for M, N, K in [(16, 4096, 4096), (1024, 4096, 4096)]:
        a = torch.randn(M, K, device=DEV).to(torch.float8_e4m3fn)
        w = torch.randn(N, K, device=DEV).to(torch.float8_e4m3fn)
        sa, sb = torch.tensor([0.5], device=DEV), torch.tensor([3.0], device=DEV)
        out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
        ops.gemm(a, w.t(), out, scale_a=sa, scale_b=sb, config="default")
        torch.cuda.synchronize()
        ref = (a.double() @ w.double().t()) * 1.5
        e = rel(out, ref)
        # the same call captured in a CUDA graph: a new scale value is read at replay
        g = capture(torch, lambda: ops.gemm(a, w.t(), out, scale_a=sa, scale_b=sb, config="default"), 1)
        sa.fill_(0.25)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        eg = rel(out, ref / 0.5 * 0.25)
        ok = e < 2e-2 and eg < 2e-2
        bad += not ok
        print(f"  gemm fp8 e4m3 {M}x{N}x{K} device scales: {'OK ' if ok else 'BAD'} rel err {e:.1e}; "
              f"graph replay with a new scale {eg:.1e}", flush=True)
    for B, H, S, D, causal in [(2, 8, 300, 128, True), (1, 4, 1000, 64, False)]:
        q, k, v = (torch.randn(B, H, S, D, device=DEV, dtype=torch.bfloat16) for _ in range(3))
        o = ops.attention(q, k, v, causal=causal)
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        e = rel(o, ref)
        ok = e < 1e-2
        bad += not ok
        print(f"  attention {B}x{H}x{S} d{D} causal={causal}: {'OK ' if ok else 'BAD'} rel err {e:.1e}", flush=True)
    return bad


# ---------------------------------------------------------------- 2. host cost per call
def host_cost():
    print("== host cost per call (eager loop of 300 calls; us per call: enqueue / until the GPU is done)", flush=True)
    rows = []
    a = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=DEV, dtype=torch.bfloat16)
    a1 = torch.randn(16, 64, device=DEV, dtype=torch.bfloat16)  # K = 64: one K tile, so one launch (no split-K)
    w1 = torch.randn(1024, 64, device=DEV, dtype=torch.bfloat16)
    q, k, v = (torch.randn(1, 4, 128, 64, device=DEV, dtype=torch.bfloat16) for _ in range(3))
    a8 = torch.randn(16, 1024, device=DEV).to(torch.float8_e4m3fn)
    w8 = torch.randn(1024, 1024, device=DEV).to(torch.float8_e4m3fn)
    sa, sb = torch.ones(1, device=DEV), torch.ones(1, device=DEV)
    cases = [
        ("torch.matmul 16x1024x64", lambda: torch.matmul(a1, w1.t())),
        ("ops.gemm 16x1024x64 (one launch)", lambda: ops.gemm(a1, w1.t(), config="default")),
        ("torch.matmul 16x1024x1024", lambda: torch.matmul(a, w.t())),
        ("ops.gemm 16x1024x1024 (split-K: kernel, sum, copy)", lambda: ops.gemm(a, w.t(), config="default")),
        ("torch._scaled_mm fp8 16x1024x1024", lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb,
                                                                        out_dtype=torch.bfloat16)),
        ("ops.gemm fp8 (tensor scales)", lambda: ops.gemm(a8, w8.t(), scale_a=sa, scale_b=sb, config="default")),
        ("SDPA 1x4x128 d64", lambda: F.scaled_dot_product_attention(q, k, v)),
        ("ops.attention 1x4x128 d64", lambda: ops.attention(q, k, v)),
    ]
    for path in (True, False):
        use_ffi(path)
        for name, fn in cases:
            if name.startswith(("torch", "SDPA")) and not path:
                continue
            h, t = per_call_us(torch, fn)
            label = name if name.startswith(("torch", "SDPA")) else f"{name} [{'TVM FFI' if path else 'JIT executor'}]"
            rows.append((label, h, t))
            print(f"  {label:<52} {h:8.1f} {t:8.1f}", flush=True)
    use_ffi(True)
    return rows


def breakdown():
    """Where an ops.gemm call's host time goes: the kernel call alone, the output allocation, the view."""
    print("== ops.gemm host time, piece by piece (us per call)", flush=True)
    gemm_ops._PLANS.clear()
    a = torch.randn(16, 64, device=DEV, dtype=torch.bfloat16)  # one K tile: a single-launch plan
    w = torch.randn(1024, 64, device=DEV, dtype=torch.bfloat16)
    out = torch.empty(16, 1024, device=DEV, dtype=torch.bfloat16)
    ops.gemm(a, w.t(), out, config="default")
    plan = next(p for p, *_ in gemm_ops._PLANS.values())
    assert plan.target == "c" and plan.splits == 1
    bt = w
    pieces = [("plan(a, b, out) (the TVM-FFI call + its Python wrapper)", lambda: plan(a, bt, out, 1.0, ())),
              ("plan.f(a, b, out, 1, 1.0) (the TVM-FFI function alone)", lambda: plan.f(a, bt, out, 1, 1.0)),
              ("torch.empty(16, 1024)", lambda: torch.empty(16, 1024, device=DEV, dtype=torch.bfloat16)),
              ("gemm_ops.gemm(a, w.t(), out) (no warpsched.ops wrapper)",
               lambda: gemm_ops.gemm(a, w.t(), out, config="default")),
              ("w.t()", lambda: w.t()),
              ("ops.gemm(a, w.t(), out)", lambda: ops.gemm(a, w.t(), out, config="default")),
              ("ops.gemm(a, w.t())", lambda: ops.gemm(a, w.t(), config="default")),
              ("torch.matmul(a, w.t(), out=out)", lambda: torch.matmul(a, w.t(), out=out))]
    for name, fn in pieces:
        h, _ = per_call_us(torch, fn, n=1000)
        print(f"  {name:<60} {h:7.2f}", flush=True)


def torch_ops():
    """torch.ops.warpsched.*: torch.compile(fullgraph=True) without a graph break, bitwise equal to
    eager; CUDA-graph capture; the custom op's host cost."""
    import warpsched.torch_ops  # noqa: F401  (registers the ops)

    print("== torch.library ops", flush=True)
    bad = 0
    x = torch.randn(128, 4096, device=DEV, dtype=torch.bfloat16)
    Wg, Wu = (torch.randn(14336, 4096, device=DEV, dtype=torch.bfloat16) * 0.02 for _ in range(2))
    Wd = torch.randn(4096, 14336, device=DEV, dtype=torch.bfloat16) * 0.02
    q, k, v = (torch.randn(2, 8, 256, 128, device=DEV, dtype=torch.bfloat16) for _ in range(3))

    def block(x, q, k, v):  # only warpsched ops: inductor would fuse silu * up in fp32 (other bits)
        g = torch.ops.warpsched.gemm(x, Wg.t())
        o, lse = torch.ops.warpsched.attention_fwd(q, k, v, True)
        return g, torch.ops.warpsched.gemm(g, Wd.t()), o, lse

    eager = block(x, q, k, v)
    from torch import _dynamo

    _dynamo.reset()
    explain = _dynamo.explain(block)(x, q, k, v)
    compiled = torch.compile(block, fullgraph=True)
    got = compiled(x, q, k, v)
    same = all(torch.equal(a, b) for a, b in zip(eager, got))
    bad += not same or explain.graph_break_count != 0
    print(f"  torch.compile(fullgraph=True): {explain.graph_count} graph(s), {explain.graph_break_count} graph "
          f"break(s); bitwise equal to eager: {same}", flush=True)
    outs = [None]
    g = capture(torch, lambda: outs.__setitem__(0, block(x, q, k, v)), 1)
    g.replay()
    torch.cuda.synchronize()
    same_g = all(torch.equal(a, b) for a, b in zip(eager, outs[0]))
    bad += not same_g
    print(f"  CUDA graph capture and replay: bitwise equal to eager: {same_g}", flush=True)
    a1 = torch.randn(16, 64, device=DEV, dtype=torch.bfloat16)
    w1 = torch.randn(1024, 64, device=DEV, dtype=torch.bfloat16)
    a8 = torch.randn(16, 64, device=DEV).to(torch.float8_e4m3fn)
    w8 = torch.randn(1024, 64, device=DEV).to(torch.float8_e4m3fn)
    sa, sb = torch.ones(1, device=DEV), torch.ones(1, device=DEV)
    ops.gemm(a8, w8.t(), scale_a=sa, scale_b=sb)
    plan8 = next(p for p, *_ in reversed(list(gemm_ops._PLANS.values())))
    for name, fn in (("torch._scaled_mm fp8 16x1024x64", lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb,
                                                                                  out_dtype=torch.bfloat16)),
                     ("ops.gemm fp8 16x1024x64 (tensor scales)", lambda: ops.gemm(a8, w8.t(), scale_a=sa,
                                                                                  scale_b=sb)),
                     ("ops.gemm fp8 16x1024x64 (float scales)", lambda: ops.gemm(a8, w8.t(), scale_a=1.0,
                                                                                 scale_b=1.0)),
                     ("fp8 plan's TVM-FFI function + torch.empty", lambda: plan8.f(a8, w8, torch.empty(
                         16, 1024, device=DEV, dtype=torch.bfloat16), 1, 1.0, None, None, sa, sb)),
                     ("torch.matmul 16x1024x64", lambda: torch.matmul(a1, w1.t())),
                     ("ops.gemm 16x1024x64", lambda: ops.gemm(a1, w1.t())),
                     ("torch.ops.warpsched.gemm 16x1024x64", lambda: torch.ops.warpsched.gemm(a1, w1.t()))):
        h, _ = per_call_us(torch, fn)
        print(f"  {name:<52} {h:8.1f} us per call", flush=True)
    return bad


# ---------------------------------------------------------------- 3. SwiGLU MLP, eager
def mlp(tokens_list=None, rounds=5, iters=30, config=None):
    """``MLP_TOKENS`` (comma-separated, default 16,128,4096) and ``MLP_CONFIG`` ("default": no
    autotuning; "auto": each GEMM shape tuned at its first call, outside the timed rounds)."""
    tokens_list = tokens_list or [int(t) for t in os.environ.get("MLP_TOKENS", "16,128,4096").split(",")]
    config = config or os.environ.get("MLP_CONFIG", "default")
    print(f"== Llama-3-8B SwiGLU MLP block, eager, config={config!r} (ms per block, median of rounds alternating "
          "torch / warpsched)", flush=True)
    hid, inter = 4096, 14336
    Wg, Wu = (torch.randn(inter, hid, device=DEV, dtype=torch.bfloat16) * 0.02 for _ in range(2))
    Wd = torch.randn(hid, inter, device=DEV, dtype=torch.bfloat16) * 0.02
    rows = []
    for T in tokens_list:
        x = torch.randn(T, hid, device=DEV, dtype=torch.bfloat16)

        def torch_block():
            return (F.silu(x @ Wg.t()) * (x @ Wu.t())) @ Wd.t()

        def ws_block():
            h = F.silu(ops.gemm(x, Wg.t(), config=config)) * ops.gemm(x, Wu.t(), config=config)
            return ops.gemm(h, Wd.t(), config=config)

        ref = torch_block().double()
        t_first = time.time()
        err = rel(ws_block(), ref)  # the first call compiles (and with "auto" tunes) each shape
        print(f"  T={T}: first call {time.time() - t_first:.1f} s", flush=True)
        med = alternate(torch, {"torch": torch_block, "warpsched": ws_block}, rounds, iters)
        t_t, t_w = med["torch"], med["warpsched"]
        rows.append((T, t_t, t_w, err))
        print(f"  T={T:<5} torch {t_t:.3f} ms  warpsched {t_w:.3f} ms  ratio {t_t / t_w:.3f}x  (rel err {err:.1e})",
              flush=True)
    return rows


# ---------------------------------------------------------------- 4. device time
def graph_ms(fn, reps=20, rounds=5):
    """Median device ms per call over replays of a captured graph of ``reps`` calls (_graphs.capture)."""
    g = capture(torch, fn, reps)
    g.replay()
    out = []
    for _ in range(rounds):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) / reps)
    return statistics.median(out)


def device_time():
    print("== device time per GEMM (CUDA graph of 20 launches, median of 5 replays; config='default')", flush=True)
    rows = []
    for M, N, K in [(16, 14336, 4096), (128, 14336, 4096), (4096, 14336, 4096), (4096, 4096, 14336)]:
        a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        w = torch.randn(N, K, device=DEV, dtype=torch.bfloat16)
        out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
        res = {}
        for label, path in (("ffi", True), ("jit", False)):
            use_ffi(path)
            res[label] = graph_ms(lambda: ops.gemm(a, w.t(), out, config="default"))
        use_ffi(True)
        res["torch"] = graph_ms(lambda: torch.matmul(a, w.t(), out=out))
        fl = 2 * M * N * K / 1e9
        rows.append((M, N, K, res))
        print(f"  {M}x{N}x{K}: torch {fl / res['torch']:.0f} TFLOP/s; TVM-FFI plan {res['torch'] / res['ffi']:.3f}x "
              f"torch; JIT plan {res['torch'] / res['jit']:.3f}x torch", flush=True)
    return rows


if __name__ == "__main__":
    print("device:", torch.cuda.get_device_name(), "| TVM FFI available:", _host.ffi_enabled(), flush=True)
    t0 = time.time()
    only = sys.argv[1:] or ["correctness", "torch_ops", "host_cost", "breakdown", "mlp", "device_time"]
    bad = correctness() if "correctness" in only else 0
    bad += torch_ops() if "torch_ops" in only else 0
    for part in ("host_cost", "breakdown", "mlp", "device_time"):
        if part in only:
            globals()[part]()
    print(f"SUMMARY: {bad} correctness failure(s); {time.time() - t0:.0f} s", flush=True)
    sys.exit(1 if bad else 0)
