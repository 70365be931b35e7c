"""The seed's pattern kernels (examples/hopper/patterns) traced and compiled for sm_90a on the
CPU with fake tensors, their PTX barrier traffic pinned with derivations, and the programs the
kernels build (with plain-int loop bounds) checked on the CPU.

The same kernels run on the H200: ``python3 tools/run_patterns_gpu.py`` (31/31 single-CTA cases
correct, and the 2-CTA variants; docs/patterns.md has the table)."""
from __future__ import annotations

import importlib
import os
import sys
import warnings

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper", "patterns"))

import _path  # noqa: E402,F401 (pins CUTE_DSL_ARCH=sm_90a before cutlass compiles anything)

import warpsched  # noqa: E402
from warpsched.verify.verdicts import VERDICTS  # noqa: E402

PATTERNS = ("mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx", "cp.async.bulk.tensor",
            "tcgen05", "wgmma", "elect.sync")

# (module, compile kwargs) -> PTX lines containing each pattern. elect.sync: 1 per mbarrier.init
# (init by one elected thread) + 1 per arm/TMA issue site that elects inside a full warp.
EXPECTED = {
    # 1 stage: init full + empty. arrive = producer commit + consumer release. try_wait = acquire +
    # wait + producer_tail (1 stage).
    ("pingpong", "async_async"): {"mbarrier.init": 2, "mbarrier.arrive": 2, "mbarrier.try_wait": 3,
                                  "expect_tx": 0, "cp.async.bulk.tensor": 0},
    # TmaAsync: acquire arms 128 bytes (arrive.expect_tx, counted in arrive) and write_next's TMA
    # completes them; commit emits nothing. try_wait as above.
    ("pingpong", "tma_async"): {"mbarrier.init": 2, "mbarrier.arrive": 2, "mbarrier.try_wait": 3,
                                "expect_tx": 1, "cp.async.bulk.tensor": 1},
    # 3 pipelines x 4 stages x (full + empty) = 24 inits. arrive = 2 expect_tx (LoadA / LoadB) +
    # proxy commit + 3 releases in the compute task. try_wait = 2 acquires + 2 waits + proxy acquire
    # (sync task) + proxy wait (compute task) + 3 producer tails x 4 stages.
    ("split_consumer", None): {"mbarrier.init": 24, "mbarrier.arrive": 6, "mbarrier.try_wait": 18,
                               "expect_tx": 2, "cp.async.bulk.tensor": 2},
    # TaskWarpLeader: the leader warp acquires and arms (1 try_wait + 1 expect_tx), the other 3 warps
    # only wait for the empty stage (1 try_wait); every warp issues its TMA part (1 site).
    # arrive = expect_tx + release; try_wait = 2 + consumer wait + producer_tail (4 stages).
    ("leader_routed", None): {"mbarrier.init": 8, "mbarrier.arrive": 2, "mbarrier.try_wait": 7,
                              "expect_tx": 1, "cp.async.bulk.tensor": 1},
    # 2-CTA clusters: the same barrier sites as the single-CTA kernels (the cluster changes where the
    # arrivals go, not how many sites emit them; see the cluster tests below).
    ("split_consumer", "cluster"): {"mbarrier.init": 24, "mbarrier.arrive": 6, "mbarrier.try_wait": 18,
                                    "expect_tx": 2, "cp.async.bulk.tensor": 2},
    ("leader_routed", "cluster"): {"mbarrier.init": 8, "mbarrier.arrive": 2, "mbarrier.try_wait": 7,
                                   "expect_tx": 1, "cp.async.bulk.tensor": 1},
    # 8 stages; each warp arrives on its own lane's stage: arrive = commit + release; try_wait =
    # acquire + wait (no producer_tail on an interleaved lane).
    ("interleaved", "warp_lane"): {"mbarrier.init": 16, "mbarrier.arrive": 2, "mbarrier.try_wait": 2,
                                   "expect_tx": 0, "cp.async.bulk.tensor": 0},
    # tiles (8 stages) + partials (4) = 24 inits. Producer: 4 unrolled acquire/arm/TMA; wait task:
    # tiles wait + partials acquire + partials commit; release task: 4 unrolled partials wait +
    # tiles release + partials release; producer_tail of the dense tiles producer: 8 stages.
    # arrive = 4 + 1 + 4 + 4 = 13; try_wait = 4 + 2 + 4 + 8 = 18.
    ("interleaved", "per_role"): {"mbarrier.init": 24, "mbarrier.arrive": 13, "mbarrier.try_wait": 18,
                                  "expect_tx": 4, "cp.async.bulk.tensor": 4},
    # scores + probs, 2 stages each = 8 inits. Mma: scores acquire / commit, probs wait / release;
    # each of the 2 softmax siblings: scores wait / release, probs acquire / commit; producer_tail of
    # the dense scores producer: 2 stages. arrive = 2 + 2 x 2 = 6; try_wait = 2 + 2 x 2 + 2 = 8.
    ("interleaved", "domain_lane"): {"mbarrier.init": 8, "mbarrier.arrive": 6, "mbarrier.try_wait": 8,
                                     "expect_tx": 0, "cp.async.bulk.tensor": 0},
}


