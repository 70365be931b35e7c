"""The reference-TS surface warpsched accepts for porting (pure Python, no kernel), and the checker
rule a ported split-K epilogue relies on. Kernel builds: tests/test_port_programs.py."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from warpsched import (MemoryResource, ScheduleError, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, TileSchedulerConfig, TmemAllocation, TmemAllocator,
                       ValidationError, WorkQueue, consumer_work, domain_loop, producer_work, schedule)
from warpsched.compat import IGNORED, port_imports

from test_checks_bracketing import tma_umma, umma_async
from test_checks_support import Buf, Gmem, cg, line


@schedule
def _copy(src, dst):
    with domain_loop(0, 4, 1):
        v = src.load()
        dst.store(value=v)


def _pair():
    src, dst = Gmem(name="src"), Gmem(name="dst")
    return src, dst, _copy(src, dst)


def test_task_takes_the_reference_signature_and_ignores_its_debug_keywords():
    src, dst, sched = _pair()
    t = Task([src], [dst], 2, 4, schedule=sched, name="copy", num_registers=None, debug_print=True,
             iket_enable_profiling=False, iket_profiling_stages=None, iket_profiling_resources=None,
             run_only_on_cta_id=None)
    assert (t.src_resources, t.dst_resources, t.warp_idx, t.num_warps) == ([src], [dst], 2, 4)
    assert t.resources == [src, dst]
    assert set(IGNORED["Task"]) >= {"debug_print", "iket_enable_profiling"}


def test_task_refuses_what_it_cannot_honour_and_misspellings():
    src, dst, sched = _pair()
    with pytest.raises(ScheduleError) as info:
        Task([src], [dst], 0, 1, schedule=sched, name="copy", run_only_on_cta_id=1)  # @cta_only
    f = info.value.finding
    assert f.check == "porting" and f.location.line == line("cta_only") and "run_only_on_cta_id" in f.fix
    with pytest.raises(TypeError, match="debug_prnt"):
        Task([src], [dst], 0, 1, schedule=sched, debug_prnt=True)


def test_task_manager_accepts_the_reference_keywords():
    src, dst, sched = _pair()
    m = TaskManager(tasks=[Task([src], [dst], 0, 1, schedule=sched)], resource_dependency_graph={dst: [src]},
                    verbose=False, dma_consumer_release_labels=None, iket_enable_profiling=False, tmem_ptr_i32=None)
    assert m.result.accepted
    with pytest.raises(TypeError, match="no_such_option"):
        TaskManager(tasks=[Task([src], [dst], 0, 1, schedule=sched)], resource_dependency_graph={dst: [src]},
                    verbose=False, no_such_option=1)


def test_allocations_in_the_reference_argument_order():
    raw = SmemAllocation("ring", 4096, alignment=1024)  # (name, size_bytes, alignment)
    one = SmemAllocation("slot", dtype=SimpleNamespace(width=32), alignment=4)  # count defaults to 1
    typed = SmemAllocation("tiles", dtype=2, count=100)  # warpsched's keyword form still works
    assert (raw.size_bytes, one.size_bytes, typed.size_bytes) == (4096, 4, 200)
    smem = SmemAllocator()
    assert smem.add(raw) is raw and smem.add_tmem_ptr(one) is one and smem.tmem_ptr_alloc is one
    smem.add(typed)
    assert smem.compute_layout() == smem.total == smem.total_smem_bytes == 4096 + 200 + 4
    assert TmemAllocation("acc", 128).num_columns == TmemAllocation("acc", num_columns=128).columns == 128
    tmem = TmemAllocator()
    tmem.add(TmemAllocation("acc", num_columns=96))
    assert tmem.compute_layout() == tmem.total_tmem_columns == 96


def test_tile_scheduler_config_from_dsl_params():
    params = SimpleNamespace(problem_shape_ntile_mnl=(12, 3, 1), cluster_shape_mn=(2, 1))
    cfg = TileSchedulerConfig.create_static_persistent_tile_scheduler_params(tile_scheduler_params=params)
    assert (cfg.num_tiles, cfg.cluster_shape_mn, cfg.tile_scheduler_params) == ((12, 3, 1), (2, 1), params)
    clc = TileSchedulerConfig.create_clc_dynamic_persistent_tile_scheduler_params(params, response_ptr="ptr")
    assert clc.response_ptr == "ptr" and clc.num_tiles == (12, 3, 1)
    assert WorkQueue(name="wq", tile_scheduler_config=cfg).tile_scheduler_config is cfg


def test_stage_info_carries_the_fields_reference_work_methods_read():
    info = StageInfo(loop_offset=3, loop_start=0, loop_end=8, loop_step=1)
    assert (info.loop_end - info.loop_start, info.label, info.num_active_stages, info.task_cache) == (8, None, 0, None)
    var = TaskLocalVariable(dtype=int, default_factory=lambda: 7, runtime_slot_name="x")
    assert var.default_value() == 7


def test_port_imports_is_the_whole_edit():
    src = ("from cutlass.experimental.task_scheduling.resources import (\n    MemoryResource,\n)\n"
           "from cutlass.experimental.task_scheduling import when_true\nimport cutlass.cute as cute\n")
    out = port_imports(src)
    # the first module-level import also marks the module as a port (same line: lines do not move)
    assert out == ("__warpsched_port__ = True; from warpsched import (\n    MemoryResource,\n)\n"
                   "from warpsched import when_true\nimport cutlass.cute as cute\n")


# ------------------------------------------------------------------ UMMA completion ends the MMA reads
@dataclass(kw_only=True)
class Ring(Buf):
    """A/B operand ring (2 stages) whose bytes the epilogue staging reuses."""

    alloc: Any = field(default=None)

    def get_smem_requirements(self):
        return [self.alloc]


@dataclass(kw_only=True)
class Staging(Gmem):
    alloc: Any = field(default=None)

    def get_smem_requirements(self):
        return [self.alloc]

    @producer_work
    def stage(self, stage_info: StageInfo, value=None):
        pass


def _split_k_epilogue(stage_before_wait: bool):
    smem = SmemAllocator()
    ring_bytes, stage_bytes = SmemAllocation("ring", 2 * 1024), SmemAllocation("staging", 4096)
    gmem, out = Gmem(name="gmem"), Staging(name="staging", alloc=stage_bytes)
    ring = Ring(name="ring", alloc=ring_bytes, pipeline_config=tma_umma())
    acc = Buf(name="acc", pipeline_config=umma_async(warps=4))
    for r in (ring, out):
        smem.add_resource(r)
    smem.add_alias_group([[ring_bytes], [stage_bytes]])
    smem.compute_layout()

    @schedule
    def load(gmem, ring):
        with domain_loop(0, 4, 1):
            c = gmem.compute_coords()
            ring.acquire()
            ring.tma_load_a(coord_k=c)
            ring.commit()

    @schedule
    def mma(ring, acc):
        acc.acquire()
        with domain_loop(0, 4, 1):
            ring.wait()
            d = ring.build_desc()
            acc.mma(desc_a=d)
            ring.release()  # tcgen05.commit: arrives when these MMAs complete
        acc.commit()  # tcgen05.commit: every MMA above has completed when this arrives

    @schedule
    def epilogue(acc, out):
        if stage_before_wait:
            out.stage()  # @early_stage
        acc.wait()
        v = acc.read()
        if not stage_before_wait:
            out.stage(value=v)
        acc.release()

    tasks = [Task([gmem], [ring], 4, 1, schedule=load(gmem, ring), name="load"),
             Task([ring], [acc], 5, 1, schedule=mma(ring, acc), name="mma"),
             Task([acc], [out], 0, 4, schedule=epilogue(acc, out), name="epilogue")]
    return dict(tasks=tasks, resource_dependency_graph={ring: [gmem], acc: [ring], out: [acc]},
                smem_allocator=smem, verbose=False)


def test_umma_commit_ends_the_tasks_earlier_mma_reads():
    """Staging that aliases the operand ring may be written once the accumulator's full barrier
    completed: that tcgen05.commit arrives only after every earlier MMA (and its SMEM reads)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = TaskManager(**_split_k_epilogue(stage_before_wait=False))
    assert m.result.accepted and m.result.checker.verdict == "SAFE"
    with pytest.raises(ValidationError) as info:
        TaskManager(**_split_k_epilogue(stage_before_wait=True))
    races = [f for f in info.value.findings if "race" in f.message and "staging" in f.message]
    assert races and f"test_port_compat.py:{line('early_stage')}" in races[0].detail
