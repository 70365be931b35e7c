"""Seed pattern 1, ping-pong, end to end on the bundled example (src/warpsched/examples/pingpong.py):
accepted by the static checks, proven SAFE by the exhaustive checker for every loop length,
and one rejected twin per requirement of the seed, each finding naming check, resource and line."""
from __future__ import annotations

import warnings

import pytest

import warpsched
from warpsched.examples import pingpong
from warpsched.verify.checker import run_checker

from test_checks_support import line

PATH = pingpong.__file__
CHECK = "ping-pong resources"


def build(**kw):
    kw.setdefault("verbose", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        return pingpong.build(**kw)


def rejected(**kw):
    kw.setdefault("exhaustive_deadlock_race_check", False)
    with pytest.raises(warpsched.ValidationError) as info:
        build(**kw)
    return info.value.findings


def only(findings, check=CHECK):
    hits = [f for f in findings if f.check == check]
    assert len(hits) == 1, "\n".join(f.format() for f in findings)
    f = hits[0]
    assert f.fix and f.expected, f.format()
    assert f.location is not None and f.location.file.endswith("examples/pingpong.py"), f.format()
    return f


@pytest.mark.parametrize("kind", ["async_async", "tma_async", "umma_async"])
def test_accepted_and_proven_safe(kind):
    """The seed's self-edge over one slot, with every synchronous-consumer pipeline type."""
    tm = build(kind=kind)
    assert tm.result.errors == []
    assert tm.result.checker is not None and tm.result.checker.verdict == "SAFE"
    # the checker is also callable directly on the program
    res = run_checker(tm.program)
    assert res.verdict == "SAFE", res.report()
    assert res.states > 0


def test_self_edge_is_what_the_example_declares():
    tm = build()
    (r, ups), = tm.resource_dependency_graph.items()
    assert ups == [r] and r.name == "SmemPP"
    producer, consumer = tm.tasks
    assert producer.dst_resources == [r] and consumer.src_resources == [r]


def test_rejected_without_pipeline_config():
    f = only(rejected(kind=None))
    assert f.resource == "SmemPP"
    assert "no pipeline_config" in f.message
    assert f.line == line("pp_producer_acquire", PATH)  # the first schedule call on the slot
    assert "AsyncAsync" in f.expected


@pytest.mark.parametrize("kind,type_name", [("tma_umma", "TmaUmma"), ("async_umma", "AsyncUmma"),
                                            ("umma_umma", "UmmaUmma")])
def test_rejected_mma_consumer_types(kind, type_name):
    f = only(rejected(kind=kind))
    assert f.resource == "SmemPP"
    assert type_name in f.message and "MMA consumer" in f.message
    assert f.line == line("pp_mma_cfg", PATH)  # the PipelineConfig factory call
    assert "synchronous consumer" in f.expected


@pytest.mark.parametrize("side,missing", [("producer", "consumed"), ("consumer", "produced")])
def test_rejected_when_used_on_one_side_only(side, missing):
    f = only(rejected(sides=(side,)))
    assert f.resource == "SmemPP"
    assert f"never {missing}" in f.message
    assert f.line == line("pp_async_async_cfg", PATH)


def test_one_sided_slot_would_deadlock_or_leak_in_the_checker_too():
    """The checker sees the same mistake at barrier level: with only the producer, the second
    acquire waits for a release that never comes (skip the static findings to reach it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        tm = pingpong.build(verbose=False, sides=("producer",), skip_validation=True)
    res = run_checker(tm.program)
    assert res.verdict == "UNSAFE"
    assert any("deadlock" in f.message for f in res.findings), res.report()
