"""Seed pattern 2, split-consumer, end to end on the bundled example
(src/warpsched/examples/split_consumer.py): a wait-only sync task waits on two TMA-filled
buffers and signals a proxy declared downstream of them; the compute task waits only on the
proxy, works on the buffers and releases them. Accepted, proven SAFE for every loop length,
and one rejected twin per requirement of the seed."""
from __future__ import annotations

import dataclasses
import warnings

import pytest

import warpsched
from warpsched import SignalingThreads
from warpsched.examples import split_consumer
from warpsched.model.ir import StepKind
from warpsched.protocol.plan import SyncPlan
from warpsched.verify.checker import run_checker

from test_checks_support import line

PATH = split_consumer.__file__
CHECK = "split-consumer signaling"


def build(**kw):
    kw.setdefault("verbose", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        return split_consumer.build(**kw)


def rejected(**kw):
    kw.setdefault("exhaustive_deadlock_race_check", False)
    with pytest.raises(warpsched.ValidationError) as info:
        build(**kw)
    return info.value.findings


def hits(findings, check=CHECK):
    out = [f for f in findings if f.check == check]
    assert out, "\n".join(f.format() for f in findings)
    for f in out:
        assert f.fix and f.expected, f.format()
        assert f.location is not None and f.location.file.endswith("examples/split_consumer.py"), f.format()
    return out


@pytest.mark.parametrize("kw", [
    dict(kind="hopper"),
    dict(kind="hopper", wait_signaling=SignalingThreads.All, cluster=(1, 2, 1, 1)),
    dict(kind="umma"),
    dict(kind="umma", cluster=(2, 1, 1, 1)),
], ids=["hopper", "hopper-2cta-wait-all", "umma-seed", "umma-cta-pair"])
def test_accepted_and_proven_safe(kw):
    tm = build(**kw)
    assert tm.result.errors == []
    res = tm.result.checker
    assert res is not None and res.verdict == "SAFE", res.report() if res else None


def test_cta_pair_is_checked_on_both_ctas():
    """The UMMA shape over a CTA pair: the loaders and the store task run in both CTAs, the sync
    and MMA tasks (every side CtaLeader) in the leader only; the barriers exist per CTA."""
    res = build(kind="umma", cluster=(2, 1, 1, 1)).result.checker
    names = {ex.name for eng, _ in res.runs for ex in eng.execs}
    assert names == {"StoreTask@leader", "StoreTask@peer", "LoadA@leader", "LoadA@peer", "LoadB@leader",
                     "LoadB@peer", "SyncTask@leader", "MmaTask@leader"}
    bars = {b.label for eng, _ in res.runs for b in eng.c.barriers}
    # the peer waits on its own empty (the leader's commit multicasts into it) and accumulator full;
    # nobody touches the peer's smem full or accumulator empty (the pair routes them to the leader's)
    assert {"smem_a@leader.full[0]", "smem_a@peer.empty[0]", "tmem_c@peer.full[0]", "tmem_c@leader.empty[0]"} <= bars
    assert not {"smem_a@peer.full[0]", "tmem_c@peer.empty[0]"} & bars


@pytest.mark.parametrize("kind", ["hopper", "umma"])
def test_static_checks_accept_the_seed_shapes(kind):
    tm = build(kind=kind, exhaustive_deadlock_race_check=False)
    assert tm.result.errors == []
    cluster = (2, 1, 1, 1) if kind == "umma" else (1, 2, 1, 1)
    wait = None if kind == "umma" else SignalingThreads.All
    tm = build(kind=kind, wait_signaling=wait, cluster=cluster, exhaustive_deadlock_race_check=False)
    assert tm.result.errors == []


@pytest.mark.parametrize("kind,task,call", [("umma", "SyncTask", "wait()"), ("hopper", "LoadA", "acquire()")])
def test_wait_all_release_leader_over_a_pair_is_rejected(kind, task, call):
    """Over a V = 2 pair, "wait on every CTA, release on the leader" leaves a barrier of the peer
    CTA that no operation reaches: a TmaUmma pair arms and completes only the leader's full
    barrier (umma), and the peer never releases its own TmaAsync stages (hopper)."""
    f = [x for x in rejected(kind=kind, wait_signaling=SignalingThreads.All, cluster=(2, 1, 1, 1))
         if x.check == "cta layout consistency"]
    assert {x.resource for x in f} == {"smem_a", "smem_b"}, "\n".join(x.format() for x in f)
    hit = next(x for x in f if x.task == task and x.resource == "smem_a")
    assert f"smem_a.{call} in both CTAs of each pair" in hit.message and "never completes" in hit.message
    assert "CtaLeader" in hit.expected and hit.fix


def test_proxy_is_downstream_of_both_buffers():
    tm = build(kind="hopper", exhaustive_deadlock_race_check=False)
    by_name = {r.name: (r, ups) for r, ups in tm.resource_dependency_graph.items()}
    _, ups = by_name["proxy"]
    assert {u.name for u in ups} == {"smem_a", "smem_b"}
    sync = next(t for t in tm.tasks if t.name == "SyncTask")
    kinds = {(s.resource.name, s.kind) for s in tm.program.steps_of(sync)}
    assert ("smem_a", StepKind.ConsumerWait) in kinds and ("smem_a", StepKind.ConsumerRelease) not in kinds
    compute = next(t for t in tm.tasks if t.name == "ComputeTask")
    kinds = {(s.resource.name, s.kind) for s in tm.program.steps_of(compute)}
    assert ("smem_a", StepKind.ConsumerRelease) in kinds and ("smem_a", StepKind.ConsumerWait) not in kinds


# ------------------------------------------------------------------ consumer_wait_signaling_threads
def test_wait_signaling_without_the_pattern_is_rejected():
    """Twin: the compute task waits on and releases the buffers itself (no sync task, no proxy)."""
    marker = "split_smem_cfg_hopper"
    f = hits(rejected(kind="hopper", wait_signaling=SignalingThreads.All, split=False))
    assert {x.resource for x in f} == {"smem_a", "smem_b"}
    for x in f:
        assert "no split consumer" in x.message and "ComputeTask" in x.message
        assert x.line == line(marker, PATH)
        assert "unset" in x.expected


@pytest.mark.parametrize("kind,marker", [("hopper", "split_smem_cfg_hopper"), ("umma", "split_smem_cfg")])
def test_wait_signaling_equal_to_release_signaling_is_rejected(kind, marker):
    f = hits(rejected(kind=kind, wait_signaling=SignalingThreads.CtaLeader, cluster=(2, 1, 1, 1)))
    assert {x.resource for x in f} == {"smem_a", "smem_b"}
    for x in f:
        assert "equals consumer_signaling_threads" in x.message and "CtaLeader" in x.message
        assert x.line == line(marker, PATH)


# ------------------------------------------------------------------ wait-only state advances on wait
def test_wait_only_task_advances_on_wait_in_the_lowering_plan():
    from warpsched.protocol.plan import counter_plan  # plain Python; no kernel needed

    tm = build(kind="hopper", exhaustive_deadlock_race_check=False)
    sync = next(t for t in tm.tasks if t.name == "SyncTask")
    smem_a = next(r for r in tm.resource_dependency_graph if r.name == "smem_a")
    kinds = [s.kind for s in tm.program.steps_of(sync) if s.resource is smem_a]
    assert counter_plan(smem_a.pipeline_config, kinds) == {"c": (StepKind.ConsumerWait,)}


def test_checker_proves_every_loop_length_and_catches_a_non_advancing_wait(monkeypatch):
    tm = build(kind="hopper")
    res = tm.result.checker
    assert res.verdict == "SAFE"
    assert "exactly 8" in res.report()  # the compile-time trip count, exactly

    # The same program with the sync task's wait-only counter frozen (what a pipeline that only
    # advances on release would do): it re-waits stage 0 and signals the proxy too early. The
    # checker reads its counters from the sync plan, so the plan is what gets frozen.
    orig = SyncPlan.side

    def frozen(self, task, target, side):
        sp = orig(self, task, target, side)
        if sp is not None and task.name == "SyncTask" and side == "consumer":
            stuck = tuple(dataclasses.replace(c, advanced_by=StepKind.ConsumerRelease) for c in sp.counters)
            sp = dataclasses.replace(sp, counters=stuck)
        return sp

    monkeypatch.setattr(SyncPlan, "side", frozen)
    bad = run_checker(tm.program)
    assert bad.verdict == "UNSAFE", bad.report()
    assert any(f.check == "exhaustive interleaving" for f in bad.findings)
