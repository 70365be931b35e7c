"""The persistent GEMM's cross-CTA hand-overs as GmemFlag protocols the grid checker proves.

``serial_fixup_calls`` is the serial hand-over itself (serial split-K, and stream-K's shared tiles):
the kernel's GmemC.serial_fixup runs this function on its runtime values (gemm.fixup: a runtime
``branch``, its GMEM accesses as ``flag`` / ``tile``), and the protocols below run it on the unit's
ints, with the kernel's own unit assignment (the cooperative schedule's static persistent order;
gemm.streamk.StreamKPlan). ``parallel_fixup_calls`` (with a ``repeat`` for the last share's loop
over slabs) and ``atomic_fixup_calls`` (with a ``when`` for the last share's branch) are shared the
same way. With ``PersistentGemm(gmem_flags=
True)`` the flag verbs go through lower/gmem_flags.bind(SPLIT_K_FLAGS, mF): the same flag, fence and
barrier instructions as the hand-written accesses. The planted-bug twins the tests and
tools/gmem_flags_gpu.py check are built in tests/_handover_twins.py, by wrapping the ``flag`` /
``tile`` these functions take (a dropped signal, a read moved before its wait, ...).
"""
from __future__ import annotations

from ...model.gmem_flags import CrossCtaProtocol, GmemFlag, GmemWorkspace
from .streamk import StreamKPlan

SPLIT_K_FLAGS = GmemFlag(name="split-K tile flags (mF)")
SPLIT_K_TILE = GmemWorkspace(name="split-K fp32 tile (mW)")


