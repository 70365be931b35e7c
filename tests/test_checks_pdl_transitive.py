"""PDL ordering through a full barrier (issue 27, CUTLASS 04_01): a task that only reads SMEM that
depends on a PdlWaitBarrier is ordered after the predecessor grid when every task that fills that
SMEM calls wait_griddep() before filling it; the stage it waits for was written after that wait."""
from __future__ import annotations

from warpsched import PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, Task, domain_loop, schedule
from warpsched.model.program import Program
from warpsched.verify.checker import run_checker

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

K = 4


def mma_program(load_waits=True):
    """SmemA depends on PdlWait (the 04_01 graph); LoadA fills it, MmaTask only waits on and reads
    it. ``load_waits``: True (wait_griddep() first), False (never) or "late" (after the loop)."""
    gmem, out = Gmem(name="GmemAB"), Gmem(name="TmemC")
    smem_a = Buf(name="SmemA", pipeline_config=PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=2, num_bytes=1024, producer_group=cg(1), consumer_group=cg(1)))
    pdl_wait, pdl_launch = PdlWaitBarrier(name="PdlWait"), PdlLaunchBarrier(name="PdlLaunch")

    @schedule
    def load(gmem, smem, pw, pl):
        pw.wait_griddep()
        with domain_loop(0, K, 1):
            c = gmem.compute_coords()
            smem.acquire()
            smem.tma_load_a(coord_k=c)
            smem.commit()
        pl.launch_griddep()

    @schedule
    def load_no_wait(gmem, smem, pl):
        with domain_loop(0, K, 1):
            c = gmem.compute_coords()
            smem.acquire()  # @filler_no_wait
            smem.tma_load_a(coord_k=c)
            smem.commit()
        pl.launch_griddep()

    @schedule
    def load_late(gmem, smem, pw, pl):
        with domain_loop(0, K, 1):
            c = gmem.compute_coords()
            smem.acquire()  # @late_acquire
            smem.tma_load_a(coord_k=c)
            smem.commit()
        pw.wait_griddep()
        pl.launch_griddep()

    @schedule
    def mma(smem, out):
        with domain_loop(0, K, 1):
            smem.wait()  # @mma_wait
            v = smem.read()
            out.store(value=v)
            smem.release()

    filler = {True: lambda: load(gmem, smem_a, pdl_wait, pdl_launch),
              False: lambda: load_no_wait(gmem, smem_a, pdl_launch),
              "late": lambda: load_late(gmem, smem_a, pdl_wait, pdl_launch)}[load_waits]()
    loaders = [Task(name="LoadA", src_resources=[gmem, pdl_wait], dst_resources=[smem_a, pdl_launch], warp_idx=0,
                    schedule=filler)]
    tasks = loaders + [Task(name="MmaTask", src_resources=[smem_a], dst_resources=[out], warp_idx=1,
                            schedule=mma(smem_a, out))]
    return tasks, {smem_a: [gmem, pdl_wait], out: [smem_a]}


def test_reader_ordered_through_the_full_barrier_is_accepted():
    m = accepted(*mma_program(), exhaustive_deadlock_race_check=True)
    assert m.result.checker.verdict == "SAFE"
    assert not [f for f in m.result.findings if f.check == "pdl ordering"]


def test_filler_without_wait_griddep_is_rejected_and_the_reader_too():
    """Twin: LoadA fills SmemA without wait_griddep(); LoadA is named at its acquire, and MmaTask
    at its wait, with the filling task named as the one that does not wait."""
    f = rejected(*mma_program(load_waits=False))
    load = expect(f, "pdl ordering", "LoadA", "SmemA", line("filler_no_wait"))
    assert "without calling PdlWait.wait_griddep() first" in load.message
    reader = expect(f, "pdl ordering", "MmaTask", "SmemA", line("mma_wait"))
    assert "'LoadA'" in reader.message and "every task that fills it" in reader.expected
    # the exhaustive checker, run on its own, still sees MmaTask's read as unordered
    res = run_checker(Program(tasks=mma_program(load_waits=False)[0], graph=mma_program(load_waits=False)[1]))
    assert res.verdict == "UNSAFE" and any("wait_griddep" in x.message for x in res.findings), res.report()


def test_a_wait_after_the_fill_does_not_order_the_reader():
    """LoadA's wait_griddep() comes after its loop: the stages were written before it."""
    f = rejected(*mma_program(load_waits="late"))
    expect(f, "pdl ordering", "LoadA", "SmemA", line("late_acquire"))
    reader = expect(f, "pdl ordering", "MmaTask", "SmemA", line("mma_wait"))
    assert "'LoadA'" in reader.message
