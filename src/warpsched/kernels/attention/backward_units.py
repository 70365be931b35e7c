"""The work units of warpsched's FlashAttention backward (``warpsched.kernels.attention.backward``): a unit
is a key block of one (batch, K/V head) (``block_n`` keys: 128, or 64 at head dim 256), one CTA each; its
steps are the (query head of the group, Q block of ``block_m`` rows) pairs that see its keys. These methods (a mixin of ``FlashAttentionBackward``) run in the trace on
device values and, in the tests, on Python ints. ``varlen``: the batch is packed sequences (``cu_q`` /
``cu_k``, flash_attn_varlen_func's cu_seqlens); a unit's rows and keys are its sequence's
(``seq_bounds``), and a key block past its sequence's keys has no step."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .backward_math import HALF
from .live_units import HEADER, KEY_BITS, MAX_KEY_BLOCKS
from .masks import AttentionConfigError
from .units import HeldUnit, grouped_longest_first

BLOCK_N = 2 * HALF  # keys per CTA at head dims 64 / 128: one 64-key half per consumer warp group
BLOCK_M = 64  # Q rows per step (the default; 128 at head dim 64: FlashAttentionBackward(block_m=))


def padded_first_block(q_start, batch, block=BLOCK_M):
    """``varlen`` with ``tma_stats``: the padded LSE / delta block (of ``block`` rows: the kernel's ``block_m``)
    where sequence ``batch`` (first packed row ``q_start``) starts: (q_start + block * batch) rounded down to a
    block, which leaves every sequence its rows rounded up to whole blocks, apart from the next one's
    (``backward_prep.VarlenStatsPrep`` writes there, the load warp reads there). Python ints or device values."""
    return (q_start + block * batch) // block


def padded_stats_rows(total_q, batches, block=BLOCK_M):
    """The padded LSE / delta rows that hold every sequence's blocks: T + block * B, rounded up to a block (so
    the head stride is a multiple of 16 bytes, as TMA needs)."""
    return -(-(total_q + block * batches) // block) * block


class BackwardUnits(HeldUnit):
    """Unit and step order; needs ``block_m``, ``block_n``, ``causal``, ``window_left`` / ``window_right``,
    ``varlen``, ``lpt``, ``lpt_heads``, ``live_units`` and ``grid3d`` (the coordinates read from the block index of a
    (key blocks, K/V heads, batches) grid: ``unit_coords`` then ignores its argument, the CTA's own unit)."""

    def grid_setup(self, seqlen_q, seqlen_k, heads, kv_heads, batches, units_table=None):
        """``units_table`` (``live_units``): ``live_units.SequenceOrderTable``'s table (a tensor, or in the tests
        a list of ints); the grid is then its capacity."""
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k
        self.heads, self.kv_heads, self.batches = heads, kv_heads, batches
        self.group = heads // kv_heads
        self.n_blocks = (seqlen_k + self.block_n - 1) // self.block_n
        self.m_blocks = (seqlen_q + self.block_m - 1) // self.block_m
        self.num_units = self.n_blocks * kv_heads * batches
        if cutlass.const_expr(self.live_units):
            self.units_table = units_table
            words = len(units_table) if isinstance(units_table, list) else cute.size(units_table, mode=[0])
            self.num_units = (words - HEADER) // 2

    def unit_order_options(self, lpt, lpt_heads, live_units, unit_in_regs, grid3d, dq_finish):
        """Set ``lpt``, ``lpt_heads``, ``live_units``, ``unit_in_regs`` and ``grid3d`` (``causal``, ``varlen`` and
        ``deterministic`` set), or raise an AttentionConfigError naming the combination a unit order cannot serve."""
        if lpt and (not (self.causal or self.varlen) or self.deterministic):
            raise AttentionConfigError(f"lpt=True with causal={self.causal}, varlen={self.varlen}, deterministic="
                                       f"{self.deterministic}: the longest-first order is for causal or packed "
                                       "batches (the deterministic dQ's hand-over is proven for the head-major order)")
        self.lpt = bool(lpt)
        # packed batches: the units are live_units.SequenceOrderTable's entries (no CTA for a key block past its
        # sequence's keys; the longest sequences first), read by unit_coords
        if live_units and (not self.varlen or self.lpt):
            raise AttentionConfigError(f"live_units=True with varlen={self.varlen}, lpt={self.lpt}: the unit table "
                                       "lists a packed batch's key blocks in its own order (varlen=True, lpt=False)")
        self.live_units = bool(live_units)
        # packed batches: the CTA's unit coordinates and sequence bounds read once at the top, not after every
        # barrier wait (units.HeldUnit)
        if unit_in_regs and not self.varlen:
            raise AttentionConfigError("unit_in_regs=True with varlen=False: an unpacked batch's bounds are constants "
                                       "(unit_in_regs=False)")
        self.unit_in_regs = bool(unit_in_regs)
        if grid3d and (self.varlen or self.lpt or self.deterministic or dq_finish):
            raise AttentionConfigError(f"grid3d=True with varlen={self.varlen}, lpt={self.lpt}, deterministic="
                                       f"{self.deterministic}, dq_finish={dq_finish}: the 3-D grid is the dense head-"
                                       "major order; those count units by their linear index (grid3d=False)")
        self.grid3d = bool(grid3d)  # coordinates = block index, no division by the key-block count (unit_coords)
        # lpt: longest-first over groups of lpt_heads (batch, K/V head) pairs (None: all of them at once)
        if lpt_heads is not None and (not self.lpt or not isinstance(lpt_heads, int) or lpt_heads < 1):
            raise AttentionConfigError(f"lpt_heads={lpt_heads!r} with lpt={self.lpt}: the group size of the "
                                       "longest-first order, an int >= 1 with lpt=True (None: every head at once)")
        self.lpt_heads = lpt_heads

    def unit_coords(self, unit):
        """(key block, K/V head, batch) of CTA ``unit``: the key blocks of one (batch, K/V head) are
        consecutive CTAs, so the CTAs running at once walk the same query heads and Q blocks and their
        dQ reduce-adds meet in L2 (the fp32 dQ buffer is larger than L2 on long sequences). ``lpt``
        (causal): key block 0 of every (batch, K/V head), then block 1, ...: the longest units first over
        the whole grid, so the hardware hands the short ones to the SMs that finish early (without it the
        last head's long blocks start late and run alone: a 3-7% tail, docs/attention.md); ``lpt_heads``: the
        same within groups of that many (batch, K/V head) pairs (``units.grouped_longest_first``), so the
        CTAs running at once share fewer heads' Q / dO / dQ."""
        held = self._held(unit)
        if held is not None:
            return held[0]
        if cutlass.const_expr(self.grid3d):  # the launching CTA's own unit: its block index
            return cute.arch.block_idx()
        if cutlass.const_expr(self.live_units):
            return self._table_coords(unit)
        if cutlass.const_expr(self.lpt):
            bhs = self.kv_heads * self.batches
            if cutlass.const_expr(self.lpt_heads is not None):
                n_block, bh = grouped_longest_first(unit, self.n_blocks, bhs, self.lpt_heads)
            else:
                n_block, bh = unit // bhs, unit % bhs
        else:
            n_block, bh = unit % self.n_blocks, unit // self.n_blocks
        return n_block, bh % self.kv_heads, bh // self.kv_heads

    def _table_coords(self, unit):
        """``live_units``: entry ``unit`` of the table (``live_units.decode_entry``); a unit past the table's count
        gets key block ``n_blocks`` of sequence 0, past its keys (no step, nothing stored). Selected by
        multiplying, not branching: this runs in plain Python in the tests and inside traced code on the GPU."""
        t = self.units_table
        live = cutlass.min(1, cutlass.max(0, t[0] - unit))
        first, second = t[HEADER + 2 * unit], t[HEADER + 2 * unit + 1]
        n_block = (second & (MAX_KEY_BLOCKS - 1)) * live + self.n_blocks * (1 - live)
        return n_block, (second >> KEY_BITS) * live, first * live

    def first_m_block(self, n_block):
        """The first Q block that sees a key of ``n_block`` (causal: query i sees keys j <= i; a window:
        keys j <= i + right)."""
        if cutlass.const_expr(self.causal):
            return n_block * self.block_n // self.block_m
        if cutlass.const_expr(self.window_right is not None):
            return cutlass.max(n_block * self.block_n - self.window_right, 0) // self.block_m
        return 0

    def end_m_block(self, unit):
        """One past the last Q block that sees a key of ``unit``'s block (a window: keys j >= i - left)."""
        n_block = self.unit_coords(unit)[0]
        _, seqlen_q, _, seqlen_k = self.seq_bounds(unit)
        m_blocks = self.m_blocks
        if cutlass.const_expr(self.varlen):
            m_blocks = (seqlen_q + self.block_m - 1) // self.block_m
        if cutlass.const_expr(self.window_left is None):
            return m_blocks
        last_key = cutlass.min(n_block * self.block_n + self.block_n, seqlen_k) - 1
        return cutlass.min(m_blocks, (last_key + self.window_left) // self.block_m + 1)

    def steps_of(self, unit):
        """(query heads of the group) x (Q blocks ``first_m_block`` .. ``end_m_block``): the unit's step count
        (>= 0; ``varlen``: 0 for a key block past its sequence's keys)."""
        n_block = self.unit_coords(unit)[0]
        steps = self.group * cutlass.max(0, self.end_m_block(unit) - self.first_m_block(n_block))
        if cutlass.const_expr(self.varlen):
            keys = self.seq_bounds(unit)[3]
            steps = steps * cutlass.min(1, cutlass.max(0, keys - n_block * self.block_n))  # 0: no key of the block
        if cutlass.const_expr(self.window_right is not None and not self.causal):
            # first_m_block's block may be the last, cut at S_q before a query whose window reaches the keys
            seqlen_q = self.seq_bounds(unit)[1]
            steps = steps * cutlass.min(1, cutlass.max(0, seqlen_q + self.window_right - n_block * self.block_n))
        return steps

    def step_coords(self, unit, step):
        """(query head, Q block, batch) of step ``step`` of CTA ``unit``: the Q blocks of one query head in
        turn, then the group's next head."""
        n_block, kv_head, batch = self.unit_coords(unit)
        first = self.first_m_block(n_block)
        count = cutlass.max(1, self.end_m_block(unit) - first)
        return kv_head * self.group + step // count, first + step % count, batch

    def seq_bounds(self, unit):
        """(first query row, query rows, first key, keys) of ``unit``'s sequence: (0, S_q, 0, S_k), or with
        ``varlen`` its sequence's, from ``cu_q`` / ``cu_k``."""
        if cutlass.const_expr(not self.varlen):
            return 0, self.seqlen_q, 0, self.seqlen_k
        held = self._held(unit)
        if held is not None:
            return held[1]
        b = self.unit_coords(unit)[2]
        q0, k0 = self.cu_q[b], self.cu_k[b]
        return q0, self.cu_q[b + 1] - q0, k0, self.cu_k[b + 1] - k0

    def padded_block0(self, unit):
        """``varlen`` with ``tma_stats``: the first padded LSE / delta block of ``unit``'s sequence
        (``padded_first_block``)."""
        return padded_first_block(self.seq_bounds(unit)[0], self.unit_coords(unit)[2], self.block_m)

    def rows_of(self, t, unit, head, batch, key=False):
        """``t[:, :, head, batch]`` of an (S, D, H, B) TMA or global view; ``varlen``: the packed tensor's
        rows from the unit's sequence's first query row (``key``: first key) on."""
        if cutlass.const_expr(not self.varlen):
            return t[(None, None, head, batch)]
        start = self.seq_bounds(unit)[2 if key else 0]
        return cute.domain_offset((start, 0), t[(None, None, head, 0)])

