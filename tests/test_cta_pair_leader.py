"""The seed's leader-routed completion as the seed writes it (issue 27): a 2-CTA TmaUmma pair with
``producer_signaling_threads=CtaLeader`` and ``num_bytes_per_warp_per_cta``. The leader CTA arms the
pair's transaction barrier with the bytes of both CTAs and every CTA issues its loads (its TMA
completes on the leader's barrier): the same protocol CUTLASS's PipelineTmaUmma runs for a pair, so
the checker runs the load task in both CTAs and the lowering emits the same PTX as TaskWarpLeader.
"""
from __future__ import annotations

import warnings

import pytest

import warpsched
from warpsched import PipelineConfig, SignalingThreads
from warpsched.model.ir import StepKind
from warpsched.protocol.plan import SyncPlan
from warpsched.verify.checker.model import compile_program

from test_cta_pairs import PATTERNS, _facts, pairs


@pytest.fixture
def cta_leader_producer(monkeypatch):
    """The umma_pairs leader-routed program (examples/blackwell/patterns) with CtaLeader added to its
    TMA producer's signaling, as the seed writes it (``bytes_ctas``: the CTAs num_bytes covers)."""
    original = PipelineConfig.create_tma_umma_pipeline_cfg.__func__

    def with_cta_leader(cls, **kw):
        kw["producer_signaling_threads"] = kw["producer_signaling_threads"] | SignalingThreads.CtaLeader
        if with_cta_leader.bytes_ctas != 2:
            kw["num_bytes"] = kw["num_bytes"] // 2 * with_cta_leader.bytes_ctas
        return original(cls, **kw)

    with_cta_leader.bytes_ctas = 2
    monkeypatch.setattr(PipelineConfig, "create_tma_umma_pipeline_cfg", classmethod(with_cta_leader))
    return with_cta_leader


def test_cta_leader_producer_on_a_pair_is_accepted_and_every_cta_loads(cta_leader_producer):
    tm = pairs().build_leader_routed(verbose=False)
    (tile,) = [r for r in tm.resource_dependency_graph if r.name == "tile"]
    assert tile.pipeline_config.producer_signaling_threads.cta_leader
    assert tm.result.errors == [] and tm.result.checker.verdict == "SAFE", tm.result.checker.report()
    plan = SyncPlan(tm.program)
    assert [t.name for t in tm.tasks if plan.leader_only(t)] == ["MmaTask"]
    comp = compile_program(tm.program)
    assert {ex.name for ex in comp.executors if ex.task.name == "LoadTask"} == {"LoadTask@leader", "LoadTask@peer"}
    peer = next(ex for ex in comp.executors if ex.name == "LoadTask@peer")
    acquire = next(i.action for i in peer.program if i.action is not None
                   and i.action.step.kind is StepKind.ProducerAcquire)
    # the peer waits on its own empty barrier, arms nothing, and its bytes land on the leader's full barrier
    assert acquire.arrivals == 0 and comp.barriers[acquire.deliver_base].label == "tile@leader.full[0]"
    leader = next(ex for ex in comp.executors if ex.name == "LoadTask@leader")
    arm = next(i.action for i in leader.program if i.action is not None
               and i.action.step.kind is StepKind.ProducerAcquire)
    assert arm.tx_expect == tile.pipeline_config.num_bytes == tile.pipeline_config.num_bytes_per_warp_per_cta * 4 * 2


def test_cta_leader_producer_with_one_ctas_bytes_is_rejected(cta_leader_producer):
    """Twin: num_bytes covers one CTA only; the leader arms for the pair's two."""
    cta_leader_producer.bytes_ctas = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        with pytest.raises(warpsched.ValidationError) as info:
            pairs().build_leader_routed(verbose=False, exhaustive_deadlock_race_check=False)
    f = [x for x in info.value.findings if x.check == "leader-routed producer completions"]
    assert len(f) == 1 and f[0].task == "LoadTask" and f[0].resource == "tile"
    assert "x 2 producing CTA(s)" in f[0].expected and "TmaUmma pair" in f[0].expected
    assert f[0].fix == f"num_bytes={pairs().TILE_BYTES * 4 * 2}"


def test_cta_leader_producer_pair_lowers_like_the_leader_arming_protocol(cta_leader_producer):
    """sm_100a: the leader arms the pair's 8 KiB once (skipped in the peer), every warp's TMA
    completes on the leader's barrier -- the PTX facts of the TaskWarpLeader form."""
    from warpsched.verify.verdicts import VERDICTS

    ptx = pairs().compile_for_cpu("leader_routed").artifacts.PTX
    got = _facts(ptx)
    assert {k: got[k] for k in PATTERNS["leader_routed"]} == PATTERNS["leader_routed"]
    # the kernel traced the CtaLeader program (not the TaskWarpLeader one)
    traced = VERDICTS.looked_up[-1]
    assert traced == pairs().build_leader_routed(verbose=False, exhaustive_deadlock_race_check=False).fingerprint

