"""Shared pieces of the test_capture_docs_* modules: kernel constants, IR helpers and resources several pages use.

The TS documentation pages leave some values to the kernel (``num_k_tiles``, ``bx``, ``tx`` ...); they are
module constants here. The helpers take the test module's path explicitly: a captured schedule records the
``file:line`` of its calls, which is the module where the schedule is written, not this one.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, ScheduleResult, TaskLocalVariable, WorkAttr, WorkQueue,
                       consumer_work, producer_work)
from warpsched.model.ir import Section

num_k_tiles = 8
num_entries = 1000
num_iters = 6
num_rows = 16
subtile_cnt = 4
packet_count = 3
unroll = 2
num_warps = 4
bx, tx, gdimx = 0, 0, 8
threads_per_block = num_warps * 32
H, L, T, P, E = Section.HEAD, Section.LOOP, Section.TAIL, Section.PROLOGUE, Section.EPILOGUE


def shape(result: ScheduleResult):
    """(resource, method, kind, section, guard kinds) per step: the IR in one comparable value."""
    return [(s.resource_name, s.method, s.kind, s.section, s.guard_kinds()) for s in result.steps]


def assert_sources(result: ScheduleResult, path: str):
    """Every step points at ``path`` (the module writing the schedule), on the line that makes the call."""
    for s in result.steps:
        assert s.location.file == path, s
        assert f".{s.method}(" in s.location.text, (s.method, s.location.text)


def line_of(path: str, text: str, after: int = 0) -> int:
    """The line of ``path`` holding ``text`` (the first after line ``after``), not counting asserts."""
    with open(path) as fh:
        hits = [i for i, ln in enumerate(fh, 1) if text in ln and "line_of(" not in ln and i > after]
    assert hits, text
    return hits[0]


def cfg(stages=4):
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=stages, producer_group=32, consumer_group=32)


# ------------------------------------------------------------------ resources several pages use
@dataclass(kw_only=True)
class GmemAResource(MemoryResource):
    @consumer_work
    def compute_coords(self, stage_info):
        return 0, 0, 0


@dataclass(kw_only=True)
class GmemAbResource(MemoryResource):
    @consumer_work
    def compute_coords(self, stage_info):
        return 0, 0, 0


@dataclass(kw_only=True)
class SmemAResource(MemoryResource):
    @producer_work
    def tma_load_a(self, stage_info, coord_k, coord_m): ...

    @producer_work
    def produce_tile(self, stage_info): ...

    @consumer_work
    def build_desc(self, stage_info): ...


@dataclass(kw_only=True)
class InputGmemResource(MemoryResource):
    item: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.item = TaskLocalVariable(dtype="Int16", default=0, docs="element")

    @consumer_work(returns=item)
    def get_item(self, stage_info): ...

    @consumer_work
    def load(self, stage_info, *, slot_index: int = 0): ...


@dataclass(kw_only=True)
class OutputGmemResource(MemoryResource):
    @producer_work
    def set_item(self, stage_info, data): ...

    @producer_work
    def store(self, stage_info, *, frag=None, val=None, value=None, slot_index: int = 0): ...


@dataclass(kw_only=True)
class TmemCResource(MemoryResource):
    t2r_rmem: object = TaskLocalVariable.uninitialized()

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def init_work_tile_state(self, stage_info):
        del stage_info

    @producer_work
    def mma(self, stage_info, desc_a_base=None, desc_b_base=None, desc_a=None, desc_b=None): ...

    @consumer_work(returns=t2r_rmem)
    def load_subtile(self, stage_info, *, subtile_idx: int): ...


@dataclass(kw_only=True)
class GmemDResource(MemoryResource):
    @producer_work
    def store(self, stage_info, *, t2r_rmem, subtile_idx: int): ...


@dataclass(kw_only=True)
class ValSrc(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=val)
    def load(self, stage_info): ...


class OversubscribedCopyWorkQueue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return work_tile.tile_idx >= 100


@dataclass(kw_only=True)
class CopyResource(MemoryResource):
    @producer_work
    def copy_tile_row(self, stage_info): ...

    @producer_work
    def copy_row(self, stage_info): ...
