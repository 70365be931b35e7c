"""Batched try probes (issue 27): a try_acquire / try_wait feeds the next call on its resource and
side, which must be its blocking verb; calls on other resources may sit between."""
from __future__ import annotations

from warpsched import Task, domain_loop, schedule

from test_checks_bracketing import K, _tma_async
from test_checks_support import Buf, Gmem, accepted, expect, line, rejected


def test_batched_probes_of_two_rings_are_accepted():
    """``a.try_wait(); b.try_wait(); a.wait(); b.wait()`` (04_01 / 05_01's shape) is accepted and SAFE;
    its twin whose b probe is followed by a b release first (the probe would answer for another
    stage) is rejected at that probe."""
    a = Buf(name="ring_a", pipeline_config=_tma_async())
    b = Buf(name="ring_b", pipeline_config=_tma_async())
    ga, gb, out = Gmem(name="gmem_a"), Gmem(name="gmem_b"), Gmem(name="out")

    def loader(buf, gm):
        @schedule
        def load(gm, buf):
            with domain_loop(0, K, 1):
                c = gm.compute_coords()
                buf.acquire()
                buf.tma_load_a(coord_k=c)
                buf.commit()
        return load(gm, buf)

    @schedule
    def batched(a, b, out):
        with domain_loop(0, K, 1):
            a.try_wait()
            b.try_wait()
            a.wait()
            b.wait()
            a.read()
            b.read()
            out.store()
            a.release()
            b.release()

    @schedule
    def stale(a, b, out):
        with domain_loop(0, K, 1):
            a.wait()
            b.wait()
            a.read()
            b.read()
            out.store()
            a.try_wait()
            b.try_wait()  # @stale_probe
            b.release()
            a.release()

    def program_of(sched):
        tasks = [Task(name="LoadA", src_resources=[ga], dst_resources=[a], warp_idx=0, num_warps=1,
                      schedule=loader(a, ga)),
                 Task(name="LoadB", src_resources=[gb], dst_resources=[b], warp_idx=1, num_warps=1,
                      schedule=loader(b, gb)),
                 Task(name="Consumer", src_resources=[a, b], dst_resources=[out], warp_idx=2, num_warps=1,
                      schedule=sched(a, b, out))]
        return tasks, {a: [ga], b: [gb], out: [a, b]}

    m = accepted(*program_of(batched), exhaustive_deadlock_race_check=True)
    assert m.result.checker.verdict == "SAFE" and not m.result.warnings
    f = rejected(*program_of(stale))
    expect(f, "work bracketing", "Consumer", "ring_b", line("stale_probe"))
