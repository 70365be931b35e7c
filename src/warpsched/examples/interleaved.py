"""Interleaved pipelines: lanes sharing one set of num_stages barriers.

Three shapes from the scheduling-patterns page:
- ``warp_lane``: a 4-warp consumer task shares 8 stages with stride 4 (warp i owns lane i);
- ``per_role``: stride tuple (1, 1, 4, 1) with advance_on_wait: a dense producer warp, a 4-warp
  wait task and a 1-warp release task;
- ``domain_lane``: two 4-warp sibling softmax tasks take even and odd tiles and share a score
  pipeline (1, 1, 2, 2) and a probability pipeline (2, 2, 1, 1).
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskManager, consumer_work,
                       domain_loop, producer_work, schedule)

from warpsched.examples._groups import thread_group

NUM_TILES = 16
NUM_LANES = 2
TILE_BYTES = 4096


@dataclass(kw_only=True)
class Tiles(MemoryResource):
    @producer_work
    def fill(self, stage_info: StageInfo):
        """Write one tile into the acquired stage."""

    @consumer_work
    def read(self, stage_info: StageInfo):
        """Read the waited stage."""

    @producer_work
    def fill_part(self, stage_info: StageInfo, j=0):
        """Write tile loop_offset + j into the acquired stage."""


# ------------------------------------------------------------------ warp-lane
def warp_lane_config(kind, num_stages, stride):
    if kind == "async_async":  # Hopper-runnable shape of the seed's example
        return PipelineConfig.create_async_async_pipeline_cfg(  # @wl_async_cfg
            num_stages=num_stages, producer_group=thread_group(32), consumer_group=thread_group(32),
            interleave_stride=stride)
    if kind == "tma_umma":  # the seed's exact config (Blackwell)
        return PipelineConfig.create_tma_umma_pipeline_cfg(  # @wl_tma_umma_cfg
            num_stages=num_stages, num_bytes=TILE_BYTES, producer_group=thread_group(1),
            consumer_group=thread_group(1), cta_layout_vmnk=(1, 1, 1, 1), interleave_stride=stride)
    if kind == "umma_umma":  # never interleaved (rejected twin)
        return PipelineConfig.create_umma_umma_pipeline_cfg(  # @wl_umma_umma_cfg
            num_stages=num_stages, producer_group=thread_group(1), consumer_group=thread_group(1),
            cta_layout_vmnk=(1, 1, 1, 1), interleave_stride=stride)
    if kind == "clc_fetch_async":  # never interleaved (rejected twin)
        return PipelineConfig.create_clc_fetch_async_pipeline_cfg(  # @wl_clc_cfg
            num_stages=num_stages, producer_group=thread_group(1), consumer_group=thread_group(32),
            cta_layout_vmnk=(1, 1, 1, 1), interleave_stride=stride)
    raise ValueError(kind)


def build_warp_lane(verbose=True, stride=4, consumer_warps=4, kind="async_async", num_stages=8, **opts):
    # An int stride interleaves every role: each warp of both tasks owns one lane, so one
    # commit or release is one warp's arrivals.
    tiles = Tiles(name="tiles", pipeline_config=warp_lane_config(kind, num_stages, stride))

    @schedule
    def produce(tiles):
        with domain_loop(0, NUM_TILES, 1):
            tiles.acquire()
            tiles.fill()
            tiles.commit()

    @schedule
    def consume(tiles):
        with domain_loop(0, NUM_TILES, 1):  # @wl_consume_loop
            tiles.wait()
            tiles.read()
            tiles.release()

    tasks = [Task(name="Producers", dst_resources=[tiles], warp_idx=0, num_warps=4, schedule=produce(tiles)),
             Task(name="Consumers", src_resources=[tiles], warp_idx=4, num_warps=consumer_warps,
                  schedule=consume(tiles))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tiles: []}, verbose=verbose, **opts)


# ------------------------------------------------------------------ per-role (1, 1, 4, 1)
WAIT_LANES = 4


@dataclass(kw_only=True)
class Partials(MemoryResource):
    """Per-lane results the wait warps hand to the release task (the proxy that orders the
    release after the reads, as in the split-consumer pattern)."""

    @producer_work
    def write(self, stage_info: StageInfo):
        """Write this lane's result of the tile it read."""

    @consumer_work
    def drain(self, stage_info: StageInfo, j=0):
        """Read the result of tile loop_offset + j (dense order: tile 0, 1, 2, ...)."""


