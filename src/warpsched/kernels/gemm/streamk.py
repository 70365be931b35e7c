"""Stream-K work partition of the persistent GEMM (``split_k="stream"``): integer arithmetic only,
so the kernel runs it on device values (``minimum`` / ``maximum``: cutlass.min / cutlass.max) and
the tests run it on Python ints.

Hybrid data-parallel + stream-K, as CUTLASS does it: with T output tiles, k K tiles each and P
persistent CTAs (P <= T), when P does not divide T the last (1 + fraction) waves, ``sk_tiles =
T % P + P`` tiles, are stream-K: their ``sk_tiles * k`` K iterations are divided evenly, as
contiguous ranges, among the P CTAs (CTA b: [b * S // P, (b + 1) * S // P)); the other tiles,
``(T - sk_tiles) / P`` per CTA, are whole (data-parallel, CTA b: tiles b, b + P, ...). A CTA runs
its data-parallel tiles first, then its range cut at tile boundaries into work units (tile,
first K tile, K tile count).

Determinism: every range holds at least k iterations (sk_tiles >= P), so a range that meets a
tile without covering it has a neighbour that covers the rest, and no third range fits inside
one tile: a tile has one share (stored directly) or two. Of two shares, the one holding the
tile's last K tiles is CTA b's first stream-K unit and writes its fp32 partial into the slot's
workspace tile, then releases the slot's flag; the one holding the first K tiles is CTA b - 1's
last unit: it waits for the flag (set long before, in practice), adds the partial to its own sum
and stores C (gemm.resources.serial_fixup with two shares). The sum is always own + partial, so
the result is the same bit for bit on every launch. No cycle of waits: a writer waits for
nothing before it (its CTA's data-parallel tiles only), and the grid is resident (<= one CTA per
SM). Its correctness and speed against the data-parallel kernel on the H200: docs/gemm.md, "Stream-K".
"""
from __future__ import annotations


def ctas_for(tiles, max_ctas):
    """The persistent grid: one CTA per tile up to ``max_ctas`` (fewer tiles than SMs: no stream-K,
    every CTA one whole tile; stream-K's ranges of >= one tile cannot use more CTAs than tiles)."""
    return min(tiles, max_ctas)


class StreamKPlan:
    """The partition of ``tiles`` output tiles of ``k_tiles`` K tiles over ``ctas`` CTAs (ctas <= tiles)."""

    def __init__(self, tiles, k_tiles, ctas, minimum=min, maximum=max):
        self.k_tiles, self.ctas, self.min, self.max = k_tiles, ctas, minimum, maximum
        rem = tiles % ctas
        self.sk_tiles = (rem + ctas) * minimum(rem, 1)  # 0 when the waves are whole: data-parallel only
        self.dp_tiles = tiles - self.sk_tiles  # a multiple of ctas
        self.dp_per_cta = self.dp_tiles // ctas
        self.sk_iters = self.sk_tiles * k_tiles

    def range_of(self, cta):
        """[lo, hi): the stream-K iterations of ``cta`` (tile t's iterations are [t * k, (t + 1) * k))."""
        return cta * self.sk_iters // self.ctas, (cta + 1) * self.sk_iters // self.ctas

    def units(self, cta):
        """Work units of ``cta``: its data-parallel tiles plus the stream-K tiles its range meets
        (>= 1 always: a range holds >= k_tiles iterations, or there is no stream-K and >= 1 wave)."""
        lo, hi = self.range_of(cta)
        k = self.k_tiles
        return self.dp_per_cta + (hi + k - 1) // k - lo // k  # ceil(hi / k) - floor(lo / k), 0 for an empty range

    def unit(self, cta, j):
        """Unit ``j`` of ``cta``: (tile, first K tile, K tiles, stream-K slot). ``tile`` indexes the
        rasterized tile order; ``slot`` (the stream-K tile's index, < 2 * ctas) picks the fp32
        workspace tile and arrival flag. A unit with fewer than k_tiles K tiles shares its tile
        with exactly one other unit (see the module docstring); one with k_tiles owns it.
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
