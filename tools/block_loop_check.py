"""H200: a decoder block (``bench/model_block.py``'s) timed three ways per side, to tell a slow kernel from a
GPU that idles or slows down in a loop: one block at a time between CUDA events after a synchronization
(median), and loops of ``--loops`` blocks back to back (wall time per block, one synchronization at the
end), the sides alternating. Run with ``nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv -lms 100``
in the background to see the clocks and power the loops ran at.

    python3 tools/block_loop_check.py [--size prefill] [--pass forward+backward] [--loops 5,20] [--rounds 2]
"""
import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))  # bench/: model_block

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--size", default="prefill")
ap.add_argument("--pass", dest="pas", default="forward+backward")
ap.add_argument("--loops", default="5,20")
ap.add_argument("--rounds", type=int, default=2)
a = ap.parse_args()

from model_block import profiled_steps  # noqa: E402

print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), a.size, a.pas, flush=True)
steps = profiled_steps(a.size, a.pas)
for f in steps.values():
    for _ in range(3):
        f()
torch.cuda.synchronize()
res = {name: {"single": []} for name in steps}
for _ in range(a.rounds):
    for name, f in steps.items():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        one = []
        for _ in range(5):
            torch.cuda.synchronize()
            start.record()
            f()
            end.record()
            end.synchronize()
            one.append(start.elapsed_time(end) * 1e3)
        res[name]["single"].append(statistics.median(one))
        for n in (int(v) for v in a.loops.split(",")):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            torch.cuda.synchronize()
            res[name].setdefault(f"loop {n}", []).append((time.perf_counter() - t0) / n * 1e6)
cols = list(res["warpsched"])
print("| side | " + " | ".join(f"{c} (us / block)" for c in cols) + " |\n|---|" + "---|" * len(cols))
for name, r in res.items():
    print(f"| {name} | " + " | ".join("/".join(f"{v:.0f}" for v in r[c]) for c in cols) + " |", flush=True)
