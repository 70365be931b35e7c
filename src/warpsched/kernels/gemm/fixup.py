"""The kernel's side of gemm.handover's hand-over descriptions: what each verb the grid checker
proves (GmemFlag wait / signal / reset, GmemWorkspace read / store) emits in the persistent GEMM.

Each of gemm.handover's ``serial_fixup_calls``, ``parallel_fixup_calls`` and ``atomic_fixup_calls`` is
run twice, once per side: the grid checker runs it on the unit's ints with the model's recording
GmemFlag / GmemWorkspace, and ``GmemC.serial_fixup`` / ``parallel_fixup`` / ``atomic_fixup`` run it
while the kernel is traced, with ``runtime_branch`` / ``runtime_repeat`` for its ifs and loops and a
``SerialFixupIO`` / ``ParallelFixupIO`` / ``AtomicFixupIO`` for its verbs. So the calls the checker
proves are the calls the kernel makes, in the same order under the same conditions: there is no
second, hand-kept copy of the hand-over to drift apart. What a binding adds is the CTA's side of
each verb (which thread issues it, the epilogue barrier and fences around it) and the addresses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass._mlir import ir
from cutlass._mlir.dialects import nvvm, vector

from ...lower.dsl import dyn_if
from ...lower.gmem_flags import bind
from .handover import SPLIT_K_FLAGS

SPIN_LIMIT = 1 << 20  # polls of a tile flag before the tile is poisoned (~1 s: a visible failure, not a hang)


@cute.jit
def wait_flag(flag, target, acc):
    """The hand-written wait (without ``gmem_flags``): spin with acquire loads (GPU scope) until the
    flag word at ``flag`` reads ``target``; bounded by SPIN_LIMIT polls, past which ``acc`` is
    poisoned with NaN (a visible failure, not a hang)."""
    seen = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
    spins = cutlass.Int32(0)
    while seen != target:
        seen = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
        spins = spins + 1
        if spins >= SPIN_LIMIT:
            seen = target
            acc[0] = cutlass.Float32(float("nan"))


@cute.jit
def first_thread_wait(io, idx, value):
    """The output's first thread spins on the flag (bounded: past SPIN_LIMIT polls its accumulator is
    poisoned with NaN); ``io``: a fix-up binding (out, acc, tidx, words, gmem_flags)."""
    acc = io.acc  # a local: the DSL would carry ``io`` (a Python object) through the if that writes it
    if io.tidx == io.out.first_thread:
        if cutlass.const_expr(io.gmem_flags):
            if not bind(SPLIT_K_FLAGS, io.words).wait(idx, value, spin_limit=SPIN_LIMIT, fence=False):
                acc[0] = cutlass.Float32(float("nan"))
        else:
            wait_flag(io.words.iterator + idx, value, acc)


@cute.jit
def first_thread_reset(io, idx):
    """The output's first thread zeroes the flag for the next launch (a relaxed store)."""
    if io.tidx == io.out.first_thread:
        if cutlass.const_expr(io.gmem_flags):
            bind(SPLIT_K_FLAGS, io.words).reset(idx)
        else:
            cute.arch.store(io.words.iterator + idx, cutlass.Int32(0), sem="relaxed", scope="gpu")


