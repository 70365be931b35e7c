"""The persistent GEMM as a warpsched program: the load and math schedules and ``build(g)``, which
``warpsched check`` runs on the CPU (through ``gemm.host.build``) and the kernel runs while it is
traced (the same program both times, with the runtime K-tile count and units per CTA declared
with ``trip_count``)."""
from __future__ import annotations

from .resources import GmemAB, GmemC, MathOrder, SmemAB

from warpsched import (PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, SmemAllocation, SmemAllocator, Task,
                       TaskManager, TileSchedulerConfig, WorkQueue, domain_loop, schedule, threads, trip_count,
                       when_false, when_true, work_tile_loop)


# ---------------------------------------------------------------------------------- schedules
@schedule
def load_schedule(gmem_ab, ring, wq, k_tiles, units, which, pdl=None, launch=None):
    """``pdl`` / ``launch`` (programmatic dependent launch): wait for the previous grid in the
    stream before the first load (every C store is after a ring wait, so after it too), then let
    the next grid launch at once: its CTAs run their prologue on the SMs this grid leaves idle or
    frees, and wait in griddepcontrol.wait until this grid has completed."""
    if pdl is not None:
        pdl.wait_griddep()
        launch.launch_griddep()
    with work_tile_loop(wq, tile_count=units):
        m, n, k0 = gmem_ab.tile_coords(which=which)
        with domain_loop(0, k_tiles, 1):
            ring.acquire()
            ring.tma_load(m=m, n=n, k0=k0)
            ring.commit()
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def mma_schedule(ring, gmem_c, wq, k_tiles, units, order, turn):
    """``turn``: None (cooperative), "first" (produces the math order), "second" (consumes it)."""
    acc, frag_a, frag_b = ring.init_acc()
    with work_tile_loop(wq, tile_count=units):
        if turn == "first":
            order.acquire()  # Mma1 finished issuing its previous mainloop
        elif turn == "second":
            order.wait()  # Mma0 finished issuing this unit's mainloop
        with domain_loop(0, k_tiles, 1) as d:
            ring.wait()
            with d.first_iter():
                ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b, first=True)
            with d.every(1, start=1):
                ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b)
                ring.retire(pending=1)  # the previous stage's wgmmas have retired ...
                ring.release()  # ... so it is released (split counters: one stage behind the wait)
        if turn == "first":
            order.commit()  # the other warp group may issue now; this one drains and stores
        elif turn == "second":
            order.release()
        ring.retire()
        ring.release()
        gmem_c.store(acc=acc)
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()
    gmem_c.drain()


@schedule
def mma_shared_schedule(ring, gmem_c, wq, k_tiles, units, wg):
    """pingpong_shared's math warp group ``wg``: the CTA's work tiles alternate between the two
    (``ring.owns``: Mma0 the even ones of this CTA, Mma1 the odd ones), and both wait for and
    release every stage of the one ring, which the load warp fills in tile order. On its own tile
    a warp group runs the mainloop and the epilogue; on the other's it only passes over the
    stages (wait, release one behind, as the mainloop does), so the warp group whose tile is
    loading sees every stage of the ring, and one's epilogue overlaps the other's mainloop.
    The checker takes every ownership sequence (the condition is a runtime value, the same in
    both tasks, read both ways), so odd tile counts per CTA are covered."""
    acc, frag_a, frag_b = ring.init_acc()
    with work_tile_loop(wq, tile_count=units):
        even = ring.owns()  # this CTA's tile count so far is even: Mma0's tile
        own = when_true if wg == 0 else when_false
        with domain_loop(0, k_tiles, 1) as d:
            ring.wait()
            with own(even):
                with d.first_iter():
                    ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b, first=True)
                with d.every(1, start=1):
                    ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b)
                    ring.retire(pending=1)  # the previous stage's wgmmas have retired ...
            with d.every(1, start=1):
                ring.release()  # ... so it is released (on the other's tile: at once)
        ring.retire()  # unguarded: ptxas serializes every wgmma when a path may skip the wait
        ring.release()
        with own(even):
            gmem_c.store(acc=acc)
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()
    gmem_c.drain()


