"""PDL ordering (static part): launch after a wait, wait before the dependent work,
and assume_pdl_wait_completed."""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, Task, WorkQueue, domain_loop, schedule,
                       work_tile_loop)

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

K = 4


@dataclass(kw_only=True)
class SkipQueue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return False


def pdl_program(sched, graph_edge=True, persistent=False, with_wait=True):
    gmem_ab = Gmem(name="gmem_ab")
    smem_a = Buf(name="smem_a", pipeline_config=PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=2, num_bytes=1024, producer_group=cg(1), consumer_group=cg(1)))
    out = Gmem(name="out")
    pdl_wait, pdl_launch = PdlWaitBarrier(name="pdl_wait"), PdlLaunchBarrier(name="pdl_launch")
    wq = SkipQueue(name="wq")
    args = (gmem_ab, smem_a, pdl_wait, pdl_launch) + ((wq,) if persistent else ())

    @schedule
    def drain(smem_a, out, *rest):
        def body():
            with domain_loop(0, K, 1):
                smem_a.wait()
                v = smem_a.read()
                out.store(value=v)
                smem_a.release()
        if rest:
            with work_tile_loop(rest[0]):
                body()
                rest[0].wait()
                rest[0].get_and_advance_work_tile()
                rest[0].release()
        else:
            body()

    extra = [wq] if persistent else []
    waits = [pdl_wait] if with_wait else []
    tasks = [Task(name="load", src_resources=[gmem_ab] + waits + extra, dst_resources=[smem_a, pdl_launch],
                  warp_idx=0, schedule=sched(*args)),
             Task(name="drain", src_resources=[smem_a] + extra, dst_resources=[out], warp_idx=1,
                  schedule=drain(smem_a, out, *extra))]
    graph = {smem_a: [gmem_ab] + extra, out: [smem_a]}
    graph[gmem_ab] = [pdl_wait] if graph_edge and with_wait else []
    if not graph_edge and with_wait:
        graph[pdl_wait] = []  # in the graph, but not upstream of gmem_ab
    return tasks, graph


@schedule
def pdl_load_schedule(gmem_ab, smem_a, pdl_wait_resource, pdl_launch_resource):
    pdl_wait_resource.wait_griddep()
    with domain_loop(0, K, 1):
        coords = gmem_ab.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coords)
        smem_a.commit()
    pdl_launch_resource.launch_griddep()


@schedule
def bad_pdl_launch_schedule(gmem_ab, smem_a, pdl_wait_resource, pdl_launch_resource):
    with domain_loop(0, K, 1):
        pdl_launch_resource.launch_griddep()  # @launch_no_wait
        coords = gmem_ab.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coords)
        smem_a.commit()


@schedule
def launch_before_wait(gmem_ab, smem_a, pdl_wait_resource, pdl_launch_resource):
    pdl_launch_resource.launch_griddep()  # @launch_first
    pdl_wait_resource.wait_griddep()
    with domain_loop(0, K, 1):
        coords = gmem_ab.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coords)
        smem_a.commit()


@schedule
def wait_after_dependent(gmem_ab, smem_a, pdl_wait_resource, pdl_launch_resource):
    with domain_loop(0, K, 1):
        coords = gmem_ab.compute_coords()  # @late_wait_use
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coords)
        smem_a.commit()
    pdl_wait_resource.wait_griddep()
    pdl_launch_resource.launch_griddep()


def test_launch_without_any_wait_doc_pair():
    f = rejected(*pdl_program(bad_pdl_launch_schedule, with_wait=False))
    expect(f, "pdl ordering", "load", "pdl_launch", line("launch_no_wait"))
    accepted(*pdl_program(pdl_load_schedule))


def test_launch_before_the_task_s_own_wait():
    f = rejected(*pdl_program(launch_before_wait))
    expect(f, "pdl ordering", "load", "pdl_launch", line("launch_first"))


def test_wait_must_precede_the_dependent_work():
    f = rejected(*pdl_program(wait_after_dependent))
    hit = expect(f, "pdl ordering", "load", "gmem_ab", line("late_wait_use"))
    assert "pdl_wait.wait_griddep()" in hit.expected


def test_without_the_graph_edge_the_dependency_is_not_checked():
    accepted(*pdl_program(wait_after_dependent, graph_edge=False))


def test_assume_pdl_wait_completed_accepts_the_launch_and_the_dependent_work():
    accepted(*pdl_program(bad_pdl_launch_schedule, with_wait=False), assume_pdl_wait_completed=True)
    accepted(*pdl_program(wait_after_dependent), assume_pdl_wait_completed=True)


def test_wait_hidden_in_skipped_work_does_not_justify_an_unconditional_launch():
    @schedule
    def skipped_wait(gmem_ab, smem_a, pdl_wait, pdl_launch, wq):
        with work_tile_loop(wq, skip_if=SkipQueue.skip_work_tile_if) as wtwl:
            with wtwl.skippable():
                pdl_wait.wait_griddep()
                with domain_loop(0, K, 1):
                    coords = gmem_ab.compute_coords()
                    smem_a.acquire()
                    smem_a.tma_load_a(coord_k=coords)
                    smem_a.commit()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()
        pdl_launch.launch_griddep()  # @launch_after_skipped

    @schedule
    def unconditional_wait(gmem_ab, smem_a, pdl_wait, pdl_launch, wq):
        pdl_wait.wait_griddep()
        with work_tile_loop(wq, skip_if=SkipQueue.skip_work_tile_if) as wtwl:
            with wtwl.skippable(), domain_loop(0, K, 1):
                coords = gmem_ab.compute_coords()
                smem_a.acquire()
                smem_a.tma_load_a(coord_k=coords)
                smem_a.commit()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()
        pdl_launch.launch_griddep()

    f = rejected(*pdl_program(skipped_wait, persistent=True))
    hit = expect(f, "pdl ordering", "load", "pdl_launch", line("launch_after_skipped"))
    assert "skipped path" in hit.message
    accepted(*pdl_program(unconditional_wait, persistent=True))
