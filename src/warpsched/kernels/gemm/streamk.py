"""Stream-K work partition of the persistent GEMM (``split_k="stream"``): integer arithmetic only,
so the kernel runs it on device values (``minimum`` / ``maximum``: cutlass.min / cutlass.max) and
the tests run it on Python ints.

Hybrid data-parallel + stream-K, as CUTLASS does it: with T output tiles, k K tiles each and P
persistent CTAs (P <= T * k), when P does not divide T the last (1 + fraction) waves, ``sk_tiles =
min(T, T % P + P)`` tiles, are stream-K: their ``sk_tiles * k`` K iterations are divided evenly, as
contiguous ranges, among the P CTAs (CTA b: [b * S // P, (b + 1) * S // P)); the other tiles,
``(T - sk_tiles) / P`` per CTA, are whole (data-parallel, CTA b: tiles b, b + P, ...). A CTA runs
its data-parallel tiles first, then its range cut at tile boundaries into work units (tile,
first K tile, K tile count). With fewer tiles than CTAs (T < P: one partial wave) every tile is
stream-K and a range may be shorter than a tile: a tile then has two or more shares.

The hand-over of a shared tile is a chain in K order, from its last K tiles to its first (``share``):
the share holding the tile's last K tiles (share 0: a CTA's first stream-K unit) writes its fp32
partial into the slot's workspace tile and releases the slot's flag; each next share (toward the
tile's first K tile) waits for the flag, adds the partial to its own sum, writes it back and hands on;
the share holding the first K tiles (the last: a CTA's last unit) adds and stores C
(gemm.resources.serial_fixup). The sum is always formed in the same order, so the result is the same
bit for bit on every launch. No cycle of waits: a unit waits only for a unit of a higher CTA that is
that CTA's first stream-K unit, which waits only for a higher CTA's first unit in turn (the chain
ends at a share 0, which waits for nothing), and the grid is resident (<= one CTA per SM). With T >=
P every range holds at least k iterations, so a tile has one share or two. Its correctness and speed
against the data-parallel kernel on the H200: docs/gemm.md, "Stream-K".
"""
from __future__ import annotations


def ctas_for(tiles, k_tiles, max_ctas):
    """The persistent grid: ``max_ctas`` CTAs, or one per K iteration when there are fewer (every
    CTA's range then holds at least one; the kernel's ``__call__`` computes the same bound)."""
    return min(tiles * k_tiles, max_ctas)


class StreamKPlan:
    """The partition of ``tiles`` output tiles of ``k_tiles`` K tiles over ``ctas`` CTAs
    (ctas <= tiles * k_tiles: ``ctas_for``)."""

    def __init__(self, tiles, k_tiles, ctas, minimum=min, maximum=max):
        self.k_tiles, self.ctas, self.min, self.max = k_tiles, ctas, minimum, maximum
        rem = tiles % ctas
        # 0 when the waves are whole (data-parallel only); every tile when they are fewer than the CTAs
        self.sk_tiles = minimum(tiles, (rem + ctas) * minimum(rem, 1))
        self.dp_tiles = tiles - self.sk_tiles  # a multiple of ctas
        self.dp_per_cta = self.dp_tiles // ctas
        self.sk_iters = self.sk_tiles * k_tiles

    def range_of(self, cta):
        """[lo, hi): the stream-K iterations of ``cta`` (tile t's iterations are [t * k, (t + 1) * k))."""
        return cta * self.sk_iters // self.ctas, (cta + 1) * self.sk_iters // self.ctas

    def units(self, cta):
        """Work units of ``cta``: its data-parallel tiles plus the stream-K tiles its range meets
        (>= 1 always: a range holds >= 1 iteration as ctas <= tiles * k_tiles, or there is no
        stream-K and >= 1 wave)."""
        lo, hi = self.range_of(cta)
        k = self.k_tiles
        return self.dp_per_cta + (hi + k - 1) // k - lo // k  # ceil(hi / k) - floor(lo / k), 0 for an empty range

    def unit(self, cta, j):
        """Unit ``j`` of ``cta``: (tile, first K tile, K tiles, stream-K slot). ``tile`` indexes the
        rasterized tile order; ``slot`` (the stream-K tile's index, < 2 * ctas) picks the fp32
        workspace tile and arrival flag. A unit with fewer than k_tiles K tiles shares its tile
        with other units (``share``; see the module docstring); one with k_tiles owns it.
        Branch-free (min / max), so it traces to straight-line device code."""
        mn, mx, k = self.min, self.max, self.k_tiles
        i = j - self.dp_per_cta  # < 0: a data-parallel tile
        is_sk = mn(mx(i + 1, 0), 1)
        lo, hi = self.range_of(cta)
        slot = lo // k + mx(i, 0)
        first = mx(lo, slot * k)
        count = mn(hi, slot * k + k) - first
        dp_tile = cta + j * self.ctas
        tile = dp_tile + is_sk * (self.dp_tiles + slot - dp_tile)
        return tile, is_sk * (first - slot * k), k + is_sk * (count - k), slot

    def _first_cta_from(self, x):
        """The lowest CTA whose range starts at stream-K iteration ``x`` or later (b * S // P >= x
        exactly when b >= ceil(x * P / S)); ``ctas`` when none does."""
        return (x * self.ctas + self.sk_iters - 1) // self.max(self.sk_iters, 1)

    def share(self, slot, first, count):
        """(share, last) of the stream-K unit covering K tiles [first, first + count) of slot
        ``slot``'s tile: ``share`` counts the tile's shares after it in K order (0: the one holding
        the last K tiles), ``last`` is the tile's share count less one (the share holding its first
        K tile). Shares after the unit start at the ranges beginning in [its end, the tile's end);
        the tile's shares beyond its first begin at the range starts strictly inside it. Only
        meaningful for a unit with fewer than k_tiles K tiles."""
        k = self.k_tiles
        start, tile_end = slot * k, slot * k + k
        after = self._first_cta_from(tile_end)
        return after - self._first_cta_from(start + first + count), after - self._first_cta_from(start + 1)
