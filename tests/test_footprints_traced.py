"""Consumer footprints held while a kernel is traced (``warpsched.lower.footprints``).

The checker proves the parts two consumer tasks declare in ``consumer_footprint`` disjoint where one of them
writes, and trusts that the work bodies touch only those parts. A warp-group index passed wrong from the
schedule made a body touch the other warp group's part: the checker said SAFE and the kernel compiled. Bodies
now report what they touch (``StageInfo.touches``), held to the running task's footprint. Planted here: the
forward's O written through the other warp group's Q tile, its S GEMM reading the other's Q tile, the backward's
dK / dV staged in the other warp group's V half and its dP GEMM reading the other's V half. Each was SAFE (the
checker alone accepts it); the trace now stops at the schedule call, named by file and line. The ledger's own
rules are tested without cutlass."""
from __future__ import annotations

import os
import sys
import warnings
from types import SimpleNamespace

import pytest

from warpsched import ValidationError, ValidationWarning, WorkAttr, consumer_work
from warpsched.lower.footprints import FootprintLedger
from warpsched.model.source import SourceLoc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Stage:
    name = "Stage"

    def consumer_footprint(self, task_name):
        return {f"T{task_name[-1]}": "rw", "shared": "r"}

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def store(self, stage_info):
        pass

    @consumer_work
    def read(self, stage_info):
        pass

    @consumer_work(work_attrs=WorkAttr.WGMMA_OPERAND)
    def declare(self, stage_info):
        pass


class _Gemm:
    name = "Ring"

    @consumer_work(work_attrs=WorkAttr.WGMMA)
    def gemm(self, stage_info):
        pass

    @consumer_work
    def plain(self, stage_info):
        pass


class _Plain:
    name = "Plain"

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def store(self, stage_info):
        pass


def _ledger(*resources, skip=False):
    program = SimpleNamespace(resources=list(resources))
    return FootprintLedger(program, SimpleNamespace(name="WG1"), skip)


def _step(method):
    return SimpleNamespace(method=method, location=SourceLoc("kernel.py", 42))


def _finding(ledger, resource, method, touches, check="consumer writes"):
    with pytest.raises(ValidationError) as e:
        ledger.worked(resource, _step(method), touches)
    msg = str(e.value)
    assert f"[{check}]" in msg and "kernel.py:42" in msg and "fix:" in msg, msg
    return msg


def test_touches_inside_the_footprint_pass():
    stage = _Stage()
    _ledger(stage).worked(stage, _step("store"), [(None, "T1", "w"), (None, "shared", "r")])
    _ledger(stage).worked(stage, _step("read"), [(None, "T1", "r")])
    _ledger(stage).worked(stage, _step("read"), [])  # a read that reports nothing: not held


def test_a_write_to_another_tasks_part_or_a_read_only_part_is_refused():
    stage = _Stage()
    msg = _finding(_ledger(stage), stage, "store", [(None, "T0", "w")])
    assert "writes part 'T0'" in msg and "does not name" in msg, msg
    msg = _finding(_ledger(stage), stage, "store", [(None, "shared", "w")])
    assert "marks read-only" in msg, msg
    msg = _finding(_ledger(stage), stage, "read", [(None, "T0", "r")])
    assert "reads part 'T0'" in msg, msg


def test_a_writes_work_of_a_footprinted_resource_must_report_its_write():
    stage = _Stage()
    msg = _finding(_ledger(stage), stage, "store", [(None, "T1", "r")])
    assert "reported no part it writes" in msg and "stage_info.touches" in msg, msg
    _ledger(_Plain()).worked(_Plain(), _step("store"), [])  # no footprint declared: nothing to hold it to


def test_a_consumer_write_without_the_writes_attribute_is_refused():
    """The checker takes an unmarked consumer work for a reader, so the write would go unchecked."""
    stage = _Stage()
    msg = _finding(_ledger(stage), stage, "read", [(None, "T1", "w")])
    assert "Stage.read() writes part 'T1'" in msg and "not marked WorkAttr.WRITES" in msg, msg
    _ledger(_Plain()).worked(_Plain(), _step("store"), [(None, "any", "w")])  # marked: held by nothing else here


