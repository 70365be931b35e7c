"""Programs for the HTML report tests (tests/test_report_html.py, tests/test_report_browser.py),
checked through `warpsched check tests/_report_programs.py:NAME`.

``build_safe``: a TMA load warp feeds a 4-warp WGMMA warp group through a 2-stage pipeline; the
stage is released after ``wgmma.wait_group`` retires the reads. ``build_race`` releases first:
the load warp refills the stage the wgmma still reads (UNSAFE: a race, 17 steps).
``build_deadlock``: the consumer loop steps by 2, so the loader waits for a free stage forever.
``build_wide``: one producer, seven consumer tasks (eight lanes), for wide-layout checks.
"""
from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskLocalVariable, TaskManager, WorkAttr,
                       consumer_work, domain_loop, producer_work, schedule)
from warpsched.examples._groups import thread_group


@dataclass(kw_only=True)
class Gmem(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=val)
    def coords(self, stage_info: StageInfo): ...

    @producer_work
    def store(self, stage_info: StageInfo, val=None): ...


@dataclass(kw_only=True)
class Tiles(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @producer_work
    def tma_load(self, stage_info: StageInfo, c=None): ...

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def wgmma(self, stage_info: StageInfo): ...

    @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY)
    def retire(self, stage_info: StageInfo, pending=0): ...

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo): ...


@schedule
def load(gmem, tiles):
    with domain_loop(0, 8, 1):
        c = gmem.coords()
        tiles.acquire()
        tiles.tma_load(c=c)
        tiles.commit()


@schedule
def mma(tiles, out):
    with domain_loop(0, 8, 1):
        tiles.wait()
        tiles.wgmma()
        tiles.retire(pending=0)  # the wgmma reads of this stage are done ...
        tiles.release()  # ... so the stage can be refilled
    out.store()


@schedule
def mma_early_release(tiles, out):
    with domain_loop(0, 8, 1):
        tiles.wait()
        tiles.wgmma()
        tiles.release()  # released while the wgmma may still read the stage
        tiles.retire(pending=0)
    out.store()


@schedule
def half_consumer(tiles, out):
    with domain_loop(0, 8, 2):  # half the loader's trip count
        tiles.wait()
        v = tiles.read()
        out.store(val=v)
        tiles.release()


def _wgmma_program(consumer, verbose, manager_options, consumer_warps=4, stages=2):
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=stages, num_bytes=1024,
                                                       producer_group=thread_group(1),
                                                       consumer_group=thread_group(consumer_warps))
    gmem, tiles, out = Gmem(name="gmem"), Tiles(name="tiles", pipeline_config=cfg), Gmem(name="out")
    tasks = [Task(name="Load", src_resources=[gmem], dst_resources=[tiles], warp_idx=0, num_warps=1,
                  schedule=load(gmem, tiles)),
             Task(name="Mma", src_resources=[tiles], dst_resources=[out], warp_idx=4, num_warps=consumer_warps,
                  schedule=consumer(tiles, out))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tiles: [gmem], out: [tiles]}, verbose=verbose,
                       **manager_options)


def build_safe(verbose=True, **manager_options):
    return _wgmma_program(mma, verbose, manager_options)


def build_race(verbose=True, **manager_options):
    return _wgmma_program(mma_early_release, verbose, manager_options)


def build_deadlock(verbose=True, **manager_options):
    return _wgmma_program(half_consumer, verbose, manager_options, stages=1)


@schedule
def produce(gmem, tiles):
    with domain_loop(0, 8, 1):
        c = gmem.coords()
        tiles.acquire()
        tiles.tma_load(c=c)
        tiles.commit()


@schedule
def consume(tiles, out):
    with domain_loop(0, 8, 1):
        tiles.wait()
        v = tiles.read()
        tiles.release()
        out.store(val=v)


def build_wide(verbose=True, consumers=7, **manager_options):
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=1024, producer_group=thread_group(1),
                                                       consumer_group=thread_group(consumers))
    gmem, tiles = Gmem(name="gmem"), Tiles(name="tiles", pipeline_config=cfg)
    outs = [Gmem(name=f"out{i}") for i in range(consumers)]
    tasks = [Task(name="Producer", src_resources=[gmem], dst_resources=[tiles], warp_idx=0, num_warps=1,
                  schedule=produce(gmem, tiles))]
    tasks += [Task(name=f"Consumer{i}", src_resources=[tiles], dst_resources=[outs[i]], warp_idx=1 + i,
                   num_warps=1, schedule=consume(tiles, outs[i])) for i in range(consumers)]
    graph = {tiles: [gmem], **{o: [tiles] for o in outs}}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=verbose, **manager_options)