def build_per_role(verbose=True, advance_on_wait=True, strides=(1, 1, WAIT_LANES, 1), advance_on_acquire=False,
                   same_task=False, cluster=(1, 1, 1, 1), num_stages=8, num_tiles=NUM_TILES, **opts):
    """One dense TMA producer warp, a 4-warp wait task (warp i owns tiles i, i+4, ...), a 1-warp
    release task. The wait warps hand each tile's result to the release task through a
    ``partials`` pipeline interleaved on its producer side, so the release follows the reads.
    ``same_task=True`` is the twin that waits and releases in one task. ``num_tiles``: an int
    (exact) or a ``trip_count`` (e.g. ``trip_count("tiles", divisibility=4)``)."""
    tiles = Tiles(name="tiles", pipeline_config=PipelineConfig.create_tma_async_pipeline_cfg(  # @pr_cfg
        num_stages=num_stages, num_bytes=TILE_BYTES, producer_group=thread_group(1), consumer_group=thread_group(1),
        cta_layout_vmnk=cluster, advance_on_wait=advance_on_wait, advance_on_acquire=advance_on_acquire,
        interleave_stride=strides))
    partials = Partials(name="partials", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=WAIT_LANES, producer_group=thread_group(32), consumer_group=thread_group(32),
        interleave_stride=(WAIT_LANES, WAIT_LANES, 1, 1)))

    # The dense tasks walk every tile; wait warp i walks tiles i, i + 4, ... (step 4). The
    # three loops agree when the tile count is a multiple of 4 (the default 16, or a runtime
    # count declared with trip_count(..., divisibility=4)); at other counts wait warps wait for
    # tiles that are never produced, and the checker shows that deadlock.
    @schedule
    def produce(tiles):
        with domain_loop(0, num_tiles, 1):
            tiles.acquire()
            tiles.fill()
            tiles.commit()

    @schedule
    def wait_only(tiles, partials):  # warp i: tiles i, i + 4, ... (loop_offset + lane)
        with domain_loop(0, num_tiles, WAIT_LANES):
            tiles.wait()
            tiles.read()
            partials.acquire()
            partials.write()
            partials.commit()

    @schedule
    def wait_and_release(tiles, partials):  # twin: wait and release in one task
        with domain_loop(0, num_tiles, WAIT_LANES):
            tiles.wait()
            tiles.read()
            partials.acquire()
            partials.write()
            partials.commit()
            tiles.release()

    @schedule
    def release_only(partials, tiles):
        with domain_loop(0, num_tiles, 1):
            partials.wait()
            partials.drain()
            tiles.release()
            partials.release()

    tasks = [Task(name="Producer", dst_resources=[tiles], warp_idx=0, num_warps=1, schedule=produce(tiles)),
             Task(name="WaitTask", src_resources=[tiles], dst_resources=[partials], warp_idx=4,
                  num_warps=WAIT_LANES,
                  schedule=(wait_and_release if same_task else wait_only)(tiles, partials)),
             Task(name="ReleaseTask", src_resources=[partials, tiles], warp_idx=1, num_warps=1,
                  schedule=release_only(partials, tiles))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tiles: [], partials: [tiles]}, verbose=verbose,
                       **opts)


# ------------------------------------------------------------------ domain-lane softmax
@dataclass(kw_only=True)
class Scores(MemoryResource):
    @producer_work
    def mma_scores(self, stage_info: StageInfo):
        """S = Q K^T into the acquired stage."""

    @consumer_work
    def compute_softmax(self, stage_info: StageInfo):
        """Row max / exp / sum of the waited scores."""


