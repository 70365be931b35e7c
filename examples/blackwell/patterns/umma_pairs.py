"""The seed's 2-CTA UMMA shapes over a CTA pair (cta_layout_vmnk=(2, 1, 1, 1)), compiled for sm_100a
(Blackwell; cannot run on the H200). Barrier-protocol kernels: real 2-SM TMA loads (each CTA loads
its own tile, completing on the leader CTA's barrier), placeholder MMA bodies (the hardware
arrivals are the tcgen05.commit cta_group::2 the lowering emits for each UMMA release / commit).

mode="split_consumer"  the seed's split-consumer (src/warpsched/examples/split_consumer.py, kind="umma",
                       cluster=(2, 1, 1, 1)): LoadA / LoadB in both CTAs, SyncTask and MmaTask in the
                       leader (their sides are CtaLeader), StoreTask in both CTAs releasing into the
                       leader's accumulator barrier.
mode="leader_routed"   leader-routed completions over a pair: 4 TMA producer warps per CTA
                       (TaskWarpLeader), 1 KiB per warp per CTA; the leader CTA's warp 0 arms its
                       barrier for 1 KiB x 4 warps x 2 CTAs; the MMA task (leader) waits and releases.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

_HOPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hopper")
if _HOPPER not in sys.path:
    sys.path.insert(0, _HOPPER)
import _common  # noqa: E402

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.nvgpu import tcgen05  # noqa: E402

from warpsched import (MemoryResource, PipelineConfig, SignalingThreads, SmemAllocation, SmemAllocator,  # noqa: E402
                       StageInfo, Task, TaskLocalVariable, TaskManager, WorkAttr, consumer_work, domain_loop,
                       producer_work, schedule, threads, trip_count)

PAIR = (2, 1, 1, 1)
WIDTH, TILE_ROWS, STAGES, WARPS = 32, 8, 4, 4
TILE = (TILE_ROWS, WIDTH)
TILE_BYTES = TILE_ROWS * WIDTH * 4  # 1 KiB: one CTA's tile (one warp's part in leader_routed)
LEAD = SignalingThreads.CtaLeader


def _cta_in_pair():
    return cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster()) % PAIR[0]


@dataclass(kw_only=True)
class Coords(MemoryResource):
    k: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.k = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="tile of this iteration")

    @consumer_work(returns=k)
    def compute_coords(self, stage_info: StageInfo):
        return stage_info.loop_offset


@dataclass(kw_only=True)
class PairTiles(MemoryResource):
    """``parts`` tiles per stage in each CTA; part p of CTA v, iteration k: tile (k * 2 + v) * parts + p."""
    atom: Any = None
    gmem: Any = None
    allocator: Any = None
    alloc: Any = None
    parts: int = 1
    desc: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.desc = TaskLocalVariable(dtype=cutlass.Int32, default=0, docs="stage the MMA reads")

    def get_smem_requirements(self):
        return [self.alloc]

    @producer_work
    @cute.jit
    def tma_load(self, stage_info: StageInfo, coords):
        part = cute.arch.make_warp_uniform(cute.arch.warp_idx()) % self.parts
        s = cute.make_tensor(self.allocator.get(self.alloc),
                             cute.make_layout((TILE_ROWS, WIDTH, self.parts * STAGES),
                                              stride=(WIDTH, 1, TILE_ROWS * WIDTH)))
        g = cute.local_tile(self.gmem, TILE, (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1), cute.group_modes(s, 0, 2),
                                                     cute.group_modes(g, 0, 2))
        tile = (coords * PAIR[0] + _cta_in_pair()) * self.parts + part
        # the 2-SM TMA completes on the leader CTA's barrier (the barrier address's peer bit is masked)
        cute.copy(self.atom, t_g[(None, tile, 0)], t_s[(None, stage_info.stage_idx * self.parts + part)],
                  tma_bar_ptr=stage_info.barrier)

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def build_desc(self, stage_info: StageInfo):
        return stage_info.stage_idx

    @consumer_work
    def mma(self, stage_info: StageInfo):
        """Placeholder for tcgen05.mma.cta_group::2 reading the stage (not issued in this protocol kernel)."""


@dataclass(kw_only=True)
class Proxy(MemoryResource):
    @producer_work
    def signal_ready(self, stage_info: StageInfo):
        """Nothing to write: the commit itself is the signal."""


@dataclass(kw_only=True)
class Acc(MemoryResource):
    @producer_work
    def mma(self, stage_info: StageInfo, desc_a, desc_b):
        """Placeholder for tcgen05.mma.cta_group::2 into the pair's accumulator."""

    @consumer_work
    def drain(self, stage_info: StageInfo):
        """Placeholder for the epilogue's tcgen05.ld of this CTA's half."""