@schedule
def mma_skip_schedule(ring, gmem_c, wq, k_tiles, units, wg, mine, theirs):
    """pingpong_shared with ``skip=True``, CUTLASS's ping-pong: a tile's owner alone waits for and
    releases its stages (the ring's consumer group is one warp group); the other warp group only
    moves its ring position past them (``ring.skip(count=k_tiles)``: no barrier operation), so an
    epilogue never holds back the load warp. ``mine`` / ``theirs``: this warp group's and the other's
    turn pipelines. After its mainloop the owner commits ``mine``; the other waits for that turn in
    the same tile, then skips. That wait is what makes the skip sound: a warp group that skipped
    a whole tile could otherwise wait on a stage whose barrier is two phases behind, and parity
    would let it through (the checker finds the race without it). It also makes the mainloops take
    turns, and as each tile's turn is taken in that tile, every ownership sequence is balanced."""
    acc, frag_a, frag_b = ring.init_acc()
    with work_tile_loop(wq, tile_count=units):
        even = ring.owns()  # this CTA's tile count so far is even: Mma0's tile
        own, other = (when_true, when_false) if wg == 0 else (when_false, when_true)
        with domain_loop(0, k_tiles, 1) as d:
            with own(even):
                ring.wait()
                with d.first_iter():
                    ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b, first=True)
                with d.every(1, start=1):
                    ring.mma(acc=acc, frag_a=frag_a, frag_b=frag_b)
                    ring.retire(pending=1)  # the previous stage's wgmmas have retired ...
                    ring.release()  # ... so it is released
        with own(even):
            mine.acquire()  # the other warp group took this warp group's previous turn
            mine.commit()  # every stage of this tile was waited for: the other may go on
        with other(even):
            theirs.wait()
            theirs.release()
        with other(even):
            # the owner's k_tiles stages at once: this warp group's position moves past them
            ring.skip(count=k_tiles)
        ring.retire()  # unguarded: ptxas serializes every wgmma when a path may skip the wait
        with own(even):
            ring.release()
            gmem_c.store(acc=acc)
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()
    gmem_c.drain()


# ---------------------------------------------------------------------------------- program
class GemmTask(Task):
    """A GEMM task; with split-K or stream-K its K loop length is a per-unit domain provider."""

    g = None

    def k_tiles_of(self, tile_idx):
        """K tiles of this work unit's split (a dynamic domain: the checker takes every count >= 1)."""
        return self.g.unit_k(tile_idx[0])[1]


def turn_pipelines(consumer_threads):
    """pingpong_shared with skip=True: Turn0 / Turn1, warp group w's mainloop of its tile is issued
    (producer w, consumer the other; see ``mma_skip_schedule``)."""
    return [MathOrder(name=f"Turn{w}", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=1, producer_group=threads(consumer_threads), consumer_group=threads(consumer_threads)))
        for w in range(2)]