def split_k_units(cta, ctas, tiles, splits):
    """The cooperative split-K kernel's units of ``cta``, in its order: the static persistent queue
    visits units cta, cta + ctas, ... below tiles * splits; unit v is (tile v % tiles, share
    v // tiles) (PersistentGemm.unit_tile without a cluster; the raster only renames tiles)."""
    return [(v % tiles, v // tiles) for v in range(cta, tiles * splits, ctas)]


def python_branch(cond, then, otherwise=None):
    """The grid checker's ``branch``: a Python if on the unit's ints."""
    if cond:
        then()
    elif otherwise is not None:
        otherwise()


def serial_fixup_calls(idx, split, last, flag=SPLIT_K_FLAGS, tile=SPLIT_K_TILE, branch=python_branch):
    """The serial hand-over of share ``split`` of ``last + 1`` on flag / tile ``idx``. One description,
    run twice: by the grid checker on the unit's ints (``branch``: a Python if; ``flag`` / ``tile``: the
    model's GmemFlag / GmemWorkspace, which record the calls) and by the kernel while it is traced
    (gemm.resources.serial_fixup: ``branch`` a runtime if, ``flag`` / ``tile`` its GMEM accesses,
    gemm.fixup.SerialFixupIO)."""
    def take_the_sum_so_far():
        flag.wait(idx, split)  # tidx 0 spins, then epi_bar and a GPU fence for every thread
        tile.read(idx)  # prev = the tile; acc += prev

    def hand_on():
        tile.write_or_accumulate(idx, split == 0)  # the first share writes, the later ones add to it
        flag.signal(idx, split + 1)  # fence, epi_bar, then tidx 0's release store

    branch(split > 0, take_the_sum_so_far)
    branch(split < last, hand_on, lambda: flag.reset(idx))  # the last share: zero for the next launch


def serial_split_k_protocol(splits=2, grids=(1, 2, 3, 4), tiles=(1, 2, 3)) -> CrossCtaProtocol:
    """split_reduce='serial' with ``splits`` K shares: every launch of ``grids`` CTAs over ``tiles``."""
    def assignment(cta, ctas, n_tiles):
        return split_k_units(cta, ctas, n_tiles, splits)

    def body(grid, unit):
        t, split = unit
        serial_fixup_calls(t, split, splits - 1)

    return CrossCtaProtocol(f"GEMM serial split-K ({splits} shares)", assignment, body, grids=grids, unit_counts=tiles)


def python_repeat(count, body):
    """The grid checker's ``repeat``: ``body(s)`` for s in range(count)."""
    for s in range(count):
        body(s)


def parallel_fixup_calls(t, split, last, slab, flag=SPLIT_K_FLAGS, slabs=SPLIT_K_TILE,
                         branch=python_branch, repeat=python_repeat):
    """The parallel hand-over of share ``split`` of ``last + 1`` on tile ``t``: the shares but the last
    write their own slab (``slab(split)``) and count themselves (a release-only add); the last one
    waits for the count, resets it and reads every slab. One description, run by the grid checker
    (``slab(s)`` = s * tiles + t, a Python if and loop) and by the kernel (gemm.fixup.ParallelFixupIO,
    whose slab index is the share)."""
    def hand_in():
        slabs.write(slab(split))
        flag.add(t, 1, acquire=False)  # fence, epi_bar, then tidx 0's release atomic add

    def finish():
        flag.wait(t, last)  # tidx 0 spins, then epi_bar and a GPU fence for every thread
        flag.reset(t)
        repeat(last, lambda s: slabs.read(slab(s)))

    branch(split < last, hand_in, finish)


def parallel_split_k_protocol(splits=3, grids=(1, 2, 3, 4), tiles=(1, 2, 3)) -> CrossCtaProtocol:
    """split_reduce='parallel' with ``splits`` K shares (the same unit partition as serial split-K)."""
    def assignment(cta, ctas, n_tiles):
        return split_k_units(cta, ctas, n_tiles, splits)

    def body(grid, unit):
        t, split = unit
        parallel_fixup_calls(t, split, splits - 1, lambda s: s * grid.units + t)

    return CrossCtaProtocol(f"GEMM parallel split-K ({splits} shares)", assignment, body, grids=grids,
                            unit_counts=tiles)


def python_when(ticket, old, body):
    """The grid checker's ``when``: ``body`` runs in the branch where the add returned ``old``."""
    with ticket.when(old):
        body()


def atomic_fixup_calls(t, last, flag=SPLIT_K_FLAGS, tile=SPLIT_K_TILE, when=python_when):
    """The atomic hand-over of one share of tile ``t``: reduce-add into the zeroed tile (red.add: a
    declared atomic accumulation), count itself (acq_rel add); the share whose add returns ``last``
    reads the sum, zeroes the tile and the flag for the next launch. One description, run by the grid
    checker and by the kernel (gemm.fixup.AtomicFixupIO: its ``when`` broadcasts the first thread's
    ticket by a predicate-OR barrier and returns whether this share is the last)."""
    tile.accumulate(t, atomic=True)
    ticket = flag.add(t, 1, acquire=True)  # fence, epi_bar, then tidx 0's atomic

    def finish():
        tile.read(t)
        tile.write(t)  # zero
        flag.reset(t)

    return when(ticket, last, finish)


def atomic_split_k_protocol(splits=3, grids=(1, 2, 3, 4), tiles=(1, 2)) -> CrossCtaProtocol:
    """split_reduce='atomic' with ``splits`` K shares: whichever share counts last finishes the tile."""
    def assignment(cta, ctas, n_tiles):
        return split_k_units(cta, ctas, n_tiles, splits)

    def body(grid, unit):
        t, _ = unit
        atomic_fixup_calls(t, splits - 1)

    return CrossCtaProtocol(f"GEMM atomic split-K ({splits} shares)", assignment, body, grids=grids, unit_counts=tiles)


def stream_k_protocol(k_tiles=3, grids=(1, 2, 3, 4), tiles=(1, 2, 3, 4, 5)) -> CrossCtaProtocol:
    """split_k='stream': the store's hand-over (gemm.resources.store) on StreamKPlan's units; a
    shared tile runs serial_fixup on its workspace slot, its shares chained from the last K tiles to
    the first (StreamKPlan.share). The grids include more CTAs than tiles (a tile of up to k_tiles
    shares) up to one CTA per K iteration (gemm.streamk.ctas_for)."""
    def assignment(cta, ctas, n_tiles):
        plan = StreamKPlan(n_tiles, k_tiles, ctas)
        return [plan.unit(cta, j) for j in range(plan.units(cta))]

    def body(grid, unit):
        _, k_first, k_count, slot = unit
        if k_count < k_tiles:
            share, last = StreamKPlan(grid.units, k_tiles, grid.ctas).share(slot, k_first, k_count)
            serial_fixup_calls(slot, share, last)

    return CrossCtaProtocol(f"GEMM stream-K ({k_tiles} K tiles)", assignment, body,
                            grids=grids, unit_counts=tiles, valid=lambda ctas, t: ctas <= t * k_tiles)


_PROVEN = {}


def require_safe(kind: str):
    """The grid checker's verdict on the hand-over a gmem_flags kernel runs (``kind``: 'serial' or
    'parallel' split-K with 2 and 3 shares, or 'stream' with 2 and 3 K tiles, over the default
    bounds), computed once per process (about 0.1 s); a violation raises GemmConfigError with the findings."""
    from ...verify.checker.grid import check_grid
    from .config import GemmConfigError

    key = kind
    if key not in _PROVEN:
        make = {"stream": stream_k_protocol, "serial": serial_split_k_protocol,
                "parallel": parallel_split_k_protocol, "atomic": atomic_split_k_protocol}[kind]
        _PROVEN[key] = [check_grid(make(n)) for n in (2, 3)]
    bad = [r for r in _PROVEN[key] if r.verdict != "SAFE"]
    if bad:
        raise GemmConfigError("gmem_flags=True: the grid checker does not prove the hand-over:\n"
                              + "\n".join(r.report() for r in bad))
    return _PROVEN[key]
