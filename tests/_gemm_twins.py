"""The persistent GEMM's planted-bug twins: each is gemm_program's schedule with one mistake, planted
in its place with ``_planting.planted(gemm_program, name=twin)`` (the production builder takes no test
hooks). Every twin must be rejected by the checks or the checker, at this file's lines."""
from __future__ import annotations

from warpsched import domain_loop, schedule, when_false, when_true, work_tile_loop


def _tail(wq):
    wq.try_wait()
    wq.wait()
    wq.get_and_advance_work_tile()
    wq.release()


def _mainloop(ring, acc, frag_a, frag_b, d):
    """The k-th stage's MMAs; from the second stage on, the previous stage's retire (the callers release)."""
    with d.first_iter():
        ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b, first=True)
    with d.every(1, start=1):
        ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b)
        ring.retire(pending=1)


def _load_body(gmem_ab, ring, wq, k_tiles, units, which):
    with work_tile_loop(wq, tile_count=units):
        m, n, k0 = gmem_ab.tile_coords(which=which)
        with domain_loop(0, k_tiles, 1):
            ring.acquire()
            ring.tma_load(m=m, n=n, k0=k0)
            ring.commit()
        _tail(wq)


@schedule
def load_launch_first(gmem_ab, ring, wq, k_tiles, units, which, pdl=None, launch=None):
    """PDL: triggers the next grid before waiting for the previous one."""
    if pdl is not None:
        launch.launch_griddep()
        pdl.wait_griddep()
    _load_body(gmem_ab, ring, wq, k_tiles, units, which)


@schedule
def load_no_wait(gmem_ab, ring, wq, k_tiles, units, which, pdl=None, launch=None):
    """PDL: loads A and B without waiting for the previous grid, which may still write them."""
    if pdl is not None:
        launch.launch_griddep()
    _load_body(gmem_ab, ring, wq, k_tiles, units, which)


@schedule
def mma_keeps_turn(ring, gmem_c, wq, k_tiles, units, order, turn):
    """pingpong: the second warp group waits for its turn and never hands it back (Mma0 waits for its
    next turn forever)."""
    acc, frag_a, frag_b = ring.init_acc()
    with work_tile_loop(wq, tile_count=units):
        if turn == "first":
            order.acquire()
        elif turn == "second":
            order.wait()
        with domain_loop(0, k_tiles, 1) as d:
            ring.wait()
            _mainloop(ring, acc, frag_a, frag_b, d)
            with d.every(1, start=1):
                ring.release()
        if turn == "first":
            order.commit()
        ring.retire()
        ring.release()
        gmem_c.store(acc=acc)
        _tail(wq)
    gmem_c.drain()


@schedule
def mma_shared_releases_own_only(ring, gmem_c, wq, k_tiles, units, wg):
    """pingpong_shared: each warp group releases only the stages of its own tiles (never the other's)."""
    acc, frag_a, frag_b = ring.init_acc()
    with work_tile_loop(wq, tile_count=units):
        even = ring.owns()
        own = when_true if wg == 0 else when_false
        with domain_loop(0, k_tiles, 1) as d:
            ring.wait()
            with own(even):
                _mainloop(ring, acc, frag_a, frag_b, d)
            with own(even):
                with d.every(1, start=1):
                    ring.release()
        ring.retire()
        with own(even):
            ring.release()
        with own(even):
            gmem_c.store(acc=acc)
        _tail(wq)
    gmem_c.drain()


def _skip_twin(extra_stage, wait_turn):
    @schedule
    def mma_skip_twin(ring, gmem_c, wq, k_tiles, units, wg, mine, theirs):
        acc, frag_a, frag_b = ring.init_acc()
        with work_tile_loop(wq, tile_count=units):
            even = ring.owns()
            own, other = (when_true, when_false) if wg == 0 else (when_false, when_true)
            with domain_loop(0, k_tiles, 1) as d:
                with own(even):
                    ring.wait()
                    _mainloop(ring, acc, frag_a, frag_b, d)
                    with d.every(1, start=1):
                        ring.release()
            if wait_turn:
                with own(even):
                    mine.acquire()
                    mine.commit()
                with other(even):
                    theirs.wait()
                    theirs.release()
            with other(even):
                ring.skip(count=k_tiles + 1 if extra_stage else k_tiles)
            ring.retire()
            with own(even):
                ring.release()
                gmem_c.store(acc=acc)
            _tail(wq)
        gmem_c.drain()
    return mma_skip_twin


# pingpong_shared skip=True: one stage too many skipped per tile; no Turn wait (and no Turn pipelines)
mma_skip_extra = _skip_twin(extra_stage=True, wait_turn=True)
mma_skip_no_turn_wait = _skip_twin(extra_stage=False, wait_turn=False)
