"""Consumer works that write the stage they hold (``WorkAttr.WRITES``, verify/checks_writes.py): the
attention backward stages dK / dV in each warp group's V half and the forward stages O in each warp group's
Q tile, both while the other warp group holds the same stage. Their footprints make that checkable; twins
that write a part the other warp group reads, or declare nothing, are rejected at the writing call."""
from __future__ import annotations

import pytest

from warpsched import ValidationError, WorkAttr, consumer_work
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_resources as br
from warpsched.kernels.attention import forward as af
from warpsched.kernels.attention import host as fwd_host
from _planting import planted

QUIET = {"verbose": False, "progress": False, "cache_verdict": False}
STORE_GRADS = "backward_schedules.py"  # the writing call's file (the shipped schedule's store_grads)


def _backward(twin):
    with planted(ab, SmemKV=twin):
        return ab.build(ab.FlashAttentionBackward(shared_ds=True, tma_stats=True, tma_store_dkv=True), **QUIET)


def test_the_shipped_programs_declare_disjoint_writes():
    assert _backward(br.SmemKV).result.checker.verdict == "SAFE"
    fwd = af.FlashAttention(head_dim=128, causal=True, **fwd_host.tuned_options(128, True))
    assert fwd.o_through_q or fwd.tma_store_o  # the tuned forward stages O through a stage it holds
    assert af.build(fwd, **QUIET).result.checker.verdict == "SAFE"


class _StagesInK(br.SmemKV):
    """Planted: dK / dV staged in K, which the other warp group's dQ GEMM (shared_ds) still reads."""

    def consumer_footprint(self, task_name):
        return {"K": "rw", f"V{task_name[-1]}": "r"}


class _NoFootprint(br.SmemKV):
    consumer_footprint = None


class _BadFootprint(br.SmemKV):
    def consumer_footprint(self, task_name):
        return {"V": "write"}


def test_a_write_to_a_part_the_other_warp_group_reads_is_rejected_at_the_write():
    with pytest.raises(ValidationError) as e:
        _backward(_StagesInK)
    msg = str(e.value)
    assert "[consumer writes]" in msg and "store_grads() in task 'Grad0' writes part 'K'" in msg, msg
    assert "task 'Grad1'" in msg and STORE_GRADS in msg and "fix:" in msg, msg


def test_a_write_without_footprints_names_the_declaration_to_add():
    with pytest.raises(ValidationError) as e:
        _backward(_NoFootprint)
    msg = str(e.value)
    assert "hold at the same time" in msg and "consumer_footprint" in msg and STORE_GRADS in msg, msg


def test_a_malformed_footprint_is_reported_not_crashed_on():
    with pytest.raises(ValidationError) as e:
        _backward(_BadFootprint)
    assert "consumer_footprint('Grad0') returned {'V': 'write'}" in str(e.value)


class _AuxWrite(br.SmemKV):
    @consumer_work(work_attrs=WorkAttr.WRITES | WorkAttr.AUXILIARY)
    def store_grads(self, stage_info, acc_dk, acc_dv, *, wg=0):
        """Planted: a write marked auxiliary (it may run outside the bracket)."""


def test_an_auxiliary_write_is_rejected():
    with pytest.raises(ValidationError) as e:
        _backward(_AuxWrite)
    assert "marked WRITES and AUXILIARY" in str(e.value)
