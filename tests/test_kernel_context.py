"""The conveniences that make a kernel shorter than by hand: ``SmemAllocator.for_resources`` /
``.view``, the library work ``wgmma_wait``, and the kernel context work methods read
(``StageInfo.context``: the kernel's trace-time values, SMEM views, cluster coordinate and
multicast masks). Pure-Python parts first; the traced parts compile a small kernel for sm_90a."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import program, task, tma_cfg  # noqa: E402
from warpsched import (MemoryResource, SmemAllocation, SmemAllocator, StageInfo, Task, TaskManager, WorkAttr,
                       consumer_work, domain_loop, producer_work, schedule, wgmma_wait)  # noqa: E402
from warpsched.model.memory import LayoutError  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(kw_only=True)
class Tiles(MemoryResource):
    allocs: tuple = ()

    def get_smem_requirements(self):
        return list(self.allocs)


def test_for_resources_lays_out_every_requirement():
    a = SmemAllocation("a", dtype=2, count=4096, alignment=1024)
    b = SmemAllocation("b", dtype=4, count=10)
    c = SmemAllocation("c", dtype=2, count=512, alignment=1024)
    allocator = SmemAllocator.for_resources(Tiles(name="AB", allocs=(a, b)), Tiles(name="C", allocs=(c,)))
    assert allocator.allocations == [a, b, c] and [r.name for r in allocator.resources] == ["AB", "C"]
    # laid out once (aligned, largest first within an alignment), ready for TaskManager as is
    assert (a.offset, c.offset, b.offset) == (0, 8192, 9216) and allocator.total == 9256
    with pytest.raises(LayoutError, match="already called"):
        allocator.compute_layout()
    with pytest.raises(LayoutError, match=r"view\(\) is only available after setup_resources_and_tasks"):
        allocator.view(a, None)


def test_adjacent_allocations_lie_back_to_back_whatever_the_sort():
    """``add_adjacent``: a run placed in its order with no gap, before the rest (which the size sort would have
    put between them); each allocation stays its resource's; one allocation cannot join two runs."""
    small0 = SmemAllocation("small0", dtype=2, count=2048, alignment=1024)
    big = SmemAllocation("big", dtype=2, count=8192, alignment=1024)
    small1 = SmemAllocation("small1", dtype=2, count=2048, alignment=1024)
    allocator = SmemAllocator()
    allocator.add_adjacent([small0, small1])
    for r in (Tiles(name="S0", allocs=(small0,)), Tiles(name="B", allocs=(big,)), Tiles(name="S1", allocs=(small1,))):
        allocator.add_resource(r)
    allocator.compute_layout()
    assert (small0.offset, small1.offset, big.offset) == (0, 4096, 8192)
    assert allocator.allocations == [small0, small1, big]
    again = SmemAllocator()
    again.add_adjacent([small0, small1])
    with pytest.raises(LayoutError, match="already in an adjacent run"):
        again.add_adjacent([small1, big])
    with pytest.raises(LayoutError, match=r"view_span\(\) is only available after setup_resources_and_tasks"):
        allocator.view_span([small0, small1], None)


# ---------------------------------------------------------------- wgmma_wait through the checker
@dataclass(kw_only=True)
class Stages(MemoryResource):
    retire = wgmma_wait  # the library work, under the name the schedule calls

    @producer_work
    def fill(self, stage_info: StageInfo):
        pass

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def mma(self, stage_info: StageInfo):
        pass


def _wgmma_program(order):
    smem = Stages(name="SmemAB", pipeline_config=tma_cfg(stages=2))

    @schedule
    def load(s):
        with domain_loop(0, 4, 1):
            s.acquire()
            s.fill()
            s.commit()

    @schedule
    def mma(s):
        with domain_loop(0, 4, 1):
            s.wait()
            s.mma()
            for step in order:
                s.release() if step == "release" else s.retire(pending=step)

    return program([task("Load", load(smem), dst=[smem]), task("Mma", mma(smem), src=[smem], warp=1)])