def _tiles(name, atom, gmem, allocator, parts, cfg):
    t = PairTiles(name=name, pipeline_config=cfg, atom=atom, gmem=gmem, allocator=allocator, parts=parts,
                  alloc=SmemAllocation(name, dtype=cutlass.Float32, count=TILE_ROWS * WIDTH * STAGES * parts,
                                       alignment=128))
    allocator.add_resource(t)
    return t


# ------------------------------------------------------------------ the seed's split-consumer over a pair
@schedule
def load_schedule(coords, smem, n):
    with domain_loop(0, n, 1):
        k = coords.compute_coords()
        smem.acquire()
        smem.tma_load(coords=k)
        smem.commit()


@schedule
def sync_schedule(smem_a, smem_b, proxy, n):
    with domain_loop(0, n, 1):
        smem_a.wait()
        smem_b.wait()
        proxy.acquire()
        proxy.signal_ready()
        proxy.commit()


@schedule
def mma_schedule(proxy, smem_a, smem_b, acc, n):
    acc.acquire()
    with domain_loop(0, n, 1):
        proxy.wait()
        da = smem_a.build_desc()
        db = smem_b.build_desc()
        acc.mma(desc_a=da, desc_b=db)
        smem_a.release()
        smem_b.release()
        proxy.release()
    acc.commit()


@schedule
def store_schedule(acc):
    acc.wait()
    acc.drain()
    acc.release()


def build_split(atoms=(None, None), gmems=(None, None), n=None, verbose=True, **manager_options):
    """The seed's UMMA split-consumer over a pair: the bundled example's configs for cluster=(2, 1, 1, 1)."""
    n = trip_count("n", n)
    allocator = SmemAllocator()
    smem_cfg = dict(num_stages=STAGES, num_bytes=TILE_BYTES * 1 * 2, num_bytes_per_warp_per_cta=TILE_BYTES,
                    producer_group=threads(1), consumer_group=threads(1), cta_layout_vmnk=PAIR,
                    consumer_signaling_threads=LEAD)
    smem_a = _tiles("smem_a", atoms[0], gmems[0], allocator, 1,
                    PipelineConfig.create_tma_umma_pipeline_cfg(**smem_cfg))  # @pair_split_smem_a
    smem_b = _tiles("smem_b", atoms[1], gmems[1], allocator, 1,
                    PipelineConfig.create_tma_umma_pipeline_cfg(**smem_cfg))
    allocator.compute_layout()
    proxy = Proxy(name="proxy", pipeline_config=PipelineConfig.create_async_umma_pipeline_cfg(
        num_stages=STAGES, producer_group=threads(32), consumer_group=threads(1), cta_layout_vmnk=PAIR,
        producer_signaling_threads=LEAD, consumer_signaling_threads=LEAD))
    acc = Acc(name="tmem_c", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(  # @pair_split_acc
        num_stages=1, producer_group=threads(1), consumer_group=threads(128 * 2), cta_layout_vmnk=PAIR,
        producer_signaling_threads=LEAD))
    ca, cb = Coords(name="gmem_a"), Coords(name="gmem_b")
    tasks = [
        Task(name="StoreTask", src_resources=[acc], warp_idx=0, num_warps=4, schedule=store_schedule(acc)),
        Task(name="LoadA", src_resources=[ca], dst_resources=[smem_a], warp_idx=4, schedule=load_schedule(ca, smem_a, n)),
        Task(name="LoadB", src_resources=[cb], dst_resources=[smem_b], warp_idx=5, schedule=load_schedule(cb, smem_b, n)),
        Task(name="SyncTask", src_resources=[smem_a, smem_b], dst_resources=[proxy], warp_idx=6,
             schedule=sync_schedule(smem_a, smem_b, proxy, n)),
        Task(name="MmaTask", src_resources=[proxy, smem_a, smem_b], dst_resources=[acc], warp_idx=7,
             schedule=mma_schedule(proxy, smem_a, smem_b, acc, n)),
    ]
    graph = {smem_a: [ca], smem_b: [cb], proxy: [smem_a, smem_b], acc: [proxy]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


# ------------------------------------------------------------------ leader-routed completions over a pair
@schedule
def lr_load(coords, tile, n):
    with domain_loop(0, n, 1):
        k = coords.compute_coords()
        tile.acquire()
        tile.tma_load(coords=k)
        tile.commit()


@schedule
def lr_mma(tile, n):
    with domain_loop(0, n, 1):
        tile.wait()
        tile.mma()
        tile.release()


def build_leader_routed(atom=None, gmem=None, n=None, verbose=True, **manager_options):
    n = trip_count("n", n)
    allocator = SmemAllocator()
    cfg = PipelineConfig.create_tma_umma_pipeline_cfg(  # @pair_lr_cfg
        num_stages=STAGES, num_bytes=TILE_BYTES * WARPS * 2, num_bytes_per_warp_per_cta=TILE_BYTES,
        producer_group=threads(1), consumer_group=threads(1), cta_layout_vmnk=PAIR,
        producer_signaling_threads=SignalingThreads.TaskWarpLeader, consumer_signaling_threads=LEAD)
    tile = _tiles("tile", atom, gmem, allocator, WARPS, cfg)
    allocator.compute_layout()
    coords = Coords(name="gmem")
    tasks = [Task(name="LoadTask", src_resources=[coords], dst_resources=[tile], warp_idx=0, num_warps=WARPS,
                  schedule=lr_load(coords, tile, n)),
             Task(name="MmaTask", src_resources=[tile], warp_idx=WARPS, schedule=lr_mma(tile, n))]
    return TaskManager(tasks=tasks, resource_dependency_graph={tile: [coords]}, smem_allocator=allocator,
                       verbose=verbose, **manager_options)


# ------------------------------------------------------------------ kernels
def _atom(mx):
    op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.TWO)  # the 2-SM TMA
    return cute.nvgpu.cpasync.make_tiled_tma_atom(op, mx, cute.make_layout(TILE, stride=(WIDTH, 1)), TILE)