@dataclass(kw_only=True)
class Probs(MemoryResource):
    @producer_work
    def store(self, stage_info: StageInfo):
        """Write P into the acquired stage."""

    @consumer_work
    def mma_pv(self, stage_info: StageInfo):
        """O += P V reading the waited stage."""


def build_domain_lane(verbose=True, lanes=NUM_LANES, kind="async_async", scores_strides=None, probs_strides=None,
                      starts=None, step=None, softmax_warps=4, scores_advance_on_wait=False, **opts):
    """Two 4-warp softmax siblings on even / odd tiles. ``kind="umma"`` uses the seed's types
    (UmmaAsync scores, AsyncUmma probs); the other keywords build the rejected twins."""
    scores_strides = scores_strides or (1, 1, lanes, lanes)
    probs_strides = probs_strides or (lanes, lanes, 1, 1)
    starts = starts if starts is not None else tuple(range(lanes))
    step = step if step is not None else lanes
    if kind == "umma":
        scores_cfg = PipelineConfig.create_umma_async_pipeline_cfg(  # @dl_scores_cfg_umma
            num_stages=2, producer_group=thread_group(1), consumer_group=thread_group(128),
            cta_layout_vmnk=(1, 1, 1, 1), interleave_stride=scores_strides, advance_on_wait=scores_advance_on_wait)
        probs_cfg = PipelineConfig.create_async_umma_pipeline_cfg(  # @dl_probs_cfg_umma
            num_stages=2, producer_group=thread_group(128), consumer_group=thread_group(1),
            cta_layout_vmnk=(1, 1, 1, 1), interleave_stride=probs_strides)
    else:
        scores_cfg = PipelineConfig.create_async_async_pipeline_cfg(  # @dl_scores_cfg
            num_stages=2, producer_group=thread_group(32), consumer_group=thread_group(32 * softmax_warps),
            interleave_stride=scores_strides, advance_on_wait=scores_advance_on_wait)
        probs_cfg = PipelineConfig.create_async_async_pipeline_cfg(  # @dl_probs_cfg
            num_stages=2, producer_group=thread_group(32 * softmax_warps), consumer_group=thread_group(32),
            interleave_stride=probs_strides)
    scores = Scores(name="scores", pipeline_config=scores_cfg)
    probs = Probs(name="probs", pipeline_config=probs_cfg)

    @schedule
    def mma(scores, probs):
        with domain_loop(0, NUM_TILES, 1):
            scores.acquire()
            scores.mma_scores()
            scores.commit()
            probs.wait()
            probs.mma_pv()
            probs.release()

    def make_softmax_task(lane, warp_idx, i):
        @schedule
        def softmax_lane(scores, probs):
            with domain_loop(lane, NUM_TILES, step):  # @dl_softmax_loop
                scores.wait()
                scores.compute_softmax()
                probs.acquire()
                probs.store()
                probs.commit()
                scores.release()

        return Task(src_resources=[scores], dst_resources=[probs], warp_idx=warp_idx, num_warps=softmax_warps,
                    schedule=softmax_lane(scores, probs), name=f"SoftmaxLane{i}")

    tasks = []
    for i, lane in enumerate(starts):
        tasks.append(make_softmax_task(lane=lane, warp_idx=4 * i, i=i))
    tasks.append(Task(name="Mma", src_resources=[probs], dst_resources=[scores], warp_idx=4 * len(starts),
                      num_warps=1, schedule=mma(scores, probs)))
    return TaskManager(tasks=tasks, resource_dependency_graph={scores: [], probs: [scores]}, verbose=verbose,
                       **opts)


VARIANTS = {"warp_lane": build_warp_lane, "per_role": build_per_role, "domain_lane": build_domain_lane}


def build(verbose: bool = True, variant: str = "warp_lane", **manager_options) -> TaskManager:
    return VARIANTS[variant](verbose=verbose, **manager_options)


if __name__ == "__main__":
    for v in VARIANTS:
        build(variant=v)
