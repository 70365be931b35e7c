"""Planted-bug twins of the GEMM's cross-CTA hand-overs (warpsched.kernels.gemm.handover), for the
tests and tools/gmem_flags_gpu.py. Each twin runs the kernel's own ``*_fixup_calls`` with a mutated
``flag`` / ``tile`` (the wrappers below) or mutated arguments, on the kernel's own unit assignment,
so the production descriptions carry no test hook.

    serial:   missing_signal (share 0 never hands on), reversed (the chain runs from the last share
              down), read_first (a share reads the tile before its wait)
    stream-K: read_first, missing_signal, wrong_neighbour (the reader waits on the next slot),
              two_share_rule (a middle share of a tile with three takes itself for the writer)
    parallel: missing_signal (share 0 never counts itself), read_first (the last share reads a slab
              before its wait)
    atomic:   plain_write (stores instead of reduce-adds), release_only (the count does not acquire)
"""
from __future__ import annotations

from warpsched.kernels.gemm import handover as H
from warpsched.model.gmem_flags import CrossCtaProtocol
from warpsched.kernels.gemm.streamk import StreamKPlan

FLAGS, TILE = H.SPLIT_K_FLAGS, H.SPLIT_K_TILE
BUGS = {"serial": ("missing_signal", "reversed", "read_first"),
        "stream": ("read_first", "missing_signal", "wrong_neighbour", "two_share_rule"),
        "parallel": ("missing_signal", "read_first"),
        "atomic": ("plain_write", "release_only")}


class _Wrap:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)


class NeverHandsOn(_Wrap):
    """A flag whose signal / count is dropped (planted: the share never hands on)."""

    def signal(self, idx, value):
        pass

    def add(self, idx, amount, acquire=True):
        return None


class ReadsBeforeWait(_Wrap):
    """A flag whose wait first reads ``tile`` at ``index(idx)`` (planted: the read moved before the wait)."""

    def __init__(self, inner, tile, index=lambda idx: idx):
        super().__init__(inner)
        self.tile, self.index = tile, index

    def wait(self, idx, value):
        self.tile.read(self.index(idx))
        return self.inner.wait(idx, value)


class ReadsNothing(_Wrap):
    """A tile whose reads are dropped (with ReadsBeforeWait: the read moved, not doubled)."""

    def read(self, idx):
        pass


class PlainWrites(_Wrap):
    """A tile whose atomic accumulation is a plain store (planted: a second plain writer)."""

    def accumulate(self, idx, atomic=False):
        return self.inner.write(idx)


class CountsWithoutAcquire(_Wrap):
    """A flag whose counting add only releases (planted: the last share reads without acquiring)."""

    def add(self, idx, amount, acquire=True):
        return self.inner.add(idx, amount, acquire=False)


def serial(bug, splits=2, grids=(1, 2, 3, 4), tiles=(1, 2, 3)) -> CrossCtaProtocol:
    last = splits - 1

    def body(grid, unit):
        t, split = unit
        if bug == "missing_signal":
            H.serial_fixup_calls(t, split, last, flag=NeverHandsOn(FLAGS) if split == 0 else FLAGS)
        elif bug == "reversed":
            H.serial_fixup_calls(t, last - split, last)
        elif bug == "read_first":
            H.serial_fixup_calls(t, split, last, flag=ReadsBeforeWait(FLAGS, TILE), tile=ReadsNothing(TILE))
        else:
            raise ValueError(f"serial twin {bug!r}: one of {BUGS['serial']}")

    return CrossCtaProtocol(f"GEMM serial split-K ({splits} shares, {bug})",
                            lambda cta, ctas, n: H.split_k_units(cta, ctas, n, splits), body, grids=grids,
                            unit_counts=tiles)


def stream(bug, k_tiles=3, grids=(1, 2, 3, 4), tiles=(1, 2, 3, 4, 5)) -> CrossCtaProtocol:
    def assignment(cta, ctas, n_tiles):
        plan = StreamKPlan(n_tiles, k_tiles, ctas)
        return [plan.unit(cta, j) for j in range(plan.units(cta))]

    def body(grid, unit):
        _, k_first, k_count, slot = unit
        if k_count >= k_tiles:
            return
        share, last = StreamKPlan(grid.units, k_tiles, grid.ctas).share(slot, k_first, k_count)
        if bug == "missing_signal":
            H.serial_fixup_calls(slot, share, last, flag=NeverHandsOn(FLAGS) if share == 0 else FLAGS)
        elif bug == "read_first":
            H.serial_fixup_calls(slot, share, last, flag=ReadsBeforeWait(FLAGS, TILE), tile=ReadsNothing(TILE))
        elif bug == "wrong_neighbour":
            H.serial_fixup_calls(slot, share, last, flag=_NextSlot(FLAGS) if share == last else FLAGS)
        elif bug == "two_share_rule":
            # the rule of a grid with no more CTAs than tiles (a tile has one share or two), on a grid
            # with more: a middle share takes itself for the writer
            H.serial_fixup_calls(slot, 1 - min(k_first, 1), 1)
        else:
            raise ValueError(f"stream-K twin {bug!r}: one of {BUGS['stream']}")

    return CrossCtaProtocol(f"GEMM stream-K ({k_tiles} K tiles, {bug})", assignment, body, grids=grids,
                            unit_counts=tiles, valid=lambda ctas, t: ctas <= t * k_tiles)


class _NextSlot(_Wrap):
    """A flag whose wait looks at the next slot (planted: the reader waits on its neighbour's flag)."""

    def wait(self, idx, value):
        return self.inner.wait(idx + 1, value)


def parallel(bug, splits=3, grids=(1, 2, 3, 4), tiles=(1, 2, 3)) -> CrossCtaProtocol:
    last = splits - 1

    def body(grid, unit):
        t, split = unit

        def slab(s):
            return s * grid.units + t
        if bug == "missing_signal":
            H.parallel_fixup_calls(t, split, last, slab, flag=NeverHandsOn(FLAGS) if split == 0 else FLAGS)
        elif bug == "read_first":
            H.parallel_fixup_calls(t, split, last, slab, flag=ReadsBeforeWait(FLAGS, TILE, lambda _: slab(0)))
        else:
            raise ValueError(f"parallel twin {bug!r}: one of {BUGS['parallel']}")

    return CrossCtaProtocol(f"GEMM parallel split-K ({splits} shares, {bug})",
                            lambda cta, ctas, n: H.split_k_units(cta, ctas, n, splits), body, grids=grids,
                            unit_counts=tiles)


def atomic(bug, splits=3, grids=(1, 2, 3, 4), tiles=(1, 2)) -> CrossCtaProtocol:
    mutated = {"plain_write": dict(tile=PlainWrites(TILE)), "release_only": dict(flag=CountsWithoutAcquire(FLAGS))}
    if bug not in mutated:
        raise ValueError(f"atomic twin {bug!r}: one of {BUGS['atomic']}")

    def body(grid, unit):
        H.atomic_fixup_calls(unit[0], splits - 1, **mutated[bug])

    return CrossCtaProtocol(f"GEMM atomic split-K ({splits} shares, {bug})",
                            lambda cta, ctas, n: H.split_k_units(cta, ctas, n, splits), body, grids=grids,
                            unit_counts=tiles)


TWINS = {"serial": serial, "stream": stream, "parallel": parallel, "atomic": atomic}
