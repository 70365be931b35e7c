"""The schedules of the checker-scaling programs, written once for both checkers: warpsched's
(bench/checker_scaling.py) and the reference TS's (ref_schedules.py) build the same program from them.
``api`` is either side's namespace: ``domain_loop``, ``schedule`` and ``work_tile_loop``; ``K`` the K
loop's trip count (an int, or warpsched's ``trip_count``).

    plain:      Load (1 warp) -> SmemAB -> Mma (1 warp; acquires the TMEM accumulator in the head,
                commits in the tail) -> TmemC -> Store (4 warps), each over domain_loop(0, K, 1)
    persistent: the same three in work_tile_loop(wq), each ending its tile with the work queue's tail;
                ``scheduler`` the CLC task that fetches the next tile
"""
from __future__ import annotations

NUM_EPI_WARPS = 4  # the store task's warps
ACC_STAGES = 2  # TmemC's stages
WQ_STAGES = 2  # the CLC work queue's stages


def resource_classes(memory_resource, consumer_work, producer_work, wrap=lambda cls: cls):
    """(GmemAb, SmemAb, TmemC, GmemD): the programs' resources on either side's ``MemoryResource`` and work
    decorators (``wrap``: warpsched's kw-only dataclass). Work bodies are only captured on the CPU, so
    they are empty."""
    @wrap
    class GmemAb(memory_resource):
        @consumer_work
        def compute_coords(self, stage_info):
            pass

    @wrap
    class SmemAb(memory_resource):
        @producer_work
        def tma_load(self, stage_info):
            pass

        @consumer_work
        def build_desc(self, stage_info):
            pass

    @wrap
    class TmemC(memory_resource):
        @producer_work
        def mma(self, stage_info):
            pass

        @consumer_work
        def load_subtile(self, stage_info):
            pass

    @wrap
    class GmemD(memory_resource):
        @producer_work
        def store(self, stage_info):
            pass

    return GmemAb, SmemAb, TmemC, GmemD


def wq_tail(q):
    """The end of a work tile: wait for the next tile's id, take it, release the queue's stage."""
    q.try_wait()
    q.wait()
    q.get_and_advance_work_tile()
    q.release()


def plain_schedules(api, K):
    """(load, mma, store) schedule factories of the non-persistent program."""
    domain_loop, schedule = api.domain_loop, api.schedule

    @schedule
    def load(g, s):
        with domain_loop(0, K, 1):
            g.compute_coords()
            s.acquire()
            s.tma_load()
            s.commit()

    @schedule
    def mma(s, t):
        t.acquire()
        with domain_loop(0, K, 1):
            s.wait()
            s.build_desc()
            t.mma()
            s.release()
        t.commit()

    @schedule
    def store(t, o):
        with domain_loop(0, K, 1):
            pass
        t.wait()
        t.load_subtile()
        o.store()
        t.release()

    return load, mma, store


def persistent_schedules(api, K):
    """(load, mma, store, scheduler) schedule factories of the persistent program."""
    domain_loop, schedule, work_tile_loop = api.domain_loop, api.schedule, api.work_tile_loop

    @schedule
    def load(g, s, q):
        with work_tile_loop(q):
            with domain_loop(0, K, 1):
                g.compute_coords()
                s.acquire()
                s.tma_load()
                s.commit()
            wq_tail(q)

    @schedule
    def mma(s, t, q):
        with work_tile_loop(q):
            t.acquire()
            with domain_loop(0, K, 1):
                s.wait()
                s.build_desc()
                t.mma()
                s.release()
            t.commit()
            wq_tail(q)

    @schedule
    def store(t, o, q):
        with work_tile_loop(q):
            with domain_loop(0, K, 1):
                pass
            t.wait()
            t.load_subtile()
            o.store()
            t.release()
            wq_tail(q)

    @schedule
    def scheduler(q):
        with work_tile_loop(q):
            with domain_loop(0, 0, 1):  # empty domain: no K work
                pass
            q.try_acquire()
            q.acquire()
            q.fetch_work_tile()
            q.commit()
            wq_tail(q)

    return load, mma, store, scheduler
