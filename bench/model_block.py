"""H200: a Llama-style decoder block in bf16, as a PyTorch model calls it (issue 25's model block).

    x -> RMSNorm -> QKV -> causal attention (GQA 32 / 8, head dim 128) -> O -> + x
      -> RMSNorm -> [gate | up] -> silu(gate) * up -> down -> + (Llama-3-8B sizes: hidden 4096, MLP 14336)

Sides, timed in alternating rounds (``_eager.alternate``: calls between two synchronizations, host time
included: eager is what a model pays): ``warpsched`` (``warpsched.nn.functional.linear`` and
``warpsched.nn.scaled_dot_product_attention``, the MLP's gate / up weight interleaved once as a warpsched model
loads it, ``ops.interleave_gate_up``, and ``linear(..., activation="swiglu")``: the product in the GEMM's
epilogue in inference, one elementwise kernel each way under autograd; ``--unfused-mlp`` adds ``ws unfused
MLP``, the [gate | up] weight and torch's silu(gate) * up), ``torch`` (``F.linear`` + SDPA's default backend choice),
``torch+FA4`` (``F.linear`` + ``flash_attn.cute``'s attention, when installed), ``quack+FA4`` (quack-kernels'
``linear_func`` + FA4: the field's CuTe DSL kernels; quack's GEMMs by its heuristic, ``QUACK_TUNED=1`` for its
autotuner). Passes: forward (under ``torch.no_grad``, as inference runs), and forward + backward (a loss on
the output, gradients for every weight and the input). Modes: eager and ``torch.compile``. Sizes: decode
(1 x 16 tokens), prefill (4 x 2048), training (8 x 4096; forward + backward only). First, gradients of a
small block against an fp32 torch reference; after the table, each row's ratios paired by round (median and
range: how far one row can be trusted); last, the per-op host-overhead table (``bench/_host_ops.py``).

    python3 bench/model_block.py [--rounds 3] [--sizes decode,prefill,training] [--no-compile] [--no-host-table]
                                 [--unfused-mlp] [--composed-rmsnorm]
"""
from __future__ import annotations

import argparse
import os
import time
import types

import torch
import torch.nn.functional as F
from _eager import alternate, spread_line  # bench/_eager.py: sides alternated, host time included
from _host_ops import host_table  # bench/_host_ops.py: the per-op host-overhead table

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP = 4096, 32, 8, 128, 14336
SIZES = {"decode": (1, 16), "prefill": (4, 2048), "training": (8, 4096)}
UNFUSED_MLP = False  # --unfused-mlp: also warpsched with the [gate | up] weight and torch's product
COMPOSED_RMSNORM = False  # --composed-rmsnorm: RMSNorm as elementwise ops (the earlier tables), not F.rms_norm
PYTHON_LINEAR = False  # --python-linear: also warpsched with its linear layers on the Python path (no native op)
NO_KEEP = False  # --no-keep: also warpsched with the SwiGLU forward as two kernels at every size (no swiglu_keep)
PEERS = True  # --no-peers: warpsched and torch only


