"""How many CTAs in clusters of 1, 2 and 4 a GPU runs at once, measured, beside what the driver says.

    python3 tools/cluster_residency.py [--smem 200000] [--hold-us 200] [--sizes 1,2,4] [--grids 120,128,132]

Why: on one H200 ``HardwareInfo().get_max_active_clusters(4)`` (what ``gemm.launch.max_ctas`` asks) said 33
clusters of 4, yet wave-fit GEMM grids of 32 such clusters ran in about two waves' time; on another it said 30 and
this probe measured 30 (docs/gemm.md, "4-CTA clusters"). This launches a probe kernel with the GEMM's shape of residency (384 threads, ``--smem`` bytes of
SMEM: one CTA per SM) over a grid of G CTAs in clusters of ``size``: each CTA's first thread reads
``%globaltimer`` and ``%smid``, spins for ``--hold-us`` and reads the timer again. A CTA that could not be
resident with the first ones starts only after some of them end, so the most intervals that overlap at one
instant is the number the GPU ran at once. Prints, per cluster size and grid: that number, the CTAs of the
grid, the SMs used and the driver's count. Nothing here is part of warpsched's API.

On the CPU (``--cpu``) it only compiles the probe for sm_90a and checks its PTX reads both registers (the
tests do this).
"""
from __future__ import annotations

import argparse
import os
import sys

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401

THREADS = 384  # the GEMM's: a load warp group and two math warp groups


class ResidencyProbe:
    """One launch: ``out[cta] = (start ns, end ns, SM id)`` for every CTA of the grid, in clusters of ``size``."""

    def __init__(self, size: int, smem_bytes: int, hold_ns: int):
        self.size, self.smem_bytes, self.hold_ns = size, smem_bytes, hold_ns

    @cute.jit
    def __call__(self, out: cute.Tensor, stream):
        ctas = cute.size(out, mode=[0])
        if cutlass.const_expr(self.size > 1):
            self.kernel(out).launch(grid=[ctas, 1, 1], block=[THREADS, 1, 1], cluster=[self.size, 1, 1],
                                    smem=self.smem_bytes, stream=stream)
        else:
            self.kernel(out).launch(grid=[ctas, 1, 1], block=[THREADS, 1, 1], smem=self.smem_bytes, stream=stream)

    @cute.kernel
    def kernel(self, out: cute.Tensor):
        # the SMEM a GEMM CTA holds, so that no two CTAs share an SM (it is never touched)
        cutlass.memory.SmemAllocator().allocate_array(cutlass.Int8, num_elems=self.smem_bytes)
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        if tidx == 0:
            start = cute.arch.globaltimer()
            now = start
            while now - start < self.hold_ns:
                now = cute.arch.globaltimer()
            out[bid, 0] = start
            out[bid, 1] = now
            out[bid, 2] = cutlass.Int64(cute.arch.smid())


def most_at_once(rows):
    """The largest number of [start, end] intervals that contain one instant."""
    events = sorted([(s, 1) for s, _, _ in rows] + [(e, -1) for _, e, _ in rows])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def compile_for_cpu(size=4, smem_bytes=200_000, hold_ns=200_000):
    """The probe compiled for sm_90a on the CPU (fake tensor and stream): its PTX."""
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    from warpsched.kernels import _host

    out = make_fake_tensor(cutlass.Int64, (132, 3), stride=(3, 1))
    return cute.compile(ResidencyProbe(size, smem_bytes, hold_ns), out, make_fake_stream(),
                        options=_host.ptx_options("sm_90a")).artifacts.PTX


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smem", type=int, default=200_000, help="SMEM bytes per CTA (default: one CTA per SM)")
    ap.add_argument("--hold-us", type=int, default=200, help="how long each CTA stays (us)")
    ap.add_argument("--sizes", default="1,2,4")
    ap.add_argument("--grids", default="120,124,128,132", help="CTAs per launch (rounded down to whole clusters)")
    ap.add_argument("--cpu", action="store_true", help="compile only, for sm_90a, and check the PTX")
    a = ap.parse_args()
    if a.cpu:
        os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
        ptx = compile_for_cpu(smem_bytes=a.smem, hold_ns=a.hold_us * 1000)
        ok = "%globaltimer" in ptx and "%smid" in ptx
        print("probe PTX reads %globaltimer and %smid:", "yes" if ok else "NO")
        sys.exit(0 if ok else 1)
    import torch
    from cutlass.cute.runtime import from_dlpack
    from cutlass.utils import HardwareInfo

    from warpsched.kernels import _host

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = _host.current_stream()
    print(f"{torch.cuda.get_device_name()}: {sms} SMs; each CTA {THREADS} threads, {a.smem} B of SMEM, "
          f"{a.hold_us} us\n")
    print("| cluster size | driver: clusters (CTAs) | grid CTAs | most CTAs at once | SMs used | one wave |")
    print("|---|---|---|---|---|---|")
    for size in (int(s) for s in a.sizes.split(",")):
        try:
            driver = HardwareInfo().get_max_active_clusters(size)
        except Exception as e:  # noqa: BLE001 - an older driver
            driver = f"({type(e).__name__})"
        probe = ResidencyProbe(size, a.smem, a.hold_us * 1000)
        for g in (int(x) // size * size for x in a.grids.split(",")):
            out = torch.zeros(g, 3, dtype=torch.int64, device="cuda")
            t = from_dlpack(out, assumed_align=16)
            cute.compile(probe, t, stream)(t, stream)  # per grid: the tensor's shape is static in the compile
            torch.cuda.synchronize()
            rows = [tuple(r) for r in out.tolist()]
            at_once = most_at_once(rows)
            d = f"{driver} ({driver * size})" if isinstance(driver, int) else driver
            print(f"| {size} | {d} | {g} | {at_once} | {len({r[2] for r in rows})} | "
                  f"{'yes' if at_once == g else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
