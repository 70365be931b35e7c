"""compute-sanitizer over every kernel family ``warpsched.ops`` ships, on small shapes: what the checker cannot see.

    python3 tools/sanitize_ops_gpu.py [--tools memcheck,racecheck,synccheck] [--cases gemm,attention_fwd,...]

The checker proves a kernel's barrier protocol; it does not see an instruction the PTX ISA leaves undefined in
the way a kernel uses it (``st.async`` in a cluster of one CTA ran correctly on the H100 and memcheck stopped
it). For each tool, one child runs every selected case under ``compute-sanitizer --tool T`` (API errors not
reported: the DSL runtime's ``cuGetProcAddress`` lookups), each case a small ragged shape with its output
poisoned with NaN and checked against a torch reference (GEMMs in their default configuration: no autotuning
under the tool); the table gives, per tool, the sanitizer's summary
line, the cases that ran, and the kernels its reports name. ``--case NAME`` runs one case without the tool.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
if os.environ.get("WS_BWD_DEFAULTS") or os.environ.get("WS_BWD_VARLEN_DEFAULTS"):  # options on trial as defaults
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import _bwd_defaults  # noqa: F401,E402


def _close(torch, got, ref, tol=3e-2):
    """Finite and within ``tol`` of max |ref| (bf16's class of error)."""
    err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-3)).item()
    return math.isfinite(err) and err < tol, err