def params(hidden=HIDDEN, mlp=MLP, heads=HEADS, kv_heads=KV_HEADS, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def w(n, k):
        return (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(dtype).requires_grad_()
    qkv = (heads + 2 * kv_heads) * HEAD_DIM
    return {"n1": torch.ones(hidden, device="cuda", dtype=dtype, requires_grad=True),
            "n2": torch.ones(hidden, device="cuda", dtype=dtype, requires_grad=True),
            "wqkv": w(qkv, hidden), "wo": w(hidden, heads * HEAD_DIM), "wgu": w(2 * mlp, hidden),
            "wdown": w(hidden, mlp)}


def rmsnorm(x, weight, eps=1e-5):
    """torch's RMSNorm (``F.rms_norm``: its fused CUDA kernel, what ``torch.nn.RMSNorm`` runs), the same on every
    side; ``--composed-rmsnorm``: the fp32 composition of elementwise ops the docs' block tables were measured with."""
    if COMPOSED_RMSNORM:
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def block(x, p, linear, attention, heads=HEADS, kv_heads=KV_HEADS):
    B, S, hidden = x.shape
    h = rmsnorm(x, p["n1"])
    q, k, v = linear(h, p["wqkv"]).split([heads * HEAD_DIM, kv_heads * HEAD_DIM, kv_heads * HEAD_DIM], dim=-1)
    q = q.view(B, S, heads, HEAD_DIM)
    k = k.view(B, S, kv_heads, HEAD_DIM)
    v = v.view(B, S, kv_heads, HEAD_DIM)
    a = attention(q, k, v).reshape(B, S, heads * HEAD_DIM)  # (B, S, H, D) in and out
    x = x + linear(a, p["wo"])
    if "wgu_swiglu" in p:  # warpsched's side: the interleaved gate / up weight, linear(..., activation="swiglu")
        return x + linear(linear(rmsnorm(x, p["n2"]), p["wgu_swiglu"], activation="swiglu"), p["wdown"])
    gate, up = linear(rmsnorm(x, p["n2"]), p["wgu"]).chunk(2, dim=-1)
    return x + linear(F.silu(gate) * up, p["wdown"])


def sdpa_bshd(q, k, v):
    """torch SDPA on (B, S, H, D) views (its default backend choice)."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                       enable_gqa=True)
    return o.transpose(1, 2)


def warpsched_bshd(q, k, v):
    import warpsched.nn as wnn

    return wnn.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                            is_causal=True).transpose(1, 2)


def fa4_bshd(q, k, v):
    from flash_attn.cute import flash_attn_func

    res = flash_attn_func(q, k, v, causal=True)
    return res[0] if isinstance(res, tuple) else res


def quack_linear(x, weight):
    from quack.linear import linear_func

    return linear_func(x, weight, tuned=os.environ.get("QUACK_TUNED") == "1")


def sides_names():
    return list(sides(quiet=True))


def sides(quiet=False):
    import warpsched.nn.functional as wf

    out = {"warpsched": (wf.linear, warpsched_bshd), "torch": (F.linear, sdpa_bshd)}
    if UNFUSED_MLP:
        out["ws unfused MLP"] = (wf.linear, warpsched_bshd)
    if PYTHON_LINEAR:
        out["ws Python linear"] = (wf.linear, warpsched_bshd)
    if NO_KEEP:
        out["ws no keep"] = (wf.linear, warpsched_bshd)
    if not PEERS:
        return out
    try:
        import flash_attn.cute  # noqa: F401

        out["torch+FA4"] = (F.linear, fa4_bshd)
        import quack.linear  # noqa: F401

        out["quack+FA4"] = (quack_linear, fa4_bshd)
    except Exception as e:  # noqa: BLE001
        if not quiet:
            print(f"FA4 / quack unavailable: {type(e).__name__}: {e}")
    return out


def gradient_check():
    """A 1 x 256-token block at a quarter of the widths: warpsched's bf16 gradients and torch's bf16
    gradients, each against fp32 torch (max |err| / max |ref| per tensor)."""
    small = dict(hidden=1024, mlp=2048, heads=8, kv_heads=2)
    ref_p = {k: t.detach().float().requires_grad_() for k, t in params(**small).items()}
    x = torch.randn(1, 256, 1024, device="cuda")
    dy = torch.randn(1, 256, 1024, device="cuda")
    kw = dict(heads=8, kv_heads=2)
    y = block(x.requires_grad_(), ref_p, F.linear, sdpa_bshd, **kw)
    ref = torch.autograd.grad(y, [x] + list(ref_p.values()), dy)
    from warpsched import ops

    refs = dict(zip(["x"] + list(ref_p), ref))
    refs["wgu_swiglu"] = ops.interleave_gate_up(*refs["wgu"].chunk(2, dim=0))[0]
    worst = {}
    for name, (linear, attention) in sides().items():
        p = {k: t.detach().to(torch.bfloat16).requires_grad_() for k, t in ref_p.items()}
        if name in ("warpsched", "ws Python linear", "ws no keep"):  # gate / up interleaved: compared interleaved
            p = fused_mlp_params(p)
        xb = x.detach().to(torch.bfloat16).requires_grad_()
        try:
            def grads(p=p, linear=linear, attention=attention):
                return torch.autograd.grad(block(xb, p, linear, attention, **kw), [xb] + list(p.values()),
                                           dy.to(torch.bfloat16))
            if name == "warpsched":  # 256 tokens: the swiglu_keep GEMM forced, so the check covers it
                import warpsched.nn.functional as wf

                with wf.swiglu_keep_from(1):
                    got = grads()
            else:
                got = _without_native(grads) if name == "ws Python linear" else grads()
        except Exception as e:  # noqa: BLE001 - a peer that fails is left out of every table, saying why
            if name in ("warpsched", "torch"):
                raise
            print(f"gradients {name}: {type(e).__name__}: {str(e)[:200]} (left out)", flush=True)
            continue
        names = ["x"] + list(p)
        errs = [((a.float() - refs[n]).abs().max() / refs[n].abs().max().clamp_min(1e-6)).item()
                for a, n in zip(got, names)]
        worst[name] = max(errs)
        print(f"gradients {name}: max rel err per tensor (" + ", ".join(names) + "): "
              + " ".join(f"{e:.1e}" for e in errs), flush=True)
    ws = max(v for k, v in worst.items() if k.startswith("w"))
    ok = ws <= 2 * worst["torch"] + 1e-3
    print(f"gradient check: warpsched {ws:.2e} vs torch bf16 {worst['torch']:.2e} -> {'PASS' if ok else 'FAIL'}",
          flush=True)
    return ok


def _no_grad(f, x):
    with torch.no_grad():
        return f(x)


def own_code(f):
    """``f`` with a code object of its own. torch.compile keeps its graphs per code object: sides made from one
    lambda would share one cache of graphs, each looked up by guards, and a side whose guards match another's
    (warpsched and "ws Python linear" differ only in a switch the lambda does not see) would run that side's
    graph."""
    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def _without_native(f):
    """``f()`` with ``warpsched.nn.functional.linear`` on its Python path (``warpsched.native`` off)."""
    import warpsched.nn.functional as wf

    with wf.without_native():
        return f()


def _without_keep(f):
    """``f()`` with the SwiGLU layers' forward as two kernels (no ``swiglu_keep`` GEMM) at every token count."""
    import warpsched.nn.functional as wf

    with wf.swiglu_keep_from(1 << 40):
        return f()


def fused_mlp_params(p):
    """``p`` with the gate / up weight interleaved for ``linear(..., activation="swiglu")``
    (``ops.interleave_gate_up``, once, as when weights are loaded) in place of ``wgu``."""
    from warpsched import ops

    gate, up = p["wgu"].detach().chunk(2, dim=0)
    out = {k: t for k, t in p.items() if k != "wgu"}
    out["wgu_swiglu"] = ops.interleave_gate_up(gate, up)[0].requires_grad_(p["wgu"].requires_grad)
    return out


def profiled_steps(size, pas, compiled=False):
    """{"warpsched": step, "torch": step} for the tools that profile one block (tools/block_*.py): ``step()`` runs a
    ``size`` block's forward (under ``torch.no_grad``) or forward + backward (``pas``), on each side's weights (the
    warpsched side's gate / up weight interleaved); ``compiled``: the block under ``torch.compile`` (compiled at its
    first step, as ``run``'s)."""
    import warpsched.nn.functional as wf

    B, S = SIZES[size]
    p = params()
    x = torch.randn(B, S, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    steps = {}
    for name, (lin, att, pp) in {"warpsched": (wf.linear, warpsched_bshd, fused_mlp_params(p)),
                                 "torch": (F.linear, sdpa_bshd, p)}.items():
        f = (lambda x, lin=lin, att=att, pp=pp: block(x, pp, lin, att))
        if compiled:
            torch._dynamo.reset()
            f = torch.compile(own_code(f))

        def step(f=f, pp=pp):
            if pas == "forward":
                with torch.no_grad():
                    return f(x.detach())
            return torch.autograd.grad(f(x), [x] + list(pp.values()), dy)
        steps[name] = step
    return steps


def run(size, passes, compile_modes, rounds):
    """Print ``size``'s table rows; return one line per row of its ratios paired by round (``_eager.spread_line``),
    for after the table."""
    B, S = SIZES[size]
    spreads = []
    p = params()
    pf = fused_mlp_params(p)  # warpsched's side: the gate / up weight interleaved
    x = torch.randn(B, S, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    for mode in compile_modes:
        for pas in passes:
            if size == "training" and pas == "forward":
                continue
            fns = {}
            for name, (linear, attention) in sides().items():
                pp = pf if name in ("warpsched", "ws Python linear", "ws no keep") else p
                f = (lambda x, linear=linear, attention=attention, pp=pp: block(x, pp, linear, attention))
                if mode == "compile":
                    torch._dynamo.reset()
                    f = torch.compile(own_code(f))
                if pas == "forward":  # inference, as a model serves it: no autograd graph
                    fns[name] = (lambda f=f: _no_grad(f, x.detach()))
                else:
                    fns[name] = (lambda f=f, pp=pp: torch.autograd.grad(f(x), [x] + list(pp.values()), dy))
            if "ws Python linear" in fns:  # the native op off for this side's every call
                fns["ws Python linear"] = (lambda f=fns["ws Python linear"]: _without_native(f))
            if "ws no keep" in fns:  # the SwiGLU forward as the GEMM + the elementwise kernel at every size
                fns["ws no keep"] = (lambda f=fns["ws no keep"]: _without_keep(f))
            if "ws unfused MLP" in fns:  # the same block: its output against the fused one's
                a_, b_ = fns["warpsched"](), fns["ws unfused MLP"]()
                a_, b_ = (a_, b_) if pas == "forward" else (a_[0], b_[0])  # forward + backward: dX
                err = ((a_.float() - b_.float()).abs().max() / b_.float().abs().max()).item()
                print(f"  ws {size} {pas} {mode}: max |fused MLP - unfused| / max |unfused| = {err:.1e}"
                      + ("" if err < 2e-2 else "  MISMATCH"), flush=True)
            for name in [n for n in fns if n not in ("warpsched", "torch")]:
                try:  # a peer that fails here (a compile it refuses, say) is left out of this row
                    fns[name]()
                except Exception as e:  # noqa: BLE001
                    print(f"  {name} {size} {pas} {mode}: {type(e).__name__}: {str(e)[:160]} (left out)", flush=True)
                    del fns[name]
            samples = {}
            med = alternate(torch, fns, rounds=rounds, iters=20 if S <= 16 else 3, samples=samples)
            spreads.append(spread_line(f"{size} {B}x{S} {pas} {mode}", samples))
            print(f"| {size} {B}x{S} | {pas} | {mode} | "
                  + " | ".join(f"{med[s] * 1e3:.0f}" if s in med else "-" for s in sides_names())
                  + f" | {med['torch'] / med['warpsched']:.3f}x"
                  + "".join(f" | {med[p] / med['warpsched']:.3f}x" if p in med else " | -"
                            for p in ("torch+FA4", "quack+FA4")) + " |", flush=True)
    return spreads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="decode,prefill,training")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--compile-only", action="store_true", help="torch.compile rows only")
    ap.add_argument("--passes", default="forward,forward+backward",
                    help="which passes: forward, forward+backward or both (comma-separated)")
    ap.add_argument("--no-host-table", action="store_true", help="skip the per-op host-overhead table")
    ap.add_argument("--unfused-mlp", action="store_true", help="also warpsched with the [gate | up] weight and "
                    "torch's silu(gate) * up (the side before the interleaved SwiGLU kernels)")
    ap.add_argument("--python-linear", action="store_true", help="also warpsched with its linear layers on the "
                    "Python path (warpsched.native off): the side before the native op")
    ap.add_argument("--no-keep", action="store_true", help="also warpsched with the SwiGLU layers' forward as the "
                    "GEMM + the elementwise kernel at every size (the side before the swiglu_keep GEMM)")
    ap.add_argument("--composed-rmsnorm", action="store_true", help="RMSNorm as fp32 elementwise ops on every side "
                    "(what the docs' block tables measured) instead of F.rms_norm")
    ap.add_argument("--no-peers", action="store_true", help="warpsched and torch only (no torch + FA4, quack + FA4): "
                    "a shorter run, e.g. the training rows' first, which tunes their GEMMs")
    a = ap.parse_args()
    global UNFUSED_MLP, COMPOSED_RMSNORM, PYTHON_LINEAR, PEERS, NO_KEEP
    UNFUSED_MLP, COMPOSED_RMSNORM, PYTHON_LINEAR, PEERS = (a.unfused_mlp, a.composed_rmsnorm, a.python_linear,
                                                          not a.no_peers)
    NO_KEEP = a.no_keep
    print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
    if not gradient_check():
        raise SystemExit(1)
    names = list(sides())
    print("| size | pass | mode | " + " | ".join(f"{n} (us)" for n in names) + " | torch / warpsched | "
          "torch+FA4 / warpsched | quack+FA4 / warpsched |")
    print("|---|---|---|" + "---|" * (len(names) + 3))
    modes = ([] if a.compile_only else ["eager"]) + ([] if a.no_compile else ["compile"])
    passes = [p_ for p_ in a.passes.split(",") if p_]
    if not modes or any(p_ not in ("forward", "forward+backward") for p_ in passes):
        ap.error("--compile-only with --no-compile leaves no rows; --passes takes forward and forward+backward")
    spreads = [line for size in a.sizes.split(",") for line in run(size, passes, modes, a.rounds)]
    print(f"\nEach row's ratios paired by round ({a.rounds} rounds; median and range):")
    print("\n".join(spreads), flush=True)
    if not a.no_host_table:
        print("\nHost cost per op (bench/_host_ops.py):", flush=True)
        host_table()


if __name__ == "__main__":
    main()
