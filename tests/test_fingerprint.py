"""The program fingerprint (the verdict cache's key): it changes with everything the checks read,
and only with that. Pure Python: no CuTe DSL."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


# ---------------------------------------------------------------- the same program from another place
_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "warpsched", "examples")


def _fingerprint_of_file(path: str) -> str:
    """Load ``path`` as ``warpsched check`` does (by path) and fingerprint its ``build()``."""
    from warpsched.cli import load_module

    return load_module(path).build(verbose=False, exhaustive_deadlock_race_check=False).fingerprint


def test_the_same_example_copied_to_two_places_has_one_fingerprint(tmp_path):
    """Two clones, a wheel, the README's own checkout: a file's place on disk is not the program.
    A different program from the same place still has another fingerprint."""
    src = open(os.path.join(_EXAMPLES, "grid_stride_copy.py")).read()
    a = tmp_path / "clone_a" / "grid_stride_copy.py"
    b = tmp_path / "elsewhere" / "deeper" / "grid_stride_copy.py"
    for p in (a, b):
        p.parent.mkdir(parents=True)
        p.write_text(src)
    assert _fingerprint_of_file(str(a)) == _fingerprint_of_file(str(b))
    changed = src.replace("UNROLL = 4", "UNROLL = 2")
    assert changed != src
    b.write_text(changed)
    assert _fingerprint_of_file(str(a)) != _fingerprint_of_file(str(b))


def test_the_package_from_two_checkouts_gives_one_fingerprint(tmp_path):
    """The whole package copied to two folders (as two clones or two installs would hold it): its
    bundled example has the same fingerprint in each and in this process."""
    package = os.path.dirname(_EXAMPLES)
    code = ("import warpsched, sys; from warpsched.examples import gemm; assert warpsched.__file__.startswith(sys.argv[1]); "
            "print(gemm.build(verbose=False, exhaustive_deadlock_race_check=False).fingerprint)")
    prints = []
    for where in (tmp_path / "one", tmp_path / "two" / "site-packages"):
        shutil.copytree(package, where / "warpsched", ignore=shutil.ignore_patterns("__pycache__"))
        env = dict(os.environ, PYTHONPATH=str(where))
        proc = subprocess.run([sys.executable, "-c", code, str(where)], capture_output=True, text=True, env=env,
                              cwd=str(tmp_path), timeout=120)
        assert proc.returncode == 0, proc.stderr
        prints.append(proc.stdout.strip().splitlines()[-1])
    from warpsched.examples import gemm

    here = gemm.build(verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    assert prints == [here, here]


def test_a_source_file_is_named_from_the_top_of_its_package(tmp_path):
    from warpsched.verify.fingerprint import stable_file

    pkg = tmp_path / "co" / "top" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "co" / "top" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("")
    (tmp_path / "co" / "script.py").write_text("")
    assert stable_file(str(pkg / "mod.py")) == "top/sub/mod.py"
    assert stable_file(str(tmp_path / "co" / "script.py")) == "script.py"
    assert stable_file("<string>") == "<string>"
