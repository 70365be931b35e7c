"""The backward's pre-pass: delta = rowsum(dO * O) in fp32, one thread per (batch, head, query) row
(``StatsPrep``: also a copy of the LSE, both into buffers padded to whole Q blocks, for the kernel's TMA).

A plain CuTe DSL kernel (no pipelines, so no warpsched program): each thread copies its row of O and dO
into registers (16-byte vector loads; D is 64 or 128 and rows are 16-byte aligned) and sums the products
in fp32. It replaces torch's ``(dout.float() * out.float()).sum(-1)``, which writes and reads two fp32
copies of the tensors.
"""
from __future__ import annotations

import math
from typing import Optional

import cutlass
import cutlass.cute as cute

from .backward_units import BLOCK_M, padded_first_block
from .backward_math import LOG2E

THREADS = 128
VEC = 8  # 16-bit elements per 16-byte load
CHUNK = 128  # columns of a row in registers at once


class DeltaPrep:
    """delta[b, h, s] = sum_d O[b, h, s, d] * dO[b, h, s, d] (fp32) for 16-bit (B, H, S, D) inputs."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128):
        self.dtype, self.head_dim = dtype, head_dim

    @cute.jit
    def __call__(self, mO: cute.Tensor, mdO: cute.Tensor, mDelta: cute.Tensor, stream):
        rows = cute.size(mO, mode=[0]) * cute.size(mO, mode=[1]) * cute.size(mO, mode=[2])
        self.kernel(mO, mdO, mDelta).launch(grid=[(rows + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1],
                                            stream=stream)

    @cute.kernel
    def kernel(self, mO: cute.Tensor, mdO: cute.Tensor, mDelta: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        heads, seq = cute.size(mO, mode=[1]), cute.size(mO, mode=[2])
        row = bid * THREADS + tidx
        if row < cute.size(mO, mode=[0]) * heads * seq:
            s, bh = row % seq, row // seq
            h, b = bh % heads, bh // heads
            mDelta[(b, h, s)] = self.row_delta(mO, mdO, b, h, s)

    @cute.jit
    def row_delta(self, mO: cute.Tensor, mdO: cute.Tensor, b, h, s):
        """sum_d O[b, h, s, d] * dO[b, h, s, d] in fp32, the row read with 16-byte loads, at most 128 columns
        at a time (a whole 256-column row of both would take 256 registers)."""
        chunk = min(self.head_dim, CHUNK)
        rows_o = cute.flat_divide(mO[(b, h, s, None)], (chunk,))
        rows_do = cute.flat_divide(mdO[(b, h, s, None)], (chunk,))
        total = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(self.head_dim // chunk):
            o = cute.make_rmem_tensor(cute.make_layout(chunk), self.dtype)
            do = cute.make_rmem_tensor(cute.make_layout(chunk), self.dtype)
            cute.autovec_copy(rows_o[(None, c)], o)
            cute.autovec_copy(rows_do[(None, c)], do)
            prod = o.load().to(cutlass.Float32) * do.load().to(cutlass.Float32)
            total = total + prod.reduce(cute.ReductionOp.ADD, cutlass.Float32.zero, 0)
        return total


class RowParallel(DeltaPrep):
    """The row work of the padded pre-passes, D / 8 threads a row (a row's threads are in one warp): each
    thread's 8 columns of O * dO, summed over the row by butterfly shuffles, and its 8 floats of the dQ
    accumulator's row zeroed. ``StatsPrep`` and ``VarlenStatsPrep`` differ only in which row a thread has."""

    @cute.jit
    def lane_product(self, mO: cute.Tensor, mdO: cute.Tensor, b, h, s, lane):
        """sum over this lane's 8 columns of O[b, h, s] * dO[b, h, s] (fp32; one 16-byte load of each)."""
        o = cute.make_rmem_tensor(cute.make_layout(VEC), self.dtype)
        do = cute.make_rmem_tensor(cute.make_layout(VEC), self.dtype)
        cute.autovec_copy(cute.flat_divide(mO[(b, h, s, None)], (VEC,))[(None, lane)], o)
        cute.autovec_copy(cute.flat_divide(mdO[(b, h, s, None)], (VEC,))[(None, lane)], do)
        prod = o.load().to(cutlass.Float32) * do.load().to(cutlass.Float32)
        return prod.reduce(cute.ReductionOp.ADD, cutlass.Float32.zero, 0)

    def row_sum(self, part):
        """The row's total in every lane of it: every lane of the warp must call this (rows outside the grid with
        0), so no lane waits on an absent one."""
        lanes = self.head_dim // VEC
        for i in range(int(math.log2(lanes))):  # traced Python: unrolled
            part = part + cute.arch.shuffle_sync_bfly(part, offset=lanes >> (i + 1))
        return part

    @cute.jit
    def zero_lane(self, mdQacc: cute.Tensor, b, h, s, lane):
        """This lane's 8 floats of the dQ accumulator's row (two 16-byte stores)."""
        zero = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float32)
        zero.fill(0.0)
        cute.autovec_copy(zero, cute.flat_divide(mdQacc[(b, h, s, None)], (VEC,))[(None, lane)])


