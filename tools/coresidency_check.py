"""H200: the co-residency bound the host computes for serial split-K and stream-K, and both correct and
deterministic with it (two launches bitwise equal); a max_ctas past the device refused.

    python3 tools/coresidency_check.py
"""
import torch
from warpsched.kernels.gemm import host as gemm_host
from warpsched.kernels.gemm import residency

a = torch.randn(1280, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(3840, 4096, device="cuda", dtype=torch.bfloat16)
ref = (a.double() @ b.double().T)
for split_k, reduce in (("stream", "host"), (4, "serial")):
    c = torch.full((1280, 3840), float("nan"), device="cuda", dtype=torch.bfloat16)
    p = gemm_host.plan(a, b, c, "cooperative", split_k, reduce)
    p(a, b, c)
    c2 = torch.full_like(c, float("nan"))
    p(a, b, c2)
    torch.cuda.synchronize()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    print(f"split_k={split_k} {reduce}: max_ctas={p.options['max_ctas']} err={err:.2e} two launches equal="
          f"{torch.equal(c, c2)} {'PASS' if err < 1e-2 and torch.equal(c, c2) else 'FAIL'}", flush=True)
occ = residency.device_occupancy()
print("device occupancy:", occ)
try:
    gemm_host.plan(a, b, c, "cooperative", "stream", "host", max_ctas=occ.sms + 1)
    print("FAIL: a grid past the device accepted")
except residency.CoResidencyError as e:
    print("refused as expected:", e)
