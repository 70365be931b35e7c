"""warpsched.nn.Linear (forward and backward on warpsched's GEMM) against torch.nn.Linear, on the H200.

  python3 bench/linear_autograd.py 2>&1 | tee bench/results/linear_autograd.log

1. Transposed operands (what the backward reads): ops.gemm with a column-major a and / or a row-major
   b, fresh random bf16 inputs, output poisoned with NaN, against fp64.
2. Gradients: y = Linear(x) with bias, a random upstream gradient; dX, dW, db (and y) against an fp64
   reference on the same bf16 values; the state_dict loads into torch.nn.Linear and back.
3. Time per training step of the layer (forward + backward, eager, host included), rounds alternating
   torch.nn.Linear and warpsched.nn.Linear (config "auto": each GEMM shape tuned at its first call).
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import warpsched.nn as wnn  # noqa: E402
import warpsched.ops as ops  # noqa: E402
from _eager import alternate  # noqa: E402

DEV = "cuda"


def rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item() if torch.isfinite(x).all() else float("nan")


def transposed():
    bad = 0
    print("== ops.gemm with transposed 16-bit operands (fp64 reference)", flush=True)
    for M, N, K in [(256, 4096, 1024), (4096, 1024, 4096), (1000, 1000, 1000), (64, 14336, 4096)]:
        for a_t, b_t in ((False, True), (True, False), (True, True)):
            a = torch.randn(K, M, device=DEV, dtype=torch.bfloat16).t() if a_t else \
                torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
            b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16) if b_t else \
                torch.randn(N, K, device=DEV, dtype=torch.bfloat16).t()
            out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.bfloat16)
            ops.gemm(a, b, out, config="default")
            torch.cuda.synchronize()
            e = rel(out, a.double() @ b.double())
            ok = e < 1e-2
            bad += not ok
            print(f"  {M}x{N}x{K} a {'col' if a_t else 'row'}-major, b {'row' if b_t else 'col'}-major: "
                  f"{'OK ' if ok else 'BAD'} rel err {e:.1e}", flush=True)
    return bad


def gradients():
    bad = 0
    print("== warpsched.nn.Linear gradients (fp64 reference on the same bf16 values)", flush=True)
    for shape, N in [((4, 256, 4096), 14336), ((16, 4096), 4096), ((2, 1000, 1024), 3072)]:
        K = shape[-1]
        ref_layer = torch.nn.Linear(K, N, bias=True, device=DEV, dtype=torch.bfloat16)
        layer = wnn.Linear(K, N, bias=True, device=DEV, dtype=torch.bfloat16)
        layer.load_state_dict(ref_layer.state_dict())  # the same parameters, the same state_dict keys
        back = torch.nn.Linear(K, N, device=DEV, dtype=torch.bfloat16)
        back.load_state_dict(layer.state_dict())
        x = torch.randn(*shape, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        y = layer(x)
        g = torch.randn_like(y)
        y.backward(g)
        xd = x.detach().double().requires_grad_()
        wd = layer.weight.detach().double().requires_grad_()
        bd = layer.bias.detach().double().requires_grad_()
        yd = torch.nn.functional.linear(xd, wd, bd)
        yd.backward(g.double())
        errs = [rel(y, yd), rel(x.grad, xd.grad), rel(layer.weight.grad, wd.grad), rel(layer.bias.grad, bd.grad)]
        ok = all(e < 1e-2 for e in errs) and torch.equal(back.weight, layer.weight)
        bad += not ok
        print(f"  x {shape} -> {N}: {'OK ' if ok else 'BAD'} rel err y {errs[0]:.1e}, dX {errs[1]:.1e}, "
              f"dW {errs[2]:.1e}, db {errs[3]:.1e}; state_dict round trip {'equal' if ok else 'DIFFERS'}", flush=True)
    return bad


def step_time(rounds=5, iters=20):
    print("== one training step of the layer (forward + backward, eager; ms, median of rounds alternating)",
          flush=True)
    shapes = [((16, 4096), 14336), ((8, 512, 4096), 14336)]
    if os.environ.get("LINEAR_SHAPES") == "all":
        shapes.append(((8, 4096, 4096), 4096))
    for shape, N in shapes:
        K = shape[-1]
        ref = torch.nn.Linear(K, N, bias=False, device=DEV, dtype=torch.bfloat16)
        ws = wnn.Linear(K, N, bias=False, device=DEV, dtype=torch.bfloat16)
        ws.load_state_dict(ref.state_dict())
        x = torch.randn(*shape, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(*shape[:-1], N, device=DEV, dtype=torch.bfloat16)

        def run(layer):
            def step():
                layer(x).backward(g)
            return step

        t_first = time.time()
        run(ws)()  # compiles (and tunes) the three GEMM shapes
        print(f"  x {shape} -> {N}: first step {time.time() - t_first:.1f} s", flush=True)
        med = alternate(torch, {"torch": run(ref), "warpsched": run(ws)}, rounds, iters)
        tt, tw = med["torch"], med["warpsched"]
        print(f"  x {shape} -> {N}: torch {tt:.3f} ms, warpsched {tw:.3f} ms, ratio {tt / tw:.3f}x", flush=True)


if __name__ == "__main__":
    print("device:", torch.cuda.get_device_name(), flush=True)
    t0 = time.time()
    bad = 0 if "--time-only" in sys.argv else transposed() + gradients()
    if "--no-time" not in sys.argv:
        step_time()
    print(f"SUMMARY: {bad} failure(s); {time.time() - t0:.0f} s", flush=True)
    sys.exit(1 if bad else 0)
