"""The Blackwell TMA + tcgen05 GEMM example compiles for sm_100a on the CPU (TmaUmma, UmmaAsync,
TMEM allocator), with its barrier / tcgen05 instruction counts pinned."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

pytest.importorskip("cutlass")
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
    ptx = _load().compile_for_cpu().artifacts.PTX
    assert ".target sm_100a" in ptx
    lines = ptx.splitlines()
    assert {p: sum(p in line for line in lines) for p in EXPECTED} == EXPECTED


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
    assert mod.build(verbose=False).result.accepted
