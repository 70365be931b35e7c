"""Each class of bug the exhaustive checker must catch, with its counterexample, and the
fixed twin of each proven SAFE."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import (Buf, Group, aliased_pair, async_cfg, program, task,  # noqa: E402
                                   tma_cfg)
from warpsched import (PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, domain_loop, schedule, trip_count,  # noqa: E402
                       when_false, when_true)
from warpsched.verify.checker import run_checker  # noqa: E402

HERE = os.path.basename(__file__)


def _line(fn, marker):
    """Line number of the first source line of ``fn`` containing ``marker``."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if marker in text:
            return start + i
    raise AssertionError(marker)


def _unsafe(result, kind_word):
    assert result.verdict == "UNSAFE", result.report()
    errs = [f for f in result.findings if f.severity == "error"]
    assert errs, result.report()
    hit = [f for f in errs if kind_word in f.message]
    assert hit, [f.message for f in errs]
    for f in hit:
        assert f.check == "exhaustive interleaving"
        assert f.task and f.resource and f.location is not None and f.location.line
        assert "timeline" in f.detail
    return hit


def _safe(result):
    assert result.verdict == "SAFE", result.report()
    assert not [f for f in result.findings if f.severity == "error"]
    assert "Result: SAFE" in result.report()


# ------------------------------------------------------------------ missing commit
def _producer_consumer(commit=True, extra_wait=False, stages=2, trip=8):
    buf = Buf(name="Buf", pipeline_config=async_cfg(stages=stages))

    @schedule
    def prod(b):
        with domain_loop(0, trip, 1):
            b.acquire()
            b.fill()
            if commit:
                b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, trip, 1):
            b.wait()
            b.read()
            b.release()
        if extra_wait:
            b.wait()  # one wait more than was produced
            b.read()
            b.release()

    return program([task("Producer", prod(buf), dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)]), cons


def test_missing_commit_deadlocks():
    # one iteration: the consumer waits for a stage that is never committed (at 8 iterations
    # the producer blocks first, on the stage that is never released)
    prog, cons = _producer_consumer(commit=False, trip=1)
    hit = _unsafe(run_checker(prog), "deadlock")
    f = next(f for f in hit if f.task == "Consumer")
    assert f.location.line == _line(cons.fn, "b.wait()")
    assert "Buf.full[0]" in f.message and "32 of 32 arrival(s) still pending" in f.message


def test_missing_commit_fixed_is_safe():
    _safe(run_checker(_producer_consumer(commit=True)[0]))


# ------------------------------------------------------------------ consumer waits more than produced
def test_consumer_waits_more_than_produced():
    prog, cons = _producer_consumer(extra_wait=True)
    res = run_checker(prog)
    hit = _unsafe(res, "deadlock")
    assert any(f.location.line == _line(cons.fn, "one wait more") for f in hit)
    assert "blocked:" in hit[0].detail


# ------------------------------------------------------------------ wrong arrival count
def _arrivals(consumer_group_size, consumer_warps=4):
    buf = Buf(name="Tile", pipeline_config=async_cfg(stages=2, cons=consumer_group_size))

    @schedule
    def prod(b):
        with domain_loop(0, 4, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, 4, 1):
            b.wait()
            b.read()
            b.release()

    return program([task("Producer", prod(buf), dst=[buf], warp=4),
                    task("Epilogue", cons(buf), src=[buf], warp=0, warps=consumer_warps)]), cons


def test_consumer_group_too_small_is_an_over_arrival():
    prog, cons = _arrivals(64)  # 4 warps release: 128 arrivals per phase of an init-64 barrier
    res = run_checker(prog)
    hit = _unsafe(res, "barrier protocol error")
    assert hit[0].location.line == _line(cons.fn, "b.release()")
    assert "Tile.empty[0] received 128 arrival(s) with only 64 pending" in hit[0].message
    assert "at most 64 arrival(s)" in hit[0].expected


def test_consumer_group_too_large_deadlocks():
    prog, _ = _arrivals(256)
    hit = _unsafe(run_checker(prog), "deadlock")
    assert any("Tile.empty" in f.message and "128 of 256 arrival(s) still pending" in f.detail for f in hit)


def test_consumer_group_matching_task_warps_is_safe():
    _safe(run_checker(_arrivals(128)[0]))


