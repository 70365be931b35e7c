"""Persistent warp-specialized TMA + WGMMA GEMM for Hopper, written as a warpsched program.

The kernel ships in the package (``warpsched.kernels.gemm_*``; torch entry point
``warpsched.ops.gemm``); this file is its examples/ entry, so that ``warpsched check
examples/hopper/gemm_persistent.py`` and ``CUTE_DSL_ARCH=sm_90a python
examples/hopper/gemm_persistent.py`` (compile both schedules) work like the other examples.

C[M, N] = A[M, K] @ B[N, K]^T, bf16 (or fp16) in, fp32 accumulate, bf16 / fp16 out. The grid is
min(#SMs, #work units); every CTA walks a static WorkQueue (unit = blockIdx.x, + gridDim.x, ...)
and maps each unit to output tiles through a grouped rasterization (``raster``, ``group``).
Two consumer schedules, chosen with ``schedule=``:

cooperative (tile 128x256 by default; one unit = one tile; 384 threads):
    LoadTask   (warp 0, 40 regs)     per tile: m, n = coords; for k: acquire, TMA A+B, commit
    MmaTask    (warps 4-11, 232)     per tile: for k: wait, wgmma, retire(1), release(previous);
                                               retire(0), release; epilogue (stmatrix -> SMEM -> TMA)
    Both math warp groups share each 128-row tile (64 rows each). The TMA stores of a tile are
    only waited on when their SMEM buffer comes round again (next tile's epilogue, or the end),
    and the load warp already fills the ring with the next tile while the epilogue runs.

pingpong (tile 128x128 per warp group by default; one unit = two consecutive tiles; 384 threads):
    Load0, Load1 (warps 0, 1, 40 regs)  each feeds its own ring (half the stages) for tile 2u / 2u+1
    Mma0 (warps 4-7, 232)   per unit: order.acquire; mainloop on ring 0; order.commit; epilogue
    Mma1 (warps 8-11, 232)  per unit: order.wait; mainloop on ring 1; order.release; epilogue
    MathOrder is a 1-stage AsyncAsync pipeline from Mma0 to Mma1: the two mainloops take turns
    on the tensor cores (Mma0, Mma1, Mma0, ...), so each warp group's epilogue runs while the other
    one's mainloop keeps the tensor cores busy. With an odd tile count the last unit's second
    tile is the last tile again (both warp groups store the same values): no tile is skipped,
    which keeps every unit's schedule identical (a skipped tile would let Load1 run ahead
    without bound, and the checker's search with it).

pingpong_shared (tile 128x128 per warp group; one unit = one tile; 384 threads):
    LoadTask (warp 0, 40 regs)  one ring of every stage that fits (6), filled in tile order
    Mma0, Mma1 (warps 4-7, 8-11, 232)  the CTA's tiles alternate (Mma0 the 1st, 3rd, ...); per tile
        each waits for every stage and releases it (one behind); the owner also issues the wgmmas
        and then runs the epilogue, which overlaps the other's mainloop. The ring order alone
        makes the mainloops take turns (no MathOrder); the checker takes every ownership sequence.

split-K (cooperative, ``split_k=True``; host ``gemm(..., split_k="auto" | n)``): unit u is tile
    u % tiles of K share u // tiles; the K loop length is a per-unit domain provider
    (``GemmTask.k_tiles_of``); the epilogue stores fp32 partial tiles into a workspace (one
    tile-padded slab per split) and the host sums the slabs into C (torch, same stream).

The checker sees every barrier: the rings, the math order, the static queue, with the runtime
K-tile count and the number of units per CTA declared with ``trip_count`` (every K >= 1 and
every unit count >= 1 are proven; with split-K every per-unit K count >= 1).
Stream-K (``gemm(..., split_k="stream")``, ``PersistentGemm(stream_k=True)``): the split-K
program; whole tiles first, then each CTA's even share of the last waves' K iterations, cut at
tile boundaries into units; a tile shared by two CTAs is reduced as in the atomic split-K
(warpsched.kernels.gemm.streamk: deterministic, at most two shares per tile).
Host: ``gemm(a, b, c, schedule=..., split_k="auto", tile_mn=..., raster=..., group=..., cluster_mn=...)``.
"""
from __future__ import annotations

# The names tests, benchmarks and docs use, from the package's modules (one job each).
try:
    from . import _common  # noqa: F401  (pins CUTE_DSL_ARCH before cutlass is imported)
except ImportError:
    import _common  # type: ignore

from warpsched.kernels.gemm.config import DEFAULT_TILES, H200_SMS, SCHEDULES, GemmConfigError
from warpsched.kernels.gemm.resources import EpilogueGather, GmemAB, GmemC, MathOrder, SmemAB
from warpsched.kernels.gemm.program import GemmTask, load_schedule, mma_schedule, mma_shared_schedule
from warpsched.kernels.gemm.kernel import PersistentGemm
from warpsched.kernels.gemm.host import (VERDICT_OF, build, build_cooperative, build_pingpong, build_pingpong_shared,
                                         build_split_k, build_stream_k,
                                         check_args, choose_splits, compile_for_cpu, compiled, cutlass_dtype, gemm,
                                         max_ctas, to_cute, verdict_for)

__all__ = ["DEFAULT_TILES", "H200_SMS", "SCHEDULES", "EpilogueGather", "GemmConfigError", "GemmTask", "GmemAB", "GmemC",
           "MathOrder", "PersistentGemm", "SmemAB", "VERDICT_OF", "build", "build_cooperative", "build_pingpong",
           "build_pingpong_shared", "build_split_k", "build_stream_k", "check_args", "choose_splits", "compile_for_cpu", "compiled", "cutlass_dtype", "gemm",
           "load_schedule",
           "max_ctas", "mma_schedule", "mma_shared_schedule", "to_cute", "verdict_for"]

if __name__ == "__main__":
    for s in SCHEDULES:
        print(s, _common.count_ptx(compile_for_cpu(schedule=s).artifacts.PTX))