class StatsPrep(RowParallel):
    """delta (as ``DeltaPrep``) and the LSE times log2 e (what the backward's exp2 subtracts, so no step
    multiplies it) into (B, H, S_pad) fp32 buffers, S_pad = S rounded up
    to whole Q blocks: rows past S get delta 0 and LSE +inf (P = 0 there), so the backward
    (``tma_stats``) loads each step's 64 values of both with one TMA each, beside Q and dO; and the fp32 dQ
    accumulator (B, H, S_pad, D) zeroed (no separate fill kernel before the backward).

    Row-parallel: D / 8 threads per row, each with one 16-byte load of O and of dO (a warp reads whole rows,
    coalesced), their products summed by butterfly shuffles; each thread zeroes its 8 columns of the row's
    dQ accumulator (two 16-byte stores)."""

    @cute.jit
    def __call__(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mDelta: cute.Tensor,
                 mLSEp: cute.Tensor, mdQacc: cute.Tensor, stream):
        self._launch(mO, mdO, mLSE, mDelta, mLSEp, mdQacc, None, stream)

    def _launch(self, mO, mdO, mLSE, mDelta, mLSEp, mdQacc, mCount, stream):
        """The kernel over every padded row, D / 8 threads a row (traced from either entry point)."""
        rows = cute.size(mDelta, mode=[0]) * cute.size(mDelta, mode=[1]) * cute.size(mDelta, mode=[2])
        per_cta = THREADS // (self.head_dim // VEC)
        self.kernel(mO, mdO, mLSE, mDelta, mLSEp, mdQacc, mCount).launch(
            grid=[(rows + per_cta - 1) // per_cta, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mDelta: cute.Tensor,
               mLSEp: cute.Tensor, mdQacc: cute.Tensor, mCount: Optional[cute.Tensor]):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        lanes = self.head_dim // VEC  # threads per row (8, 16 or 32: a row's threads are in one warp)
        heads, seq, padded = cute.size(mO, mode=[1]), cute.size(mO, mode=[2]), cute.size(mDelta, mode=[2])
        row = bid * (THREADS // lanes) + tidx // lanes
        lane = tidx % lanes
        s, bh = row % padded, row // padded
        h, b = bh % heads, bh // heads
        in_grid = row < cute.size(mO, mode=[0]) * heads * padded
        part = cutlass.Float32(0.0)
        if in_grid:
            if s < seq:
                part = self.lane_product(mO, mdO, b, h, s, lane)
        part = self.row_sum(part)
        if in_grid:
            self.zero_lane(mdQacc, b, h, s, lane)
            if lane == 0:
                if cutlass.const_expr(mCount is not None):  # StatsPrepCounts: the Q block's word, by its first row
                    if s % self.block_m == 0:
                        mCount[bh * (padded // self.block_m) + s // self.block_m] = cutlass.Int32(0)
                if s < seq:
                    mDelta[(b, h, s)] = part
                    mLSEp[(b, h, s)] = mLSE[(b, h, s)] * LOG2E
                else:
                    mDelta[(b, h, s)] = cutlass.Float32(0.0)
                    mLSEp[(b, h, s)] = cutlass.Float32.inf


class StatsPrepCounts(StatsPrep):
    """``StatsPrep`` that also zeroes the in-kernel dQ finish's words (``FlashAttentionBackward(dq_finish=True)``:
    one Int32 per (batch, head, ``block_m``-row Q block), ``mCount``)."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, block_m=BLOCK_M):
        super().__init__(dtype, head_dim)
        self.block_m = block_m

    @cute.jit
    def __call__(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mDelta: cute.Tensor,
                 mLSEp: cute.Tensor, mdQacc: cute.Tensor, mCount: cute.Tensor, stream):
        self._launch(mO, mdO, mLSE, mDelta, mLSEp, mdQacc, mCount, stream)


class VarlenStatsPrep(RowParallel):
    """``StatsPrep`` for packed sequences: (1, H, T) O / dO / LSE and int32 offsets ``mCuQ`` (B + 1) in, delta and
    the LSE times log2 e out into (1, H, T_pad) buffers (``backward_units.padded_stats_rows``) where sequence b's rows
    start at block ``backward_units.padded_first_block``, each followed by delta 0 / LSE +inf up to its last
    whole block (of ``block_m`` rows, the kernel's). ``zero_dq``: also zeroes the flat dQ accumulator
    (1, H, T_pad, D) over the sequence's padded rows (the kernel's flat tiles of those rows are those floats:
    ``backward_math.reduce_dq``), so no fill kernel runs before the backward; the rows between sequences are
    never read.

    Row-parallel as ``StatsPrep``: D / 8 threads a row, one 16-byte load of O and of dO each and one 32-byte
    zero of dQ (a warp's loads and stores are whole rows, coalesced), so a CTA covers 128 / (D / 8) rows of one
    (sequence, head): grid (ceil(padded max_seqlen_q / rows a CTA), H, B)."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, block_m=BLOCK_M, zero_dq=False):
        super().__init__(dtype, head_dim)
        self.block_m, self.zero_dq = block_m, zero_dq

    @cute.jit
    def __call__(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mCuQ: cute.Tensor, mDelta: cute.Tensor,
                 mLSEp: cute.Tensor, mdQacc: cute.Tensor, max_seqlen_q: cutlass.Int32, stream):
        blocks = (max_seqlen_q + self.block_m - 1) // self.block_m * self.block_m
        per_cta = THREADS // (self.head_dim // VEC)
        self.kernel(mO, mdO, mLSE, mCuQ, mDelta, mLSEp, mdQacc).launch(
            grid=[(blocks + per_cta - 1) // per_cta, cute.size(mO, mode=[1]), cute.size(mCuQ, mode=[0]) - 1],
            block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mCuQ: cute.Tensor, mDelta: cute.Tensor,
               mLSEp: cute.Tensor, mdQacc: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        blk, h, b = cute.arch.block_idx()
        lanes = self.head_dim // VEC  # threads per row (8, 16 or 32: a row's threads are in one warp)
        start = mCuQ[b]
        rows = mCuQ[b + 1] - start
        s = blk * (THREADS // lanes) + tidx // lanes
        lane = tidx % lanes
        in_seq = s < (rows + self.block_m - 1) // self.block_m * self.block_m
        part = cutlass.Float32(0.0)
        if s < rows:
            part = self.lane_product(mO, mdO, 0, h, start + s, lane)
        part = self.row_sum(part)
        if in_seq:
            p = padded_first_block(start, b, self.block_m) * self.block_m + s
            if cutlass.const_expr(self.zero_dq):
                self.zero_lane(mdQacc, 0, h, p, lane)
            if lane == 0:
                if s < rows:
                    mDelta[(0, h, p)] = part
                    mLSEp[(0, h, p)] = mLSE[(0, h, start + s)] * LOG2E
                else:
                    mDelta[(0, h, p)] = cutlass.Float32(0.0)
                    mLSEp[(0, h, p)] = cutlass.Float32.inf