class SplitPair:
    @cute.jit
    def __call__(self, ma: cute.Tensor, mb: cute.Tensor, n: cutlass.Int32):
        atom_a, ta = _atom(ma)
        atom_b, tb = _atom(mb)
        self.kernel(atom_a, ta, atom_b, tb, n).launch(grid=[2, 1, 1], block=[8 * 32, 1, 1], cluster=[2, 1, 1])

    @cute.kernel
    def kernel(self, atom_a: cute.CopyAtom, ta: cute.Tensor, atom_b: cute.CopyAtom, tb: cute.Tensor,
               n: cutlass.Int32):
        mgr = build_split((atom_a, atom_b), (ta, tb), n, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


class LeaderRoutedPair:
    @cute.jit
    def __call__(self, mx: cute.Tensor, n: cutlass.Int32):
        atom, tx = _atom(mx)
        self.kernel(atom, tx, n).launch(grid=[2, 1, 1], block=[(WARPS + 1) * 32, 1, 1], cluster=[2, 1, 1])

    @cute.kernel
    def kernel(self, atom: cute.CopyAtom, tx: cute.Tensor, n: cutlass.Int32):
        mgr = build_leader_routed(atom, tx, n, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


def build(mode="split_consumer", **kw):
    return build_split(**kw) if mode == "split_consumer" else build_leader_routed(**kw)


def compile_for_cpu(mode, arch="sm_100a"):
    from cutlass.cute.runtime import make_fake_tensor

    def x():
        return make_fake_tensor(cutlass.Float32, (cute.sym_int32(), WIDTH), (WIDTH, 1), assumed_align=16)

    if mode == "split_consumer":
        return cute.compile(SplitPair(), x(), x(), cutlass.Int32(4), options=_common.ptx_options(arch))
    return cute.compile(LeaderRoutedPair(), x(), cutlass.Int32(4), options=_common.ptx_options(arch))


if __name__ == "__main__":
    for m in ("split_consumer", "leader_routed"):
        print(m, _common.count_ptx(compile_for_cpu(m).artifacts.PTX))
