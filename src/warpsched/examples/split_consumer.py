"""Split-consumer: a light sync task waits on two buffers and signals a proxy; the MMA task
waits only on the proxy, then works on and releases the original buffers.

The proxy is declared downstream of both buffers, so waiting on it implies both are ready.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, SignalingThreads, StageInfo, Task, TaskLocalVariable,
                       TaskManager, WorkAttr, consumer_work, domain_loop, producer_work, schedule)

from warpsched.examples._groups import thread_group

NUM_K_TILES = 8
STAGES = 4
TILE_BYTES = 128 * 64 * 2
COMPUTE_WARPS = 1


@dataclass(kw_only=True)
class Gmem(MemoryResource):
    coords: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.coords = TaskLocalVariable(dtype="Int32", default=0, docs="k coordinate")

    @consumer_work(returns=coords)
    def compute_coords(self, stage_info: StageInfo):
        return stage_info.loop_offset


@dataclass(kw_only=True)
class SmemTile(MemoryResource):
    desc: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.desc = TaskLocalVariable(dtype="Uint64", default=0, docs="SMEM descriptor")

    @producer_work
    def tma_load(self, stage_info: StageInfo, coords):
        """TMA copy of one tile."""

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc(self, stage_info: StageInfo):
        return stage_info.stage_idx


@dataclass(kw_only=True)
class Proxy(MemoryResource):
    @producer_work
    def signal_ready(self, stage_info: StageInfo):
        """Nothing to write: the commit itself is the signal."""


@dataclass(kw_only=True)
class TmemC(MemoryResource):
    @producer_work
    def mma(self, stage_info: StageInfo, desc_a, desc_b):
        """tcgen05.mma reading both SMEM tiles."""


def make_resources(wait_signaling=None, cluster=(1, 1, 1, 1), kind="umma"):
    """``kind="umma"``: the seed's Blackwell shape (TmaUmma buffers, UMMA into TMEM);
    ``kind="hopper"``: TmaAsync buffers and an async-thread compute task (runs on the H200).

    Over a CTA pair (``cluster=(2, 1, 1, 1)``, umma): each CTA loads its own tile into the
    leader's transaction barrier (``num_bytes`` = the tile x 1 warp x 2 CTAs); the sync and MMA
    tasks run in the leader CTA (every side they signal is ``CtaLeader``); the store task runs
    in both CTAs and both release into the leader's accumulator barrier (128 threads x 2)."""
    lead = SignalingThreads.CtaLeader
    pair = kind == "umma" and cluster[0] == 2
    sig = lead if pair else SignalingThreads.All

    def smem_cfg():
        if kind == "hopper":
            return PipelineConfig.create_tma_async_pipeline_cfg(  # @split_smem_cfg_hopper
                num_stages=STAGES, num_bytes=TILE_BYTES, producer_group=thread_group(1),
                consumer_group=thread_group(COMPUTE_WARPS), cta_layout_vmnk=cluster,
                consumer_signaling_threads=SignalingThreads.CtaLeader if wait_signaling else SignalingThreads.All,
                consumer_wait_signaling_threads=wait_signaling)
        return PipelineConfig.create_tma_umma_pipeline_cfg(  # @split_smem_cfg
            num_stages=STAGES, num_bytes=TILE_BYTES * (2 if pair else 1), producer_group=thread_group(1),
            consumer_group=thread_group(1), cta_layout_vmnk=cluster,
            consumer_signaling_threads=SignalingThreads.CtaLeader if wait_signaling or pair else SignalingThreads.All,
            consumer_wait_signaling_threads=wait_signaling,
            num_bytes_per_warp_per_cta=TILE_BYTES if pair else None)

    gmem_a, gmem_b = Gmem(name="gmem_a"), Gmem(name="gmem_b")
    smem_a = SmemTile(name="smem_a", pipeline_config=smem_cfg())
    smem_b = SmemTile(name="smem_b", pipeline_config=smem_cfg())
    if kind == "hopper":
        proxy = Proxy(name="proxy", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
            num_stages=STAGES, producer_group=thread_group(32), consumer_group=thread_group(32 * COMPUTE_WARPS),
            cta_layout_vmnk=cluster))
        return gmem_a, gmem_b, smem_a, smem_b, proxy, None
    proxy = Proxy(name="proxy", pipeline_config=PipelineConfig.create_async_umma_pipeline_cfg(
        num_stages=STAGES, producer_group=thread_group(32), consumer_group=thread_group(1),
        cta_layout_vmnk=cluster, producer_signaling_threads=sig, consumer_signaling_threads=sig))
    tmem_c = TmemC(name="tmem_c", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(  # @split_tmem_cfg
        num_stages=1, producer_group=thread_group(1), consumer_group=thread_group(128 * (2 if pair else 1)),
        cta_layout_vmnk=cluster, producer_signaling_threads=sig))
    return gmem_a, gmem_b, smem_a, smem_b, proxy, tmem_c


@schedule
def load_schedule(gmem, smem):
    with domain_loop(0, NUM_K_TILES, 1):
        coords = gmem.compute_coords()
        smem.acquire()
        smem.tma_load(coords=coords)
        smem.commit()


@schedule
def sync_schedule(smem_a, smem_b, proxy):  # wait-only consumer of both buffers
    with domain_loop(0, NUM_K_TILES, 1):
        smem_a.wait()  # @split_sync_wait_a
        smem_b.wait()
        proxy.acquire()
        proxy.signal_ready()
        proxy.commit()


