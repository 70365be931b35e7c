"""SMEM / TMEM capacity, warp-group register consistency and the register budget."""
from __future__ import annotations

from dataclasses import dataclass, field

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, Task, TmemAllocation,
                       TmemAllocator, domain_loop, schedule)

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

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
    assert hit.expected == "at most 65536 registers (the SM register file)"
    assert "128 threads x (256 + 256 + 248 + 248)" in hit.message
    tasks, graph, _ = program(None, num_registers=(120, 120), warps=(8, 8))
    accepted(tasks, graph)


def test_num_registers_must_be_a_setmaxnreg_value():
    tasks, graph, _ = program(None, num_registers=(100, None), warps=(4, 4))
    expect(rejected(tasks, graph), "register budget", "fill", None, line("fill"))


_ = MemoryResource
