"""The SwiGLU GEMM that keeps its pre-activation (epilogue ``swiglu_keep``) on the H200: correctness, then time.

  python3 bench/swiglu_keep_check.py --rounds 3 2>&1 | tee bench/results/swiglu_keep_check.log

A training SwiGLU layer needs z = x W^T + b (interleaved gate / up, saved for the backward) and h = silu(gate) *
up. Without the option that is two kernels: the GEMM writes z, the elementwise SwiGLU kernel reads z back and
writes h. With it, the GEMM's epilogue stores both (``kernels.gemm.swiglu.swiglu_keep``).

1. Correctness, per shape (Llama-3-8B's MLP: K = 4096, 2 I = 28672, and a ragged one), fresh random inputs,
   z and h filled with NaN first: z against the fp64 product (relative Frobenius error, PASS below 1e-2), h
   bitwise equal to the fused SwiGLU GEMM's (``linear(..., activation="swiglu")``: the same fp32 z, the same
   silu) and within 1e-2 of fp64's h; the native op (``torch.ops.warpsched_native.swiglu_keep``) bitwise equal
   to the Python path's, on its first (resolving) and a later (C++ launched) call; then the SwiGLU layer under
   autograd: y, dX, dW, db with the one-GEMM forward against the two-kernel node's (within 1e-2; bitwise shown).
2. Time (CUDA graphs, triton do_bench medians, sides in rotated order over ``--rounds``): ``keep`` (one GEMM)
   against ``two`` (the GEMM writing z, then ``swiglu_forward``) and, for scale, ``h only`` (the fused SwiGLU
   GEMM, what inference runs). The token counts span the threshold ``swiglu.KEEP_FROM``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from warpsched.kernels.gemm import ops as gemm_ops  # noqa: E402
from warpsched.kernels.gemm import swiglu  # noqa: E402

DEV, BF = "cuda", torch.bfloat16


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item() if torch.isfinite(x).all() else float("nan")


def operands(T, K, N, bias):
    x = torch.randn(T, K, device=DEV).to(BF)
    w = (torch.randn(N, K, device=DEV) / K ** 0.5).to(BF)
    b = (torch.randn(N, device=DEV) * 0.1).to(BF) if bias else None
    return x, w, b


def check_case(T, K, N, bias):
    x, w, b = operands(T, K, N, bias)
    plan = swiglu.swiglu_keep_plan(x, w, b)
    if plan is None:
        print(f"  {T}x{N}x{K} bias={bias}: no one-launch plan (FAIL: the option never ran)", flush=True)
        return False
    z = torch.full((T, N), float("nan"), device=DEV, dtype=BF)
    h = torch.full((T, N // 2), float("nan"), device=DEV, dtype=BF)
    plan(x, w, z, 1.0, (), b, None, h)
    zref = x.double() @ w.double().t() + (0 if b is None else b.double())
    g, u = zref.view(T, -1, 2, 8)[:, :, 0].reshape(T, -1), zref.view(T, -1, 2, 8)[:, :, 1].reshape(T, -1)
    href = torch.nn.functional.silu(g) * u
    h_fused = gemm_ops.linear(x, w, b, "swiglu")
    ez, eh = rel(z, zref), rel(h, href)
    same_h = torch.equal(h, h_fused)
    ok = ez < 1e-2 and eh < 1e-2 and same_h
    zz, hh = swiglu.swiglu_keep(x, w, b)
    same_py = torch.equal(zz, z) and torch.equal(hh, h)
    ok &= same_py
    line = (f"  {T}x{N}x{K} bias={bias} [{plan.f is not None and 'ffi' or 'jit'} {plan.options.get('schedule')} "
            f"{plan.options.get('tile_mn')}]: z err {ez:.2e}, h err {eh:.2e}, h == fused SwiGLU GEMM's {same_h}, "
            f"swiglu_keep == plan {same_py}")
    native = _native()
    if native:
        n1 = native(x, w, b)
        n2 = native(x, w, b)  # the C++ launch of the plan the first call resolved
        same_native = all(torch.equal(p, q) for p, q in zip((*n1, *n2), (z, h, z, h)))
        ok &= same_native
        line += f", native == plan {same_native}"
    print(line + ("  PASS" if ok else "  FAIL"), flush=True)
    return ok


def check_scalar_tile():
    """A tile whose h width (88 columns) is no multiple of 32 stores h element by element: checked the same way."""
    from warpsched.kernels.gemm import host as gp

    T, K, N = 1000, 1024, 2 * 1056
    x, w, b = operands(T, K, N, True)
    plan = gp.plan(x, w, torch.empty(T, N, device=DEV, dtype=BF), schedule="cooperative", tile_mn=(128, 176),
                   epi_n=16, split_k=1, activation="swiglu_keep", bias="c")
    z = torch.full((T, N), float("nan"), device=DEV, dtype=BF)
    h = torch.full((T, N // 2), float("nan"), device=DEV, dtype=BF)
    plan(x, w, z, 1.0, (), b, None, h)
    zref = x.double() @ w.double().t() + b.double()
    fused = gemm_ops.gemm(x, w.t(), bias=b, activation="swiglu", config=dict(schedule="cooperative",
                                                                            tile_mn=(128, 176), epi_n=16))
    ez, same = rel(z, zref), torch.equal(h, fused)
    ok = ez < 1e-2 and same
    print(f"  {T}x{N}x{K} bias=True [cooperative (128, 176), scalar h stores]: z err {ez:.2e}, h == fused SwiGLU "
          f"GEMM's {same}  {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def _native():
    from warpsched import native

    return torch.ops.warpsched_native.swiglu_keep.default if native.load() is not None else None


def check_autograd(T, K, N):
    """The SwiGLU layer's y, dX, dW with the forward from one GEMM against the two-kernel forward's (the threshold
    moved so one call takes each)."""
    from warpsched.nn import functional as nnf

    x, w, b = operands(T, K, N, True)
    dy = torch.randn(T, N // 2, device=DEV).to(BF)

    def run():
        xx, ww, bb = (t.detach().clone().requires_grad_() for t in (x, w, b))
        y = nnf._SwiGLULinear.apply(xx, ww, bb)
        y.backward(dy)
        return y.detach(), xx.grad, ww.grad, bb.grad

    with nnf.swiglu_keep_from(1):
        kept = run()
    with nnf.swiglu_keep_from(1 << 40):
        two = run()
    # h differs in its rounding where the two-kernel path reads z rounded to bf16; the gradients are bitwise equal
    # where both GEMMs' z are (the plain GEMM's tuned tile may differ from the SwiGLU GEMM's)
    errs = [rel(p, q) for p, q in zip(kept, two)]
    same = [torch.equal(p, q) for p, q in zip(kept, two)]
    ok = max(errs) < 1e-2
    print(f"  autograd {T}x{N}x{K}: one GEMM vs two kernels, y / dX / dW / db rel "
          + " / ".join(f"{e:.1e}" for e in errs) + f", bitwise {same}  {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def time_case(T, K, N, rounds):
    from triton.testing import do_bench

    from _eager import round_order
    from _graphs import graph_ms

    x, w, b = operands(T, K, N, False)
    plan = swiglu.swiglu_keep_plan(x, w, None)
    z = torch.empty(T, N, device=DEV, dtype=BF)
    h = torch.empty(T, N // 2, device=DEV, dtype=BF)
    gemm_ops.linear(x, w)  # the plain GEMM's plan (tuned once)
    sides = {
        "keep": lambda: plan(x, w, z, 1.0, (), None, None, h),
        "two": lambda: swiglu.swiglu_forward(gemm_ops.linear(x, w)),
        "h only": lambda: gemm_ops.linear(x, w, None, "swiglu"),
    }
    est = 2.0 * T * N * K / 600e12 * 1e3
    times = {s: [] for s in sides}
    names = list(sides)
    for r in range(rounds):
        for s in round_order(names, r):
            times[s].append(graph_ms(torch, do_bench, sides[s], est, 200))
    med = {s: statistics.median(v) for s, v in times.items()}
    print(f"  {T}x{N}x{K}: " + ", ".join(f"{s} {med[s] * 1e3:.1f} us" for s in names)
          + f" | two / keep {med['two'] / med['keep']:.3f}x", flush=True)
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-time", action="store_true", help="correctness only")
    ap.add_argument("--tokens", default="16,128,256,512,1024,2048,8192,32768", help="token counts timed")
    args = ap.parse_args()
    torch.manual_seed(0)
    K, N = 4096, 28672
    print("correctness", flush=True)
    results = [check_case(T, K, N, bias) for T, bias in ((2048, False), (8192, False), (1000, True), (17, False))]
    results.append(check_case(300, 1000, 2 * 1040, True))  # ragged: a partial last tile of h's columns and rows
    results.append(check_scalar_tile())
    results.append(check_autograd(1024, K, N))
    print(f"correctness: {sum(results)}/{len(results)} PASS", flush=True)
    if args.no_time:
        return
    print("time (us per call, CUDA graphs)", flush=True)
    rows = [(T, time_case(T, K, N, args.rounds)) for T in map(int, args.tokens.split(","))]
    print("\n| tokens | keep us | two kernels us | h only us | two / keep |\n|---|---|---|---|---|")
    for T, med in rows:
        print(f"| {T} | {med['keep'] * 1e3:.1f} | {med['two'] * 1e3:.1f} | {med['h only'] * 1e3:.1f} | "
              f"{med['two'] / med['keep']:.3f}x |")


if __name__ == "__main__":
    main()
