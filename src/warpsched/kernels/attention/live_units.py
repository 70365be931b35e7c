"""The live-unit table of the packed-sequence forward (``FlashAttentionVarlenLive``, ``live_units=True``).

Without it a varlen forward has ``max_seqlen_q``'s Q blocks for every sequence, and a block past its
sequence's rows still runs one fully masked K/V tile: a batch of short sequences with one long one is
mostly such blocks. The table lists only the blocks that hold rows, sequence after sequence: entry ``v``
is (sequence, Q block), and word 0 is their count. A one-warp kernel (``LiveUnitTable``) writes it from
``cu_seqlens_q`` on the device, so the host never reads the offsets (no sync; CUDA graphs capture it).

The host knows only an upper bound of the count without reading the offsets: a sequence of ``n`` rows
that starts at packed row ``s`` has at most ``(s + n) // block_m - s // block_m + 1`` blocks, so
``total_q // block_m + B`` bounds them all (``table_size``). The persistent grid is sized from that bound
and the kernel reads the count: a CTA may then have no unit at all, which its proof covers (the work-tile
count is declared ``>= 0`` for this form).

The packed backward's option of the same name (``FlashAttentionBackwardVarlenLive``) takes
``SequenceOrderTable``'s table: one entry per (sequence, K/V head, key block) that holds keys, the longest
sequences first, bounded the same way from ``total_k``.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401 (SmemAllocator)

HEADER = 2  # word 0: the live block count; word 1 unused, so every (sequence, block) pair is 8-byte aligned
LANES = 32
THREADS = 256  # LongestFirstTable's CTA
MAX_LEVELS = 2048  # LongestFirstTable's levels in shared memory (2 x 8 KB)


def levels_for(max_seqlen_q, block_m):
    """``LongestFirstTable``'s level count for a launch: the longest sequence's blocks, within 1..MAX_LEVELS."""
    return max(1, min(MAX_LEVELS, -(-max_seqlen_q // block_m)))


def max_blocks(total_q, seqs, block_m):
    """An upper bound of the live blocks of ``seqs`` sequences of ``total_q`` rows in all (see the module)."""
    return total_q // block_m + seqs


def table_size(total_q, seqs, block_m):
    """Words of the table for those sequences: the header and two per possible block."""
    return HEADER + 2 * max_blocks(total_q, seqs, block_m)


def sequence_blocks(cu, b, block_m):
    """Sequence ``b``'s blocks of ``block_m`` rows from the offsets ``cu`` (offsets that go back count none): what
    the tables list, and what a unit reading an entry counts its sequence's blocks by. Device values or ints."""
    return cutlass.max((cu[b + 1] - cu[b] + block_m - 1) // block_m, 0)


def _blocks(lengths, block_m):
    """The (sequence, Q block) pairs that hold rows, sequence after sequence."""
    return [(b, j) for b, n in enumerate(lengths) for j in range(-(-n // block_m))]


def reference_table(lengths, block_m):
    """What ``LiveUnitTable`` writes, in Python: [count, 0, b0, j0, b1, j1, ...] (entries past the count are not
    written by the kernel and not listed here)."""
    pairs = _blocks(lengths, block_m)
    return [len(pairs), 0] + [w for p in pairs for w in p]


def reference_levels(lengths, block_m, causal, levels):
    """``LongestFirstTable``'s blocks in an order it may write (from the top level down) and each block's level:
    the order within a level is the device's atomics', so tests compare levels, not slots."""
    def level(b, j):
        return min(j, levels - 1) if causal else min(-(-lengths[b] // block_m), levels) - 1
    of = {p: level(*p) for p in _blocks(lengths, block_m)}
    return sorted(of, key=lambda p: -of[p]), of


def reference_longest_first_table(lengths, block_m, causal, levels):
    """A table ``LongestFirstTable`` may write, in Python: [count, 0, b, j, ...] by level from the top
    (``reference_levels``' order; the device's order within a level is its atomics')."""
    order, _ = reference_levels(lengths, block_m, causal, levels)
    return [len(order), 0] + [w for p in order for w in p]


@cute.jit
def _level_arrays(tid):
    """The level tables' shared memory: (counts, starts), MAX_LEVELS + 2 int32 each, counts zeroed by the CTA's
    THREADS threads and synchronized."""
    smem = cutlass.memory.SmemAllocator()
    counts = smem.allocate_tensor(cutlass.Int32, cute.make_layout(MAX_LEVELS + 2), byte_alignment=16)
    starts = smem.allocate_tensor(cutlass.Int32, cute.make_layout(MAX_LEVELS + 2), byte_alignment=16)
    for i in cutlass.range(tid, MAX_LEVELS + 2, THREADS, unroll=1):
        counts[i] = cutlass.Int32(0)
    cute.arch.sync_threads()
    return counts, starts


class LiveUnitTable:
    """One warp: each lane takes a sequence of a 32-sequence chunk, counts its blocks, and an inclusive scan
    over the lanes (``shuffle_sync_up``) gives each lane where its blocks go; the chunk's total carries to the
    next chunk."""

    def __init__(self, block_m):
        self.block_m = block_m

    def blocks_of(self, mCuQ, b):
        return sequence_blocks(mCuQ, b, self.block_m)

    @cute.jit
    def __call__(self, mCuQ: cute.Tensor, mTable: cute.Tensor, stream):
        self.kernel(mCuQ, mTable).launch(grid=[1, 1, 1], block=[LANES, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mCuQ: cute.Tensor, mTable: cute.Tensor):
        lane, _, _ = cute.arch.thread_idx()
        seqs = cute.size(mCuQ, mode=[0]) - 1
        capacity = (cute.size(mTable, mode=[0]) - HEADER) // 2
        count = cutlass.Int32(0)
        for chunk in cutlass.range(0, seqs, LANES, unroll=1):
            b = chunk + lane
            n = cutlass.Int32(0)
            if b < seqs:
                n = self.blocks_of(mCuQ, b)
            total = n
            for i in cutlass.range_constexpr(5):  # inclusive scan over the 32 lanes
                below = cute.arch.shuffle_sync_up(total, offset=1 << i)
                if lane >= (1 << i):
                    total = total + below
            first = count + total - n
            for j in cutlass.range(cutlass.min(n, capacity - first), unroll=1):  # offsets past total_q: no overflow
                mTable[HEADER + 2 * (first + j)] = b
                mTable[HEADER + 2 * (first + j) + 1] = j
            count = count + cute.arch.shuffle_sync(total, LANES - 1)
        if lane == 0:
            mTable[0] = cutlass.min(count, capacity)
            mTable[1] = cutlass.Int32(0)


class LongestFirstTable(LiveUnitTable):
    """The same blocks, longest first (``lpt_units``): by level, the top level first, where a block's level is
    its Q block index (causal: block j sees about j + 1 K/V tiles) or, without a causal mask, its sequence's
    block count less one (every block of a sequence sees all its keys). Levels at or past ``levels`` (the
    launch's ``ceil(max_seqlen_q / block_m)``, at most ``MAX_LEVELS``) share the top one: the order is then
    approximate, the table still complete. One CTA: a histogram of the levels in shared memory
    (``atomic_add``), their starts by one thread from the top level down, then each block takes the next
    slot of its level (the order within a level is the atomics', which changes no result: units are
    independent)."""

    def __init__(self, block_m, causal):
        super().__init__(block_m)
        self.causal = causal

    @cute.jit
    def __call__(self, mCuQ: cute.Tensor, mTable: cute.Tensor, levels: cutlass.Int32, stream):
        self.kernel(mCuQ, mTable, levels).launch(grid=[1, 1, 1], block=[THREADS, 1, 1], stream=stream,
                                                 smem=2 * 4 * (MAX_LEVELS + 2) + 64)

    @cute.kernel
    def kernel(self, mCuQ: cute.Tensor, mTable: cute.Tensor, levels: cutlass.Int32):
        tid, _, _ = cute.arch.thread_idx()
        # counts[MAX_LEVELS + 1], causal: the blocks past the top level (they join it)
        counts, starts = _level_arrays(tid)
        seqs = cute.size(mCuQ, mode=[0]) - 1
        capacity = (cute.size(mTable, mode=[0]) - HEADER) // 2
        for b in cutlass.range(tid, seqs, THREADS, unroll=1):
            n = self.blocks_of(mCuQ, b)
            if n > 0:
                if cutlass.const_expr(self.causal):  # sequences by block count: level j holds those with n > j
                    cute.arch.atomic_add((counts.iterator + cutlass.min(n, levels)).llvm_ptr, cutlass.Int32(1))
                    if n > levels:
                        cute.arch.atomic_add((counts.iterator + MAX_LEVELS + 1).llvm_ptr, n - levels)
                else:  # n blocks at level n - 1
                    cute.arch.atomic_add((counts.iterator + cutlass.min(n, levels) - 1).llvm_ptr, n)
        cute.arch.sync_threads()
        if tid == 0:
            run = cutlass.Int32(0)
            above = counts[MAX_LEVELS + 1]  # causal: the blocks at this level (the top: also those past it)
            for k in cutlass.range(levels, unroll=1):
                level = levels - 1 - k
                size = counts[level]
                if cutlass.const_expr(self.causal):
                    above = above + counts[level + 1]
                    size = above
                starts[level] = run
                run = run + size
            mTable[0] = cutlass.min(run, capacity)
            mTable[1] = cutlass.Int32(0)
        cute.arch.sync_threads()
        for b in cutlass.range(tid, seqs, THREADS, unroll=1):
            n = self.blocks_of(mCuQ, b)
            seq_level = cutlass.min(n, levels) - 1  # without a causal mask: every block of the sequence
            for j in cutlass.range(n, unroll=1):
                level = seq_level
                if cutlass.const_expr(self.causal):
                    level = cutlass.min(j, levels - 1)
                slot = cute.arch.atomic_add((starts.iterator + level).llvm_ptr, cutlass.Int32(1))
                if slot < capacity:  # offsets past total_q: the table keeps what fits
                    mTable[HEADER + 2 * slot] = b
                    mTable[HEADER + 2 * slot + 1] = j


KEY_BITS = 16  # SequenceOrderTable: an entry's second word is K/V head << KEY_BITS | key block
MAX_KEY_BLOCKS = 1 << KEY_BITS


def backward_table_size(total_k, seqs, heads, block_n):
    """Words of ``SequenceOrderTable``'s table: the header and two per possible (K/V head, key block)."""
    return HEADER + 2 * heads * max_blocks(total_k, seqs, block_n)


def reference_sequence_order(lengths_k, heads, block_n):
    """What ``SequenceOrderTable`` lists, in Python: (sequence, K/V head, key block) triples, the sequences with
    more key blocks first (ties in sequence order here; on the device in the atomics' order), each sequence's
    triples together, head after head, key blocks in order."""
    blocks = [-(-n // block_n) for n in lengths_k]
    order = sorted((b for b, n in enumerate(blocks) if n > 0), key=lambda b: -blocks[b])
    return [(b, h, j) for b in order for h in range(heads) for j in range(blocks[b])]


def decode_entry(first, second):
    """(sequence, K/V head, key block) of a ``SequenceOrderTable`` entry's two words."""
    return first, second >> KEY_BITS, second & (MAX_KEY_BLOCKS - 1)


class SequenceOrderTable(LiveUnitTable):
    """The packed backward's units (``FlashAttentionBackwardVarlen`` with ``live_units``): one entry per
    (sequence, K/V head, key block) that holds keys, so no CTA runs for a key block past its sequence's keys;
    the sequences with the most key blocks first, so a long sequence's key blocks (the longest units: the
    most Q blocks see them) start before the short sequences' and the short ones fill the SMs at the end;
    within a sequence head after head, key blocks in order, as the dense grid's head-major order, so the
    CTAs running at once read the same heads' Q / dO and add into the same dQ tiles (L2). One CTA: a
    histogram of the sequences' entry counts by block count (``atomic_add`` in shared memory), the levels'
    starts from the top one down, then one warp per sequence takes its range of its level and its lanes
    write the entries. Block counts at or past ``levels`` share the top level (the order is then
    approximate, the table still complete)."""

    @cute.jit
    def __call__(self, mCuK: cute.Tensor, mTable: cute.Tensor, heads: cutlass.Int32, levels: cutlass.Int32,
                 stream):
        self.kernel(mCuK, mTable, heads, levels).launch(grid=[1, 1, 1], block=[THREADS, 1, 1], stream=stream,
                                                        smem=2 * 4 * (MAX_LEVELS + 2) + 64)

    @cute.kernel
    def kernel(self, mCuK: cute.Tensor, mTable: cute.Tensor, heads: cutlass.Int32, levels: cutlass.Int32):
        tid, _, _ = cute.arch.thread_idx()
        lane, warp = tid % LANES, tid // LANES
        counts, starts = _level_arrays(tid)
        seqs = cute.size(mCuK, mode=[0]) - 1
        capacity = (cute.size(mTable, mode=[0]) - HEADER) // 2
        for b in cutlass.range(tid, seqs, THREADS, unroll=1):
            n = self.blocks_of(mCuK, b)
            if n > 0:  # level n - 1: the sequence's entries, heads x blocks
                cute.arch.atomic_add((counts.iterator + cutlass.min(n, levels) - 1).llvm_ptr, n * heads)
        cute.arch.sync_threads()
        if tid == 0:
            run = cutlass.Int32(0)
            for k in cutlass.range(levels, unroll=1):
                level = levels - 1 - k
                starts[level] = run
                run = run + counts[level]
            mTable[0] = cutlass.min(run, capacity)
            mTable[1] = cutlass.Int32(0)
        cute.arch.sync_threads()
        for b in cutlass.range(warp, seqs, THREADS // LANES, unroll=1):
            n = self.blocks_of(mCuK, b)  # the same for the whole warp
            if n > 0:
                first = cutlass.Int32(0)
                if lane == 0:
                    first = cute.arch.atomic_add((starts.iterator + cutlass.min(n, levels) - 1).llvm_ptr,
                                                 n * heads)
                first = cute.arch.shuffle_sync(first, 0)
                for i in cutlass.range(lane, n * heads, LANES, unroll=1):
                    if first + i < capacity:  # offsets past total_k: the table keeps what fits
                        h = i // n
                        mTable[HEADER + 2 * (first + i)] = b
                        mTable[HEADER + 2 * (first + i) + 1] = (h << KEY_BITS) | (i - h * n)


_CACHE = {}


def fake_operands():
    """Fake int32 offsets (B + 1) and table, both sizes symbolic."""
    from cutlass.cute.runtime import make_fake_tensor

    return tuple(make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=4) for _ in range(2))


def _compiled_table(key, make, ints, arch, args):
    """A table kernel ``make()`` (called ``f(offsets, table, *ints)``) compiled once per ``key``: with fake
    operands for TVM-FFI calls with torch tensors, with ``args`` (CuTe tensors, the ints, a stream) for the JIT
    executor, or with ``arch`` on the CPU (tests read its PTX)."""
    from .. import _host

    key = key + (arch, args is None)
    if key not in _CACHE:
        if args is None:
            options, stream = _host.fake_target(arch)
            _CACHE[key] = cute.compile(make(), *fake_operands(), *(cutlass.Int32(1),) * ints, stream, options=options)
        else:
            _CACHE[key] = cute.compile(make(), *args, options=_host.launch_options())
    return _CACHE[key]


def _run_table(compiled_for, offsets, words, ints):
    """A new int32 table of ``words`` words, written on the offsets' stream by the kernel ``compiled_for(args)``
    returns (no host sync: the count stays on the device)."""
    import torch

    from .. import _host

    table = torch.empty(words, device=offsets.device, dtype=torch.int32)
    if _host.ffi_enabled():
        compiled_for(None)(offsets, table, *ints)
    else:
        args = [_host.to_cute(offsets, 0), _host.to_cute(table, 0), *map(cutlass.Int32, ints), _host.current_stream()]
        compiled_for(args)(*args)
    return table


def compiled(block_m, arch=None, args=None, longest_first=None):
    """The table kernel for ``block_m``-row blocks (``longest_first``: None for ``LiveUnitTable``, else the causal
    flag of ``LongestFirstTable``): for TVM-FFI calls ``f(cu_seqlens_q, table[, levels])`` with torch tensors, or
    with ``args`` (CuTe tensors, [levels,] a stream) for the JIT executor; ``arch``: a CPU compile for that arch
    (tests read its PTX)."""
    def make():
        return LiveUnitTable(block_m) if longest_first is None else LongestFirstTable(block_m, longest_first)
    return _compiled_table((block_m, longest_first), make, 0 if longest_first is None else 1, arch, args)


def build_table(cu_seqlens_q, total_q, block_m, longest_first=None, max_seqlen_q=0):
    """The table for torch offsets ``cu_seqlens_q`` (int32, on the GPU), built on their stream: a new int32
    tensor of ``table_size`` words (no host sync: the count stays on the device). ``longest_first``: None for
    sequence order, else the causal flag of the longest-first order (``max_seqlen_q`` gives its levels)."""
    levels = () if longest_first is None else (levels_for(max_seqlen_q, block_m),)
    return _run_table(lambda args: compiled(block_m, args=args, longest_first=longest_first), cu_seqlens_q,
                      table_size(total_q, cu_seqlens_q.shape[0] - 1, block_m), levels)


def compiled_sequence_order(block_n, arch=None, args=None):
    """``SequenceOrderTable`` for ``block_n``-key blocks: for TVM-FFI calls ``f(cu_seqlens_k, table, heads,
    levels)`` with torch tensors, or with ``args`` for the JIT executor; ``arch``: a CPU compile for that arch."""
    return _compiled_table(("sequence order", block_n), lambda: SequenceOrderTable(block_n), 2, arch, args)


def build_backward_table(cu_seqlens_k, total_k, block_n, heads, max_seqlen_k):
    """``SequenceOrderTable``'s table for torch offsets ``cu_seqlens_k`` (int32, on the GPU) and ``heads`` K/V
    heads, built on their stream with no host sync: a new int32 tensor of ``backward_table_size`` words."""
    return _run_table(lambda args: compiled_sequence_order(block_n, args=args), cu_seqlens_k,
                      backward_table_size(total_k, cu_seqlens_k.shape[0] - 1, heads, block_n),
                      (heads, levels_for(max_seqlen_k, block_n)))
