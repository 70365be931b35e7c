"""The work units of warpsched's FlashAttention forward (``warpsched.kernels.attention.forward``): a unit
is a block of ``64 * wgs`` Q rows of one (batch, head); these methods (a mixin of
``FlashAttention``) map a persistent work-tile index to its (Q block, head, batch, K/V head) and
its K/V tile count. They run in the trace on device values and, in the tests, on Python ints."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .live_units import HEADER, sequence_blocks


def grouped_longest_first(unit, blocks, pairs, group):
    """Position ``unit`` of the order that takes ``pairs`` (batch, head) pairs ``group`` at a time and,
    within a group, block 0 of every pair, then block 1, ...: (block, pair). Callers number blocks so that
    block 0 is the longest, so a grid dispatched in order (one CTA per unit) runs longest-first within each
    group: a group's short units fill the SMs its long ones leave while the next group's long ones start,
    and the CTAs running at once touch about ``group`` pairs' K / V (or Q / dO / dQ), not every pair's
    (docs/attention.md, "Unit order"). The last group may be smaller. Python ints or device values."""
    span = group * blocks
    chunk, rest = unit // span, unit % span
    size = cutlass.min(group, pairs - chunk * group)
    return rest // size, chunk * group + rest % size


class HeldUnit:
    """``unit_in_regs`` (packed batches), while a kernel is traced: one unit's coordinates and sequence bounds
    computed once (``_hold``), so that ``unit_coords`` / ``seq_bounds`` for that same traced unit (compared by
    identity) return them rather than load the unit table and the offsets again after every barrier wait, which
    ptxas cannot hoist past the waits. A call for any other unit computes its own. Shared by the forward's units
    (held per work tile) and the backward's (one unit per CTA, held at the top)."""

    held_unit = None

    def _hold(self, unit):
        self.held_unit = None  # unit_coords / seq_bounds compute them here, once
        self.held_unit = (unit, self.unit_coords(unit), self.seq_bounds(unit))

    def _held(self, unit):
        held = self.held_unit
        return held[1:] if held is not None and unit is held[0] else None


