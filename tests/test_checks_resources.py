"""SMEM / TMEM capacity, warp-group register consistency and the register budget."""
from __future__ import annotations

from dataclasses import dataclass, field

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TmemAllocation, TmemAllocator, WorkAttr, consumer_work, domain_loop, schedule)

from warpsched.report.printout import register_summary

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, manager, rejected

K = 4


@dataclass(kw_only=True)
class SmemTile(Buf):
    alloc: object = field(default=None)

    def get_smem_requirements(self):
        return [self.alloc]

    def get_tmem_requirements(self):
        return [self.alloc] if isinstance(self.alloc, TmemAllocation) else []


def program(alloc, num_registers=(None, None), warps=(1, 1), **kw):
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=cg(32 * warps[0]),
                                                         consumer_group=cg(32 * warps[1]))
    src, tile, out = Gmem(name="src"), SmemTile(name="tile", pipeline_config=cfg, alloc=alloc), Gmem(name="out")

    @schedule
    def fill(src, tile):
        with domain_loop(0, K, 1):
            tile.acquire()
            v = src.load()
            tile.produce_tile(value=v)
            tile.commit()

    @schedule
    def drain(tile, out):
        with domain_loop(0, K, 1):
            tile.wait()
            v = tile.read()
            out.store(value=v)
            tile.release()

    tasks = [Task(name="fill", src_resources=[src], dst_resources=[tile], warp_idx=0, num_warps=warps[0],  # @fill
                  schedule=fill(src, tile), num_registers=num_registers[0]),
             Task(name="drain", src_resources=[tile], dst_resources=[out], warp_idx=warps[0],  # @drain
                  num_warps=warps[1], schedule=drain(tile, out), num_registers=num_registers[1])]
    return tasks, {tile: [src], out: [tile]}, tile


def smem_alloc(count):
    return SmemAllocation("tile_data", dtype=2, count=count)  # @smem_alloc


def test_smem_capacity():
    alloc = smem_alloc(200_000)  # 400 KB of 2-byte elements
    tasks, graph, tile = program(alloc)
    allocator = SmemAllocator()
    allocator.add_resource(tile)
    allocator.compute_layout()
    f = rejected(tasks, graph, smem_allocator=allocator)
    hit = expect(f, "smem capacity", None, "tile_data", line("smem_alloc"))
    assert "232448 B" in hit.expected and "400032 B" in hit.message
    alloc = smem_alloc(50_000)
    tasks, graph, tile = program(alloc)
    allocator = SmemAllocator()
    allocator.add_resource(tile)
    accepted(tasks, graph, smem_allocator=allocator)
    # the TaskManager option overrides the allocator's default capacity
    f = rejected(tasks, graph, smem_allocator=allocator, smem_capacity_bytes=64 * 1024)
    expect(f, "smem capacity", None, "tile_data", line("smem_alloc"))


def test_smem_allocation_in_bytes_without_dtype():
    """TS's SmemAllocation(name, size_bytes=..., alignment=...): no dtype, the size is the bytes given;
    it is laid out, counted against the capacity, and a malformed size is a finding at its line."""
    raw = SmemAllocation("raw_tiles", size_bytes=3000, alignment=1024)
    assert (raw.dtype, raw.size_bytes, raw.alignment) == (None, 3000, 1024)
    other = SmemAllocation("after", dtype=2, count=8)
    allocator = SmemAllocator()
    allocator.allocations += [other, raw]
    assert allocator.compute_layout() == 3072 + 16 and (raw.offset, other.offset) == (0, 3072)
    tasks, graph, tile = program(SmemAllocation("tile_bytes", size_bytes=300_000))  # @smem_bytes
    allocator = SmemAllocator()
    allocator.add_resource(tile)
    hit = expect(rejected(tasks, graph, smem_allocator=allocator), "smem capacity", None, "tile_bytes",
                 line("smem_bytes"))
    assert "300000 B" in hit.message
    tasks, graph, tile = program(SmemAllocation("tile_bytes", size_bytes=-4))  # @smem_bad_bytes
    allocator = SmemAllocator()
    allocator.add_resource(tile)
    hit = expect(rejected(tasks, graph, smem_allocator=allocator), "smem capacity", None, "tile_bytes",
                 line("smem_bad_bytes"))
    assert "size_bytes=-4" in hit.message and hit.expected == "size_bytes an int >= 0"
    tasks, graph, tile = program(SmemAllocation("tile_bytes", size_bytes=4096, alignment=128))
    allocator = SmemAllocator()
    allocator.add_resource(tile)
    accepted(tasks, graph, smem_allocator=allocator)


