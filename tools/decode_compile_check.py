"""H200: the decode block (1 x 16 tokens) forward, eager vs torch.compile, warpsched vs torch, with
nn.functional.linear on torch.ops.warpsched.gemm under torch.compile. GEMMs on config='default' (no
autotune: this checks the host path under compile, not the kernel choice).

    python3 tools/decode_compile_check.py
"""
import functools
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__))), "bench"))  # bench/: _eager, model_block
import warpsched.ops as wops  # noqa: E402

wops.gemm = functools.partial(wops.gemm, config="default")
from _eager import alternate  # noqa: E402
from model_block import HIDDEN, block, params, sdpa_bshd, warpsched_bshd  # noqa: E402
import warpsched.nn.functional as wf  # noqa: E402

t0 = time.time()
p = params()
x = torch.randn(1, 16, HIDDEN, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    ref = block(x, p, F.linear, sdpa_bshd)
    got = block(x, p, wf.linear, warpsched_bshd)
    err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
print(f"decode forward: warpsched vs torch rel err {err:.2e} ({time.time() - t0:.0f} s)", flush=True)
fns = {}
for name, (lin, att) in {"warpsched": (wf.linear, warpsched_bshd), "torch": (F.linear, sdpa_bshd)}.items():
    f = (lambda x, lin=lin, att=att: block(x, p, lin, att))
    fns[f"{name} eager"] = (lambda f=f: f(x))
    torch._dynamo.reset()
    c = torch.compile(f)
    with torch.no_grad():
        c(x)
    fns[f"{name} compile"] = (lambda c=c: c(x))
print(f"compiled ({time.time() - t0:.0f} s)", flush=True)
with torch.no_grad():
    med = alternate(torch, fns, rounds=3, iters=20)
for k, v in med.items():
    print(f"{k}: {v * 1e3:.0f} us", flush=True)
print(f"torch compile / warpsched compile: {med['torch compile'] / med['warpsched compile']:.3f}x; "
      f"warpsched compile / eager: {med['warpsched compile'] / med['warpsched eager']:.3f}x ({time.time() - t0:.0f} s)")
