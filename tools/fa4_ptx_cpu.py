"""FlashAttention-4's Hopper forward or backward (``flash_attn.cute``), compiled on the CPU for sm_90a: its PTX, to
set beside ours (``tools/sass_loops.py``). FA4 is the kernel we measure against; warpsched never imports it.

    FLASH_ATTENTION_NUM_SMS=132 .venv/bin/python tools/fa4_ptx_cpu.py --shape 8x16x4096 --kv-heads 4 --dim 64 \\
        --causal --out /tmp/fa4_64c.ptx
    .venv/bin/python tools/fa4_ptx_cpu.py --backward --shape 16x16x1024 --dim 64 --causal --out /tmp/fa4_b64c.ptx

Needs ``flash_attn.cute`` (the ``flash-attn-4`` wheel) and ``quack-kernels`` installed, no GPU: the call runs
under torch's FakeTensorMode, where FA4 compiles and does not launch, with its compute capability given
(``_arch=90``) and the SM count from ``FLASH_ATTENTION_NUM_SMS``. Its own configuration choice applies (at head
dim 64: 192 x 128 tiles, P in registers, intra-warp-group overlap).
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8x16x4096", help="B x H x S")
    ap.add_argument("--kv-heads", type=int, default=None, help="H_kv (default: H)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--out", required=True, help="the PTX file to write")
    ap.add_argument("--backward", action="store_true", help="the backward kernel (its own tile choice per head dim)")
    a = ap.parse_args()
    os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")  # the backward picks its path from this, not _arch
    B, H, S = (int(x) for x in a.shape.split("x"))
    Hk = a.kv_heads or H
    dump = tempfile.mkdtemp(prefix="fa4_ptx_")
    os.environ["CUTE_DSL_KEEP"] = "ptx"
    os.environ["CUTE_DSL_DUMP_DIR"] = dump
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from flash_attn.cute import interface

    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.empty(B, S, H, a.dim, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.empty(B, S, Hk, a.dim, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        if a.backward:
            out = torch.empty_like(q)
            lse = torch.empty(B, H, S, dtype=torch.float32, device="cuda")
            interface._flash_attn_bwd(q, k, v, out, torch.empty_like(q), lse, causal=a.causal)
        else:
            interface._flash_attn_fwd(q, k, v, causal=a.causal, num_splits=1, _arch=90)
    kind = "Backward" if a.backward else "Forward"
    found = sorted(glob.glob(os.path.join(dump, f"*FlashAttention{kind}Sm90*.ptx")))
    if not found:
        sys.exit(f"fa4_ptx_cpu: no {kind.lower()} PTX in {dump}: {os.listdir(dump)}")
    shutil.copy(found[-1], a.out)
    print(f"fa4_ptx_cpu: {a.out} ({os.path.getsize(a.out)} bytes)")


if __name__ == "__main__":
    main()