def test_tmem_capacity():
    def tm(cols):
        return TmemAllocation("tmem_acc", cols)  # @tmem_alloc

    tasks, graph, tile = program(tm(256 * 3))
    allocator = TmemAllocator()
    allocator.add_resource(tile)
    f = rejected(tasks, graph, tmem_allocator=allocator)
    hit = expect(f, "tmem capacity", None, "tmem_acc", line("tmem_alloc"))
    assert hit.expected == "at most 512 columns" and "768 columns" in hit.message
    tasks, graph, tile = program(tm(256 * 2))
    allocator = TmemAllocator()
    allocator.add_resource(tile)
    accepted(tasks, graph, tmem_allocator=allocator)


def test_warp_group_register_consistency():
    tasks, graph, _ = program(None, num_registers=(40, 232))
    f = rejected(tasks, graph)
    hit = expect(f, "warp-group register consistency", "drain", None, line("drain"))
    assert "fill: 40" in hit.message and "drain: 232" in hit.message
    tasks, graph, _ = program(None, num_registers=(232, 232))
    accepted(tasks, graph)
    tasks, graph, _ = program(None, num_registers=(40, 232), warps=(4, 4))  # separate warp groups
    accepted(tasks, graph)


def test_register_budget():
    tasks, graph, _ = program(None, num_registers=(256, 248), warps=(8, 8))
    f = rejected(tasks, graph)
    hit = expect(f, "register budget", "fill", None, line("fill"))
    assert hit.expected.startswith("at most 65536 (512 threads x 128 registers at launch)")
    assert "128 threads x (256 + 256 + 248 + 248)" in hit.message and "Reg budget -1984" in hit.message  # 8 x (128 - 256) + 8 x (128 - 248)
    tasks, graph, _ = program(None, num_registers=(120, 120), warps=(8, 8))
    accepted(tasks, graph)


def three_task_program(load_regs, consumer_regs, store_regs):
    """1 load warp and 1 store warp in warp group 0, two 4-warp consumer warp groups (warps 4-11)."""
    cfg_in = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=cg(32),
                                                            consumer_group=cg(32 * 8))
    cfg_out = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=cg(32 * 8),
                                                             consumer_group=cg(32))
    src, tile, acc, out = Gmem(name="src"), Buf(name="tile", pipeline_config=cfg_in), \
        Buf(name="acc", pipeline_config=cfg_out), Gmem(name="out")

    @schedule
    def load(src, tile):
        with domain_loop(0, K, 1):
            tile.acquire()
            v = src.load()
            tile.produce_tile(value=v)
            tile.commit()

    @schedule
    def consume(tile, acc):
        with domain_loop(0, K, 1):
            tile.wait()
            v = tile.read()
            tile.release()
            acc.acquire()
            acc.produce_tile(value=v)
            acc.commit()

    @schedule
    def store(acc, out):
        with domain_loop(0, K, 1):
            acc.wait()
            v = acc.read()
            out.store(value=v)
            acc.release()

    tasks = [Task(name="Load", src_resources=[src], dst_resources=[tile], warp_idx=0, num_warps=1,
                  schedule=load(src, tile), num_registers=load_regs),
             Task(name="Store", src_resources=[acc], dst_resources=[out], warp_idx=1, num_warps=1,
                  schedule=store(acc, out), num_registers=store_regs),
             Task(name="Consumers", src_resources=[tile], dst_resources=[acc], warp_idx=4,  # @consumers
                  num_warps=8, schedule=consume(tile, acc), num_registers=consumer_regs)]
    return tasks, {tile: [src], acc: [tile], out: [acc]}


