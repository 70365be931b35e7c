"""The Blackwell TMA + tcgen05 GEMM example compiles for sm_100a on the CPU (TmaUmma, UmmaAsync,
TMEM allocator), with its barrier / tcgen05 instruction counts pinned; the program checked inside
each kernel trace is the example's CPU build (equal fingerprints)."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

cutlass = pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load():
    path = os.path.join(ROOT, "examples", "blackwell", "tcgen05_gemm.py")
    spec = importlib.util.spec_from_file_location("ws_tcgen05_gemm", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ws_tcgen05_gemm"] = mod
    spec.loader.exec_module(mod)
    return mod


# init: 4 + 4 (A/B stages) + 1 + 1 (accumulator); arrive: arrive.expect_tx at acquire + the 128-thread
# release of the accumulator; try_wait: load (try + acquire + producer_tail 4), mma (accumulator acquire,
# try + wait in the peeled first iteration and in the loop, accumulator producer_tail 1), store (try + wait);
# tcgen05.commit: the A/B release (peeled + loop) and the accumulator commit; tcgen05.mma: 4 k-blocks x 2.
EXPECTED = {"mbarrier.init": 10, "mbarrier.arrive": 2, "mbarrier.try_wait": 14, "expect_tx": 1,
            "cp.async.bulk.tensor": 2, "tcgen05.mma": 8, "tcgen05.commit": 3, "tcgen05.alloc": 1,
            "tcgen05.dealloc": 1, "tcgen05.relinquish_alloc_permit": 1, "wgmma": 0, "setmaxnreg": 0}


def test_tcgen05_gemm_compiles_for_sm100a():
    from warpsched.verify.verdicts import VERDICTS

    mod = _load()
    ptx = mod.compile_for_cpu().artifacts.PTX
    assert ".target sm_100a" in ptx
    lines = ptx.splitlines()
    assert {p: sum(p in line for line in lines) for p in EXPECTED} == EXPECTED
    assert VERDICTS.looked_up[-1] == mod.build(verbose=False, exhaustive_deadlock_race_check=False).fingerprint


def test_tcgen05_gemm_program_passes_check():
    mgr = _load().build(verbose=False)
    assert mgr.result.accepted, [f.format() for f in mgr.result.errors]


def _load_path(name, rel):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *rel.split("/")))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# clc_copy (2 stages): init 2 + 2; arrive = the scheduler's arrive.expect_tx (16 bytes) + one release per
# task (remote-capable arrive on CTA 0); try_wait = scheduler (try + acquire + try + wait + producer_tail 2)
# + copy task (try + wait); one try_cancel; each task decodes validity (is_canceled), the copy task also
# the tile's x coordinate.
CLC = {"mbarrier.init": 4, "mbarrier.arrive": 3, "mbarrier.try_wait": 8, "expect_tx": 1,
       "clusterlaunchcontrol.try_cancel": 1, "query_cancel.is_canceled": 2, "get_first_ctaid::x": 1,
       "fence.proxy.async.shared::cta": 2}


def test_clc_dynamic_queue_compiles_for_sm100a():
    mod = _load_path("ws_clc_copy", "examples/blackwell/clc_copy.py")
    ptx = mod.compile_for_cpu().artifacts.PTX
    lines = ptx.splitlines()
    assert ".target sm_100a" in ptx
    assert {p: sum(p in line for line in lines) for p in CLC} == CLC
    from warpsched.verify.verdicts import VERDICTS

    traced = VERDICTS.looked_up[-1]
    mgr = mod.build(verbose=False)
    assert mgr.result.accepted and mgr.fingerprint == traced


def test_umma_umma_pipeline_compiles_for_sm100a():
    """UmmaUmma (no cutlass class in 4.8.1): both sides arrive with tcgen05.commit."""
    from dataclasses import dataclass

    import cutlass.cute as cute
    import cutlass.pipeline as pipeline

    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common

    from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskManager, consumer_work,
                           domain_loop, producer_work, schedule)

    @dataclass(kw_only=True)
    class Acc(MemoryResource):
        @producer_work
        def mma1(self, stage_info: StageInfo):
            pass

        @consumer_work
        def mma2(self, stage_info: StageInfo):
            pass

    @schedule
    def first(acc, n):
        with domain_loop(0, n, 1):
            acc.acquire()
            acc.mma1()
            acc.commit()

    @schedule
    def second(acc, n):
        with domain_loop(0, n, 1):
            acc.wait()
            acc.mma2()
            acc.release()

    def build(n):
        cg = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
        acc = Acc(name="Acc", pipeline_config=PipelineConfig.create_umma_umma_pipeline_cfg(
            num_stages=2, producer_group=cg, consumer_group=cg, cta_layout_vmnk=(1, 1, 1, 1)))
        return TaskManager(tasks=[Task(name="Mma1", dst_resources=[acc], warp_idx=0, schedule=first(acc, n)),
                                  Task(name="Mma2", src_resources=[acc], warp_idx=1, schedule=second(acc, n))],
                           resource_dependency_graph={acc: []}, verbose=False)

    @cute.kernel
    def kern(n: cutlass.Int32):
        mgr = build(n)
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host(n: cutlass.Int32):
        kern(n).launch(grid=[1, 1, 1], block=[64, 1, 1])

    ptx = cute.compile(host, cutlass.Int32(4), options=_common.ptx_options("sm_100a")).artifacts.PTX
    lines = ptx.splitlines()
    want = {"mbarrier.init": 4, "tcgen05.commit": 2, "mbarrier.try_wait": 3, "mbarrier.arrive": 0}
    assert {p: sum(p in line for line in lines) for p in want} == want
    assert build(4).result.accepted
