"""Checker gaps found by mutating the bundled examples (issue 17): each mutant is rejected with a
finding at the mutated call, and the example itself stays accepted."""
from __future__ import annotations

import importlib.util
import os
import sys
import warnings

import pytest

import warpsched

sys.path.insert(0, os.path.dirname(__file__))
from warpsched.examples import gemm, gemm_persistent, split_consumer

EXAMPLES = os.path.dirname(gemm.__file__)


def _mutant(module, old: str, new: str, tmp_path):
    """Import a copy of ``module`` with ``old`` replaced by ``new`` (exactly once)."""
    src = open(module.__file__).read()
    assert src.count(old) == 1, old
    path = tmp_path / os.path.basename(module.__file__)
    path.write_text(src.replace(old, new))
    base = module.__name__.rsplit(".", 1)[-1]
    prefix = "warpsched.examples." if module.__name__.startswith("warpsched.examples.") else ""
    name = f"{prefix}_mutant_{base}_{abs(hash(new))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod, str(path), path.read_text().splitlines()


def _line_of(lines, text, after=0):
    return next(i + 1 for i, ln in enumerate(lines) if i + 1 > after and text in ln)


def _rejected(build, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(warpsched.ValidationError) as info:
            build(verbose=False, **kw)
    return info.value.findings


def _accepted(build, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = build(verbose=False, **kw)
    assert m.result.accepted and m.result.checker.verdict == "SAFE"


QUEUE_EPILOGUES = ["load_schedule", "mma_schedule", "store_schedule"]


@pytest.mark.parametrize("which", range(3))
def test_persistent_task_without_queue_release(which, tmp_path):
    src = open(gemm_persistent.__file__).read()
    tail = "        wq.get_and_advance_work_tile()\n        wq.release()\n"
    assert src.count(tail) == 3
    parts = src.split(tail)
    mutated = tail.join(parts[:which + 1]) + "        wq.get_and_advance_work_tile()\n" + tail.join(parts[which + 1:])
    path = tmp_path / "gemm_persistent.py"
    path.write_text(mutated)
    spec = importlib.util.spec_from_file_location(f"warpsched.examples._mutant_gp{which}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    lines = mutated.splitlines()
    start = _line_of(lines, f"def {QUEUE_EPILOGUES[which]}")
    wait_line = _line_of(lines, "wq.wait()", after=start)
    findings = _rejected(mod.build)
    hit = [f for f in findings if f.check == "work bracketing" and f.resource == "WorkQueue"
           and f.location.line == wait_line]
    assert hit, [f.format() for f in findings]
    assert any("never released" in f.message and "release()" in f.fix for f in hit), [f.message for f in hit]
    assert hit[0].task == ["LoadTask", "MmaTask", "StoreTask"][which]


def test_persistent_gemm_itself_is_accepted():
    _accepted(gemm_persistent.build)


DESC_BEFORE_PROXY = ("        proxy.wait()\n        desc_a = smem_a.build_desc()  # work, no direct wait\n",
                     "        desc_a = smem_a.build_desc()  # work, no direct wait\n        proxy.wait()\n")


@pytest.mark.parametrize("schedule_name,builder", [("mma_schedule", "build"), ("compute_schedule", "build_hopper")])
def test_descriptor_built_before_the_proxy_wait(schedule_name, builder, tmp_path):
    src = open(split_consumer.__file__).read()
    start = src.index(f"def {schedule_name}")
    at = src.index(DESC_BEFORE_PROXY[0], start)
    mutated = src[:at] + DESC_BEFORE_PROXY[1] + src[at + len(DESC_BEFORE_PROXY[0]):]
    path = tmp_path / "split_consumer.py"
    path.write_text(mutated)
    spec = importlib.util.spec_from_file_location(f"warpsched.examples._mutant_sc_{schedule_name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    lines = mutated.splitlines()
    desc_line = _line_of(lines, "desc_a = smem_a.build_desc()", after=_line_of(lines, f"def {schedule_name}"))
    findings = _rejected(getattr(mod, builder))
    hit = [f for f in findings if f.location.line == desc_line and f.resource == "smem_a"]
    assert hit, [f.format() for f in findings]
    assert "stage_idx" in hit[0].message and hit[0].check == "work bracketing"


def test_descriptor_built_before_the_wait_in_the_plain_gemm(tmp_path):
    old = "        smem_ab.try_wait()\n        smem_ab.wait()\n        desc = smem_ab.build_desc()\n"
    new = "        desc = smem_ab.build_desc()\n        smem_ab.try_wait()\n        smem_ab.wait()\n"
    mod, _, lines = _mutant(gemm, old, new, tmp_path)
    findings = _rejected(mod.build)
    assert any(f.location.line == _line_of(lines, "desc = smem_ab.build_desc()") for f in findings)


def test_split_consumer_examples_are_accepted():
    _accepted(split_consumer.build)
    _accepted(split_consumer.build_hopper)


def test_store_before_the_accumulator_wait(tmp_path):
    mod, _, lines = _mutant(split_consumer, "    tmem_c.wait()\n    gmem_d.store()\n",
                            "    gmem_d.store()\n    tmem_c.wait()\n", tmp_path)
    findings = _rejected(mod.build)
    store_line = _line_of(lines, "    gmem_d.store()")
    hit = [f for f in findings if f.location.line == store_line]
    assert hit, [f.format() for f in findings]
    assert hit[0].task == "StoreTask" and hit[0].resource == "tmem_c" and "before this task has waited" in hit[0].message


def test_tma_load_that_no_task_waits_on(tmp_path):
    """The GEMM with the MMA task's waits on the tiles removed entirely (and their work): the loads'
    commits are never consumed."""
    old = ("            smem_ab.try_wait()\n            smem_ab.wait()\n            desc = smem_ab.build_desc()\n"
           "            tmem_c.mma(desc=desc)\n            smem_ab.release()\n")
    src = open(gemm_persistent.__file__).read()
    assert src.count(old) == 1
    mod, _, lines = _mutant(gemm_persistent, old, "            tmem_c.mma()\n", tmp_path)
    findings = _rejected(mod.build)
    hit = [f for f in findings if "no task ever waits on" in f.message]
    assert hit and hit[0].task == "LoadTask" and hit[0].resource == "SmemAB"
    assert hit[0].location.line in (_line_of(lines, "smem_ab.acquire()"), _line_of(lines, "smem_ab.commit()"))


# ------------------------------------------------------------------ num_bytes against the SMEM stage
def _tma_program(num_bytes, **config):
    from dataclasses import dataclass

    from test_checks_support import Buf, Gmem, cg, line  # noqa: F401
    from warpsched import PipelineConfig, SmemAllocation, SmemAllocator, Task, domain_loop, schedule

    @dataclass(kw_only=True)
    class Tiles(Buf):
        alloc: object = None

        def get_smem_requirements(self):
            return [self.alloc]

    smem = SmemAllocator()
    cfg = PipelineConfig.create_tma_async_pipeline_cfg(  # @tiles_cfg
        num_stages=2, num_bytes=num_bytes, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1),
        **config)
    tiles = Tiles(name="tiles", pipeline_config=cfg, alloc=SmemAllocation("tiles", dtype=2, count=2 * 1024))
    smem.add_resource(tiles)
    smem.compute_layout()
    gmem, out = Gmem(name="gmem"), Gmem(name="out")

    @schedule
    def load(g, t):
        with domain_loop(0, 4, 1):
            c = g.compute_coords()
            t.acquire()
            t.tma_load_a(coord_k=c)
            t.commit()

    @schedule
    def use(t, o):
        with domain_loop(0, 4, 1):
            t.wait()
            v = t.read()
            t.release()
            o.store(value=v)

    tasks = [Task(name="Load", src_resources=[gmem], dst_resources=[tiles], warp_idx=0, num_warps=1,
                  schedule=load(gmem, tiles)),
             Task(name="Use", src_resources=[tiles], dst_resources=[out], warp_idx=1, num_warps=1,
                  schedule=use(tiles, out))]
    return dict(tasks=tasks, resource_dependency_graph={tiles: [gmem], out: [tiles]}, smem_allocator=smem)


def test_num_bytes_larger_than_the_smem_stage_is_an_error():
    from test_checks_support import line

    with pytest.raises(warpsched.ValidationError) as info:
        warpsched.TaskManager(verbose=False, **_tma_program(2048 + 1))
    hit = [f for f in info.value.findings if "one stage of its SMEM allocations is 2048 bytes" in f.message]
    assert hit and hit[0].location.line == line("tiles_cfg") and hit[0].expected == "num_bytes=2048 (the bytes one " \
        "stage's TMA loads deliver)"


def test_num_bytes_smaller_than_the_smem_stage_is_an_error_unless_declared_partial():
    """num_bytes=2047 for a 2048-byte stage: copies that fill the stage underflow the transaction
    count (the kernel hangs or reads a half-landed stage); partial_stage=True declares a stage the
    copies deliberately fill in part, and the exact count is clean."""
    from test_checks_support import line

    with pytest.raises(warpsched.ValidationError) as info:
        warpsched.TaskManager(verbose=False, **_tma_program(2048 - 1))
    hit = [f for f in info.value.findings if "less than a stage holds" in f.message]
    assert len(hit) == 1 and hit[0].location.line == line("tiles_cfg") and hit[0].resource == "tiles"
    assert hit[0].task == "Load" and hit[0].expected.startswith("num_bytes=2048") and "partial_stage=True" in hit[0].fix
    with warnings.catch_warnings():
        warnings.simplefilter("error", warpsched.ValidationWarning)
        assert warpsched.TaskManager(verbose=False, **_tma_program(2048)).result.accepted
        assert warpsched.TaskManager(verbose=False, **_tma_program(1024, partial_stage=True)).result.accepted
    with pytest.raises(warpsched.ValidationError, match="more than a stage holds"):  # partial, not larger
        warpsched.TaskManager(verbose=False, **_tma_program(2048 + 2, partial_stage=True))


def test_two_warp_mma_task_makes_two_umma_arrivals(tmp_path):
    """cutlass elects one thread per warp for tcgen05.commit: a 2-warp MMA task commits twice per
    stage, so its UMMA sides need cooperative groups of 2 (the example declares 1)."""
    old = 'Task(name="MmaTask", src_resources=[smem_ab, wq], dst_resources=[tmem_c], warp_idx=5, num_warps=1,'
    mod, _, lines = _mutant(gemm_persistent, old, old.replace("num_warps=1", "num_warps=2"), tmp_path)
    findings = _rejected(mod.build)
    hit = [f for f in findings if f.check == "pipeline thread counts and bytes" and f.task == "MmaTask"]
    assert {f.resource for f in hit} == {"SmemAB", "TmemC"}, [f.format() for f in findings]
    assert all("2 signaling warp(s) x 1 tcgen05.commit" in f.expected for f in hit)


# ------------------------------------------------------------------ stage references used after the release
@pytest.mark.parametrize("work,sched,builder", [("gmem_out.add_tiles", "compute_schedule", "build_hopper"),
                                                ("tmem_c.mma", "mma_schedule", "build")])
def test_descriptor_used_after_its_stage_was_released(work, sched, builder, tmp_path):
    old = f"        {work}(desc_a=desc_a, desc_b=desc_b)\n        smem_a.release()\n"
    new = f"        smem_a.release()\n        {work}(desc_a=desc_a, desc_b=desc_b)\n"
    src = open(split_consumer.__file__).read()
    at = src.index(old, src.index(f"def {sched}"))
    path = tmp_path / "split_consumer.py"
    path.write_text(src[:at] + new + src[at + len(old):])
    spec = importlib.util.spec_from_file_location(f"warpsched.examples._mutant_sc_rel_{sched}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    lines = path.read_text().splitlines()
    findings = _rejected(getattr(mod, builder))
    hit = [f for f in findings if "after smem_a's stage was released" in f.message]
    want = _line_of(lines, f"        {work}(", after=_line_of(lines, f"def {sched}"))
    assert hit and hit[0].location.line == want and hit[0].resource == "smem_a", [f.format() for f in findings]


HOPPER_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "hopper")


def test_accumulator_read_before_the_last_wgmma_retires(tmp_path):
    sys.path.insert(0, HOPPER_DIR)
    import wgmma_gemm

    old = "    smem_ab.retire()\n    smem_ab.release()\n    gmem_c.store(acc=acc)\n"
    mod, _, lines = _mutant(wgmma_gemm, old, "    smem_ab.release()\n    gmem_c.store(acc=acc)\n", tmp_path)
    findings = _rejected(mod.build)
    hit = [f for f in findings if f.check == "value routing" and "still writing" in f.message]
    want = _line_of(lines, "    gmem_c.store(acc=acc)", after=_line_of(lines, "def mma_schedule"))
    assert hit and hit[0].location.line == want, [f.format() for f in findings]
    _accepted(wgmma_gemm.build)


# ------------------------------------------------------------------ SMEM stages of an AsyncAsync ring
def _ring_program(count, stages=2, indexed=True, stub=False):
    from dataclasses import dataclass

    from test_checks_support import Gmem, cg
    from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                           TaskLocalVariable, consumer_work, domain_loop, producer_work, schedule)

    @dataclass(kw_only=True)
    class Ring(MemoryResource):
        alloc: object = None
        val: object = TaskLocalVariable.uninitialized()

        def __post_init__(self):
            self.val = TaskLocalVariable(dtype="Float32", default=0)

        def get_smem_requirements(self):
            return [self.alloc]

        @producer_work
        def fill(self, stage_info: StageInfo):
            return stage_info.stage_idx if indexed else 0

        @consumer_work(returns=val)
        def read(self, stage_info: StageInfo):
            return stage_info.stage_idx if indexed else 0

    @dataclass(kw_only=True)
    class FlatRing(Ring):  # real bodies (not placeholders) that address the same bytes in every stage
        @producer_work
        def fill(self, stage_info: StageInfo):
            return self.alloc.offset

        @consumer_work(returns=Ring.val)
        def read(self, stage_info: StageInfo):
            return self.alloc.offset + stage_info.loop_offset

    @dataclass(kw_only=True)
    class StubRing(Ring):  # a model's placeholders: the kernel's bodies are judged when it is traced
        @producer_work
        def fill(self, stage_info: StageInfo):
            """filled in by the kernel"""

        @consumer_work(returns=Ring.val)
        def read(self, stage_info: StageInfo):
            return 0

    smem = SmemAllocator()
    cls = StubRing if stub else Ring if indexed else FlatRing
    ring = cls(name="ring", alloc=SmemAllocation("ring", dtype=4, count=count), pipeline_config=(
        PipelineConfig.create_async_async_pipeline_cfg(num_stages=stages, producer_group=cg(32),  # @ring_cfg
                                                       consumer_group=cg(32))))
    smem.add_resource(ring)
    smem.compute_layout()
    out = Gmem(name="out")

    @schedule
    def prod(r):
        with domain_loop(0, 4, 1):
            r.acquire()
            r.fill()
            r.commit()

    @schedule
    def cons(r, o):
        with domain_loop(0, 4, 1):
            r.wait()
            v = r.read()
            r.release()
            o.store(value=v)

    tasks = [Task(name="P", dst_resources=[ring], warp_idx=0, num_warps=1, schedule=prod(ring)),
             Task(name="C", src_resources=[ring], dst_resources=[out], warp_idx=1, num_warps=1, schedule=cons(ring, out))]
    return dict(tasks=tasks, resource_dependency_graph={out: [ring]}, smem_allocator=smem)


def test_allocation_that_does_not_split_into_the_stages():
    from test_checks_support import line

    with pytest.raises(warpsched.ValidationError) as info:
        warpsched.TaskManager(verbose=False, **_ring_program(count=96, stages=5))
    hit = [f for f in info.value.findings if "does not split into num_stages=5" in f.message]
    assert hit and hit[0].location.line == line("ring_cfg")
    with warnings.catch_warnings():
        warnings.simplefilter("error", warpsched.ValidationWarning)
        assert warpsched.TaskManager(verbose=False, **_ring_program(count=96, stages=2)).result.accepted


def test_multi_stage_ring_whose_work_ignores_the_stage_index_is_an_error():
    """Two stages over one address: the producer refills the bytes the consumer of the other
    stage still reads. One stage is the correct twin."""
    from test_checks_support import line

    with pytest.raises(warpsched.ValidationError) as info:
        warpsched.TaskManager(verbose=False, **_ring_program(count=64, stages=2, indexed=False))
    hit = [f for f in info.value.findings if "every stage addresses the same SMEM bytes" in f.message]
    assert len(hit) == 1 and hit[0].resource == "ring" and hit[0].task == "P" and hit[0].location.line == line("ring_cfg")
    assert "num_stages=1" in hit[0].expected and "stage_info.stage_idx" in hit[0].fix
    with warnings.catch_warnings():
        warnings.simplefilter("error", warpsched.ValidationWarning)
        warpsched.TaskManager(verbose=False, **_ring_program(count=64, stages=1, indexed=False))
        warpsched.TaskManager(verbose=False, **_ring_program(count=64, stages=2, indexed=True))
        warpsched.TaskManager(verbose=False, **_ring_program(count=64, stages=2, stub=True))


# ------------------------------------------------------------------ hopper tma_copy: shared counts, stage() tokens
def _tma_copy_mutant(tmp_path, old, new, scope):
    sys.path.insert(0, HOPPER_DIR)
    import tma_copy

    src = open(tma_copy.__file__).read()
    at = src.index(old, src.index(scope))
    path = tmp_path / "tma_copy.py"
    path.write_text(src[:at] + new + src[at + len(old):])
    spec = importlib.util.spec_from_file_location(f"_mutant_tma_copy_{abs(hash((old, new, scope)))}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return tma_copy, mod, path.read_text().splitlines()


def test_loops_sharing_a_count_with_different_bounds(tmp_path):
    old = "    with domain_loop(start, end, step, count=count):"
    orig, mod, lines = _tma_copy_mutant(tmp_path, old, old.replace("end, step", "end + 1, step"), "def load_schedule")
    findings = _rejected(mod.build)
    hit = [f for f in findings if f.check == "captured domain validity" and "count=tiles_per_cta" in f.message]
    mutated = _line_of(lines, "with domain_loop(start, end + 1, step, count=count)")
    other = _line_of(lines, "with domain_loop(start, end, step, count=count) as d:")
    assert hit and hit[0].location.line in (mutated, other)  # the finding at one loop names the other
    assert f":{mutated if hit[0].location.line == other else other}" in hit[0].message
    _accepted(orig.build)


def test_stage_returned_by_work_used_after_the_release(tmp_path):
    old = "        gmem_y.tma_store(stage=stage)\n        smem.release()\n"
    new = "        smem.release()\n        gmem_y.tma_store(stage=stage)\n"
    orig, mod, lines = _tma_copy_mutant(tmp_path, old, new, "def store_schedule(")
    findings = _rejected(mod.build, store_lag=0)
    hit = [f for f in findings if "after SmemTiles's stage was released" in f.message]
    assert hit and hit[0].location.line == _line_of(lines, "        gmem_y.tma_store(stage=stage)",
                                                    after=_line_of(lines, "def store_schedule("))
    _accepted(orig.build, store_lag=0)


def test_allocations_sized_for_a_deeper_ring_name_the_stage_count():
    """num_stages=2 over allocations of 4 x 1024-byte tiles with num_bytes=1024 (a stage dropped from
    the config, not from the allocation): rejected, and the fix names num_stages=4 first."""
    from test_checks_support import line

    with pytest.raises(warpsched.ValidationError) as info:
        warpsched.TaskManager(verbose=False, **_tma_program(1024))  # 2 stages of 2048 bytes
    hit = [f for f in info.value.findings if "less than a stage holds" in f.message]
    assert len(hit) == 1 and hit[0].location.line == line("tiles_cfg")
    assert "the allocations hold 4 stages of 1024 bytes" in hit[0].message
    assert hit[0].fix.startswith("num_stages=4, or allocations of 2 x 1024 bytes")