def test_register_rule_cutlass_split_is_accepted_with_a_non_negative_budget():
    """The printout and the check read one plan: 12 warps launch with 168 registers each
    (65536 / 384, rounded down to 8); setmaxnreg gives warp group 0 (load, store and its two
    idle warps) 40 and the consumer groups 232: 128 x (40 + 232 + 232) = 64512 = 384 x 168."""
    tasks, graph = three_task_program(40, 232, 40)
    m = accepted(tasks, graph)
    text = register_summary(m.program)
    assert "Idle warps [2:4) (group 0)" in text and "= 2 x (168 - 40) = 256" in text
    assert "Num. regs: 64512 of 64512 (384 threads x 168 at launch" in text
    assert text.splitlines()[-1] == "Reg budget: 0"
    m = accepted(*three_task_program(40, 224, 40))  # under the pool: a positive budget
    assert register_summary(m.program).splitlines()[-1] == "Reg budget: 64"


def test_register_rule_over_budget_twin_is_rejected():
    tasks, graph = three_task_program(40, 240, 40)
    hit = expect(rejected(tasks, graph), "register budget", "Consumers", None, line("consumers"))
    assert "128 threads x (40 + 240 + 240)" in hit.message and "Reg budget -64" in hit.message
    assert hit.expected.startswith("at most 64512 (384 threads x 168 registers at launch)")
    assert "Reg budget: -64" in register_summary(manager(tasks, graph, skip_validation=True).program)
    # 48 / 232 / 232 fills the 65536-register file exactly, but not the launch's 64512-register pool
    tasks, graph = three_task_program(48, 232, 48)
    expect(rejected(tasks, graph), "register budget", "Consumers", None, line("consumers"))


@dataclass(kw_only=True)
class WgmmaTile(Buf):
    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def wgmma(self, stage_info: StageInfo):
        pass

    @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT)
    def retire(self, stage_info: StageInfo, pending=0):
        pass


def wgmma_program(mma_warp_idx, mma_warps):
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=1024, producer_group=cg(1),
                                                       consumer_group=cg(mma_warps))
    src, tile, out = Gmem(name="src"), WgmmaTile(name="tile", pipeline_config=cfg), Gmem(name="out")

    @schedule
    def load(src, tile):
        with domain_loop(0, K, 1):
            c = src.compute_coords()
            tile.acquire()
            tile.tma_load_a(coord_k=c)
            tile.commit()

    @schedule
    def mma(tile, out):
        with domain_loop(0, K, 1):
            tile.wait()
            tile.wgmma()  # @wgmma_call
            tile.retire()
            tile.release()
        out.store()

    return [Task(name="Load", src_resources=[src], dst_resources=[tile], warp_idx=0, num_warps=1,
                 schedule=load(src, tile)),
            Task(name="Mma", src_resources=[tile], dst_resources=[out], warp_idx=mma_warp_idx, num_warps=mma_warps,
                 schedule=mma(tile, out))], {tile: [src], out: [tile]}


def test_wgmma_needs_whole_aligned_warp_groups():
    hit = expect(rejected(*wgmma_program(1, 4)), "wgmma warp groups", "Mma", "tile", line("wgmma_call"))
    assert "warps 1-4 (warp groups 0-1, straddling)" in hit.message and "WorkAttr.WGMMA" in hit.message
    assert "warp_idx=0, num_warps=4" in hit.fix
    hit = expect(rejected(*wgmma_program(4, 2)), "wgmma warp groups", "Mma", "tile", line("wgmma_call"))
    assert "warps 4-5 (warp group 1, part of it)" in hit.message and "warp_idx=4, num_warps=4" in hit.fix
    accepted(*wgmma_program(4, 4))
    accepted(*wgmma_program(4, 8))


def test_num_registers_must_be_a_setmaxnreg_value():
    tasks, graph, _ = program(None, num_registers=(100, None), warps=(4, 4))
    expect(rejected(tasks, graph), "register budget", "fill", None, line("fill"))


_ = MemoryResource