def case_gemm(torch, ops):
    a = torch.randn(300, 264, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(520, 264, device="cuda", dtype=torch.bfloat16)
    out = torch.full((300, 520), float("nan"), device="cuda", dtype=torch.bfloat16)
    ops.gemm(a, w.t(), out, config="default")
    return _close(torch, out, a.double() @ w.double().t())


def case_gemm_epilogues(torch, ops):
    a = torch.randn(200, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(384, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(384, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(200, 384, device="cuda", dtype=torch.bfloat16)
    z = a.double() @ w.double().t() + bias.double()
    got = ops.gemm(a, w.t(), bias=bias, activation="gelu_tanh", residual=res, config="default")
    ok1, e1 = _close(torch, got, torch.nn.functional.gelu(z, approximate="tanh") + res.double())
    wg, bg = ops.interleave_gate_up(w[:192], w[192:])
    h = ops.gemm(a, wg.t(), activation="swiglu", config="default")
    g, u = a.double() @ w[:192].double().t(), a.double() @ w[192:].double().t()
    ok2, e2 = _close(torch, h, torch.nn.functional.silu(g) * u)
    return ok1 and ok2, max(e1, e2)


def case_gemm_fp8(torch, ops):
    a = torch.randn(256, 256, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(256, 256, device="cuda").to(torch.float8_e4m3fn)
    got = ops.gemm(a, w.t(), scale_a=0.5, scale_b=2.0, config="default")  # the scales' product is 1
    return _close(torch, got, a.float().double() @ w.float().double().t())


def case_gemm_batched(torch, ops):
    a = torch.randn(2, 130, 192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2, 192, 96, device="cuda", dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)
    return _close(torch, ops.gemm(a, b, config="default"), a.double() @ b.double())


def _sdpa(torch, q, k, v, causal):
    rep = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(rep, dim=1) for t in (k, v))
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k, v, is_causal=causal)


def case_attention_fwd(torch, ops):
    worst, ok = 0.0, True
    for d in (64, 128, 256):
        for causal in (False, True):
            q = torch.randn(1, 4, 300, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(1, 2, 300, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            good, err = _close(torch, ops.attention(q, k, v, causal=causal), _sdpa(torch, q, k, v, causal))
            ok, worst = ok and good, max(worst, err)
    return ok, worst


def case_attention_decode(torch, ops):
    q = torch.randn(2, 8, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, 3000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return _close(torch, ops.attention(q, k, v), _sdpa(torch, q, k, v, False))


def _varlen_inputs(torch, lengths, H=4, Hk=2, D=128):
    cu = torch.tensor([0] + [sum(lengths[:i + 1]) for i in range(len(lengths))], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lengths), H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(lengths), Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return cu, q, k, v


def _varlen_reference(torch, q, k, v, lengths, causal):
    outs, s = [], 0
    for n in lengths:
        if n:
            sl = slice(s, s + n)
            outs.append(_sdpa(torch, *(t[sl].transpose(0, 1)[None] for t in (q, k, v)), causal)[0].transpose(0, 1))
        s += n
    return torch.cat(outs)


def case_attention_varlen(torch, ops):
    """The default (static order) and the unit queue (``queued_varlen_options``)."""
    from warpsched.kernels.attention import varlen

    lengths = [5, 0, 1, 300, 129, 700]
    cu, q, k, v = _varlen_inputs(torch, lengths)
    ref = _varlen_reference(torch, q, k, v, lengths, True)
    ok, worst = True, 0.0
    for options in (None, varlen.queued_varlen_options(128, True, max(lengths), 2)):
        out = torch.full_like(q, float("nan"))
        varlen.attention_varlen(q, k, v, cu, cu, max(lengths), max(lengths), causal=True, out=out, options=options)
        good, err = _close(torch, out, ref)
        ok, worst = ok and good, max(worst, err)
    return ok, worst


def case_attention_bwd(torch, ops, configs=((128, True, False), (64, False, False), (128, True, True),
                                            (256, True, False))):
    ok, worst = True, 0.0
    for d, causal, deterministic in configs:
        q = torch.randn(1, 4, 300, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, 2, 300, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        dout = torch.randn_like(out)
        grads = ops.attention_backward(q, k, v, out, dout, lse, causal=causal, deterministic=deterministic)
        qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
        refs = torch.autograd.grad(_sdpa(torch, qr, kr, vr, causal), (qr, kr, vr), dout.double())
        for g, r in zip(grads, refs):
            good, err = _close(torch, g, r)
            ok, worst = ok and good, max(worst, err)
    return ok, worst


def case_attention_bwd_hd256(torch, ops):
    """Head dim 256 alone (its own kernel program: the warp groups split D, or with ``split_queries`` the
    queries), causal, one compile."""
    return case_attention_bwd(torch, ops, ((256, True, False),))


def case_attention_varlen_bwd(torch, ops):
    lengths = [5, 0, 1, 300, 129]
    cu, q, k, v = _varlen_inputs(torch, lengths)
    out, lse = ops.attention_varlen(q, k, v, cu, cu, max(lengths), max(lengths), causal=True, return_lse=True)
    dout = torch.randn_like(out)
    grads = ops.attention_varlen_backward(q, k, v, out, dout, lse, cu, cu, max(lengths), max(lengths), causal=True)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    refs = torch.autograd.grad(_varlen_reference(torch, qr, kr, vr, lengths, True), (qr, kr, vr), dout.double())
    worst = max(_close(torch, g, r)[1] for g, r in zip(grads, refs))
    return worst < 3e-2, worst


def case_attention_paged(torch, ops):
    B, H, Hk, D, page = 2, 8, 2, 128, 128
    seq = [300, 1000]
    pages_per = max(-(-n // page) for n in seq)
    k_cache, v_cache = (torch.randn(B * pages_per, page, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    table = torch.randperm(B * pages_per, device="cuda", dtype=torch.int32).view(B, pages_per)
    lens = torch.tensor(seq, dtype=torch.int32, device="cuda")
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
    out = ops.attention_paged(q, k_cache, v_cache, table, lens)
    worst = 0.0
    for b, n in enumerate(seq):
        kb, vb = (c[table[b].long()].reshape(-1, Hk, D)[:n].transpose(0, 1)[None] for c in (k_cache, v_cache))
        worst = max(worst, _close(torch, out[b:b + 1], _sdpa(torch, q[b:b + 1], kb, vb, False))[1])
    return worst < 3e-2, worst


CASES = {name[5:]: fn for name, fn in dict(globals()).items() if name.startswith("case_")}


def run_cases(names):
    """Run the cases in this process: one line each, ``CASE name ok|BAD err`` (or the exception)."""
    import torch

    from warpsched import ops

    torch.manual_seed(0)
    for name in names:
        try:
            ok, err = CASES[name](torch, ops)
            torch.cuda.synchronize()
            print(f"CASE {name} {'ok' if ok else 'BAD'} {err:.2e}", flush=True)
        except Exception as e:  # noqa: BLE001 - a failing case is reported, the others still run
            print(f"CASE {name} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)


def summary(tool, text):
    """(the sanitizer's summary line, the kernels its reports name)."""
    line = next((ln.strip("= ").strip() for ln in text.splitlines()
                 if re.search(r"(ERROR|RACECHECK) SUMMARY", ln)), "no summary (the child did not finish)")
    kernels = sorted({m.group(1)[:60] for m in re.finditer(r"=+\s+at (kernel_\w+)", text)})
    return line, kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default="memcheck,racecheck,synccheck")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--case", nargs="*", help="run these cases here, without a sanitizer (the child's mode)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for each tool's child")
    a = ap.parse_args()
    if a.case is not None:
        run_cases(a.case or list(CASES))
        return 0
    names = [n for n in a.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    print("| tool | summary | cases (ok / run) | kernels reported | seconds |")
    print("|---|---|---|---|---|")
    bad = 0
    for tool in filter(None, a.tools.split(",")):
        cmd = ["compute-sanitizer", "--tool", tool, "--report-api-errors", "no", "--print-limit", "20",
               sys.executable, os.path.abspath(__file__), "--case", *names]
        t0 = time.time()
        try:
            text = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout).stdout
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            text += "\n(timed out)"
        line, kernels = summary(tool, text)
        cases = re.findall(r"^CASE (\S+) (\S+)", text, re.M)
        ok = sum(r == "ok" for _, r in cases)
        failed = [f"{n} {r}" for n, r in cases if r != "ok"]
        clean = re.search(r"\b0 (errors|hazards)\b", line) is not None and ok == len(names)
        bad += not clean
        print(f"| {tool} | {line} | {ok} / {len(cases)}{' (' + ', '.join(failed) + ')' if failed else ''} | "
              f"{', '.join(kernels) or '-'} | {time.time() - t0:.0f} |", flush=True)
        if not clean:
            print("\n".join(text.splitlines()[-60:]), flush=True)
    print(f"sanitize: {'clean' if not bad else f'{bad} tool(s) with reports or failed cases'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
