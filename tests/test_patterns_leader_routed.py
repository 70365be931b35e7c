"""Seed pattern 4, leader-routed completions, end to end on the bundled example
(src/warpsched/examples/leader_routed.py): 4 TMA producer warps, the first one arming the
transaction barrier for all (TaskWarpLeader), and the 2-CTA cluster shape with
CtaLeader | TaskWarpLeader and multicast. num_bytes must equal num_bytes_per_warp_per_cta x
producing warps x producing CTAs, and the error states that exact value."""
from __future__ import annotations

import warnings

import pytest

import warpsched
from warpsched import SignalingThreads
from warpsched.examples import leader_routed
from warpsched.protocol import expected_num_bytes

from test_checks_support import line

PATH = leader_routed.__file__
CHECK = "leader-routed producer completions"
CLUSTER = dict(cluster=(1, 2, 1, 1), signaling=SignalingThreads.CtaLeader | SignalingThreads.TaskWarpLeader,
               mcast=(True, True))


def build(**kw):
    kw.setdefault("verbose", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        return leader_routed.build(**kw)


def rejected(**kw):
    kw.setdefault("exhaustive_deadlock_race_check", False)
    with pytest.raises(warpsched.ValidationError) as info:
        build(**kw)
    return info.value.findings


def only(findings, resource="tile"):
    hits = [f for f in findings if f.check == CHECK]
    assert len(hits) == 1, "\n".join(f.format() for f in findings)
    f = hits[0]
    assert f.fix and f.expected, f.format()
    assert f.location.file.endswith("examples/leader_routed.py") and f.line == line("lr_cfg", PATH), f.format()
    assert f.resource == resource
    return f


@pytest.mark.parametrize("kw", [{}, CLUSTER], ids=["task-warp-leader", "2cta-cta-leader-mcast"])
def test_accepted_and_proven_safe(kw):
    tm = build(**kw)
    assert tm.result.errors == []
    assert tm.result.checker.verdict == "SAFE", tm.result.checker.report()
    cfg = tm.tasks[0].dst_resources[0].pipeline_config
    want = 2048 * 4 * (2 if kw else 1)
    assert cfg.num_bytes == want
    assert expected_num_bytes(cfg, 4)[0] == want


def test_task_warp_leader_num_bytes_must_cover_every_warp():
    f = only(rejected(num_bytes=2048))
    assert f.task == "LoadTask"
    assert "num_bytes=2048 does not cover" in f.message
    assert f.expected == ("num_bytes=8192: num_bytes_per_warp_per_cta 2048 x 4 producing warp(s) x "
                          "1 producing CTA(s) = 8192")


def test_cta_leader_num_bytes_must_cover_every_cta_of_the_cluster():
    f = only(rejected(num_bytes=8192, **CLUSTER))  # one CTA's worth: the other CTA's bytes are missing
    assert f.task == "LoadTask"
    assert "num_bytes=8192 does not cover" in f.message
    assert f.expected == ("num_bytes=16384: num_bytes_per_warp_per_cta 2048 x 4 producing warp(s) x "
                          "2 producing CTA(s) = 16384")


def test_too_many_bytes_is_rejected_too():
    f = only(rejected(num_bytes=4 * 8192))
    assert "= 8192" in f.expected


def test_cta_layout_must_be_inspectable():
    """Refused by the PipelineConfig factory (no resource yet): the finding names the factory call."""
    class OpaqueLayout:  # e.g. a runtime layout: no static (v, m, n, k) shape
        shape = None

    f = only(rejected(cluster=OpaqueLayout()), resource=None)
    assert "cannot be inspected" in f.message
    assert "(v, m, n, k) tuple" in f.expected


def test_wrong_bytes_would_hang_the_barrier_in_the_checker():
    """Past the static check, the checker executes the transaction bytes: the leader arms
    2048 but 4 warps deliver 8192, so the barrier over-completes / never balances."""
    from warpsched.verify.checker import run_checker

    tm = build(num_bytes=2048, skip_validation=True, exhaustive_deadlock_race_check=False)
    res = run_checker(tm.program)
    assert res.verdict == "UNSAFE", res.report()
