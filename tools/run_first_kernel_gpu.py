"""Run examples/hopper/first_kernel.py on the GPU: fresh inputs, NaN-poisoned outputs, exact compare.

  python3 tools/run_first_kernel_gpu.py 2>&1 | tee bench/results/first_kernel.log
"""
import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.path.join(ROOT, "src"))

import torch  # noqa: E402

import first_kernel as k  # noqa: E402

bad = 0
for rows in (1, 2, 3, 1000, 65537):
    for draw in range(2):
        x = torch.randn(rows, k.WIDTH, device="cuda")
        y = torch.full_like(x, float("nan"))
        k.scale(x, y)
        torch.cuda.synchronize()
        ok = torch.equal(y, 2 * x)
        bad += not ok
        print(f"first_kernel rows={rows:6d} draw={draw}: {'OK' if ok else 'MISMATCH'}", flush=True)
print(f"first_kernel: {10 - bad}/10 cases correct")
sys.exit(1 if bad else 0)