class WorkUnits(HeldUnit):
    """Unit order and sizes; needs ``causal``, ``causal_pairs``, ``lpt_heads``, ``persistent``, ``block_m``,
    ``block_n``, ``max_ctas``, ``window_left`` / ``window_right`` and ``split_kv`` from the kernel
    configuration.

    ``split_kv``: each (Q block, head, batch) is ``splits`` units, split s taking the s-th of
    ``splits`` equal runs of the block's K/V tiles (split-major: the units running at once share one
    run of K / V, and a group's Q heads share it in L2). A split past the block's tiles visits one tile
    beyond them, fully masked (its rows' LSE is +inf: the combine gives it no weight).

    ``varlen``: the batch is packed sequences, ``cu_q`` / ``cu_k`` their first rows and keys (as
    flash_attn_varlen_func's cu_seqlens); ``seqlen_q`` is the longest sequence's rows (max_seqlen_q), a
    unit is a Q block of one (sequence, head), and a block past its sequence's rows stores nothing.
    ``live_units``: the units are ``unit_table``'s blocks (``live_units.LiveUnitTable``: only blocks that hold
    rows) times the heads; ``grid_setup``'s ``live`` is their count (word 0 of the table).

    ``paged``: K and V live in pages of ``block_n`` keys (a K/V cache), ``page_table[b, j]`` the page of
    sequence b's j-th K/V tile and ``cache_seqlens[b]`` its keys; ``physical_tile`` maps a tile."""

    unit_counter = None  # dynamic_units: the live table's word 1, the queue's counter (set while traced)

    def grid_setup(self, seqlen_q, seqlen_k, heads, kv_heads, batches, splits=1, live=None):
        self.seqlen_q, self.seqlen_k = seqlen_q, seqlen_k
        self.heads, self.kv_heads, self.batches = heads, kv_heads, batches
        self.nblocks = (seqlen_q + self.block_m - 1) // self.block_m
        self.splits = splits
        self.live_count = live  # live_units: the table's block count
        # (Q block, head, batch) triples
        self.base_units = live * heads if self.live_units else self.nblocks * heads * batches
        self.num_units = self.base_units * splits
        self.ctas = cutlass.min(self.num_units, self.max_ctas)  # the persistent grid

    def paired_position(self, t):
        """``causal_pairs``: work tile ``t`` (CTA ``t % ctas``, its slot ``t // ctas``) -> the
        position in the head-major zigzag order (per head: Q block nb-1, 0, nb-2, 1, ...). Slots
        2m and 2m+1 of a CTA take positions 2p and 2p+1, a long and a short block of one head
        (nb + 1 K/V tiles together, for even nb), so every CTA does the same work however long its
        blocks are; two rounds (2 x ctas units) cover 2 ctas / nb heads, whose K and V stay in L2
        (the longest-first order runs every head at once: 16x16x1024 streams K / V from DRAM).
        The slots past the last full pair round: with an odd slot count, a CTA that has two gets
        a pair, the others one unit each. Branch-free (called from plain methods in the trace)."""
        ctas, units = self.ctas, self.num_units
        n = units // ctas  # every CTA has n slots, the first `extra` n + 1
        extra = units - n * ctas
        paired = n // 2 * 2  # slots [0, paired) are full pair rounds
        cta, slot = t % ctas, t // ctas
        base = paired * ctas
        in_pairs = cutlass.min(1, cutlass.max(0, paired - slot))  # 1: slot < paired
        odd = n - paired  # n odd: two more rounds (the second only for CTAs < extra); even: one
        late = cutlass.max(0, slot - paired)  # 0 or 1 past the pair rounds
        rest_odd = base + (1 - late) * (cta + cutlass.min(cta, extra)) + late * (2 * cta + 1)
        rest = odd * rest_odd + (1 - odd) * (base + cta)
        pair = slot // 2 * 2 * ctas + 2 * cta + slot % 2
        return in_pairs * pair + (1 - in_pairs) * rest

    def hold_unit(self, stage_info):
        """``unit_in_regs``: in a task's first work of a tile, hold its unit (``HeldUnit``), so the works of its K/V
        loop (the mask's key count, the K / V loads' rows) and its epilogue reuse it: without it two dependent
        loads ran before every S tile's mask. A task's works before its hold, or another task's, compute their
        own."""
        if self.unit_in_regs:
            self._hold(self.unit_of(stage_info))

    def unit_coords(self, unit):
        """(q_block, head, batch, kv_head) of work unit ``unit``. Causal: Q blocks from the last
        (the longest K/V loop) to the first, every (batch, head) of a block in turn; with ``lpt_heads``
        the same within each group of that many (batch, head) pairs, group after group
        (``grouped_longest_first``); or with
        ``causal_pairs`` long / short pairs of one head (``paired_position``); else the Q blocks of
        one (batch, head) in turn (they share K and V in L2). GQA: consecutive Q heads share a K/V
        head. ``split_kv``: the coordinates of the unit's block (``split_of`` says which run)."""
        held = self._held(unit)
        if held is not None:
            return held[0]
        if cutlass.const_expr(self.split_kv):
            unit = unit % self.base_units
        if cutlass.const_expr(self.live_units):
            return self._live_coords(unit)
        hb = self.heads * self.batches
        if cutlass.const_expr(self.causal_pairs):
            z = self.paired_position(unit)
            bh, i = z // self.nblocks, z % self.nblocks
            odd = i % 2
            q_block = (1 - odd) * (self.nblocks - 1 - i // 2) + odd * (i // 2)
        elif cutlass.const_expr(self.causal and self.lpt_heads > 0):
            longest, bh = grouped_longest_first(unit, self.nblocks, hb, self.lpt_heads)
            q_block = self.nblocks - 1 - longest
        elif cutlass.const_expr(self.causal):
            q_block, bh = self.nblocks - 1 - unit // hb, unit % hb
        else:
            q_block, bh = unit % self.nblocks, unit // self.nblocks
        head, batch = bh % self.heads, bh // self.heads
        return q_block, head, batch, head // (self.heads // self.kv_heads)

    def _live_coords(self, unit):
        """``live_units``: unit_coords from the table. Order: K/V head, then the table's blocks, then the Q heads
        that share that K/V head (GQA), so the CTAs running at once read few heads' K / V (one, without GQA);
        causal: the table from its end (each sequence's last, longest blocks first), or with ``causal_pairs`` (the
        tuned default) in zigzag pairs (``_paired_live_coords``). ``lpt_units``: the longest-first table dealt in
        snake rounds, or, handed out by the queue (``dynamic_units``), in groups of ``lpt_heads`` K/V heads."""
        group = self.heads // self.kv_heads
        if cutlass.const_expr(self.lpt_units and self.dynamic_units):
            # queued longest first: the table's blocks (longest first) within groups of lpt_heads K/V heads, a
            # group's K/V heads and then its query heads innermost; a CTA takes the next unit as it frees up, so
            # the last units to start are the shortest, while the CTAs running at once read about lpt_heads K/V
            # heads of a few sequences (all heads: best balanced, most K / V in flight)
            rest, g = unit // group, unit % group
            per = self.kv_heads if self.lpt_heads == 0 else cutlass.min(self.lpt_heads, self.kv_heads)
            v, kv_head = grouped_longest_first(rest, self.live_count, self.kv_heads, per)
            batch, q_block = self._table_entry(v)
            return q_block, kv_head * group + g, batch, kv_head
        if cutlass.const_expr(self.lpt_units):  # the table is longest first: its blocks outermost, in snake rounds
            position = self._snake(unit)
            v, head = position // self.heads, position % self.heads
            batch, q_block = self._table_entry(v)
            return q_block, head, batch, head // group
        if cutlass.const_expr(self.causal_pairs):
            return self._paired_live_coords(unit, group)
        rest, g = unit // group, unit % group
        kv_head, v = rest // self.live_count, rest % self.live_count
        if cutlass.const_expr(self.causal):
            v = self.live_count - 1 - v
        batch, q_block = self._table_entry(v)
        return q_block, kv_head * group + g, batch, kv_head

    def _table_entry(self, v):
        """(sequence, Q block) of the live table's entry ``v``."""
        return self.unit_table[HEADER + 2 * v], self.unit_table[HEADER + 2 * v + 1]

    def _paired_live_coords(self, unit, group):
        """``causal_pairs`` over the live table (causal): work tile ``unit`` takes position ``paired_position`` of
        the order K/V head, table pair (entries 2P, 2P + 1), Q head of the group, entry of the pair; a table entry
        (sequence b, its k-th block) names Q block ``zigzag(k, n)`` of b's n blocks: n - 1, 0, n - 2, 1, ... So a
        CTA's two slots of a pair round hold neighbours of that zigzag, n or n + 1 K/V tiles together, whatever
        the table's parity at the sequence's start (only a pair across two sequences differs): on a batch of equal
        sequences every CTA does the same work, where the table's own order dealt in turn gave some CTAs 1.2x the
        mean. An odd table's last entry closes each K/V head, one unit per Q head. Branch-free."""
        z = self.paired_position(unit)
        per_head = self.live_count * group
        kv_head, u = z // per_head, z % per_head
        paired = self.live_count // 2 * 2 * group  # the units of full table pairs
        in_pairs = cutlass.min(1, cutlass.max(0, paired - u))  # 1: u < paired
        v = in_pairs * (u // (2 * group) * 2 + u % 2) + (1 - in_pairs) * (self.live_count - 1)
        g = in_pairs * (u // 2 % group) + (1 - in_pairs) * (u - paired)
        batch, k = self._table_entry(v)
        n = sequence_blocks(self.cu_q, batch, self.block_m)
        odd = k % 2
        q_block = odd * (k // 2) + (1 - odd) * (n - 1 - k // 2)
        return q_block, kv_head * group + g, batch, kv_head

    def _snake(self, t):
        """``lpt_units``: the table position of work tile ``t`` (CTA ``t % ctas``, round ``t // ctas``): odd full
        rounds reversed, so the CTA that takes a round's longest unit takes the next round's shortest (longest
        first, dealt in turn, leaves CTA 0 the most work; in snake order the rounds even out). The last, partial
        round is in order (reversed, it would name positions past the units)."""
        full = self.num_units // self.ctas
        r, i = t // self.ctas, t % self.ctas
        flip = (r % 2) * cutlass.min(1, cutlass.max(0, full - r))  # 1: an odd round before the partial one
        return t + flip * (self.ctas - 1 - 2 * i)

    def split_of(self, unit):
        """``split_kv``: which of the block's K/V runs ``unit`` takes (0 without splits)."""
        if cutlass.const_expr(not self.split_kv):
            return 0
        return unit // self.base_units

    def out_batch(self, unit):
        """The batch index ``unit``'s O and LSE rows are written at: its batch, or with ``split_kv``
        ``split * batches + batch`` (the partial results are (splits * B, H, S_q, ...))."""
        batch = self.unit_coords(unit)[2]
        if cutlass.const_expr(not self.split_kv):
            return batch
        return self.split_of(unit) * self.batches + batch

    def kv_tiles_of(self, unit):
        """How many K/V tiles ``unit`` visits, from ``kv_first_tile``: up to the last key its last row
        sees (the sequence end; causal: the diagonal; ``window_right``: that many keys past it), at
        least 1 (a unit whose rows see no key runs one fully masked tile: O = 0, LSE = +inf);
        ``split_kv``: its run of those tiles (at least 1)."""
        tiles = self._block_kv_tiles(unit)
        if cutlass.const_expr(self.split_kv):
            per = (tiles + self.splits - 1) // self.splits
            tiles = cutlass.max(cutlass.min(per, tiles - self.split_of(unit) * per), 1)
        return tiles

    def _block_kv_tiles(self, unit):
        """The K/V tiles of ``unit``'s Q block, from ``_block_first_tile`` (every split together)."""
        seqlen_k = self.seq_bounds(unit)[3]
        kv_end = seqlen_k
        if cutlass.const_expr(self.causal):
            kv_end = cutlass.min(seqlen_k, (self.unit_coords(unit)[0] + 1) * self.block_m)
        elif cutlass.const_expr(self.window_right is not None):
            kv_end = cutlass.min(seqlen_k, (self.unit_coords(unit)[0] + 1) * self.block_m + self.window_right)
        tiles = (kv_end + self.block_n - 1) // self.block_n
        if cutlass.const_expr(self.window_left is not None):
            tiles = cutlass.max(tiles - self._block_first_tile(unit), 1)
        elif cutlass.const_expr(self.varlen or self.paged):  # a sequence without keys: one tile, fully masked
            tiles = cutlass.max(tiles, 1)
        if cutlass.const_expr(self.varlen and not self.live_units):  # a block past its sequence's rows: one tile
            live = cutlass.min(1, cutlass.max(0, self.seq_bounds(unit)[1] - self.unit_coords(unit)[0] * self.block_m))
            tiles = live * tiles + (1 - live)
        return tiles

    def kv_first_tile(self, unit):
        """The first K/V tile ``unit`` visits: 0, or with ``window_left`` the tile of the first key its
        first row sees (clamped to the last tile: a unit past every key still visits one); ``split_kv``:
        the start of its run."""
        first = self._block_first_tile(unit)
        if cutlass.const_expr(self.split_kv):
            per = (self._block_kv_tiles(unit) + self.splits - 1) // self.splits
            first = first + self.split_of(unit) * per
        return first

    def last_kv_tile(self, unit):
        """The last K/V tile ``unit`` visits (``k_ahead`` loads its V after the K/V loop)."""
        return self.kv_first_tile(unit) + self.kv_tiles_of(unit) - 1

    def _block_first_tile(self, unit):
        if cutlass.const_expr(self.window_left is None):
            return 0
        first_key = cutlass.max(self.unit_coords(unit)[0] * self.block_m - self.window_left, 0)
        last_tile = (self.seq_bounds(unit)[3] + self.block_n - 1) // self.block_n - 1
        if cutlass.const_expr(self.varlen or self.paged):  # a sequence without keys has no last tile: tile 0
            last_tile = cutlass.max(last_tile, 0)
        return cutlass.min(first_key // self.block_n, last_tile)

    def seq_bounds(self, unit):
        """(first Q row, Q rows, first key, keys) of ``unit``'s sequence: (0, S_q, 0, S_k), or with
        ``varlen`` its sequence's, from ``cu_q`` / ``cu_k``."""
        if cutlass.const_expr(self.paged):  # one sequence of Q rows per batch, its keys in the cache
            return 0, self.seqlen_q, 0, self.cache_seqlens[self.unit_coords(unit)[2]]
        if cutlass.const_expr(not self.varlen):
            return 0, self.seqlen_q, 0, self.seqlen_k
        held = self._held(unit)
        if held is not None:
            return held[1]
        b = self.unit_coords(unit)[2]
        q0, k0 = self.cu_q[b], self.cu_k[b]
        return q0, self.cu_q[b + 1] - q0, k0, self.cu_k[b + 1] - k0

    def physical_tile(self, unit, tile):
        """``paged``: the cache page that holds K/V tile ``tile`` of ``unit``'s sequence (a tile past the
        table's last entry reads the last entry: it is fully masked)."""
        entry = cutlass.min(tile, self.pages_per_seq - 1)
        return self.page_table[(self.unit_coords(unit)[2], entry)]

    @staticmethod
    def seq_view(t, start, head, seq_mode=0):
        """``varlen``: head ``head`` of a packed TMA or global view (one batch) whose modes are (S, D, H, B)
        (``seq_mode`` 0) or (D, S, H, B) (1), its rows from ``start`` (a sequence's first row or key) on."""
        return cute.domain_offset((start, 0) if seq_mode == 0 else (0, start), t[(None, None, head, 0)])

    def kv_tile_of(self, stage_info):
        """The K/V tile a step of the unit's K/V loop visits: the loop offset, from ``kv_first_tile``."""
        if cutlass.const_expr(self.window_left is None and not self.split_kv):
            return stage_info.loop_offset
        return self.kv_first_tile(self.unit_of(stage_info)) + stage_info.loop_offset

    def ahead_of(self, stage_info):
        """``unit_overlap``: the unit coordinates (``unit_coords``) and K/V tile of the S GEMM a step
        issues, one tile ahead of the loop: K/V tile j + 1 of the current unit, or on its last tile
        tile 0 of the CTA's next unit (the static queue's tile + grid; past the CTA's last unit a
        clamped valid unit, computed and discarded). Before the tile loop (no work tile): the CTA's
        first unit, tile 0. Both units' coordinates depend on the work tile only, so the compiler
        hoists their divisions out of the K/V loop; per tile only the choice between them remains
        (a select on the unit index itself kept ~5 integer divisions in every iteration: 0.8x)."""
        if stage_info.work_tile is None:
            bid, _, _ = cute.arch.block_idx()
            return self.unit_coords(bid), 0
        t, j = stage_info.work_tile.tile_idx[0], stage_info.loop_offset
        here, ahead = self.unit_coords(t), self.unit_coords(cutlass.min(t + self.ctas, self.num_units - 1))
        last = cutlass.min(1, cutlass.max(0, j + 2 - self.kv_tiles_of(t)))  # 1: j is the unit's last tile
        return tuple(last * b + (1 - last) * a for a, b in zip(here, ahead)), (1 - last) * (j + 1)

    def unit_of(self, stage_info):
        """The work unit a work method runs for: the queue's tile, or the CTA's block index."""
        if cutlass.const_expr(self.persistent):
            return stage_info.work_tile.tile_idx[0]
        return stage_info.context.values.unit
