"""A work that leaves a wgmma group in flight must be marked ``WorkAttr.WGMMA`` (``warpsched.lower.wgmma_watch``).

The checker takes an unmarked work's reads of its stage to end when the work returns; the hardware reads until a
``wgmma.wait_group`` retires the group. Planted here: the forward's P V GEMM (``SmemV.mma_pv``) without the
attribute, in a schedule that releases V without retiring the group first. The checker proves it SAFE (it does not
know the reads are asynchronous); the trace now stops at the GEMM's schedule call. The rule's own logic is tested
without cutlass."""
from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from warpsched import ValidationError, WorkAttr, consumer_work
from warpsched.lower import wgmma_watch
from warpsched.model.source import SourceLoc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("events,flying", [
    ([], False),
    ([("commit", None)], True),
    ([("commit", None), ("wait", 0)], False),
    ([("commit", None), ("wait", 1)], True),
    ([("commit", None), ("wait", 0), ("commit", None)], True),
    ([("wait", 0)], False),
])
def test_a_group_is_in_flight_until_a_wait_for_zero(events, flying):
    assert wgmma_watch.in_flight(events) is flying


class _Ring:
    name = "Ring"

    @consumer_work
    def plain(self, stage_info):
        pass

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def gemm(self, stage_info):
        pass


def test_only_an_unmarked_work_with_a_group_in_flight_is_refused():
    task, step = SimpleNamespace(name="WG0"), lambda m: SimpleNamespace(method=m, location=SourceLoc("k.py", 7))
    wgmma_watch.check_work(task, _Ring(), step("gemm"), [("commit", None)])
    wgmma_watch.check_work(task, _Ring(), step("plain"), [("commit", None), ("wait", 0)])
    with pytest.raises(ValidationError) as e:
        wgmma_watch.check_work(task, _Ring(), step("plain"), [("commit", None)])
    msg = str(e.value)
    assert "[WGMMA groups] Ring.plain() commits a wgmma group" in msg and "k.py:7" in msg, msg
    assert "work_attrs=WorkAttr.WGMMA" in msg, msg


class _Waits:
    name = "Waits"

    @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY)
    def retire(self, stage_info, *, pending=0):
        pass


@pytest.mark.parametrize("args,events,ok", [
    ({}, [("wait", 0)], True),
    ({"pending": 1}, [("wait", 1)], True),
    ({"pending": 1}, [("wait", 0)], True),  # waits for more than it must: still what the checker counted
    ({}, [("wait", 1)], False),  # the checker counts pending=0: every group retired
    ({}, [], False),
])
def test_a_wait_work_waits_for_no_more_than_the_pending_groups_the_checker_counted(args, events, ok):
    task = SimpleNamespace(name="WG0")
    step = SimpleNamespace(method="retire", location=SourceLoc("k.py", 9), const_args=args)
    if ok:
        wgmma_watch.check_work(task, _Waits(), step, events)
        return
    with pytest.raises(ValidationError) as e:
        wgmma_watch.check_work(task, _Waits(), step, events)
    assert "Waits.retire() is a WGMMA_WAIT work" in str(e.value) and "k.py:9" in str(e.value)


def test_the_watch_is_per_thread_and_a_nested_block_restores_the_outer_one():
    """Kernels traced at once in several threads each record their own wgmma calls; outside every block
    nothing is recorded (the wrappers stay installed and pass the calls through)."""
    pytest.importorskip("cutlass")
    import threading

    from cutlass.cute.nvgpu import warpgroup

    mine, inner, other, seen = [], [], [], {}

    def in_thread():
        with wgmma_watch.watching(other):
            seen["thread"] = wgmma_watch._LOCAL.events

    with wgmma_watch.watching(mine):
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
        with wgmma_watch.watching(inner):
            assert wgmma_watch._LOCAL.events is inner
        assert wgmma_watch._LOCAL.events is mine
    assert seen["thread"] is other
    assert getattr(wgmma_watch._LOCAL, "events", None) is None
    assert warpgroup.commit_group is not wgmma_watch._INSTALLED[0][0]  # wrapped once, for good


def test_an_unmarked_gemm_released_before_its_retire_does_not_trace():
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    from _planting import QUIET, Standin, planted
    from warpsched import schedule
    from warpsched.kernels.attention import forward as fw
    from warpsched.kernels.attention import host as fh
    from warpsched.kernels.attention import resources as rs
    from warpsched.kernels.attention import schedules as fs

    class SmemV(rs.SmemV):
        mma_pv = consumer_work(rs.SmemV.mma_pv.__wrapped__)  # planted: no WorkAttr.WGMMA

    @schedule
    def twin(smem_q, smem_k, smem_v, *args, **kwargs):
        fs.softmax_schedule.fn(smem_q, smem_k, Standin(smem_v, retire=lambda **_: None), *args, **kwargs)  # no retire

    with planted(fw, SmemV=SmemV, softmax_schedule=twin):
        g = fw.FlashAttention(head_dim=128, causal=True, overlap=False)
        assert fw.build(g, **QUIET).result.checker.verdict == "SAFE"  # it believes V is read only inside mma_pv
        with pytest.raises(ValidationError) as e:
            fh.compile_for_cpu(head_dim=128, causal=True, overlap=False)
    msg = str(e.value)
    assert "rejected the traced kernel" in msg and "SmemV.mma_pv() commits a wgmma group" in msg, msg
    assert "schedules.py" in msg, msg  # the GEMM's call in the softmax schedule


def test_a_retire_that_waits_for_fewer_groups_than_counted_does_not_trace():
    """SmemK's retire planted to keep one more group in flight than the schedule's ``pending=`` says: the checker
    counts the S GEMM retired before the softmax reads S, and the GPU would read it mid-flight."""
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    import cutlass.cute as cute
    from _planting import QUIET, planted
    from warpsched.kernels.attention import forward as fw
    from warpsched.kernels.attention import host as fh
    from warpsched.kernels.attention import resources as rs

    class SmemK(rs.SmemK):
        @consumer_work(work_attrs=WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY)
        def retire(self, stage_info, *, pending=0):
            cute.nvgpu.warpgroup.wait_group(pending + 1)  # planted: one group short

    with planted(fw, SmemK=SmemK):
        g = fw.FlashAttention(head_dim=128, causal=True, overlap=False)
        assert fw.build(g, **QUIET).result.checker.verdict == "SAFE"
        with pytest.raises(ValidationError) as e:
            fh.compile_for_cpu(head_dim=128, causal=True, overlap=False)
    msg = str(e.value)
    assert "SmemK.retire() is a WGMMA_WAIT work the checker counts as retiring all but 0" in msg, msg
    assert "wait_group(1)" in msg and "schedules.py" in msg, msg