def test_another_resources_stage_is_read_only_by_a_wgmma_through_a_declaration():
    """The forward's S GEMM reads Q (SmemQ) from a work of SmemK: only as a WGMMA, and only with a WGMMA_OPERAND
    declaration of SmemQ made for that commit group (each group takes the declarations made before it)."""
    stage, ring = _Stage(), _Gemm()
    ledger = _ledger(stage, ring)
    ledger.worked(stage, _step("declare"), [])
    ledger.worked(ring, _step("gemm"), [("Stage", "T1", "r")])
    msg = _finding(ledger, ring, "gemm", [("Stage", "T1", "r")], "WGMMA groups")  # the next group: undeclared
    assert "Ring.gemm() reads part 'T1' of Stage's stage, which no WGMMA_OPERAND work of Stage declared" in msg, msg
    msg = _finding(_ledger(stage, ring), ring, "plain", [("Stage", "T1", "r")], "WGMMA groups")
    assert "which only a WGMMA work may read" in msg, msg
    declared = _ledger(stage, ring)
    declared.worked(stage, _step("declare"), [])
    msg = _finding(declared, ring, "gemm", [("Stage", "T0", "r")])  # declared, but the other task's part
    assert "reads part 'T0' of Stage's stage, which consumer_footprint('WG1') does not name" in msg, msg
    msg = _finding(_ledger(stage, ring), ring, "plain", [("Nope", "T1", "r")])
    assert "'Nope'" in msg and "Ring, Stage" in msg, msg


def test_skip_validation_turns_the_finding_into_a_warning():
    stage = _Stage()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _ledger(stage, skip=True).worked(stage, _step("store"), [(None, "T0", "w")])
    assert any(issubclass(w.category, ValidationWarning) and "writes part 'T0'" in str(w.message) for w in caught)


# ---------------------------------------------------------------------- the attention kernels, planted
def _swapped(resource, method):
    """``resource`` (a schedule argument) with ``method``'s ``wg`` swapped to the other warp group's."""
    from _planting import Standin

    def call(**kwargs):
        return getattr(resource, method)(**dict(kwargs, wg=1 - kwargs.get("wg", 0)))
    return Standin(resource, **{method: call})


@pytest.fixture(scope="module")
def kernels():
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    from warpsched.kernels.attention import backward as ab
    from warpsched.kernels.attention import backward_host as bh
    from warpsched.kernels.attention import backward_schedules as bs
    from warpsched.kernels.attention import forward as fw
    from warpsched.kernels.attention import host as fh
    from warpsched.kernels.attention import schedules as fs
    return SimpleNamespace(ab=ab, bh=bh, bs=bs, fw=fw, fh=fh, fs=fs)


def _refused(compile_fn, *named):
    with pytest.raises(ValidationError) as e:
        compile_fn()
    msg = str(e.value)
    assert "rejected the traced kernel" in msg and "[consumer writes]" in msg, msg
    assert os.path.basename(__file__) in msg, msg  # the planted schedule call, by file and line
    for n in named:
        assert n in msg, msg
    return msg


# the forward that stages O through each warp group's Q tile (SmemQ.store_o), as head dim 256 does
O_THROUGH_Q = dict(q_stages=1, tma_store_o=True, o_buffer=False)


@pytest.mark.parametrize("method,argument,named", [
    ("store_o", 0, "SmemQ.store_o() in task 'Softmax0' writes part 'Q1'"),
    ("mma_qk", 1, "SmemK.mma_qk() in task 'Softmax0' reads part 'Q1' of SmemQ's stage"),
])
def test_the_forward_touching_the_other_warp_groups_q_tile_does_not_trace(kernels, method, argument, named):
    from _planting import QUIET, planted
    from warpsched import schedule

    k = kernels

    @schedule
    def twin(*args, **kwargs):
        args = list(args)
        args[argument] = _swapped(args[argument], method)  # smem_q (store_o) or smem_k (mma_qk)
        k.fs.softmax_schedule.fn(*args, **kwargs)

    with planted(k.fw, softmax_schedule=twin):
        g = k.fw.FlashAttention(head_dim=128, causal=True, **O_THROUGH_Q)
        assert k.fw.build(g, **QUIET).result.checker.verdict == "SAFE"  # the checker trusts the footprint
        _refused(lambda: k.fh.compile_for_cpu(head_dim=128, causal=True, **O_THROUGH_Q), named)


@pytest.mark.parametrize("method,named", [
    ("store_grads", "SmemKV.store_grads() in task 'Grad0' writes part 'V1'"),
    ("mma_dp", "SmemKV.mma_dp() in task 'Grad0' reads part 'V1'"),
])
def test_the_backward_touching_the_other_warp_groups_v_half_does_not_trace(kernels, method, named):
    from _planting import QUIET, planted
    from warpsched import schedule

    k = kernels
    options = k.bh.default_options(64)  # tma_store_dkv: dK / dV staged in each warp group's V half

    @schedule
    def twin(smem_kv, *args, **kwargs):
        k.bs.grad_schedule.fn(_swapped(smem_kv, method), *args, **kwargs)

    with planted(k.ab, grad_schedule=twin):
        g = k.ab.FlashAttentionBackward(head_dim=64, causal=True, **options)
        assert k.ab.build(g, **QUIET).result.checker.verdict == "SAFE"
        _refused(lambda: k.bh.compile_for_cpu(head_dim=64, causal=True, **options), named)