def _counts(ptx):
    lines = ptx.splitlines()
    return {p: sum(p in line for line in lines) for p in PATTERNS}


@pytest.fixture(scope="module")
def compiled():
    out = {}
    for (mod, variant) in EXPECTED:
        m = importlib.import_module(mod)
        kw = {}
        if mod == "pingpong":
            kw = dict(kind=variant)
        elif mod == "interleaved":
            kw = dict(mode=variant)
        elif variant == "cluster":
            kw = dict(cluster=True)
        out[(mod, variant)] = m.compile_for_cpu(**kw).artifacts.PTX
        TRACED[(mod, variant)] = VERDICTS.looked_up[-1]
    return out


TRACED = {}  # (module, variant) -> fingerprint of the program the kernel trace checked


@pytest.mark.parametrize("key", list(EXPECTED), ids=[f"{m}-{v}" if v else m for m, v in EXPECTED])
def test_pattern_kernel_ptx(compiled, key):
    ptx = compiled[key]
    assert ".target sm_90a" in ptx
    got = _counts(ptx)
    want = EXPECTED[key]
    assert {k: got[k] for k in want} == want
    assert got["tcgen05"] == 0 and got["wgmma"] == 0


def test_tma_issue_is_not_under_a_lane_branch(compiled):
    """cute.copy of a TMA load elects one thread with elect.sync over the whole warp; issuing it
    under `if lane == 0` hung on the H200. In the ping-pong TMA kernel every elect.sync follows
    warp-uniform control flow only (no %laneid predicate between the loop head and the copy)."""
    ptx = compiled[("pingpong", "tma_async")].splitlines()
    tma = next(i for i, ln in enumerate(ptx) if "cp.async.bulk.tensor" in ln)
    window = ptx[max(0, tma - 12):tma]
    assert any("elect.sync" in ln for ln in window)
    assert not any("setp.ne.b32" in ln and "%r5, 0" in ln for ln in window), "\n".join(window)