# ------------------------------------------------------------------ lanes
def _lanes(cfg_stride, lanes=2, stages=4):
    stride = (1, 1, cfg_stride, cfg_stride)
    buf = Buf(name="Scores", pipeline_config=async_cfg(stages=stages, interleave_stride=stride))

    @schedule
    def prod(b):
        with domain_loop(0, 8, 1):
            b.acquire()
            b.fill()
            b.commit()

    tasks = [task("Producer", prod(buf), dst=[buf], warp=8)]
    for lane in range(lanes):
        @schedule
        def lane_sched(b, lane=lane):
            with domain_loop(lane, 8, lanes):
                b.wait()
                b.read()
                b.release()

        tasks.append(task(f"Lane{lane}", lane_sched(b=buf), src=[buf], warp=4 * lane))
    return program(tasks)


def test_domain_lanes_with_matching_stride_are_safe():
    _safe(run_checker(_lanes(cfg_stride=2)))


def test_lane_collision_with_wrong_stride():
    # the config says stride 1 while the sibling tasks step by 2: both lanes walk stage 0, 1, ...
    res = run_checker(_lanes(cfg_stride=1))
    assert res.verdict == "UNSAFE", res.report()
    errs = [f for f in res.findings if f.severity == "error"]
    assert any(f.task in ("Lane0", "Lane1") or "Lane" in (f.detail or "") for f in errs)


def test_warp_lanes_are_modelled_per_warp():
    buf = Buf(name="Ring", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=4, producer_group=Group(32), consumer_group=Group(32), interleave_stride=2))

    @schedule
    def prod(b):
        with domain_loop(0, 8, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, 8, 1):
            b.wait()
            b.read()
            b.release()

    res = run_checker(program([task("Producer", prod(buf), dst=[buf], warp=0, warps=2),
                               task("Consumer", cons(buf), src=[buf], warp=2, warps=2)]))
    _safe(res)
    assert "Producer.w0" in res.report() and "Consumer.w1" in res.report()


# ------------------------------------------------------------------ phase error beyond num_stages
def _batched_release(batched=True, trip=2):
    """advance_on_wait consumer that releases all stages only after the loop: correct while
    the loop is no longer than num_stages (the static trip count here), wrong beyond."""
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=2, advance_on_wait=True))

    @schedule
    def prod(b):
        with domain_loop(0, trip, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, trip, 1):
            b.wait()
            b.read()
            if not batched:
                b.release()
        if batched:
            b.release()
            b.release()

    return program([task("Producer", prod(buf), dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)]), prod


def test_bug_beyond_num_stages_is_exact_for_compile_time_counts():
    # two iterations never lap the 2-stage ring: exactly 2 is safe, exactly 3 deadlocks
    _safe(run_checker(_batched_release(True, trip=2)[0]))
    hit = _unsafe(run_checker(_batched_release(True, trip=3)[0]), "deadlock")
    assert any("trip counts" in f.detail and "3" in f.detail for f in hit), [f.detail for f in hit]


def test_bug_beyond_num_stages_is_caught_for_every_loop_length():
    prog, prod = _batched_release(True, trip=trip_count("K"))
    hit = _unsafe(run_checker(prog), "deadlock")
    f = next(f for f in hit if f.task == "Producer")
    assert f.location.line == _line(prod.fn, "b.acquire()")
    # the counterexample starts a third producer iteration (longer than num_stages = 2) whose
    # acquire of stage 0 on its second lap (parity 0) never completes
    assert f.detail.count("ProducerCommit(Ring)") == 2 and "iter (last)" in f.detail
    assert "Ring.empty[0]: waits for the phase with parity 0" in f.message


def test_release_every_iteration_is_safe():
    _safe(run_checker(_batched_release(False)[0]))


# ------------------------------------------------------------------ aliasing race
def _aliasing(release_first=True):
    smem, alloc_a, alloc_b = aliased_pair()
    sp = Buf(name="TileSP", pipeline_config=async_cfg(stages=1), allocs=(alloc_a,))
    vec = Buf(name="ScratchVec", allocs=(alloc_b,))

    @schedule
    def writer(a):
        with domain_loop(0, 4, 1):
            a.acquire()
            a.fill()
            a.commit()

    @schedule
    def reader(a, v):
        with domain_loop(0, 4, 1):
            a.wait()
            a.read()
            if release_first:
                a.release()
                v.read()  # scratch aliases the tile: read after release
            else:
                v.read()
                a.release()

    return program([task("WriterTask", writer(sp), dst=[sp]),
                    task("ReaderTask", reader(sp, vec), src=[sp, vec], warp=1)],
                   smem=smem), reader


