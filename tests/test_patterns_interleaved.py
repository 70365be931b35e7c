"""Seed pattern 3, interleaved pipelines, end to end on the bundled examples
(src/warpsched/examples/interleaved.py): warp-lane (4-warp tasks, 8 stages, stride 4), per-role
(1, 1, 4, 1) with advance_on_wait (dense producer, 4-warp wait task, 1-warp release task) and
domain-lane (two 4-warp softmax siblings, (1, 1, 2, 2) / (2, 2, 1, 1)). Each is accepted and
proven SAFE; every interleaving rule of the seed has a rejected twin whose finding names the
check, the task, the resource and the line."""
from __future__ import annotations

import warnings

import pytest

import warpsched
from warpsched.examples import interleaved

from test_checks_support import line

PATH = interleaved.__file__
CHECK = "interleaved pipelines"


def build(variant, **kw):
    kw.setdefault("verbose", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        return interleaved.build(variant=variant, **kw)


def rejected(variant, **kw):
    kw.setdefault("exhaustive_deadlock_race_check", False)
    with pytest.raises(warpsched.ValidationError) as info:
        build(variant, **kw)
    return info.value.findings


def find(findings, *, task, resource, line_no, text, check=CHECK):
    hits = [f for f in findings if f.check == check and f.task == task and f.resource == resource
            and (line_no is None or f.line == line_no) and text in f.message]
    assert hits, f"no [{check}] {text!r} finding for task={task!r} resource={resource!r} line={line_no}; got:\n" + \
        "\n".join(f"{f.check} | {f.task} | {f.resource} | {f.line} | {f.message}" for f in findings)
    f = hits[0]
    assert f.fix and f.expected, f.format()
    assert f.location.file.endswith("examples/interleaved.py"), f.format()
    return f


def loop_line_of(tm, task_name):
    t = next(t for t in tm.tasks if t.name == task_name)
    return t.schedule.domain_loop.location.line


# ------------------------------------------------------------------ accepted + SAFE
@pytest.mark.parametrize("variant,kw", [
    ("warp_lane", {}), ("warp_lane", dict(kind="tma_umma")),
    ("per_role", dict(num_stages=4)), ("per_role", {}),
    ("domain_lane", {}), ("domain_lane", dict(kind="umma")),
], ids=["warp-lane-async", "warp-lane-tma-umma-seed", "per-role-4-stages", "per-role-8-stages-seed",
        "domain-lane-async",
        "domain-lane-umma-seed"])
def test_accepted_and_proven_safe(variant, kw):
    tm = build(variant, **kw)
    assert tm.result.errors == []
    res = tm.result.checker
    assert res is not None and res.verdict == "SAFE", res.report() if res else None


def test_per_role_seed_config_is_the_seeds():
    tm = build("per_role", exhaustive_deadlock_race_check=False)
    assert tm.result.errors == []
    cfg = next(r for r in tm.resource_dependency_graph if r.name == "tiles").pipeline_config
    assert cfg.num_stages == 8 and cfg.strides == (1, 1, 4, 1) and cfg.advance_on_wait


def test_warp_lane_checker_splits_tasks_into_lanes():
    tm = build("warp_lane")
    report = tm.result.checker.report()
    assert "Consumers.w3" in report and "Producers.w0" in report


def test_per_role_dense_loops_are_exact_about_the_tile_count():
    """The seed's per-role shape as written (dense step-1 producer and release loops, step-4 wait
    warps) is correct exactly when the tile count is a multiple of 4: accepted for 16 tiles and
    for a runtime count declared divisible by 4; a count of 18, or an undeclared runtime count,
    leaves wait warps waiting for tiles never produced, and the counterexample says which count."""
    from warpsched import trip_count
    from warpsched.verify.checker import run_checker

    def check(num_tiles):
        tm = interleaved.build_per_role(verbose=False, exhaustive_deadlock_race_check=False, num_stages=4,
                                        num_tiles=num_tiles)
        return run_checker(tm.program)

    assert check(16).verdict == "SAFE"
    declared = check(trip_count("tiles", divisibility=4))
    assert declared.verdict == "SAFE", declared.report()
    assert "every tiles >= 1, tiles % 4 == 0" in declared.report()
    for bad, count in ((18, "Producer: 18 iteration(s)"), (trip_count("tiles"), "(tiles)")):
        res = check(bad)
        assert res.verdict == "UNSAFE", res.report()
        dl = [f for f in res.findings if f.severity == "error" and "deadlock" in f.message]
        assert dl and any(count in f.detail and "trip counts in this counterexample" in f.detail for f in dl), \
            [f.detail[-400:] for f in dl]


# ------------------------------------------------------------------ strides divide num_stages
def test_stride_must_divide_num_stages():
    """Refused by the factory, before a resource exists: the findings name the factory call's line."""
    f = rejected("warp_lane", num_stages=6)
    for role in ("producer_acquire", "producer_commit", "consumer_wait", "consumer_release"):
        hit = find(f, task=None, resource=None, line_no=line("wl_async_cfg", PATH),
                   text=f"num_stages=6 is not divisible by the {role} stride 4")
        assert "multiple of 4" in hit.expected


# ------------------------------------------------------------------ asymmetric acquire / commit
def test_asymmetric_acquire_commit_needs_advance_on_acquire_and_separate_tasks():
    f = rejected("per_role", strides=(4, 1, 1, 1))
    hit = find(f, task=None, resource="tiles", line_no=line("pr_cfg", PATH),
               text="producer_acquire stride 4 != producer_commit stride 1 needs advance_on_acquire=True")
    assert "advance_on_acquire=True" in hit.expected
    tm = build("per_role", exhaustive_deadlock_race_check=False, skip_validation=True, strides=(4, 1, 1, 1))
    producer = next(t for t in tm.tasks if t.name == "Producer")
    find(f, task="Producer", resource="tiles", line_no=producer.location.line,
         text="drives both acquire (stride 4) and commit (stride 1)")
    # with the flag set the separate-task rule still holds
    f = rejected("per_role", strides=(4, 1, 1, 1), advance_on_acquire=True)
    assert not [x for x in f if "needs advance_on_acquire" in x.message]
    find(f, task="Producer", resource="tiles", line_no=producer.location.line,
         text="drives both acquire (stride 4) and commit (stride 1)")


# ------------------------------------------------------------------ asymmetric wait / release
def test_asymmetric_wait_release_needs_advance_on_wait():
    f = rejected("per_role", advance_on_wait=False)
    hit = find(f, task=None, resource="tiles", line_no=line("pr_cfg", PATH),
               text="consumer_wait stride 4 != consumer_release stride 1 needs advance_on_wait=True")
    assert "advance_on_wait=True" in hit.expected


def test_asymmetric_wait_release_needs_separate_tasks():
    f = rejected("per_role", same_task=True)
    tm = build("per_role", same_task=True, skip_validation=True, exhaustive_deadlock_race_check=False)
    wait_task = next(t for t in tm.tasks if t.name == "WaitTask")
    hit = find(f, task="WaitTask", resource="tiles", line_no=wait_task.location.line,
               text="drives both wait (stride 4) and release (stride 1)")
    assert "separate tasks" in hit.expected


# ------------------------------------------------------------------ warp-lane: num_warps == stride
def test_warp_lane_needs_num_warps_equal_to_the_stride():
    f = rejected("warp_lane", consumer_warps=2)
    for role in ("consumer_wait", "consumer_release"):
        hit = find(f, task="Consumers", resource="tiles", line_no=line("wl_consume_loop", PATH),
                   text=f"drives {role} (stride 4) with 2 warp(s)")
        assert "num_warps == 4" in hit.expected


# ------------------------------------------------------------------ domain-lane rules
def test_domain_lane_start_must_be_compile_time():
    import cutlass

    f = rejected("domain_lane", starts=(cutlass.Int32(0), 1))
    tm = build("domain_lane", starts=(cutlass.Int32(0), 1), skip_validation=True,
               exhaustive_deadlock_race_check=False)
    ln = loop_line_of(tm, "SoftmaxLane0")
    assert ln == line("dl_softmax_loop", PATH)
    for res, role in (("scores", "consumer_wait"), ("probs", "producer_acquire")):
        hit = find(f, task="SoftmaxLane0", resource=res, line_no=ln, text=f"drives {role} (stride 2)")
        assert "compile-time lane in [0, 2)" in hit.expected


def test_domain_lane_start_must_be_below_the_stride():
    f = rejected("domain_lane", starts=(0, 2))
    hit = find(f, task="SoftmaxLane1", resource="scores", line_no=line("dl_softmax_loop", PATH),
               text="domain_loop(start=2, step=2)")
    assert "[0, 2)" in hit.expected
    find(f, task="SoftmaxLane0", resource="scores", line_no=None, text="lane(s) [1] have no domain-lane task")


def test_domain_lane_step_must_equal_the_stride():
    f = rejected("domain_lane", step=1)
    for task in ("SoftmaxLane0", "SoftmaxLane1"):
        hit = find(f, task=task, resource="scores", line_no=line("dl_softmax_loop", PATH),
                   text="step=1)")
        assert "domain_loop(lane, end, 2)" in hit.expected


def test_domain_lane_num_warps_must_differ_from_the_stride():
    """Siblings with num_warps == stride would be read as warp-lane tasks (each warp its own
    lane, both tasks on both lanes): the seed requires num_warps != stride for domain-lane."""
    f = rejected("domain_lane", softmax_warps=2)
    hit = find(f, task="SoftmaxLane0", resource="scores", line_no=line("dl_softmax_loop", PATH),
               text="num_warps")
    assert "num_warps != 2" in hit.expected


def test_domain_lane_open_and_close_strides_must_match():
    f = rejected("domain_lane", scores_strides=(1, 1, 2, 1), scores_advance_on_wait=True)
    for task in ("SoftmaxLane0", "SoftmaxLane1"):
        find(f, task=task, resource="scores", line_no=line("dl_softmax_loop", PATH),
             text="needs matching consumer_wait and consumer_release strides, got 2 and 1")


# ------------------------------------------------------------------ type support
def test_tma_async_interleaving_is_single_cta_only():
    f = rejected("per_role", cluster=(2, 1, 1, 1))
    hit = find(f, task=None, resource="tiles", line_no=line("pr_cfg", PATH),
               text="TmaAsync interleaving is limited to single-CTA pipelines")
    assert "(1, 1, 1, 1)" in hit.expected


def test_umma_async_interleaves_only_its_consumer_side_and_async_umma_only_its_producer_side():
    f = rejected("domain_lane", kind="umma", scores_strides=(2, 2, 1, 1), probs_strides=(1, 1, 2, 2))
    find(f, task=None, resource="scores", line_no=line("dl_scores_cfg_umma", PATH),
         text="UmmaAsync supports interleaving only on its consumer side")
    find(f, task=None, resource="probs", line_no=line("dl_probs_cfg_umma", PATH),
         text="AsyncUmma supports interleaving only on its producer side")


@pytest.mark.parametrize("kind,marker,name", [("umma_umma", "wl_umma_umma_cfg", "UmmaUmma"),
                                              ("clc_fetch_async", "wl_clc_cfg", "ClcFetchAsync")])
def test_types_that_never_interleave(kind, marker, name):
    f = rejected("warp_lane", kind=kind)
    hit = find(f, task=None, resource="tiles", line_no=line(marker, PATH),
               text=f"{name} pipelines do not support interleaving")
    assert hit.expected == "interleave_stride=1"
