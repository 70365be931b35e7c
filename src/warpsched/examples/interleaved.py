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

from ._groups import thread_group

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


# ------------------------------------------------------------------ warp-lane
def build_warp_lane(verbose=True, stride=4, consumer_warps=4, **opts):
    # An int stride interleaves every role: each warp of both tasks owns one lane, so one
    # commit or release is one warp's 32 arrivals.
    tiles = Tiles(name="tiles", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=8, producer_group=thread_group(32), consumer_group=thread_group(32),
        interleave_stride=stride))

    @schedule
    def produce(tiles):
        with domain_loop(0, NUM_TILES, 1):
            tiles.acquire()
            tiles.fill()
            tiles.commit()

    @schedule
    def consume(tiles):
        with domain_loop(0, NUM_TILES, 1):
            tiles.wait()
            tiles.read()
            tiles.release()

    tasks = [Task(name="Producers", dst_resources=[tiles], warp_idx=0, num_warps=4, schedule=produce(tiles)),
             Task(name="Consumers", src_resources=[tiles], warp_idx=4, num_warps=consumer_warps,
                  schedule=consume(tiles))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tiles: []}, verbose=verbose, **opts)


# ------------------------------------------------------------------ per-role (1, 1, 4, 1)
def build_per_role(verbose=True, advance_on_wait=True, **opts):
    tiles = Tiles(name="tiles", pipeline_config=PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=8, num_bytes=TILE_BYTES, producer_group=thread_group(1), consumer_group=thread_group(1),
        cta_layout_vmnk=(1, 1, 1, 1), advance_on_wait=advance_on_wait, interleave_stride=(1, 1, 4, 1)))

    @schedule
    def produce(tiles):
        with domain_loop(0, NUM_TILES, 1):
            tiles.acquire()
            tiles.fill()
            tiles.commit()

    @schedule
    def wait_only(tiles):
        with domain_loop(0, NUM_TILES, 1):
            tiles.wait()
            tiles.read()

    @schedule
    def release_only(tiles):
        with domain_loop(0, NUM_TILES, 1):
            tiles.release()

    tasks = [Task(name="Producer", dst_resources=[tiles], warp_idx=0, num_warps=1, schedule=produce(tiles)),
             Task(name="WaitTask", src_resources=[tiles], warp_idx=4, num_warps=4, schedule=wait_only(tiles)),
             Task(name="ReleaseTask", src_resources=[tiles], warp_idx=1, num_warps=1,
                  schedule=release_only(tiles))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tiles: []}, verbose=verbose, **opts)


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


def build_domain_lane(verbose=True, lanes=NUM_LANES, **opts):
    scores = Scores(name="scores", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=thread_group(32), consumer_group=thread_group(128),
        interleave_stride=(1, 1, lanes, lanes)))
    probs = Probs(name="probs", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=thread_group(128), consumer_group=thread_group(32),
        interleave_stride=(lanes, lanes, 1, 1)))

    @schedule
    def mma(scores, probs):
        with domain_loop(0, NUM_TILES, 1):
            scores.acquire()
            scores.mma_scores()
            scores.commit()
            probs.wait()
            probs.mma_pv()
            probs.release()

    def make_softmax_task(lane, warp_idx):
        @schedule
        def softmax_lane(scores, probs):
            with domain_loop(lane, NUM_TILES, NUM_LANES):
                scores.wait()
                scores.compute_softmax()
                probs.acquire()
                probs.store()
                probs.commit()
                scores.release()

        return Task(src_resources=[scores], dst_resources=[probs], warp_idx=warp_idx, num_warps=4,
                    schedule=softmax_lane(scores, probs), name=f"SoftmaxLane{lane}")

    tasks = [make_softmax_task(lane=0, warp_idx=0), make_softmax_task(lane=1, warp_idx=4),
             Task(name="Mma", src_resources=[probs], dst_resources=[scores], warp_idx=8, num_warps=1,
                  schedule=mma(scores, probs))]
    return TaskManager(tasks=tasks, resource_dependency_graph={scores: [], probs: [scores]}, verbose=verbose,
                       **opts)


VARIANTS = {"warp_lane": build_warp_lane, "per_role": build_per_role, "domain_lane": build_domain_lane}


def build(verbose: bool = True, variant: str = "warp_lane", **manager_options) -> TaskManager:
    return VARIANTS[variant](verbose=verbose, **manager_options)


if __name__ == "__main__":
    for v in VARIANTS:
        build(variant=v)