def test_wgmma_wait_is_a_work_method_of_any_resource():
    spec = Stages.work_methods()["retire"]
    assert spec.role == "consumer" and spec.attrs == WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY
    assert spec.keyword_params() == ("pending",)


@pytest.mark.parametrize("order, verdict", [((0, "release"), "SAFE"),  # all retired, then released
                                            (("release", 0), "UNSAFE"),  # released while wgmma reads
                                            ((1, "release"), "UNSAFE")])  # the newest group still reads
def test_wgmma_wait_retires_what_the_checker_expects(order, verdict):
    result = run_checker(_wgmma_program(order))
    assert result.verdict == verdict, result.report()
    if verdict == "UNSAFE":
        assert any("WGMMA reads until wgmma.wait_group" in f.message for f in result.findings)


# ---------------------------------------------------------------- the kernel context, traced
@pytest.fixture(scope="module")
def dsl():
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    import cutlass.cute as cute

    return cute, _common


SEEN: dict = {}


@dataclass(kw_only=True)
class Probe(MemoryResource):
    alloc: Any = None
    layout: Any = None  # a callable: the view's layout, built inside the trace

    def get_smem_requirements(self):
        return [self.alloc]

    @producer_work
    def look(self, stage_info: StageInfo):
        import cutlass.cute as cute

        ctx = stage_info.context
        SEEN["marker"] = ctx.values.marker
        SEEN["cluster"] = (ctx.cluster_mn, ctx.cluster_coord, ctx.mcast_mask(0), ctx.mcast_mask(1))
        view = ctx.smem_view(self.alloc, self.layout())
        SEEN["view"] = (str(view.layout), cute.cosize(view.layout), view.element_type.__name__)
        SEEN["missing"] = "nope" in ctx.values
        ctx.values.nope  # noqa: B018 - reading a value the kernel did not pass


@schedule
def probe_schedule(p):
    p.look()


def _compile(cute, common, layout, count=256):
    import cutlass

    probe = Probe(name="Probe", alloc=SmemAllocation("buf", dtype=cutlass.Float32, count=count), layout=layout)

    @cute.kernel
    def kern():
        mgr = TaskManager(tasks=[Task(name="T", dst_resources=[probe], warp_idx=0, num_warps=1,
                                      schedule=probe_schedule(probe))],
                          resource_dependency_graph={probe: []}, smem_allocator=SmemAllocator.for_resources(probe),
                          verbose=False,
                          exhaustive_deadlock_race_check=False)
        mgr.run(marker=7)

    @cute.jit
    def host():
        kern().launch(grid=[1, 1, 1], block=[32, 1, 1])

    return cute.compile(host, options=common.ptx_options())


def _chain(excinfo) -> str:
    e, parts = excinfo.value, []
    while e is not None:
        parts.append(str(e))
        e = e.__cause__ or e.__context__
    return "\n".join(parts)


def test_work_methods_read_the_kernel_context(dsl):
    cute, common = dsl
    SEEN.clear()
    with pytest.raises(Exception) as ei:
        _compile(cute, common, lambda: cute.make_layout((16, 16)))
    # one CTA: compile-time coordinate, no multicast masks, no instruction emitted for them
    assert SEEN["marker"] == 7 and SEEN["cluster"] == ((1, 1), (0, 0, 0), None, None)
    assert SEEN["view"] == ("(16,16):(1,16)", 256, "Float32") and SEEN["missing"] is False
    # a value the kernel did not pass: named, with what it did pass and where to pass it
    msg = _chain(ei)
    assert "StageInfo.context.values has no 'nope' (the kernel passed: marker)" in msg
    assert "TaskManager.run(nope=...)" in msg


def test_a_view_larger_than_its_allocation_is_refused(dsl):
    cute, common = dsl
    SEEN.clear()
    with pytest.raises(Exception) as ei:
        _compile(cute, common, lambda: cute.make_layout((16, 32)))
    msg = _chain(ei)
    assert "SMEM view of 'buf' spans 512 x Float32 = 2048 bytes; the allocation has 1024" in msg
    assert "fix: size the SmemAllocation for the layout" in msg and "view" not in SEEN
