"""H200: where the decode block's time goes as a model calls it (1 x 16 tokens, forward, eager): the
block's wall time per call with and without a final synchronization (host-bound when they match), the
device time of one block (CUDA events around a call after a synchronization), and a cProfile of the
Python host path per call (functions by own time), warpsched's block and torch's side by side.

    python3 tools/decode_host_profile.py [--calls 200] [--top 30] [--config auto|default] [--grad | --backward]
                                         [--no-threads]

warpsched's side is bench/model_block.py's: the gate / up weight interleaved, ``linear(..., activation="swiglu")``.
``--grad``: the forward with grad mode on (the weights require grad, so the autograd wrappers run and save their
tensors) instead of ``torch.no_grad``; ``--backward``: forward + backward, as model_block.py's forward + backward
rows (``torch.autograd.grad`` of the output for x and every weight).
"""
import argparse
import cProfile
import functools
import io
import os
import pstats
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))  # bench/: model_block

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--calls", type=int, default=200)
ap.add_argument("--top", type=int, default=30)
ap.add_argument("--config", default="auto", help="the GEMMs' config (auto: tuned, as ops.gemm does)")
ap.add_argument("--grad", action="store_true", help="the forward with grad mode on")
ap.add_argument("--backward", action="store_true", help="forward + backward, as model_block's forward + backward rows")
ap.add_argument("--no-threads", action="store_true", help="autograd's device threads off, so that cProfile (which "
                "sees the calling thread only) also sees the Python backwards")
a = ap.parse_args()
if a.no_threads:
    torch.autograd.set_multithreading_enabled(False)

import warpsched.ops as wops  # noqa: E402

if a.config != "auto":
    wops.gemm = functools.partial(wops.gemm, config=a.config)
from model_block import HIDDEN, block, fused_mlp_params, params, sdpa_bshd, warpsched_bshd  # noqa: E402
import warpsched.nn.functional as wf  # noqa: E402

p = params()
pf = fused_mlp_params(p)
x = torch.randn(1, 16, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=a.backward)
dy = torch.randn_like(x)
sides = {"warpsched": (wf.linear, warpsched_bshd, pf), "torch": (F.linear, sdpa_bshd, p)}
print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"),
      "forward + backward" if a.backward else "forward, grad mode " + ("on" if a.grad else "off"), flush=True)
with torch.enable_grad() if (a.grad or a.backward) else torch.no_grad():
    for name, (lin, att, pp) in sides.items():
        f = functools.partial(block, p=pp, linear=lin, attention=att)
        if a.backward:
            f = (lambda x, f=f, pp=pp: torch.autograd.grad(f(x), [x] + list(pp.values()), dy))
        for _ in range(5):  # tune, compile, warm up
            f(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.calls):
            f(x)
        host = (time.perf_counter() - t0) / a.calls  # the host's issue time (the queue may still be busy)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / a.calls
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dev = []
        for _ in range(20):  # one block at a time: the device's time for it, host gaps included
            torch.cuda.synchronize()
            start.record()
            f(x)
            end.record()
            end.synchronize()
            dev.append(start.elapsed_time(end) / 1e3)
        dev.sort()
        print(f"\n{name}: issue {host * 1e6:.0f} us / call, wall {wall * 1e6:.0f} us / call, one block between "
              f"events {dev[len(dev) // 2] * 1e6:.0f} us (median of 20)", flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            f(x)
        prof.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        st = pstats.Stats(prof, stream=out)
        st.sort_stats("tottime").print_stats(a.top)
        print(f"cProfile, {a.calls} calls (divide the times by {a.calls} for one block):", flush=True)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip()), flush=True)