def test_aliasing_race_after_release():
    prog, reader = _aliasing(True)
    res = run_checker(prog)
    hit = _unsafe(res, "race")
    assert "TileSP <-> ScratchVec" in res.report()
    assert any("TileSP" in f.message and "ScratchVec" in f.message for f in hit)


def test_aliasing_inside_the_pipeline_window_is_safe():
    _safe(run_checker(_aliasing(False)[0]))


# ------------------------------------------------------------------ WGMMA release before wait
def _wgmma(release_before_wait=True):
    smem = Buf(name="SmemA", pipeline_config=tma_cfg(stages=2))

    @schedule
    def load(s):
        with domain_loop(0, 4, 1):
            s.acquire()
            s.fill()
            s.commit()

    @schedule
    def mma(s):
        with domain_loop(0, 4, 1):
            s.wait()
            s.wgmma()
            if release_before_wait:
                s.release()
                s.wgmma_wait(pending=0)
            else:
                s.wgmma_wait(pending=0)
                s.release()

    return program([task("Load", load(smem), dst=[smem]), task("Mma", mma(smem), src=[smem], warp=1)]), load


def test_wgmma_release_before_wait_is_a_race():
    prog, load = _wgmma(True)
    hit = _unsafe(run_checker(prog), "race")
    assert any("WGMMA reads until wgmma.wait_group" in f.message for f in hit)
    # the load re-acquires (and refills) the stage the wgmma is still reading
    assert any(f.location.line in (_line(load.fn, "s.fill()"), _line(load.fn, "s.acquire()")) for f in hit)


def test_wgmma_wait_before_release_is_safe():
    _safe(run_checker(_wgmma(False)[0]))


# ------------------------------------------------------------------ PDL
def _pdl(ordered=True):
    pw = PdlWaitBarrier(name="PdlWait")
    pl = PdlLaunchBarrier(name="PdlLaunch")
    flag = Buf(name="Ready", pipeline_config=async_cfg(stages=1))

    @schedule
    def waiter(w, f):
        w.wait_griddep()
        f.acquire()
        f.fill()
        f.commit()

    @schedule
    def launcher(f, lnch):
        if ordered:
            f.wait()
        lnch.launch_griddep()
        if ordered:
            f.release()

    tasks = [task("Waiter", waiter(pw, flag), src=[pw], dst=[flag]),
             task("Launcher", launcher(flag, pl) if ordered else launcher(flag, pl), src=[flag] if ordered else [],
                  dst=[pl], warp=1)]
    return program(tasks), launcher


def test_pdl_launch_before_wait():
    prog, launcher = _pdl(False)
    hit = _unsafe(run_checker(prog), "PDL")
    assert hit[0].location.line == _line(launcher.fn, "launch_griddep")
    assert hit[0].task == "Launcher"


def test_pdl_launch_after_wait_is_safe():
    _safe(run_checker(_pdl(True)[0]))


# ------------------------------------------------------------------ when_true branch bug
def _branches(consumer_false_branch_waits=True):
    buf = Buf(name="Maybe", pipeline_config=async_cfg(stages=2))
    meta = Buf(name="Meta")

    @schedule
    def prod(m, b):
        with domain_loop(0, 4, 1):
            needed = m.decide()
            with when_true(needed, key="tile_needed"):
                b.acquire()
                b.fill()
                b.commit()

    @schedule
    def cons(m, b):
        with domain_loop(0, 4, 1):
            needed = m.decide()
            with when_true(needed, key="tile_needed"):
                b.wait()
                b.read()
                b.release()
            if consumer_false_branch_waits:
                with when_false(needed, key="tile_needed"):
                    b.wait()  # bug: nothing was produced on this branch
                    b.release()

    return program([task("Producer", prod(meta, buf), src=[meta], dst=[buf]),
                    task("Consumer", cons(meta, buf), src=[meta, buf], warp=1)]), cons


def test_bug_only_in_when_false_branch():
    prog, cons = _branches(True)
    hit = _unsafe(run_checker(prog), "deadlock")
    assert any(f.location.line == _line(cons.fn, "bug: nothing was produced") for f in hit)
    assert any("->F" in f.detail for f in hit)  # the counterexample takes the false branch


def test_correlated_branches_are_safe():
    _safe(run_checker(_branches(False)[0]))
