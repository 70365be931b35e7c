"""H200: warpsched's native linear (``warpsched.native``: the autograd node and the launches in C++) against the
Python path it replaces and against torch.

1. Correctness: for each case, the native op's output and gradients (dX, dW, dbias) against the Python path's
   (``nn.functional``'s ``_LinearFunction`` / ``_SwiGLULinear``: the same kernels, so bitwise equal) and against
   fp32 torch (max |err| / max |ref| within 2x torch bf16's own + 1e-3). Outputs land in memory the caching
   allocator held NaNs in (a poisoned block freed before each case), so a tile left unwritten shows.
2. Host cost: µs per call of one layer's forward + backward (``torch.autograd.grad``) as a decode step calls it,
   issue time and wall time, native / Python path / torch, in alternating rounds.

    python3 bench/native_linear_check.py [--calls 300] [--no-time] [--attention]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from _eager import per_call_us

import warpsched.native as native
import warpsched.nn.functional as wf
from warpsched.kernels.gemm.ops import swiglu_interleaved

CASES = [  # (B, S, K, N, bias, swiglu, dtype)
    (1, 16, 4096, 6144, False, False, torch.bfloat16),
    (1, 16, 4096, 28672, False, True, torch.bfloat16),
    (1, 16, 14336, 4096, False, False, torch.bfloat16),
    (2, 300, 1024, 2048, True, False, torch.bfloat16),
    (1, 13, 512, 1024, True, False, torch.float16),
    (3, 7, 256, 512, True, True, torch.float16),
    (4, 2048, 4096, 4096, False, False, torch.bfloat16),
]


def poison():
    """Fill what the caching allocator holds with NaNs and free it: the next allocations start poisoned."""
    t = torch.full((1 << 28,), float("nan"), device="cuda", dtype=torch.float16)
    del t


def python_path(x, w, b, swiglu):
    """The layer on the Python path: its autograd.Function, the launches from Python (warpsched.native off)."""
    with wf.without_native():
        return wf._SwiGLULinear.apply(x, w, b) if swiglu else wf._LinearFunction.apply(x, w, b, None)


def reference(x, w, b, swiglu):
    y = F.linear(x, w, b)
    if swiglu:
        return swiglu_interleaved(y)
    return y


def grads(f, x, w, b, swiglu, dy_seed=1):
    y = f(x, w, b, swiglu)
    g = torch.Generator(device="cuda").manual_seed(dy_seed)
    dy = torch.randn(y.shape, device="cuda", generator=g).to(y.dtype)
    ins = [x, w] + ([b] if b is not None else [])
    return [y] + list(torch.autograd.grad(y, ins, dy))


def correctness(op):
    bad = 0
    for case in CASES:
        B, S, K, N, has_bias, swiglu, dt = case
        g = torch.Generator(device="cuda").manual_seed(hash(case) % (1 << 31))
        x = torch.randn(B, S, K, device="cuda", generator=g).to(dt).requires_grad_()
        w = (torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).to(dt).requires_grad_()
        b = (torch.randn(N, device="cuda", generator=g) * 0.1).to(dt).requires_grad_() if has_bias else None
        poison()
        got = grads(lambda *a: op(*a), x, w, b, swiglu)
        poison()
        py = grads(python_path, x, w, b, swiglu)
        ref = grads(reference, *(t.detach().float().requires_grad_() if t is not None else None for t in (x, w, b)),
                    swiglu)
        tb = grads(reference, x, w, b, swiglu)
        names = ["y", "dx", "dw", "db"][:len(got)]
        equal = all(torch.equal(a, c) for a, c in zip(got, py))
        errs = [((a.float() - r).abs().max() / r.abs().max().clamp_min(1e-6)).item() for a, r in zip(got, ref)]
        terrs = [((a.float() - r).abs().max() / r.abs().max().clamp_min(1e-6)).item() for a, r in zip(tb, ref)]
        finite = all(torch.isfinite(a).all().item() for a in got)
        ok = equal and finite and all(e <= 2 * t + 1e-3 for e, t in zip(errs, terrs))
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {B}x{S}x{K} -> {N} bias={has_bias} swiglu={swiglu} {str(dt)[6:]}: "
              f"bitwise equal to the Python path {equal}, finite {finite}; rel err vs fp32 "
              + ", ".join(f"{n} {e:.1e} (torch {t:.1e})" for n, e, t in zip(names, errs, terrs)), flush=True)
    return bad


def _python_grads(x, w, swiglu, dy):
    """Forward and backward on the Python path (the backward's launches from Python too)."""
    with wf.without_native():
        return torch.autograd.grad(wf._SwiGLULinear.apply(x, w, None) if swiglu else
                                   wf._LinearFunction.apply(x, w, None, None), [x, w], dy)


def host_cost(op, calls):
    bf = torch.bfloat16
    rows = {"linear 16x4096 -> 6144": (4096, 6144, False), "swiglu linear 16x4096 -> 2x14336": (4096, 28672, True)}
    print("\n| layer, forward + backward | native issue / wall (us) | Python path issue / wall | torch issue / wall |")
    print("|---|---|---|---|")
    for name, (K, N, swiglu) in rows.items():
        x = torch.randn(1, 16, K, device="cuda", dtype=bf, requires_grad=True)
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).to(bf).requires_grad_()
        wt = w  # torch's side: the same weight, its SwiGLU unfused as a model writes it
        dy = torch.randn(1, 16, N // 2 if swiglu else N, device="cuda", dtype=bf)

        def torch_side():
            z = F.linear(x, wt)
            y = swiglu_interleaved(z) if swiglu else z
            return torch.autograd.grad(y, [x, wt], dy)
        sides = {"native": lambda: torch.autograd.grad(op(x, w, None, swiglu), [x, w], dy),
                 "python": lambda: _python_grads(x, w, swiglu, dy),
                 "torch": torch_side}
        res = {k: [] for k in sides}
        for _ in range(3):
            for k, f in sides.items():
                res[k].append(per_call_us(torch, f, calls))
        cell = {k: tuple(statistics.median(r[i] for r in v) for i in range(2)) for k, v in res.items()}
        print(f"| {name} | " + " | ".join(f"{cell[k][0]:.0f} / {cell[k][1]:.0f}" for k in sides) + " |", flush=True)


ATTENTION_CASES = [  # (B, H, H_kv, S_q, S_k, D, causal, window): decode, prefill-sized, GQA packed (split per call)
    (1, 32, 8, 16, 16, 128, True, (-1, -1)),
    (2, 16, 16, 1000, 1000, 64, False, (-1, -1)),
    (1, 32, 8, 1, 4096, 128, False, (-1, -1)),
    (2, 8, 2, 300, 700, 128, True, (64, 0)),
]


def _python_side(f):
    with wf.without_native():
        return f()


def attention_check(calls):
    """The native attention forward and backward against the Python host: bitwise equal O and LSE, dK and dV (dQ too
    in deterministic mode) over poisoned memory, q as a model hands it ((B, S, H, D) memory), gradients against
    fp64; then µs per call, native / Python host / SDPA, decode-sized: the forward op, and the layer's forward +
    backward."""
    from attention_training_masks import keep_mask, reference as attention_reference
    from warpsched import torch_ops

    bad = 0
    for B, H, Hk, Sq, Sk, D, causal, (left, right) in ATTENTION_CASES:
        q = torch.randn(B, Sq, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k, v = (torch.randn(B, Sk, Hk, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        args = (q, k, v, causal, None, left, right, None)
        runs = []
        for f in (torch.ops.warpsched_native.attention_fwd.default, torch_ops.attention_fwd) * 2:
            poison()
            runs.append(f(*args))
        equal = all(torch.equal(a, b) for r in runs[1:] for a, b in zip(runs[0], r))
        bad += not equal
        print(f"{'PASS' if equal else 'FAIL'} attention {B}x{H}/{Hk}x{Sq}x{Sk} d{D} causal={causal} window="
              f"({left}, {right}): native O and LSE bitwise equal to the Python host's (twice each)", flush=True)
    for B, H, Hk, Sq, Sk, D, causal, (left, right) in ATTENTION_CASES:
        q = torch.randn(B, Sq, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k, v = (torch.randn(B, Sk, Hk, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        out, lse = torch_ops.attention_fwd(q, k, v, causal, None, left, right, None)
        dout = torch.randn(B, Sq, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        args = (q, k, v, out, dout, lse, causal, None, left, right, None)
        # fp64 gradients through the masked softmax (attention_training_masks.py's reference and mask)
        ref = attention_reference(q, k, v, dout, keep_mask(B, H, Sq, Sk, causal, (left, right), None, q.device),
                                  D ** -0.5)[1:]
        for deterministic in (False, True):
            torch.use_deterministic_algorithms(deterministic)
            runs = []
            for f in (torch.ops.warpsched_native.attention_bwd.default, torch_ops.attention_bwd) * 2:
                poison()
                runs.append(f(*args))
            torch.use_deterministic_algorithms(False)
            # dQ is summed with fp32 atomics unless deterministic: its bits may differ run to run, so it is held to
            # the fp64 reference there, and bitwise in deterministic mode
            exact = range(3) if deterministic else range(1, 3)
            equal = all(torch.equal(r[i], runs[0][i]) for r in runs[1:] for i in exact)
            errs = [((g.float() - w).abs().max() / w.abs().max()).item() for g, w in zip(runs[0], ref)]
            close = all(e < 2e-2 for e in errs) and all(torch.isfinite(g).all() for g in runs[0])
            bad += not (equal and close)
            print(f"{'PASS' if equal and close else 'FAIL'} attention backward {B}x{H}/{Hk}x{Sq}x{Sk} d{D} "
                  f"causal={causal} window=({left}, {right}) deterministic={deterministic}: native "
                  f"{'dQ, dK, dV' if deterministic else 'dK, dV'} bitwise equal to the Python host's (twice each) "
                  f"{equal}; max rel err vs fp64 dQ {errs[0]:.1e} dK {errs[1]:.1e} dV {errs[2]:.1e}", flush=True)
    q, k, v, dout = decode_attention_operands()
    sides = {"native": lambda: torch.ops.warpsched_native.attention_fwd.default(q, k, v, True, None, -1, -1, None),
             "python": lambda: torch_ops.attention_fwd(q, k, v, True, None, -1, -1, None),
             "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)}
    host_row("attention forward 1x32/8x16 d128 causal", sides, calls)
    import warpsched.nn as wnn

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))

    def layer(f):
        return lambda: torch.autograd.grad(f(q, k, v), (q, k, v), dout)
    native_layer = layer(lambda q, k, v: wnn.scaled_dot_product_attention(q, k, v, is_causal=True))
    sides = {"native": native_layer, "python": lambda: _python_side(native_layer),
             "sdpa": layer(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))}
    host_row("attention layer forward + backward 1x32/8x16 d128 causal", sides, calls)
    return bad + graph_check(q.detach(), k.detach(), v.detach(), dout)


def host_row(label, sides, calls):
    """One table row: each side's median issue / wall us per call over three runs of ``calls`` calls."""
    res = {name: [per_call_us(torch, f, calls) for _ in range(3)] for name, f in sides.items()}
    print(f"| {label} | " + " | ".join(
        f"{name} {statistics.median(r[0] for r in runs):.0f} / {statistics.median(r[1] for r in runs):.0f}"
        for name, runs in res.items()) + " | (issue / wall us)", flush=True)


def decode_attention_operands():
    """q, k, v (1 x 32 / 8 heads x 16 tokens, d128, BHSD views of BSHD tensors) and dO of a decode layer."""
    q = torch.randn(1, 16, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(1, 16, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
    return q, k, v, torch.randn_like(q)


def _capture_status():
    """The current stream's capture status by name ("active", "invalidated", "none"): which launch broke a
    capture shows right after it (torch reports a broken capture only at its end)."""
    from cuda.bindings import runtime as cudart

    err, status = cudart.cudaStreamIsCapturing(torch.cuda.current_stream().cuda_stream)
    return str(status).split(".")[-1].replace("cudaStreamCaptureStatus", "").lower() or str(status)


def graph_check(q, k, v, dout):
    """A decode layer's native launches captured in a CUDA graph (after a warm-up resolved their plans) and replayed
    over NaN-poisoned outputs: the linear's forward + backward and attention's, bitwise equal to eager (deterministic
    dQ, so that it is bitwise too). Each piece is captured alone first, its capture status read after it and the
    resolver's calls counted (a call during capture means a key without a launch plan), so a failure names the
    piece that broke the capture."""
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(6144, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True) * 0.02
    w = w.detach().requires_grad_()
    dy = torch.randn(16, 6144, device="cuda", dtype=torch.bfloat16)
    state = {}

    def linear_forward():
        state["y"] = wf.linear(x, w)
        return (state["y"],)

    def linear_backward():
        return torch.autograd.grad(state["y"], (x, w), dy)

    def attention_forward():
        state["o"], state["lse"] = torch.ops.warpsched_native.attention_fwd.default(q, k, v, True, None, -1, -1, None)
        return state["o"], state["lse"]

    def attention_backward():
        return torch.ops.warpsched_native.attention_bwd.default(q, k, v, state["o"], dout, state["lse"], True, None,
                                                                -1, -1, None)
    pieces = [("linear forward", linear_forward), ("linear backward", linear_backward),
              ("attention forward", attention_forward), ("attention backward", attention_backward)]
    calls = []
    resolve = native.resolve

    def counting(*args):
        calls.append(args[0])
        return resolve(*args)
    native.register_resolver(counting)  # clears the plans: the warm-up below resolves them again
    torch.use_deterministic_algorithms(True)
    bad = 0
    try:
        # eager twice: every key resolved, its plan kept. As torch's whole-network capture recipe says: on a side
        # stream, and no autograd graph of it kept (detached copies, state cleared), so that the captured backward
        # does not meet the leaves' gradient accumulators made on another stream.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                eager = [t.detach().clone() for _, piece in pieces for t in piece()]
                state.clear()
        torch.cuda.current_stream().wait_stream(side)
        for upto in range(1, len(pieces) + 1):  # the first piece alone, then the first two, ...: the whole last
            calls.clear()
            graph = torch.cuda.CUDAGraph()
            statuses, captured, error = [], [], None
            try:
                with torch.cuda.graph(graph):
                    for name, piece in pieces[:upto]:
                        captured += list(piece())
                        statuses.append(f"{name}: {_capture_status()}")
            except Exception as e:  # noqa: BLE001 - reported with the piece that broke the capture
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            label = " + ".join(n for n, _ in pieces[:upto])
            if error is not None:
                bad += 1
                print(f"FAIL capture of {label}: {error}; status after each piece: {statuses}; resolver calls "
                      f"during capture (kinds): {calls}", flush=True)
                torch.cuda.synchronize()
                continue
            state.clear()
            for t in captured:
                t.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            n = len(captured)
            ok = all(torch.equal(a, b) for a, b in zip(eager[:n], captured))
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'} {label} replayed in a CUDA graph over poisoned outputs: bitwise equal "
                  f"to eager {ok}; resolver calls during capture: {len(calls)}", flush=True)
    finally:
        torch.use_deterministic_algorithms(False)
        native.register_resolver()
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--graph-only", action="store_true",
                    help="only the CUDA-graph capture check of the native launches")
    ap.add_argument("--attention", action="store_true",
                    help="also the native attention forward and backward (their own check)")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
    t0 = time.time()
    op = native.load()
    print(f"native path: {'built / loaded' if op is not None else 'unavailable: ' + native.reason()} "
          f"in {time.time() - t0:.1f} s", flush=True)
    if op is None:
        sys.exit(1)
    if a.graph_only:
        sys.exit(1 if graph_check(*decode_attention_operands()) else 0)
    op = op.default
    bad = correctness(op)
    print(f"correctness: {len(CASES) - bad}/{len(CASES)} PASS; plans {torch.ops.warpsched_native.plan_count()}",
          flush=True)
    if not a.no_time:
        host_cost(op, a.calls)
    if a.attention:
        bad += attention_check(a.calls)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
