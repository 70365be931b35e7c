"""CTA pairs (cta_layout_vmnk V = 2): modelled per CTA, checked, lowered (issue 16).

* The sync plan routes each side of a pair as CUTLASS's sm100 classes do (PipelineTmaUmma arms the
  leader's barrier only and every CTA's TMA completes on it; UmmaAsync consumer and AsyncUmma
  producer arrivals go to the leader; tcgen05.commit multicasts into both CTAs).
* The static counts multiply by the CTAs routed onto one barrier, with the derivation in the finding.
* The checker runs both CTAs of the pair (executors ``Task@leader`` / ``Task@peer``).
* The lowering compiles the 2-CTA tcgen05 GEMM and the seed's pair shapes for sm_100a; their PTX
  facts are pinned here, with the values CUTLASS's own 2-CTA dense GEMM example emits for the
  same facts (tools/cta_pair_ptx.py prints both side by side, bench/results/cta_pair_ptx.txt).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import warnings

import pytest

import warpsched
from warpsched import PipelineConfig, SignalingThreads, threads
from warpsched.model.ir import StepKind
from warpsched.protocol.plan import PairRoute, SyncPlan
from warpsched.verify.checker import run_checker

from test_checks_support import line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name, rel):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *rel.split("/")))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def gemm():
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "blackwell"))
    return _load("tcgen05_gemm_2cta", "examples/blackwell/tcgen05_gemm_2cta.py")


def pairs():
    pytest.importorskip("cutlass")
    return _load("umma_pairs", "examples/blackwell/patterns/umma_pairs.py")


def rejected(build, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        with pytest.raises(warpsched.ValidationError) as info:
            build(verbose=False, exhaustive_deadlock_race_check=False, **kw)
    return info.value.findings


# ------------------------------------------------------------------ the protocol: routing per type
@pytest.mark.parametrize("factory,full,empty,arms", [
    ("create_tma_umma_pipeline_cfg", PairRoute.LEADER, PairRoute.PAIR, True),
    ("create_umma_async_pipeline_cfg", PairRoute.PAIR, PairRoute.LEADER, False),
    ("create_async_umma_pipeline_cfg", PairRoute.LEADER, PairRoute.PAIR, False),
    ("create_umma_umma_pipeline_cfg", PairRoute.PAIR, PairRoute.PAIR, False),
    ("create_tma_async_pipeline_cfg", PairRoute.LOCAL, PairRoute.LOCAL, False),
    ("create_async_async_pipeline_cfg", PairRoute.LOCAL, PairRoute.LOCAL, False),
])
def test_the_plan_routes_a_pair_as_cutlass(factory, full, empty, arms):
    """PipelineTmaUmma: leader-only arming, TMA on the leader's barrier, commit multicast to both;
    PipelineUmmaAsync: commit multicast, releases to the leader's rank (rank // 2 * 2);
    PipelineAsyncUmma: commits to the leading rank, commit multicast; V = 1: all local."""
    from warpsched.model.program import Program

    kw = dict(num_bytes=1024) if "tma" in factory else {}
    for vmnk, want in (((2, 1, 1, 1), (full, empty, arms)), ((1, 2, 1, 1), (PairRoute.LOCAL, PairRoute.LOCAL, False))):
        cfg = getattr(PipelineConfig, factory)(num_stages=2, producer_group=threads(1), consumer_group=threads(1),
                                               cta_layout_vmnk=vmnk, **kw)
        r = warpsched.MemoryResource(name="r", pipeline_config=cfg)
        pp = SyncPlan(Program(tasks=[], graph={r: []})).pipeline(r)
        assert (pp.pair_full, pp.pair_empty, pp.arms_in_leader) == want


# ------------------------------------------------------------------ the 2-CTA GEMM program
def test_correct_2cta_gemm_is_accepted_and_proven_safe_on_both_ctas():
    tm = gemm().build(verbose=False)
    assert tm.result.errors == []
    res = tm.result.checker
    assert res.verdict == "SAFE", res.report()
    names = {ex.name for eng, _ in res.runs for ex in eng.execs}
    assert names == {"StoreTask@leader", "StoreTask@peer", "LoadTask@leader", "LoadTask@peer", "MmaTask@leader"}
    plan = SyncPlan(tm.program)
    assert plan.cta_pair == 2
    assert [t.name for t in tm.tasks if plan.leader_only(t)] == ["MmaTask"]


def test_2cta_gemm_with_one_ctas_bytes_is_rejected_with_the_derivation():
    mod = gemm()
    f = [x for x in rejected(mod.build, ab_num_bytes=mod.CTA_AB_BYTES) if x.check ==
         "leader-routed producer completions"]
    assert len(f) == 1, "\n".join(x.format() for x in f)
    x = f[0]
    assert x.resource == "SmemAB" and x.task == "LoadTask" and x.line == line("pair_ab_cfg", mod.__file__)
    assert "num_bytes=32768 does not cover every producer" in x.message
    assert x.expected == ("num_bytes=65536: num_bytes_per_warp_per_cta 32768 x 1 producing warp(s) x 2 producing "
                          "CTA(s) = 65536 (the 2 CTAs of a TmaUmma pair load into the leader CTA's barrier)")
    assert x.fix == "num_bytes=65536"


def test_2cta_gemm_with_one_ctas_epilogue_threads_is_rejected_with_the_derivation():
    mod = gemm()
    f = [x for x in rejected(mod.build, acc_threads=128) if x.check == "pipeline thread counts and bytes"]
    assert len(f) == 1, "\n".join(x.format() for x in f)
    x = f[0]
    assert x.resource == "TmemC" and x.task == "StoreTask" and x.line == line("pair_acc_cfg", mod.__file__)
    assert "consumer_group is size 128, but task 'StoreTask' (4 warp(s)) makes 256 consumer arrival(s)" in x.message
    assert x.expected == ("consumer_group size 256 = 4 signaling warp(s) x 32 threads (thread arrivals, All) x 2 "
                          "CTAs of the pair (CUTLASS routes every CTA's consumer arrivals of a UmmaAsync pair to "
                          "the leader CTA)")


def test_2cta_gemm_with_the_mma_in_both_ctas_is_rejected():
    """An MMA task whose sides are not CtaLeader runs in the peer too, where it waits on a full
    barrier the pair never arms and on an accumulator empty barrier the pair never releases into."""
    mod = gemm()
    f = [x for x in rejected(mod.build, mma_signaling=SignalingThreads.All) if x.check == "cta layout consistency"]
    got = {(x.resource, x.task) for x in f}
    assert got == {("SmemAB", "MmaTask"), ("TmemC", "MmaTask")}, "\n".join(x.format() for x in f)
    ab = next(x for x in f if x.resource == "SmemAB")
    assert "SmemAB.wait() in both CTAs of each pair" in ab.message
    assert "arms only the leader CTA's full barrier of a TmaUmma pair" in ab.message
    acc = next(x for x in f if x.resource == "TmemC")
    assert "TmemC.acquire()" in acc.message and "routes every CTA's consumer arrivals of a UmmaAsync pair" in acc.message
    assert acc.fix == "pass producer_signaling_threads=SignalingThreads.CtaLeader"


def test_the_checker_catches_one_ctas_bytes_on_both_ctas():
    """Static checks bypassed: the checker, running both CTAs, finds the leader's barrier
    completing before the peer's bytes land (or a hang), naming the pair's executors."""
    mod = gemm()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = mod.build(verbose=False, exhaustive_deadlock_race_check=False, skip_validation=True,
                       ab_num_bytes=mod.CTA_AB_BYTES)
    res = run_checker(tm.program)
    assert res.verdict == "UNSAFE", res.report()
    text = "\n".join(f.message + (f.detail or "") for f in res.findings)
    assert "@peer" in text and "@leader" in text


# ------------------------------------------------------------------ PTX (sm_100a, CPU)
def _facts(ptx):
    bench = _load("cta_pair_ptx", "tools/cta_pair_ptx.py")
    return bench.facts(ptx)


# What CUTLASS's dense_gemm.py (use_2cta_instrs=True, 256x256 MMA, cluster (2, 1)) emits for the same
# facts (bench/results/cta_pair_ptx.txt): cta_group::2 MMAs only; every TMA .cta_group::2 with its
# barrier operand masked to the leader (& 0xFEFFFFF8); arrive.expect_tx of 65536 bytes (2 CTAs x 32 KiB)
# skipped in the peer CTA; tcgen05.commit cta_group::2 multicast to self|peer (empty) and 0b11
# (accumulator full); TMEM alloc / relinquish / dealloc cta_group::2. warpsched also releases the
# accumulator (both CTAs' 128 threads into the leader's barrier, init 256: a remote arrival to the
# leader, as CUTLASS's persistent example); CUTLASS's non-persistent one never releases it and
# handshakes the TMEM dealloc with the peer (a remote arrival to the peer) where warpsched uses a
# cluster barrier. 8 MMA sites: warpsched peels the first K tile (4 k-blocks x 2).
GEMM = {
    "tcgen05.mma.cta_group::2 sites": 8, "tcgen05.mma.cta_group::1 sites": 0,
    "tcgen05.commit.cta_group::2 multicast sites": 3, "tcgen05.commit multicast masks": "self|peer self|peer 0b11",
    "TMA loads (cp.async.bulk.tensor) sites": 2, "TMA loads with .cta_group::2": 2,
    "TMA barrier operand masked to the leader (& 0xFEFFFFF8)": 2, "arrive.expect_tx sites": 1,
    "arrive.expect_tx bytes": "65536", "arrive.expect_tx skipped in the peer (leader test)": 1,
    "remote arrivals (mapa + mbarrier.arrive.shared::cluster) to": "leader",
    "tcgen05.alloc / relinquish / dealloc .cta_group::2": "1/1/1", "barrier.cluster.arrive / wait": "2/2",
    "mbarrier.init": 10, "mbarrier.init arrival counts (distinct)": "1,256",
}
# split-consumer: 2 TMA buffers x (1 KiB per CTA x 2 CTAs) armed in the leader only; commits: smem_a,
# smem_b releases (self|peer, computed), the proxy release (AsyncUmma: self|peer, folded to 0b11) and the
# accumulator commit (0b11);
# remote arrivals to the leader: the proxy commit (AsyncUmma producer) and the accumulator release.
# leader-routed: the leader CTA's warp 0 arms 1 KiB x 4 warps x 2 CTAs; every warp's TMA completes on it.
PATTERNS = {
    "split_consumer": {"tcgen05.commit multicast masks": "self|peer self|peer 0b11 0b11",
                       "TMA barrier operand masked to the leader (& 0xFEFFFFF8)": 2,
                       "arrive.expect_tx bytes": "2048,2048", "arrive.expect_tx skipped in the peer (leader test)": 2,
                       "remote arrivals (mapa + mbarrier.arrive.shared::cluster) to": "leader leader",
                       "mbarrier.init arrival counts (distinct)": "1,32,256", "tcgen05.mma.cta_group::1 sites": 0},
    "leader_routed": {"tcgen05.commit multicast masks": "self|peer",
                      "TMA barrier operand masked to the leader (& 0xFEFFFFF8)": 1,
                      "arrive.expect_tx bytes": "8192", "arrive.expect_tx skipped in the peer (leader test)": 1,
                      "remote arrivals (mapa + mbarrier.arrive.shared::cluster) to": "-"},
}


def test_2cta_gemm_compiles_for_sm100a_with_the_pair_ptx_facts():
    from warpsched.verify.verdicts import VERDICTS

    mod = gemm()
    ptx = mod.compile_for_cpu().artifacts.PTX
    assert ".target sm_100a" in ptx
    got = _facts(ptx)
    assert {k: got[k] for k in GEMM} == GEMM
    assert VERDICTS.looked_up[-1] == mod.build(verbose=False, exhaustive_deadlock_race_check=False).fingerprint


@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.slow) if m == "split_consumer" else m
                                  for m in PATTERNS])
def test_seed_pair_shapes_compile_for_sm100a_and_are_proven_safe(mode):
    from warpsched.verify.verdicts import VERDICTS

    mod = pairs()
    ptx = mod.compile_for_cpu(mode).artifacts.PTX
    got = _facts(ptx)
    assert {k: got[k] for k in PATTERNS[mode]} == PATTERNS[mode]
    tm = mod.build(mode, verbose=False)
    assert tm.fingerprint == VERDICTS.looked_up[-1]
    res = tm.result.checker
    assert res.verdict == "SAFE", res.report()
    assert {ex.name.split("@")[1] for eng, _ in res.runs for ex in eng.execs} == {"leader", "peer"}


def test_the_pair_split_consumer_kernel_is_the_bundled_examples_configuration():
    """The kernel's pipelines are the ones src/warpsched/examples/split_consumer.py declares for a
    pair (types, stages, bytes, groups, signaling, layout): the seed's shape, lowered."""
    from warpsched.examples import split_consumer

    mod = pairs()
    kern = {r.name: r.pipeline_config for r in mod.build_split(verbose=False, exhaustive_deadlock_race_check=False)
            .resource_dependency_graph if r.pipeline_config is not None}
    ex = {r.name: r.pipeline_config for r in split_consumer.build(verbose=False, kind="umma", cluster=(2, 1, 1, 1),
                                                                  exhaustive_deadlock_race_check=False)
          .resource_dependency_graph if r.pipeline_config is not None}
    fields = ("pipeline_type", "num_stages", "producer_signaling_threads", "consumer_signaling_threads",
              "consumer_wait_signaling_threads", "cta_layout_vmnk", "producer_size", "consumer_size")
    for name in ("smem_a", "smem_b", "proxy", "tmem_c"):
        assert [getattr(kern[name], f) for f in fields] == [getattr(ex[name], f) for f in fields], name
    # bytes: the example's tile is 16 KiB, the kernel's 1 KiB; both x 1 warp x 2 CTAs
    for name in ("smem_a", "smem_b"):
        for cfg in (kern[name], ex[name]):
            assert cfg.num_bytes == cfg.num_bytes_per_warp_per_cta * 1 * 2


def test_gated_verbs_in_a_task_running_in_both_ctas_are_skipped_in_the_peer():
    """A task with one CtaLeader side and one All side runs in both CTAs; in the peer the gated
    verb is a no-op that still advances its counter (the lowering emits the same)."""
    from warpsched.verify.checker.model import compile_program

    tm = pairs().build_split(verbose=False, exhaustive_deadlock_race_check=False)
    plan = SyncPlan(tm.program)
    store = next(t for t in tm.tasks if t.name == "StoreTask")
    assert not plan.leader_only(store)
    comp = compile_program(tm.program)
    mma = [ex for ex in comp.executors if ex.task.name == "MmaTask"]
    assert [ex.name for ex in mma] == ["MmaTask@leader"]
    load_peer = next(ex for ex in comp.executors if ex.name == "LoadA@peer")
    acq = next(i.action for i in load_peer.program if i.action is not None
               and i.action.step.kind is StepKind.ProducerAcquire)
    # the peer waits on its own empty barrier and arms nothing: the leader arms the pair's full barrier
    assert comp.barriers[acq.barrier_base].label == "smem_a@peer.empty[0]" and acq.arrivals == 0
    assert comp.barriers[acq.deliver_base].label == "smem_a@leader.full[0]"
