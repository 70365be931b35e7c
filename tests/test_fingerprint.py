"""The program fingerprint (the verdict cache's key): it changes with everything the checks read,
and only with that. Pure Python: no CuTe DSL."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task, TaskManager,
                       consumer_work, domain_loop, producer_work, schedule, trip_count)
from warpsched.verify.verdicts import VERDICTS


@dataclass(kw_only=True)
class Buf(MemoryResource):
    tensor: Any = None  # runtime data: never read by the checks
    alloc: Any = None

    def get_smem_requirements(self):
        return [self.alloc] if self.alloc is not None else []

    @producer_work
    def fill(self, stage_info: StageInfo):
        pass

    @consumer_work
    def read(self, stage_info: StageInfo):
        pass


@schedule
def produce(buf, n):
    with domain_loop(0, n, 1):
        buf.acquire()
        buf.fill()
        buf.commit()


@schedule
def consume(buf, n):
    with domain_loop(0, n, 1):
        buf.wait()
        buf.read()
        buf.release()


@schedule
def consume_every_other(buf, n):
    with domain_loop(0, n, 1) as d:
        buf.wait()
        with d.every(1, start=0):
            buf.read()
        buf.release()


def program(n=None, stages=2, tensor=None, consumer=consume, regs=None, alloc_count=64, consumer_end=None,
            k_name="K", k_value=None, k_facts=None, **opts):
    """``n`` None: one declared symbol (``trip_count(k_name, k_value, **k_facts)``) for both loops."""
    n = trip_count(k_name, k_value, **(k_facts or {})) if n is None else n
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=stages, producer_group=32, consumer_group=32)
    allocator = SmemAllocator()
    buf = Buf(name="buf", pipeline_config=cfg, tensor=tensor,
              alloc=SmemAllocation("buf", dtype=4, count=alloc_count * stages, alignment=128))
    allocator.add_resource(buf)
    allocator.compute_layout()
    tasks = [Task(name="P", dst_resources=[buf], warp_idx=0, num_warps=1, schedule=produce(buf, n)),
             Task(name="C", src_resources=[buf], warp_idx=4, num_warps=1, num_registers=regs,
                  schedule=consumer(buf, n if consumer_end is None else consumer_end(n)))]
    opts.setdefault("exhaustive_deadlock_race_check", False)
    return TaskManager(tasks=tasks, resource_dependency_graph={buf: []}, smem_allocator=allocator, verbose=False,
                       **opts)


def test_the_same_program_built_twice_has_one_fingerprint():
    a, b = program(), program()
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64


def test_runtime_data_and_runtime_values_do_not_count():
    base = program().fingerprint
    assert program(tensor=object()).fingerprint == base  # a tensor held by a resource
    # the kernel's DSL value of a declared trip count: only the declared facts count
    assert program(k_value=object()).fingerprint == base
    # a verification option that does not change what is checked
    assert program(skip_validation=True).fingerprint == base


def test_everything_the_checks_read_counts():
    base = program().fingerprint
    different = {
        "stages": program(stages=3),
        "exact trip count": program(n=8),
        "another exact trip count": program(n=9),
        "divisibility": program(k_facts=dict(divisibility=2)),
        "minimum": program(k_facts=dict(min=2)),
        "symbol name": program(k_name="N"),
        "an int as the symbol's value": program(k_value=8),
        "offset (K + 1)": program(consumer_end=lambda k: k + 1),
        "a guard": program(consumer=consume_every_other),
        "registers": program(regs=240),
        "allocation size": program(alloc_count=128),
        "checker budget": program(max_states=1000),
    }
    prints = {what: m.fingerprint for what, m in different.items()}
    assert base not in prints.values()
    assert len(set(prints.values())) == len(prints), prints


def test_one_runtime_value_shared_by_two_loops_is_not_two_values():
    shared = object()
    one = program(n=shared).fingerprint

    class Other:  # two distinct runtime values: two independent loop groups for the checker
        pass

    first = Other()
    two = program(n=first, consumer_end=lambda _: Other()).fingerprint
    assert one != two
    assert program(n=object()).fingerprint == one  # which object it is does not matter


def test_a_cached_verdict_is_reused_only_for_the_same_fingerprint():
    VERDICTS.clear()
    try:
        a = program(exhaustive_deadlock_race_check=True, cache_verdict=True)
        b = program(exhaustive_deadlock_race_check=True, cache_verdict=True)
        c = program(exhaustive_deadlock_race_check=True, cache_verdict=True, stages=3)
        assert (a.verdict_cached, b.verdict_cached, c.verdict_cached) == (False, True, False)
        assert b.result.checker is a.result.checker and a.result.checker.verdict == "SAFE"
        assert (VERDICTS.runs, VERDICTS.hits) == (2, 1)
    finally:
        VERDICTS.clear()