def acc_vectors(acc):
    """The accumulator fragment as (4, n / 4) registers: the order ``fragment_block`` stores them in."""
    return cute.make_tensor(acc.iterator, cute.make_layout((4, cute.size(acc) // 4)))


def fragment_block(g, acc, block, thread):
    """This thread's part of fp32 workspace block ``block`` (bM * bN floats at block * bM * bN: one per
    tile, slab or stream-K slot, which the host's tile-padded workspace holds), in the accumulators'
    register order rather than as the tile's rows: thread t's 4-float vector v at (v * threads + t) * 4, so
    a warp's access is one 512-byte run of 16-byte vectors (a row-major tile took 8-byte pieces of 8 rows
    per access). Writer and reader of a block run the same kernel, so they agree on the order."""
    bM, bN, _ = g.tile_mnk
    threads = cute.size(g.epi_tiled_mma)
    base = cute.assume(block * (bM * bN) + thread * 4, divby=4)
    return cute.make_tensor(g.mW.iterator + base, cute.make_layout((4, cute.size(acc) // 4), stride=(1, 4 * threads)))


def runtime_branch(cond, then, otherwise=None):
    """The kernel's ``branch``: a runtime if on the unit's values (plain Python on a constant)."""
    dyn_if({}, [], cond, lambda env: then(), (lambda env: otherwise()) if otherwise is not None else None)


@dataclass(frozen=True, eq=False)
class SerialFixupIO:
    """One share's GMEM accesses in serial_fixup: the flag verbs by the output's first thread (the
    GmemFlag lowering with ``g.gmem_flags``, else the hand-written loads and stores: the same PTX
    instructions), with the epilogue barrier and GPU fences that order the other threads around
    them, and the fp32 tile's reads and stores by every thread. Frozen, so the DSL does not carry it
    through a runtime if (as StageInfo)."""

    out: Any  # the GmemC resource: first_thread
    acc: Any  # acc_vectors of this thread's fp32 accumulators
    tile: Any  # its part of the tile's fp32 workspace block (fragment_block)
    tidx: Any
    epi_bar: Any
    words: Any  # the Int32 flag words (g.mF)
    gmem_flags: bool  # the GmemFlag lowering (else the hand-written accesses)

    @cute.jit
    def wait(self, idx, value):
        first_thread_wait(self, idx, value)
        self.epi_bar.arrive_and_wait()  # the other threads read after the acquire (bar.sync orders them)
        cute.arch.fence_acq_rel_gpu()

    @cute.jit
    def read(self, idx):
        prev = cute.make_rmem_tensor(self.acc.layout, self.acc.element_type)
        cute.autovec_copy(self.tile, prev)
        self.acc.store(self.acc.load() + prev.load())

    @cute.jit
    def write_or_accumulate(self, idx, first):
        cute.autovec_copy(self.acc, self.tile)  # acc holds the sum so far: one store either way

    @cute.jit
    def signal(self, idx, value):
        cute.arch.fence_acq_rel_gpu()
        self.epi_bar.arrive_and_wait()
        if self.tidx == self.out.first_thread:
            if cutlass.const_expr(self.gmem_flags):
                bind(SPLIT_K_FLAGS, self.words).signal(idx, value, fence=False)  # every thread fenced before epi_bar
            else:
                cute.arch.store(self.words.iterator + idx, value, sem="release", scope="gpu")

    @cute.jit
    def reset(self, idx):
        first_thread_reset(self, idx)


@cute.jit
def runtime_repeat(count, body: cutlass.Constexpr):
    """The kernel's ``repeat``: ``body(s)`` in a runtime loop over s < ``count``."""
    for s in cutlass.range(count):
        body(s)


@dataclass(frozen=True, eq=False)
class ParallelFixupIO:
    """One share's GMEM accesses in parallel_fixup (gemm.handover.parallel_fixup_calls): its slab (the
    share's fp32 tile) written and read by every thread, the count and the wait by the output's first
    thread with the epilogue barrier and fences around them. Its slab index is the share."""

    out: Any  # the GmemC resource: first_thread
    acc: Any  # acc_vectors of this thread's accumulators
    thread: Any  # this thread's index among the epilogue's (fragment_block)
    tidx: Any
    epi_bar: Any
    words: Any
    gmem_flags: bool
    m: Any
    n: Any

    def _slab(self, share):
        g = self.out.g
        return fragment_block(g, self.acc, (share * g.tiles_m + self.m) * g.tiles_n + self.n, self.thread)

    @cute.jit
    def write(self, share):
        cute.autovec_copy(self.acc, self._slab(share))

    @cute.jit
    def add(self, idx, value, acquire: cutlass.Constexpr = True):
        cute.arch.fence_acq_rel_gpu()  # the slab's stores, then the count
        self.epi_bar.arrive_and_wait()
        if self.tidx == self.out.first_thread:
            if cutlass.const_expr(self.gmem_flags):
                bind(SPLIT_K_FLAGS, self.words).add(idx, value, acquire=acquire, fence=False)
            else:
                cute.arch.atomic_add(self.words.iterator + idx, cutlass.Int32(value),
                                     sem="acq_rel" if acquire else "release", scope="gpu")

    @cute.jit
    def wait(self, idx, value):
        first_thread_wait(self, idx, value)

    @cute.jit
    def reset(self, idx):
        first_thread_reset(self, idx)
        # the slabs are read next: every thread after the first thread's acquire (bar.sync orders them)
        self.epi_bar.arrive_and_wait()
        cute.arch.fence_acq_rel_gpu()

    @cute.jit
    def read(self, share):
        prev = cute.make_rmem_tensor(self.acc.layout, self.acc.element_type)
        cute.autovec_copy(self._slab(share), prev)
        self.acc.store(self.acc.load() + prev.load())


@dataclass(frozen=True, eq=False)
class AtomicFixupIO:
    """One share's GMEM accesses in atomic_fixup (gemm.handover.atomic_fixup_calls): its reduce-adds into
    the tile's zeroed workspace, the count by the output's first thread after a fence and the epilogue
    barrier, and ``when``: the first thread's ticket broadcast to every thread of the output by a
    predicate-OR barrier; the last share reads the sum, zeroes the tile and resets the flag."""

    out: Any  # the GmemC resource: first_thread, which, num_threads
    acc: Any
    tile: Any  # this thread's fragment of the tile's fp32 workspace
    tidx: Any
    epi_bar: Any
    words: Any
    gmem_flags: bool

    @cute.jit
    def accumulate(self, idx, atomic: cutlass.Constexpr = False):
        pair = ir.VectorType.get([2], cutlass.Float32.mlir_type)
        # WGMMA accumulators hold two adjacent columns per register pair: one 8-byte reduction each
        for i in cutlass.range_constexpr(cute.size(self.acc) // 2):
            v = vector.from_elements(pair, [self.acc[2 * i].ir_value(), self.acc[2 * i + 1].ir_value()])
            cute.arch.red((self.tile.iterator + self.tile.layout(2 * i)).llvm_ptr, v, op="add", dtype="f32",
                          sem="relaxed", scope="gpu")

    @cute.jit
    def add(self, idx, value, acquire: cutlass.Constexpr = True):
        """The first thread's count; the value before it (-1 in the other threads: never a ticket)."""
        cute.arch.fence_acq_rel_gpu()
        self.epi_bar.arrive_and_wait()
        seen = cutlass.Int32(-1)
        if self.tidx == self.out.first_thread:
            if cutlass.const_expr(self.gmem_flags):
                seen = bind(SPLIT_K_FLAGS, self.words).add(idx, value, acquire=acquire, fence=False)
            else:
                seen = cute.arch.atomic_add(self.words.iterator + idx, cutlass.Int32(value),
                                            sem="acq_rel" if acquire else "release", scope="gpu")
        return seen

    def when(self, seen, old, body):
        """``body`` in every thread of the output when the first thread's add returned ``old``; returns
        that as a runtime Boolean (the caller stores C then)."""
        out = self.out
        is_last = nvvm.barrier_cta_red(cutlass.Boolean(seen == old).ir_value(), cutlass.Int32(1 + out.which).ir_value(),
                                       nvvm.BarrierReduxKind.OR, thread_count=cutlass.Int32(out.num_threads).ir_value(),
                                       aligned=True, results=[cutlass.Int32.mlir_type])
        is_last = cutlass.Int32(is_last) != 0

        def finish():
            cute.arch.fence_acq_rel_gpu()  # the reads after the acquire count
            body()
        runtime_branch(is_last, finish)
        return is_last

    @cute.jit
    def read(self, idx):
        cute.autovec_copy(self.tile, self.acc)

    @cute.jit
    def write(self, idx):
        zero = cute.make_rmem_tensor(self.acc.layout, self.acc.element_type)
        zero.fill(0.0)
        cute.autovec_copy(zero, self.tile)  # the workspace tile is zero again for the next launch

    @cute.jit
    def reset(self, idx):
        first_thread_reset(self, idx)