def build(g, *, schedule=None, k_tiles=None, units_per_cta=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` on the CPU and for the kernel while it is traced.

    ``g``: the PersistentGemm being traced (on the CPU: ``gemm.host.build`` makes a default one;
    this module does not import the kernel, which imports it). ``k_tiles`` / ``units_per_cta``:
    the kernel's runtime K-tile count and the number of work units this CTA runs (None on the
    CPU); the checker proves every value >= 1 of each. The schedules and ``turn_pipelines`` are read
    from this module when a program is built, so a test can plant a twin in their place
    (tests/_planting.py; the GEMM's twins are in tests/_gemm_twins.py)."""
    if schedule is not None and schedule != g.schedule:
        raise ValueError(f"build(g, schedule={schedule!r}): the kernel object says {g.schedule!r}")
    U = trip_count("units_per_cta", units_per_cta)
    g.alloc_a = [SmemAllocation(f"sA{r}", dtype=g.ab_dtype, count=g.a_elems, alignment=1024) for r in range(g.rings)]
    g.alloc_b = [SmemAllocation(f"sB{r}", dtype=g.b_dtype, count=g.b_elems, alignment=1024) for r in range(g.rings)]
    g.alloc_c = [SmemAllocation(f"sC{w}", dtype=g.c_dtype, count=g.c_elems, alignment=1024)
                 for w in range(g.math_tasks)]
    wq = WorkQueue(name="WorkQueue", tile_scheduler_config=TileSchedulerConfig(num_tiles=g.num_units))
    gmem_ab = GmemAB(name="GmemAB", g=g)
    # programmatic dependent launch: the load tasks wait for the previous grid, then trigger the next
    pdl_io = [PdlWaitBarrier(name="PdlWait"), PdlLaunchBarrier(name="PdlLaunch")] if g.pdl else []
    allocator = SmemAllocator()
    consumer_threads = 128 * g.wgs_per_mma_task
    rings, outs = [], []
    cm, cn = g.cluster_mn
    skip = g.skip  # pingpong_shared, skip=True: the owner alone releases a stage
    # the empty barrier's arrival count (a release per consumer warp of every task that releases the ring,
    # per CTA that multicasts into this one) is left to the sync plan, which derives it from the tasks
    for r in range(g.rings):
        cfg = PipelineConfig.create_tma_async_pipeline_cfg(
            num_stages=g.ab_stage, num_bytes=g.tile_bytes, producer_group=threads(1), advance_on_wait=True,
            **(dict(cta_layout_vmnk=(1, cm, cn, 1), mcast_mode_mn=(1, 1)) if g.clustered else {}))
        rings.append(SmemAB(name=f"SmemAB{r}" if g.rings > 1 else "SmemAB", pipeline_config=cfg, g=g, ring=r,
                            shared=g.shared_ring, first_thread=128 * (1 + r * g.wgs_per_mma_task)))
        allocator.add_resource(rings[-1])
    for w in range(g.math_tasks):
        outs.append(GmemC(name=f"GmemC{w}" if g.math_tasks > 1 else "GmemC", g=g, which=w,
                          first_thread=128 * (1 + w * g.wgs_per_mma_task), num_threads=consumer_threads))
        allocator.add_resource(outs[-1])
    allocator.compute_layout()
    g.allocator = allocator
    regs = (g.producer_regs, g.consumer_regs) if g.consumer_wgs == 2 else (None, None)
    tasks, graph = [], {}
    order = None
    if g.rings > 1:
        order = MathOrder(name="MathOrder", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
            num_stages=1, producer_group=threads(consumer_threads), consumer_group=threads(consumer_threads),
            **(dict(cta_layout_vmnk=(1, *g.cluster_mn, 1)) if g.clustered else {})))  # CTA-local turns
        graph[order] = []
    K = trip_count("k_tiles", k_tiles, min=g.k_tiles_min)  # the host launches no shorter K loop
    order_io = [] if order is None else [order]
    if pdl_io:
        graph.update({gmem_ab: [pdl_io[0]], pdl_io[0]: [], pdl_io[1]: [gmem_ab]})
    if g.shared_ring:
        # every ownership sequence of two tasks on a 6-stage ring: ~450k states, 1.65M with skip=True
        manager_options.setdefault("max_states", 2_000_000)
        ring = rings[0]
        load = GemmTask(name="LoadTask", src_resources=pdl_io[:1] + [gmem_ab, wq], dst_resources=[ring] + pdl_io[1:],
                        warp_idx=0, num_warps=1, num_registers=regs[0])
        load.g = g
        load.schedule = load_schedule(gmem_ab, ring, wq, K, U, 0, *pdl_io)
        tasks.append(load)
        graph[ring] = [gmem_ab, wq]
        turn = turn_pipelines(consumer_threads) if skip else []
        graph.update({t: [] for t in turn})
        for w, out in enumerate(outs):
            mma = GemmTask(name=f"MmaTask{w}", src_resources=[ring, wq] + turn[1 - w:2 - w],
                           dst_resources=[out] + turn[w:w + 1], warp_idx=4 * (1 + w), num_warps=4,
                           num_registers=regs[1])
            mma.g = g
            if skip:
                mine, theirs = (turn[w], turn[1 - w]) if turn else (None, None)
                mma.schedule = mma_skip_schedule(ring, out, wq, K, U, w, mine, theirs)
            else:
                mma.schedule = mma_shared_schedule(ring, out, wq, K, U, w)
            tasks.append(mma)
            graph[out] = [ring, wq]
    for r, (ring, out) in enumerate(zip(rings, outs) if not g.shared_ring else ()):
        turn = None if order is None else ("first", "second")[r]
        suffix = str(r) if g.rings > 1 else ""
        load = GemmTask(name=f"LoadTask{suffix}", src_resources=pdl_io[:1] + [gmem_ab, wq],
                        dst_resources=[ring] + pdl_io[1:], warp_idx=r, num_warps=1, num_registers=regs[0])
        mma = GemmTask(name=f"MmaTask{suffix}", src_resources=[ring, wq] + (order_io if turn == "second" else []),
                       dst_resources=[out] + (order_io if turn == "first" else []),
                       warp_idx=4 * (1 + r * g.wgs_per_mma_task), num_warps=4 * g.wgs_per_mma_task,
                       num_registers=regs[1])
        load.g = mma.g = g
        # split-K / stream-K: every unit has its own K range, read per tile from the tasks' provider
        per_unit = g.split_k or g.stream_k
        load.schedule = load_schedule(gmem_ab, ring, wq, load.k_tiles_of if per_unit else K, U, r, *pdl_io)
        mma.schedule = mma_schedule(ring, out, wq, mma.k_tiles_of if per_unit else K, U, order, turn)
        tasks += [load, mma]
        graph[ring] = [gmem_ab, wq]
        graph[out] = [ring, wq]
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)
