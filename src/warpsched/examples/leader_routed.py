"""Leader-routed completions: several TMA producer warps, one leader arms the barrier.

With ``TaskWarpLeader`` the first warp of the load task arms the transaction barrier for
all its warps, so ``num_bytes`` must cover every producing warp (and, with ``CtaLeader`` in a
cluster, every producing CTA).
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, SignalingThreads, StageInfo, Task, TaskManager,
                       consumer_work, domain_loop, producer_work, schedule)

from warpsched.protocol import mcast_partners
from warpsched.examples._groups import thread_group

NUM_TILES = 8
LOAD_WARPS = 4
BYTES_ONE_WARP_ONE_CTA = 2048


@dataclass(kw_only=True)
class Tile(MemoryResource):
    @producer_work
    def tma_load_part(self, stage_info: StageInfo):
        """Each producing warp issues its TMA copy of one part of the tile."""

    @consumer_work
    def read(self, stage_info: StageInfo):
        """Read the assembled tile."""


def make_config(num_bytes=None, cluster=(1, 1, 1, 1), signaling=SignalingThreads.TaskWarpLeader, mcast=None):
    """``num_bytes=None``: the right aggregate; pass a number for the rejected twins.
    ``cluster`` may be an opaque object for the twin whose layout cannot be inspected."""
    ctas = 1
    for x in (cluster if isinstance(cluster, tuple) else ()):
        ctas *= x
    covered_ctas = ctas if signaling.cta_leader else 1
    if num_bytes is None:
        num_bytes = BYTES_ONE_WARP_ONE_CTA * LOAD_WARPS * covered_ctas
    partners = 1  # with multicast, the consumer warp of every CTA a tile lands in releases it
    for _ in range(2):
        cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @lr_cfg
            num_stages=4, num_bytes=num_bytes, producer_group=thread_group(1), consumer_group=thread_group(partners),
            cta_layout_vmnk=cluster, producer_signaling_threads=signaling,
            num_bytes_per_warp_per_cta=BYTES_ONE_WARP_ONE_CTA, mcast_mode_mn=mcast)
        if mcast_partners(cfg) == partners:
            return cfg
        partners = mcast_partners(cfg)
    return cfg


def build(verbose: bool = True, num_bytes=None, cluster=(1, 1, 1, 1), signaling=SignalingThreads.TaskWarpLeader,
          mcast=None, **manager_options) -> TaskManager:
    """Default: 4 TMA producer warps, TaskWarpLeader. The seed's cluster shape:
    ``cluster=(1, 2, 1, 1), signaling=CtaLeader | TaskWarpLeader, mcast=(True, True)``."""
    tile = Tile(name="tile", pipeline_config=make_config(num_bytes, cluster, signaling, mcast))

    @schedule
    def load(tile):
        with domain_loop(0, NUM_TILES, 1):
            tile.acquire()
            tile.tma_load_part()
            tile.commit()

    @schedule
    def consume(tile):
        with domain_loop(0, NUM_TILES, 1):
            tile.wait()
            tile.read()
            tile.release()

    tasks = [Task(name="LoadTask", dst_resources=[tile], warp_idx=0, num_warps=LOAD_WARPS, schedule=load(tile)),
             Task(name="ConsumerTask", src_resources=[tile], warp_idx=4, num_warps=1, schedule=consume(tile))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tile: []}, verbose=verbose, **manager_options)


if __name__ == "__main__":
    build()