# ------------------------------------------------------------------ the kernels' programs on the CPU
def _build(mod, variant, **kw):
    m = importlib.import_module(mod)
    kw.setdefault("verbose", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        if mod == "pingpong":
            return m.build(kind=variant, **kw)
        if mod == "interleaved":
            return m.build(mode=variant, **kw)
        if variant == "cluster":
            return m.build(cluster=True, **kw)
        return m.build(**kw)


@pytest.mark.parametrize("key", list(EXPECTED), ids=[f"{m}-{v}" if v else m for m, v in EXPECTED])
def test_kernel_programs_pass_the_static_checks(compiled, key):
    """... and the CPU build is the program the kernel's trace checked (equal fingerprints)."""
    tm = _build(*key, exhaustive_deadlock_race_check=False)
    assert tm.result.errors == []
    assert tm.fingerprint == TRACED[key]


@pytest.mark.parametrize("key", list(EXPECTED), ids=[f"{m}-{v}" if v else m for m, v in EXPECTED])
def test_kernel_programs_proven_safe(key):
    """The programs the kernels lower, proven for every trip count their declared bounds allow
    (cache_verdict: when the kernel trace already checked this very program, its verdict is reused)."""
    tm = _build(*key, cache_verdict=True)
    assert tm.result.checker.verdict == "SAFE", tm.result.checker.report()


# ------------------------------------------------------------------ Blackwell: the seed's UMMA variants
# warp-lane TmaUmma (8 stages, stride 4): init 8 + 8; arrive = the lane's arrive.expect_tx at acquire;
# try_wait = acquire + wait (no producer_tail on a lane); the UMMA release is one tcgen05.commit.
# domain-lane UmmaAsync / AsyncUmma: init 2 x (2 + 2); thread arrivals = the siblings' probs commit and
# scores release (2 sites x 2 siblings); tcgen05.commit = the MMA task's scores commit and probs release;
# try_wait = MMA task (scores acquire, probs wait) + 2 siblings x (scores wait, probs acquire) + the
# scores producer_tail (one runtime loop over the stages).
UMMA = {
    "warp_lane_tma_umma": {"mbarrier.init": 16, "mbarrier.arrive": 1, "mbarrier.try_wait": 2, "expect_tx": 1,
                           "cp.async.bulk.tensor": 1, "tcgen05.commit": 1, "wgmma": 0},
    "domain_lane_umma": {"mbarrier.init": 8, "mbarrier.arrive": 4, "mbarrier.try_wait": 7, "expect_tx": 0,
                         "cp.async.bulk.tensor": 0, "tcgen05.commit": 2, "wgmma": 0},
}


def _umma_module():
    sys.path.insert(0, os.path.join(ROOT, "examples", "blackwell", "patterns"))
    return importlib.import_module("umma_patterns")


@pytest.mark.parametrize("mode", list(UMMA))
def test_seed_umma_variants_compile_for_sm100a(mode):
    ptx = _umma_module().compile_for_cpu(mode).artifacts.PTX
    assert ".target sm_100a" in ptx
    lines = ptx.splitlines()
    assert {p: sum(p in ln for ln in lines) for p in UMMA[mode]} == UMMA[mode]


@pytest.mark.parametrize("mode", list(UMMA))
def test_seed_umma_variants_are_accepted(mode):
    m = _umma_module()
    tm = m.build_warp_lane(verbose=False) if mode == "warp_lane_tma_umma" else m.build_domain_lane(verbose=False)
    assert tm.result.errors == []


# ------------------------------------------------------------------ the seed's 2-CTA variants
def _lines(ptx, text):
    return [ln.strip() for ln in ptx.splitlines() if text in ln]


def test_leader_routed_cluster_ptx(compiled):
    """CtaLeader | TaskWarpLeader over (1, 2, 1, 1) with multicast: each CTA's leader warp arms its
    own barrier once for the bytes of 4 warps x 2 CTAs (1 KiB x 8 = 8192), each warp's TMA part is
    multicast into both CTAs, and each consumer release reaches both CTAs (mapa + remote arrive)."""
    ptx = compiled[("leader_routed", "cluster")]
    tma = _lines(ptx, "cp.async.bulk.tensor")
    assert len(tma) == 1 and "multicast::cluster" in tma[0] and "complete_tx" in tma[0]
    arm = ptx.splitlines()
    i = next(k for k, ln in enumerate(arm) if "expect_tx" in ln)
    reg = arm[i].split(",")[-1].strip(" ;")
    assert any(f"mov.b32 \t{reg}, 8192;" in ln or f"mov.b32 {reg}, 8192;" in ln for ln in arm[i - 3:i]), arm[i - 3:i + 1]
    assert len(_lines(ptx, "mapa.shared::cluster")) == 1
    assert len(_lines(ptx, "mbarrier.arrive.shared::cluster")) == 1
    assert _lines(ptx, "barrier.cluster.arrive") and _lines(ptx, "barrier.cluster.wait")
    # the single-CTA kernel: no multicast, no remote arrival
    plain = compiled[("leader_routed", None)]
    assert "multicast::cluster" not in plain and not _lines(plain, "mapa")


def test_split_consumer_cluster_keeps_releases_local(compiled):
    """Wait All / release CtaLeader over (1, 2, 1, 1) without multicast: every CTA is the leader of its
    (V = 1) CTA group and its stages are its own, so every release stays in the CTA (no mapa, no
    remote arrive); the cluster only adds the init barrier across the cluster."""
    ptx = compiled[("split_consumer", "cluster")]
    assert not _lines(ptx, "mapa") and not _lines(ptx, "mbarrier.arrive.shared::cluster")
    assert "multicast::cluster" not in ptx
    assert _lines(ptx, "barrier.cluster.arrive") and _lines(ptx, "barrier.cluster.wait")


def test_split_consumer_cluster_compiles_for_sm100a():
    ptx = importlib.import_module("split_consumer").compile_for_cpu("sm_100a", cluster=True).artifacts.PTX
    assert ".target sm_100a" in ptx
    assert {k: v for k, v in _counts(ptx).items() if k in EXPECTED[("split_consumer", "cluster")]} == \
        EXPECTED[("split_consumer", "cluster")]


def test_cluster_kernel_configs_are_the_seed_shapes():
    from warpsched import SignalingThreads as S

    lr = _build("leader_routed", "cluster", exhaustive_deadlock_race_check=False)
    (tile,) = [r for r in lr.resource_dependency_graph if r.name == "tile"]
    cfg = tile.pipeline_config
    assert cfg.cluster_shape == (1, 2, 1, 1) and cfg.producer_signaling_threads == S.CtaLeader | S.TaskWarpLeader
    assert cfg.num_bytes == cfg.num_bytes_per_warp_per_cta * 4 * 2
    sc = _build("split_consumer", "cluster", exhaustive_deadlock_race_check=False)
    for r in sc.resource_dependency_graph:
        if r.name in ("smem_a", "smem_b"):
            c = r.pipeline_config
            assert c.cluster_shape == (1, 2, 1, 1)
            assert c.consumer_wait_signaling_threads == S.All and c.consumer_signaling_threads == S.CtaLeader


# ------------------------------------------------------------------ documented gaps
# CTA pairs (V = 2) are lowered for TmaUmma / UmmaAsync / AsyncUmma through CUTLASS's pair-aware classes
# (tests/test_cta_pairs.py); a TmaAsync pipeline over a V = 2 group is checked but refused by name
# (PipelineTmaAsync does not route a pair). CtaLeader releases on a multicast V = 1 pipeline are
# refused for the reason the error gives.
CLUSTER_GAPS = {
    "split_hopper_v2": ("smem_a", "TmaAsync pipelines over a (2, 1, 1, 1) cluster are checked but not lowered"),
    "leader_release_mcast": ("tile", "consumer_signaling_threads=CtaLeader on a multicast pipeline"),
}


@pytest.mark.parametrize("which", list(CLUSTER_GAPS))
def test_cluster_gaps_are_refused_by_the_lowering_with_a_named_error(which):
    import subprocess

    script = os.path.join(ROOT, "tests", "_patterns_cluster_probe.py")
    p = subprocess.run([sys.executable, script, which], capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    resource, text = CLUSTER_GAPS[which]
    assert "LoweringError" in out and text in out and f"resource: {resource}" in out, out[-2000:]
