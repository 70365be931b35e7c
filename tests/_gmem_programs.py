"""Cross-CTA hand-overs written with GmemFlag / GmemWorkspace: the GEMM's split-K and stream-K
protocols, and their planted-bug twins (``bug=``). Each factory returns a CrossCtaProtocol; the
assignment functions are the kernels' own (serial split-K: unit s * tiles + t, CTA c runs units
c, c + ctas, ...; stream-K: gemm.streamk.StreamKPlan)."""
from __future__ import annotations

from warpsched import CrossCtaProtocol, GmemFlag, GmemWorkspace
from warpsched.kernels.gemm.streamk import StreamKPlan


def persistent_units(splits):
    """Static persistent partition of split-K units: unit u = s * tiles + t is (tile t, share s);
    CTA c runs units c, c + ctas, ... in increasing order (the GEMM's WorkQueue order)."""
    def assignment(cta, ctas, tiles):
        return [(u % tiles, u // tiles) for u in range(cta, tiles * splits, ctas)]
    return assignment


def serial_split_k(splits=2, bug=None, grids=(1, 2, 3, 4), tiles=(1, 2, 3)):
    """Share s of tile t waits until the tile's flag reads s, adds the workspace tile into its sum,
    writes it back (share 0: writes it) and sets the flag to s + 1; the last share reads the sum.
    bug: 'missing_signal' (share 0 never signals), 'reversed' (the chain runs from the last share
    down: share s waits for share s + 1, which runs later), 'read_first' (the last share reads the
    workspace before its wait)."""
    flag = GmemFlag(name="tile_flags", slots=lambda ctas, t: t)
    ws = GmemWorkspace(name="partials", slots=lambda ctas, t: t)
    last = splits - 1

    def body(grid, unit):
        t, s = unit
        order = last - s if bug == "reversed" else s  # position of this share in the chain
        if bug == "read_first" and order == last:
            ws.read(t)
        if order > 0:
            flag.wait(t, order)
        if order < last:
            if order == 0:
                ws.write(t)
            else:
                ws.accumulate(t)
            if not (bug == "missing_signal" and order == 0):
                flag.signal(t, order + 1)
        elif bug != "read_first":
            ws.read(t)

    return CrossCtaProtocol(f"serial split-K ({splits} shares{', ' + bug if bug else ''})",
                            persistent_units(splits), body, grids=grids, unit_counts=tiles)


def parallel_split_k(splits=3, bug=None, grids=(1, 2, 3, 4), tiles=(1, 2, 3)):
    """Every share but the last writes its own slab and counts itself on the tile's flag; the last
    share waits until the count reaches splits - 1, then reads (sums) the slabs.
    bug: 'read_first' (the last share reads the slabs before its wait)."""
    flag = GmemFlag(name="tile_counts")
    slabs = GmemWorkspace(name="slabs")
    last = splits - 1

    def body(grid, unit):
        t, s = unit
        tiles = grid.units
        if s < last:
            slabs.write(s * tiles + t)
            flag.add(t, 1)
        else:
            if bug != "read_first":
                flag.wait(t, last)
            for k in range(last):
                slabs.read(k * tiles + t)
            if bug == "read_first":
                flag.wait(t, last)

    return CrossCtaProtocol(f"parallel split-K ({splits} shares{', ' + bug if bug else ''})",
                            persistent_units(splits), body, grids=grids, unit_counts=tiles)


def atomic_split_k(splits=3, bug=None, grids=(1, 2, 3, 4), tiles=(1, 2)):
    """Every share reduce-adds into the tile (atomic accumulation, declared) and counts itself;
    the share whose add returns splits - 1 (whichever finishes last) reads the sum.
    bug: 'plain_write' (the shares store instead of reduce-adding: second writers)."""
    flag = GmemFlag(name="tile_counts")
    ws = GmemWorkspace(name="sum")

    def body(grid, unit):
        t, s = unit
        if bug == "plain_write":
            ws.write(t)
        else:
            ws.accumulate(t, atomic=True)
        ticket = flag.add(t, 1)
        with ticket.when(splits - 1):
            ws.read(t)

    return CrossCtaProtocol(f"atomic split-K ({splits} shares{', ' + bug if bug else ''})",
                            persistent_units(splits), body, grids=grids, unit_counts=tiles)


def stream_k(k_tiles=3, bug=None, grids=(1, 2, 3, 4), tiles=(1, 2, 3, 4, 5)):
    """Stream-K fix-up (gemm/streamk.py): of a tile's two shares, the one holding its last K tiles
    writes the fp32 partial to the slot's workspace tile and sets the slot's flag; the one holding
    its first K tiles waits for the flag and reads the partial. bug: 'wrong_neighbour' (the reader
    waits on the next slot's flag, the neighbour CTA's hand-over)."""
    flag = GmemFlag(name="sk_flags", slots=lambda ctas, t: 2 * ctas)
    ws = GmemWorkspace(name="sk_partials", slots=lambda ctas, t: 2 * ctas)

    def assignment(cta, ctas, n_tiles):
        plan = StreamKPlan(n_tiles, k_tiles, ctas)
        return [plan.unit(cta, j) for j in range(plan.units(cta))]

    def body(grid, unit):
        tile, k0, count, slot = unit
        if count == k_tiles:
            return  # a whole tile: stored directly, no hand-over
        if k0 > 0:  # the tile's last K tiles: hand the partial over
            ws.write(slot)
            flag.signal(slot, 1)
        else:  # its first K tiles: take the partial, add, store C
            flag.wait(slot + 1 if bug == "wrong_neighbour" else slot, 1)
            ws.read(slot)

    return CrossCtaProtocol(f"stream-K ({k_tiles} K tiles{', ' + bug if bug else ''})", assignment, body,
                            grids=grids, unit_counts=tiles, valid=lambda ctas, t: ctas <= t)