@schedule
def mma_schedule(proxy, smem_a, smem_b, tmem_c):  # proxy consumer
    tmem_c.acquire()
    with domain_loop(0, NUM_K_TILES, 1):
        proxy.wait()
        desc_a = smem_a.build_desc()  # work, no direct wait
        desc_b = smem_b.build_desc()
        tmem_c.mma(desc_a=desc_a, desc_b=desc_b)
        smem_a.release()
        smem_b.release()
        proxy.release()
    tmem_c.commit()


@dataclass(kw_only=True)
class GmemD(MemoryResource):
    @producer_work
    def store(self, stage_info: StageInfo):
        """Drain the accumulator to global memory."""


@schedule
def store_schedule(tmem_c, gmem_d):
    tmem_c.wait()
    gmem_d.store()
    tmem_c.release()


@dataclass(kw_only=True)
class GmemOut(MemoryResource):
    @producer_work
    def add_tiles(self, stage_info: StageInfo, desc_a, desc_b):
        """out[k] = a[k] + b[k], reading both SMEM tiles (synchronous threads)."""


@schedule
def compute_schedule(proxy, smem_a, smem_b, gmem_out):  # proxy consumer, Hopper: synchronous work
    with domain_loop(0, NUM_K_TILES, 1):
        proxy.wait()
        desc_a = smem_a.build_desc()  # work, no direct wait
        desc_b = smem_b.build_desc()
        gmem_out.add_tiles(desc_a=desc_a, desc_b=desc_b)
        smem_a.release()
        smem_b.release()
        proxy.release()


@schedule
def unsplit_schedule(smem_a, smem_b, gmem_out):  # twin: the compute task waits and releases itself
    with domain_loop(0, NUM_K_TILES, 1):
        smem_a.wait()
        smem_b.wait()
        desc_a = smem_a.build_desc()
        desc_b = smem_b.build_desc()
        gmem_out.add_tiles(desc_a=desc_a, desc_b=desc_b)
        smem_a.release()
        smem_b.release()


def build_hopper(verbose: bool = True, wait_signaling=None, cluster=(1, 1, 1, 1), split=True,
                 **manager_options) -> TaskManager:
    """The pattern with Hopper pipeline types; ``split=False`` is the twin without the pattern."""
    gmem_a, gmem_b, smem_a, smem_b, proxy, _ = make_resources(wait_signaling, cluster, kind="hopper")
    out = GmemOut(name="gmem_out")
    tasks = [
        Task(name="LoadA", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0, num_warps=1,
             schedule=load_schedule(gmem_a, smem_a)),
        Task(name="LoadB", src_resources=[gmem_b], dst_resources=[smem_b], warp_idx=1, num_warps=1,
             schedule=load_schedule(gmem_b, smem_b)),
    ]
    if split:
        tasks += [
            Task(name="SyncTask", src_resources=[smem_a, smem_b], dst_resources=[proxy], warp_idx=2, num_warps=1,
                 schedule=sync_schedule(smem_a, smem_b, proxy)),
            Task(name="ComputeTask", src_resources=[proxy, smem_a, smem_b], dst_resources=[out], warp_idx=3,
                 num_warps=COMPUTE_WARPS, schedule=compute_schedule(proxy, smem_a, smem_b, out)),
        ]
        graph = {smem_a: [gmem_a], smem_b: [gmem_b], proxy: [smem_a, smem_b], out: [proxy]}
    else:
        tasks.append(Task(name="ComputeTask", src_resources=[smem_a, smem_b], dst_resources=[out], warp_idx=3,
                          num_warps=COMPUTE_WARPS, schedule=unsplit_schedule(smem_a, smem_b, out)))
        graph = {smem_a: [gmem_a], smem_b: [gmem_b], out: [smem_a, smem_b]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=verbose, **manager_options)


def build(verbose: bool = True, wait_signaling=None, cluster=(1, 1, 1, 1), kind="umma",
          **manager_options) -> TaskManager:
    if kind == "hopper":
        return build_hopper(verbose=verbose, wait_signaling=wait_signaling, cluster=cluster, **manager_options)
    gmem_a, gmem_b, smem_a, smem_b, proxy, tmem_c = make_resources(wait_signaling, cluster)
    gmem_d = GmemD(name="gmem_d")
    tasks = [
        Task(name="StoreTask", src_resources=[tmem_c], dst_resources=[gmem_d], warp_idx=0, num_warps=4,
             schedule=store_schedule(tmem_c, gmem_d)),
        Task(name="LoadA", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=4, num_warps=1,
             schedule=load_schedule(gmem_a, smem_a)),
        Task(name="LoadB", src_resources=[gmem_b], dst_resources=[smem_b], warp_idx=5, num_warps=1,
             schedule=load_schedule(gmem_b, smem_b)),
        Task(name="SyncTask", src_resources=[smem_a, smem_b], dst_resources=[proxy], warp_idx=6, num_warps=1,
             schedule=sync_schedule(smem_a, smem_b, proxy)),
        Task(name="MmaTask", src_resources=[proxy, smem_a, smem_b], dst_resources=[tmem_c], warp_idx=7,
             num_warps=1, schedule=mma_schedule(proxy, smem_a, smem_b, tmem_c)),
    ]
    graph = {smem_a: [gmem_a], smem_b: [gmem_b], proxy: [smem_a, smem_b], tmem_c: [proxy], gmem_d: [tmem_c]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=verbose, **manager_options)


def build_pair(verbose: bool = True, **manager_options) -> TaskManager:
    """The Blackwell shape over a CTA pair, ``cta_layout_vmnk=(2, 1, 1, 1)`` (see ``make_resources``)."""
    return build(verbose=verbose, kind="umma", cluster=(2, 1, 1, 1), **manager_options)


if __name__ == "__main__":
    build()
