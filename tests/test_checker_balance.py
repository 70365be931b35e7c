"""The balance check: at kernel exit every commit has been waited by each of its consumers and
released (the producer tail the lowering emits), on every path and for every trip count."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from test_checker_builders import Buf, async_cfg, program, task, tma_cfg  # noqa: E402
from warpsched import domain_loop, schedule, when_false, when_true  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402


def _line(fn, marker):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return next(start + i for i, text in enumerate(lines) if marker in text)


def _unconsumed(result):
    assert result.verdict == "UNSAFE", result.report()
    hit = [f for f in result.findings if f.severity == "error" and f.message.startswith("unconsumed commit")]
    assert hit, result.report()
    for f in hit:
        assert f.task and f.resource and f.location is not None and f.location.line
        assert "timeline" in f.detail and f.expected and f.fix
    assert "UNCONSUMED COMMIT" in result.report()
    return hit


def _safe(result):
    assert result.verdict == "SAFE", result.report()


# ------------------------------------------------------------------ a TMA stage nobody waits on
def _tma_extra_load(extra=True):
    smem = Buf(name="Tiles", pipeline_config=tma_cfg(stages=2))

    @schedule
    def load(s):
        with domain_loop(0, 4, 1):
            s.acquire()
            s.fill()
            s.commit()
        if extra:
            s.acquire()  # one more load than the consumer waits for
            s.fill()
            s.commit()

    @schedule
    def use(s):
        with domain_loop(0, 4, 1):
            s.wait()
            s.read()
            s.release()

    return program([task("Load", load(smem), dst=[smem]), task("Use", use(smem), src=[smem], warp=1)]), use


def test_tma_load_never_waited_is_an_unconsumed_commit():
    prog, use = _tma_extra_load(True)
    hit = _unconsumed(run_checker(prog))
    f = hit[0]
    assert f.task == "Use" and f.location.line == _line(use.fn, "s.wait()")
    assert "Tiles.full[" in f.message and "never consumed by Use" in f.message


def test_tma_loads_all_waited_is_safe():
    _safe(run_checker(_tma_extra_load(False)[0]))


def test_producer_without_any_consumer_hangs_in_its_tail():
    smem = Buf(name="Orphan", pipeline_config=tma_cfg(stages=2))

    @schedule
    def load(s):
        with domain_loop(0, 2, 1):  # no more loads than stages: the loop itself never blocks
            s.acquire()  # @orphan
            s.fill()
            s.commit()

    hit = _unconsumed(run_checker(program([task("Load", load(smem), dst=[smem])])))
    assert hit[0].task == "Load" and hit[0].location.line == _line(load.fn, "@orphan")
    assert "producer tail" in hit[0].message and "Orphan.empty[" in hit[0].message


# ------------------------------------------------------------------ split consumer: the wait-only task skips a wait
def _split(skip=True):
    """SyncTask waits on both tiles and signals a proxy; Compute waits on the proxy, reads both tiles
    and releases them. With ``skip`` the sync task waits on tile B only when a runtime flag is set."""
    tile_a = Buf(name="TileA", pipeline_config=tma_cfg(stages=2))
    tile_b = Buf(name="TileB", pipeline_config=tma_cfg(stages=2))
    proxy = Buf(name="Proxy", pipeline_config=async_cfg(stages=2))
    meta = Buf(name="Meta")

    @schedule
    def load(t):
        with domain_loop(0, 4, 1):
            t.acquire()
            t.fill()
            t.commit()

    @schedule
    def sync(a, b, p, m):
        with domain_loop(0, 4, 1):
            a.wait()
            if skip:
                with when_true(m.decide(), key="b_ready"):
                    b.wait()  # @sync_wait_b
            else:
                b.wait()
            p.acquire()
            p.fill()
            p.commit()

    @schedule
    def compute(p, a, b):
        with domain_loop(0, 4, 1):
            p.wait()
            a.read()
            b.read()
            a.release()
            b.release()
            p.release()

    tasks = [task("LoadA", load(tile_a), dst=[tile_a]), task("LoadB", load(tile_b), dst=[tile_b], warp=1),
             task("SyncTask", sync(tile_a, tile_b, proxy, meta), src=[tile_a, tile_b, meta], dst=[proxy], warp=2),
             task("Compute", compute(proxy, tile_a, tile_b), src=[proxy, tile_a, tile_b], warp=3)]
    graph = {proxy: [tile_a, tile_b]}
    return program(tasks, graph), sync


def test_split_consumer_wait_only_task_skipping_a_wait_is_caught():
    prog, sync = _split(True)
    res = run_checker(prog)
    assert res.verdict == "UNSAFE", res.report()
    errs = [f for f in res.findings if f.severity == "error"]
    assert any(f.task == "SyncTask" or "SyncTask" in (f.detail or "") for f in errs), res.report()


def test_split_consumer_waiting_on_every_path_is_safe():
    _safe(run_checker(_split(False)[0]))


# ------------------------------------------------------------------ the last stage waited but never released
def _last_not_released(bug=True):
    buf = Buf(name="Ring", pipeline_config=async_cfg(stages=2))

    @schedule
    def prod(b):
        with domain_loop(0, 4, 1):
            b.acquire()  # @ring_acquire
            b.fill()
            b.commit()

    @schedule
    def cons(b):
        with domain_loop(0, 4, 1):
            b.wait()
            b.read()
            b.release()
        if bug:
            b.wait()  # the consumer takes one more stage than it hands back
            b.read()

    @schedule
    def prod_extra(b):
        with domain_loop(0, 4, 1):
            b.acquire()
            b.fill()
            b.commit()
        b.acquire()  # @extra_acquire
        b.fill()
        b.commit()

    p = prod_extra(buf) if bug else prod(buf)
    return program([task("Producer", p, dst=[buf]), task("Consumer", cons(buf), src=[buf], warp=1)]), prod_extra


def test_stage_waited_but_never_released_hangs_the_producer_tail():
    prog, prod_extra = _last_not_released(True)
    hit = _unconsumed(run_checker(prog))
    assert hit[0].task == "Producer" and hit[0].location.line == _line(prod_extra.fn, "b.acquire()")  # the loop's acquire: its cursor ends the task
    assert "never released" in hit[0].message and "hangs at exit" in hit[0].message


def test_every_stage_released_is_safe():
    _safe(run_checker(_last_not_released(False)[0]))


# ------------------------------------------------------------------ a tail release with zero iterations
def _lag1_release(declare_min_one):
    """The TMA copy's lag-1 store: each stage is released one iteration later, the last one after the
    loop. On a grid-stride domain that may run zero times, that tail release completes an empty phase
    no stage was committed for, and the producer tail hangs (the example declares count >= 1)."""
    from warpsched import trip_count

    smem = Buf(name="Tiles", pipeline_config=tma_cfg(stages=2, advance_on_wait=True))
    start, step, end = trip_count("first_tile", min=0), trip_count("grid", min=1), trip_count("tiles")
    count = trip_count("tiles_per_cta", min=1) if declare_min_one else None

    @schedule
    def load(s):
        with domain_loop(start, end, step, count=count):
            s.acquire()  # @lag_acquire
            s.fill()
            s.commit()

    @schedule
    def store(s):
        with domain_loop(start, end, step, count=count) as d:
            s.wait()
            s.read()
            with d.every(1, start=1):
                s.release()
        s.release()

    return program([task("Load", load(smem), dst=[smem]), task("Store", store(smem), src=[smem], warp=1)]), load


def test_tail_release_on_a_loop_that_may_not_run_hangs_the_producer_tail():
    prog, load = _lag1_release(False)
    hit = _unconsumed(run_checker(prog))
    assert hit[0].task == "Load" and "producer tail" in hit[0].message
    assert "0 iteration(s)" in hit[0].detail


def test_tail_release_with_at_least_one_tile_per_cta_is_safe():
    _safe(run_checker(_lag1_release(True)[0]))
