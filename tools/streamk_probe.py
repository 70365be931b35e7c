"""Stream-K's grid against its speed on one shape: ``gemm(split_k="stream")`` with ``max_ctas`` from the tile
count (every tile whole: the data-parallel kernel's work) up to one CTA per SM, next to the data-parallel
kernel and torch.matmul, in device time (CUDA graphs, triton's do_bench median), each checked first against
torch.matmul into a NaN-poisoned output. Where the time goes as the tiles' K ranges are shared by more CTAs:

    python3 tools/streamk_probe.py --shape 1000x2056x4104 --tile 128x256
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1000x2056x4104", help="MxNxK")
    ap.add_argument("--tile", default="128x256", help="bMxbN")
    ap.add_argument("--rep-ms", type=int, default=25)
    args = ap.parse_args()
    import torch
    from triton.testing import do_bench

    import gemm_persistent as gp
    from _graphs import graph_ms

    M, N, K = (int(x) for x in args.shape.split("x"))
    bM, bN = (int(x) for x in args.tile.split("x"))
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    ref = torch.mm(a, b.t()).float()
    tiles = -(-M // bM) * -(-N // bN)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sides = [("torch", lambda c: torch.mm(a, b.t(), out=c)),
             ("data-parallel", lambda c: gp.gemm(a, b, c, tile_mn=(bM, bN), split_k=1))]
    for ctas in sorted({tiles, (tiles + sms) // 2, sms - 8, sms} - {0}):
        if ctas <= sms:
            sides.append((f"stream-K {ctas} CTAs", lambda c, n=ctas: gp.gemm(a, b, c, tile_mn=(bM, bN), split_k="stream",
                                                                          max_ctas=n)))
    print(f"{M}x{N}x{K}, {bM}x{bN} tiles: {tiles} tiles of {-(-K // 64)} K tiles, {sms} SMs", flush=True)
    for name, launch in sides:
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(c)
        torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        ms = graph_ms(torch, do_bench, lambda: launch(c), 0.03, args.rep_ms)
        print(f"{name:24s} {ms * 1e3:7.1f} us  rel. error {err:.2e} {'PASS' if err < 1e-2 else 'FAIL'}", flush=True)


if __name__ == "__main__":
    main()
