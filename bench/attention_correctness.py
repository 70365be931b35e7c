"""Correctness of warpsched's FlashAttention forward (examples/hopper/attention.py) on the H200.

  python3 bench/attention_correctness.py 2>&1 | tee bench/results/attention_correctness.log

Every configuration (dtype x head dim x causal) runs in its own child process with a timeout, so
a hang or a crash costs that configuration only. Each case draws fresh random inputs, poisons the
output and the LSE with NaN (every element must be written), and compares with an fp32 math
reference (scores, top-left causal mask as torch SDPA's is_causal, softmax, P V, log-sum-exp):
max and mean absolute error of O and of the LSE, and, for scale, the error of torch SDPA (default
backend) on the same inputs. Cases: S = 1, 127, 1000, tails, S_q != S_k (both ways, causal
too), grouped-query attention (H / H_kv = 4 and 8), 512 work units (several per persistent CTA), one run
over 16500 keys (the long-key tiles) and one long head split into K/V runs.

``--variants "qring:q_stages=2,n192q:block_n=192;q_stages=2;hd=64"`` also runs each named
FlashAttention configuration (``warpsched.kernels.attention.host.prepare(**options)``; ``hd=64``
restricts a variant to that head dim), each configuration of each variant in its own child;
``--dtypes``, ``--cases`` (indices into CASES) and ``--no-default`` keep a GPU run short; a
variant whose configuration times out or crashes skips its remaining configurations, and
``--passed-out FILE`` writes {variant: all passed} for ``attention_sweep.py --only-passed FILE``.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import threading
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.path.join(ROOT, "src"))

# (B, H, H_kv, S_q, S_k)
CASES = [(1, 2, 2, 1, 1), (2, 3, 3, 127, 127), (1, 2, 2, 1000, 1000), (2, 4, 4, 128, 128), (1, 2, 2, 129, 300),
         (1, 2, 2, 256, 1024), (1, 2, 2, 1000, 77), (2, 8, 2, 513, 700), (1, 8, 1, 2048, 2048),
         (1, 2, 2, 4096, 4096),
         (4, 16, 4, 1000, 1000),  # 512 work units: several per persistent CTA (a Q ring's both stages)
         (1, 4, 2, 2100, 16500),  # one run over 16500 keys (no split): the long-key tiles (tuned_options' seqlen_k)
         (1, 1, 1, 4500, 4500)]  # one head, 36 Q blocks: split into K/V runs on the short-sequence split kernel
CONFIGS = [(dtype, d, causal) for dtype in ("bfloat16", "float16") for d in (64, 128, 256) for causal in (False, True)]
# O: bf16 / fp16 rounding of values up to a few units, plus fp32 reordering; LSE: fp32 only
TOL = {"bfloat16": (1e-2, 8e-3), "float16": (2e-3, 1e-3)}  # (absolute, relative to |ref|)


def reference(q, k, v, causal, scale):
    import torch

    qf, kf, vf = q.float(), k.float(), v.float()
    rep = q.shape[1] // k.shape[1]
    kf, vf = kf.repeat_interleave(rep, dim=1), vf.repeat_interleave(rep, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", qf, kf) * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(0)
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, dim=-1), vf), lse


def parse_variants(text):
    """"name:key=value;key=value,name2:..." -> {name: {key: int}} (also attention_sweep.py's --variants)."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        name, _, kv = item.partition(":")
        out[name] = {k: int(v) for k, v in (p.split("=") for p in kv.split(";") if p)}
    return out


RESTRICTIONS = ("hd", "causal_only", "full_only")  # keys of a variant that say where it runs, not kernel options


def applies(options, d, causal):
    """Whether a variant runs at head dim ``d`` with this mask: ``hd=D`` / ``causal_only=1`` / ``full_only=1``."""
    return not (options.get("hd", d) != d or (options.get("causal_only") and not causal)
                or (options.get("full_only") and causal))


def resolve_variant(att, options, d, causal, seqlen_q, seqlen_k):
    """A variant's FlashAttention options for one call, or None where it does not apply (``applies``; also
    attention_sweep.py's): ``tuned=1`` starts from the default's options for the head dim and mask,
    ``default=1`` from those the default runs on this shape."""
    if not applies(options, d, causal):
        return None
    options = {k: x for k, x in options.items() if k not in RESTRICTIONS}
    if options.pop("tuned", 0):
        options = dict(att.tuned_options(d, causal), **options)
    if options.pop("default", 0):
        options = dict(att.tuned_options(d, causal, seqlen_q, seqlen_k), **options)
    return options


def run_config(dtype_name, d, causal, options=None, cases=None):
    import torch
    import torch.nn.functional as F

    from warpsched import ops
    from warpsched.kernels.attention import host as att

    dtype = getattr(torch, dtype_name)
    ok = True
    for case in (CASES if cases is None else [CASES[i] for i in cases]):
        B, H, Hk, Sq, Sk = case
        torch.manual_seed(hash((case, d, causal)) % 2**31)
        q = torch.randn(B, H, Sq, d, device="cuda", dtype=dtype)
        k = torch.randn(B, Hk, Sk, d, device="cuda", dtype=dtype)
        v = torch.randn(B, Hk, Sk, d, device="cuda", dtype=dtype)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Sq), float("nan"), device="cuda", dtype=torch.float32)
        scale = 1.0 / math.sqrt(d)
        t0 = time.time()
        ran_shape = q.shape  # the (B, H, S_q, D) the kernel ran: a packed GQA call runs its K/V heads
        if options:  # a variant: the same host path with FlashAttention options
            att.prepare(q, k, v, causal=causal, out=out, lse=lse,
                        **resolve_variant(att, options, d, causal, Sq, Sk))[0]()
        else:
            ops.attention(q, k, v, causal=causal, out=out, lse=lse)  # the public entry point
            packed = att.gqa_packed(q, Hk, causal)
            ran_shape = q.shape if packed is None else packed.shape
        torch.cuda.synchronize()
        ref, ref_lse = reference(q, k, v, causal, scale)
        err = (out.float() - ref).abs()
        lse_err = (lse - ref_lse).abs()
        finite = bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all())
        atol, rtol = TOL[dtype_name]
        o_ok = finite and bool((err <= atol + rtol * ref.abs()).all())
        l_ok = finite and float(lse_err.max()) <= 1e-3 * max(1.0, float(ref_lse.abs().max()))
        try:
            sd = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hk != H)
            sdpa_err = float((sd.float() - ref).abs().max())
        except Exception as e:  # noqa: BLE001 - context only
            sdpa_err = f"n/a ({type(e).__name__})"
        good = o_ok and l_ok
        ok &= good
        print(json.dumps(dict(dtype=dtype_name, d=d, causal=causal, B=B, H=H, H_kv=Hk, S_q=Sq, S_k=Sk,
                              ok=good, finite=finite, o_max=float(err.max()) if finite else None,
                              o_mean=float(err.mean()) if finite else None,
                              lse_max=float(lse_err.max()) if finite else None, sdpa_o_max=sdpa_err,
                              seconds=round(time.time() - t0, 2),
                              options=options or {}, verdict=att.VERDICT_OF.get(
                                  (att._host.cutlass_dtype(dtype), d, causal,  # the kernel the call ran
                                   tuple(sorted(att.kernel_options(ran_shape, Sk, causal, options or {})[0]
                                                .items())))))),
              flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--options", default="{}", help=argparse.SUPPRESS)  # child: the variant's options (JSON)
    ap.add_argument("--timeout", type=int, default=90)
    ap.add_argument("--variants", default="", help="extra FlashAttention configurations, e.g. 'qring:q_stages=2'")
    ap.add_argument("--no-default", action="store_true", help="run the variants only")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--dims", default="64,128,256", help="head dims, e.g. 256")
    ap.add_argument("--causal", choices=("both", "yes", "no"), default="both", help="which masks to run")
    ap.add_argument("--cases", default="", help="indices into CASES, e.g. 0,1,2,6 (default: all)")
    ap.add_argument("--budget", type=float, default=0, help="seconds: start no configuration after this (0: none)")
    ap.add_argument("--jobs", type=int, default=1, help="configurations run at once (each child compiles on the CPU)")
    ap.add_argument("--passed-out", default="", help="write {variant: every configuration passed} (JSON)")
    args = ap.parse_args()
    cases = [int(i) for i in args.cases.split(",")] if args.cases else None
    if args.child:
        dtype_name, d, causal = args.child[0], int(args.child[1]), args.child[2] == "1"
        sys.exit(0 if run_config(dtype_name, d, causal, json.loads(args.options), cases) else 1)
    runs = [] if args.no_default else [("default", {})]
    runs += list(parse_variants(args.variants).items())
    summary, passed, start = [], {}, time.time()
    lock = threading.Lock()

    def one(vname, options, dtype_name, d, causal):
        with lock:
            if passed.get(vname) is None and vname in passed:  # a hang or crash: skip the rest of the variant
                return
            if args.budget and time.time() - start > args.budget:
                summary.append(f"{vname} {dtype_name} hd{d} causal={causal}: not run (--budget {args.budget:.0f} s "
                               "spent)")
                passed[vname] = False
                return
        name = f"{vname:10s} {dtype_name} hd{d} {'causal' if causal else 'non-causal'}"
        t0 = time.time()
        try:
            rc = subprocess.run([sys.executable, __file__, "--child", dtype_name, str(d), "1" if causal else "0",
                                 "--options", json.dumps(options)] + (["--cases", args.cases] if cases else []),
                                timeout=args.timeout).returncode
            status, ok = ("PASS" if rc == 0 else f"FAIL (rc {rc})"), rc == 0
            crashed = rc not in (0, 1)  # 1: wrong results; anything else: a crash
        except subprocess.TimeoutExpired:
            status, ok, crashed = f"TIMEOUT after {args.timeout} s", False, True
        with lock:
            passed[vname] = None if crashed or (vname in passed and passed[vname] is None) else (
                passed.get(vname, True) and ok)
            summary.append(f"{name:40s} {status}  ({time.time() - t0:.0f} s)")
            print(summary[-1], flush=True)

    todo = []
    for (vname, options), (dtype_name, d, causal) in ((r, c) for r in runs for c in CONFIGS):
        if dtype_name not in args.dtypes.split(",") or str(d) not in args.dims.split(","):
            continue
        if args.causal != "both" and causal != (args.causal == "yes"):
            continue
        if not applies(options, d, causal):
            continue
        todo.append((vname, options, dtype_name, d, causal))
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:  # children print whole JSON lines
        list(pool.map(lambda job: one(*job), todo))
    print("\n".join(["== summary"] + summary))
    if args.passed_out:
        with open(args.passed_out, "w") as f:
            json.dump({k: bool(v) for k, v in passed.items()}, f)


if __name__ == "__main__":
    main()
