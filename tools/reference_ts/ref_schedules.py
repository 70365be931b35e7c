"""Reference-TS benchmark helper (CPU only, no kernel trace, no GPU).

Builds GEMM-shaped schedules with NVIDIA's reference Task Scheduling package
(``cutlass.experimental.task_scheduling`` from nvidia-cutlass-dsl) and times
``TaskManager(...)`` construction, which runs ``print_and_verify()``: the
structural validation checks plus the exhaustive BFS interleaving checker.

The reference is only *imported and called* here; nothing of it is copied.

Variants
--------
``a``         3 tasks, non-persistent.  Load (1 warp) -> SmemAb (TmaUmma, S
              stages) -> Mma (1 warp, acquires the TMEM accumulator in the
              head, commits in the tail) -> TmemC (UmmaAsync, 2 stages) ->
              Store (4 warps, waits/releases TMEM in the tail).  Every task
              has ``domain_loop(0, K, 1)``.
``b``         Persistent, 4 tasks, CLC dynamic: same 3 data tasks wrapped in
              ``work_tile_loop(wq)`` plus a 1-warp scheduler task driving a
              ``WorkQueue`` with a ``ClcFetchAsync`` pipeline (2 stages).  The
              TMEM accumulator is acquired/committed once per work tile.
``b_static``  Persistent, 3 tasks, static persistent ``WorkQueue`` (no
              pipeline, no scheduler task), otherwise identical to ``b``.

For persistent kernels the reference checker simulates 2 work tiles (the
per-tile schedule is concatenated twice).

Usage::

    .venv/bin/python -m tools.reference_ts.ref_schedules a 4 16
    # or from Python:
    from tools.reference_ts.ref_schedules import run_reference
    run_reference("a", S=4, K=16)
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import sys
import time
import warnings

try:  # the schedules warpsched's bench/checker_scaling.py builds too (one text for both checkers)
    from .scaling_schedules import (ACC_STAGES, NUM_EPI_WARPS, WQ_STAGES, persistent_schedules, plain_schedules,
                                    resource_classes)
except ImportError:  # run as a script from this folder
    from scaling_schedules import (ACC_STAGES, NUM_EPI_WARPS, WQ_STAGES, persistent_schedules, plain_schedules,
                                   resource_classes)

VARIANTS = ("a", "b", "b_static")

_BFS_RE = re.compile(
    r"BFS complete: (\d+) states explored, (\d+) complete, (\d+) deadlock\(s\), "
    r"(\d+) race\(s\)"
)


# ---------------------------------------------------------------------------
# Lazy import of the reference (so `import ref_schedules` stays cheap).
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _ref():
    import cutlass.pipeline as pipeline
    from cutlass.experimental.task_scheduling import exhaustive_checker
    from cutlass.experimental.task_scheduling.enums import SignalingThreads
    from cutlass.experimental.task_scheduling.resources import (
        MemoryResource,
        PipelineConfig,
        TileSchedulerConfig,
        WorkQueue,
        consumer_work,
        producer_work,
    )
    from cutlass.experimental.task_scheduling.schedule_builder import (
        domain_loop,
        schedule,
        work_tile_loop,
    )
    from cutlass.experimental.task_scheduling.task import Task
    from cutlass.experimental.task_scheduling.task_manager import TaskManager

    GmemAb, SmemAb, TmemC, GmemD = resource_classes(MemoryResource, consumer_work, producer_work)

    ns = dict(
        pipeline=pipeline,
        exhaustive_checker=exhaustive_checker,
        SignalingThreads=SignalingThreads,
        PipelineConfig=PipelineConfig,
        TileSchedulerConfig=TileSchedulerConfig,
        WorkQueue=WorkQueue,
        domain_loop=domain_loop,
        schedule=schedule,
        work_tile_loop=work_tile_loop,
        Task=Task,
        TaskManager=TaskManager,
        GmemAb=GmemAb,
        SmemAb=SmemAb,
        TmemC=TmemC,
        GmemD=GmemD,
    )
    return type("Ref", (), ns)


def _resources(S: int):
    R = _ref()
    CG = R.pipeline.CooperativeGroup
    Thr = R.pipeline.Agent.Thread
    gmem_ab = R.GmemAb(name="GmemAb")
    smem_ab = R.SmemAb(
        name="SmemAb",
        pipeline_config=R.PipelineConfig.create_tma_umma_pipeline_cfg(
            num_stages=S,
            num_bytes=(128 * 64 + 256 * 64) * 2,
            producer_group=CG(Thr),
            consumer_group=CG(Thr, 1),
            cta_layout_vmnk=(1, 1, 1, 1),
        ),
    )
    tmem_c = R.TmemC(
        name="TmemC",
        pipeline_config=R.PipelineConfig.create_umma_async_pipeline_cfg(
            num_stages=ACC_STAGES,
            producer_group=CG(Thr),
            consumer_group=CG(Thr, NUM_EPI_WARPS * 32),
            cta_layout_vmnk=(1, 1, 1, 1),
        ),
    )
    gmem_d = R.GmemD(name="GmemD")
    return gmem_ab, smem_ab, tmem_c, gmem_d


def build_tasks(variant: str, S: int, K: int):
    """Return (tasks, resource_dependency_graph) for the reference TaskManager."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    R = _ref()
    gmem_ab, smem_ab, tmem_c, gmem_d = _resources(S)

    if variant == "a":
        load_s, mma_s, store_s = plain_schedules(R, K)
        tasks = [
            R.Task(name="LoadTask", src_resources=[gmem_ab], dst_resources=[smem_ab],
                   warp_idx=4, num_warps=1, schedule=load_s(gmem_ab, smem_ab)),
            R.Task(name="MmaTask", src_resources=[smem_ab], dst_resources=[tmem_c],
                   warp_idx=5, num_warps=1, schedule=mma_s(smem_ab, tmem_c)),
            R.Task(name="StoreTask", src_resources=[tmem_c], dst_resources=[gmem_d],
                   warp_idx=0, num_warps=NUM_EPI_WARPS, schedule=store_s(tmem_c, gmem_d)),
        ]
        graph = {smem_ab: [gmem_ab], tmem_c: [smem_ab], gmem_d: [tmem_c]}
        return tasks, graph

    # ---- persistent variants -------------------------------------------
    clc = variant == "b"
    CG = R.pipeline.CooperativeGroup
    Thr = R.pipeline.Agent.Thread
    if clc:
        total_warps = 1 + 1 + NUM_EPI_WARPS + 1  # load + mma + store + scheduler
        wq = R.WorkQueue(
            name="WorkQueue",
            # Scheduler params / response pointer are only used when the
            # kernel is traced; the CPU-side checker never touches them.
            tile_scheduler_config=R.TileSchedulerConfig.create_clc_dynamic_persistent_tile_scheduler_params(
                tile_scheduler_params=None, response_ptr=None
            ),
            pipeline_config=R.PipelineConfig.create_clc_fetch_async_pipeline_cfg(
                num_stages=WQ_STAGES,
                num_bytes=16,
                producer_group=CG(Thr),
                consumer_group=CG(Thr, 32 * total_warps),
                cta_layout_vmnk=(1, 1, 1, 1),
                producer_signaling_threads=R.SignalingThreads.CtaLeader,
                consumer_signaling_threads=R.SignalingThreads.All,
            ),
        )
    else:
        wq = R.WorkQueue(
            name="WorkQueue",
            tile_scheduler_config=R.TileSchedulerConfig.create_static_persistent_tile_scheduler_params(
                tile_scheduler_params=None
            ),
        )

    load_s, mma_s, store_s, sched_s = persistent_schedules(R, K)

    tasks = [
        R.Task(name="LoadTask", src_resources=[gmem_ab, wq], dst_resources=[smem_ab],
               warp_idx=4, num_warps=1, schedule=load_s(gmem_ab, smem_ab, wq)),
        R.Task(name="MmaTask", src_resources=[smem_ab, wq], dst_resources=[tmem_c],
               warp_idx=5, num_warps=1, schedule=mma_s(smem_ab, tmem_c, wq)),
        R.Task(name="StoreTask", src_resources=[tmem_c, wq], dst_resources=[gmem_d],
               warp_idx=0, num_warps=NUM_EPI_WARPS, schedule=store_s(tmem_c, gmem_d, wq)),
    ]
    graph = {
        smem_ab: [gmem_ab, wq],
        tmem_c: [smem_ab, wq],
        gmem_d: [tmem_c, wq],
    }
    if clc:
        tasks.append(
            R.Task(name="SchedTask", src_resources=[wq], dst_resources=[wq],
                   warp_idx=6, num_warps=1, schedule=sched_s(wq))
        )
        graph[wq] = [wq]  # self edge: the queue is produced and consumed
    return tasks, graph


@contextlib.contextmanager
def _checker_hook(max_states, results):
    """TaskManager does not expose max_states: it calls
    ``exhaustive_checker.check_all_interleavings(...)`` with the default
    (1_000_000) from inside ``_exhaustive_aliasing_races``, importing the
    name from the module at call time.  Wrap that module attribute for the
    duration of one run, to (optionally) override ``max_states`` and to
    record every returned ``CheckResult`` (works with verbose=False too)."""
    ec = _ref().exhaustive_checker
    orig = ec.check_all_interleavings

    @functools.wraps(orig)
    def wrapped(*a, **kw):
        if max_states is not None:
            kw["max_states"] = max_states
        r = orig(*a, **kw)
        results.append(r)
        return r

    ec.check_all_interleavings = wrapped
    try:
        yield
    finally:
        ec.check_all_interleavings = orig


def run_reference(
    variant: str,
    S: int,
    K: int,
    max_states: int | None = None,
    verbose: bool = False,
) -> dict:
    """Build the schedule with the reference TS and time TaskManager construction.

    Returns {"verdict", "states", "seconds"} plus extras ("complete",
    "deadlocks", "races", "bfs_runs", "printed_states").  verdict is SAFE /
    UNSAFE / INCOMPLETE (state cap hit, nothing found) /
    "ERROR: <ExcClass>: <first line>".

    ``seconds`` covers ``TaskManager(...)`` only (schedule capture excluded):
    all structural checks + the exhaustive BFS.  ``verbose`` is passed to
    TaskManager; all output is captured either way.  NOTE: the reference's
    default is verbose=True, and in that mode the BFS also copies a per-state
    timeline path (slower, more memory); verbose=False times the bare checker.

    ``states`` is ``states_explored`` summed over all BFS runs (taken from the
    returned CheckResult objects; with verbose=True it is cross-checked
    against the printed "BFS complete: N states explored" line).
    """
    R = _ref()
    buf = io.StringIO()
    err = None
    t_elapsed = None
    results = []
    with warnings.catch_warnings(record=True) as wlist, contextlib.redirect_stdout(
        buf
    ), contextlib.redirect_stderr(buf):
        warnings.simplefilter("always")
        try:
            tasks, graph = build_tasks(variant, S, K)
            with _checker_hook(max_states, results):
                t0 = time.perf_counter()
                try:
                    R.TaskManager(
                        tasks=tasks, resource_dependency_graph=graph, verbose=verbose
                    )
                finally:
                    t_elapsed = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            err = e
    out = buf.getvalue()
    incomplete = any(r.hit_state_limit for r in results) or any(
        "hit max_states" in str(w.message) for w in wlist
    )
    printed = [int(m.group(1)) for m in _BFS_RE.finditer(out)]
    res = {
        "verdict": None,
        "states": sum(r.states_explored for r in results) if results else None,
        "seconds": t_elapsed if t_elapsed is not None else float("nan"),
        "complete": sum(r.complete_count for r in results) if results else None,
        "deadlocks": sum(len(r.deadlock_states) for r in results) if results else None,
        "races": sum(len(r.race_states) for r in results) if results else None,
        "bfs_runs": len(results),
        "printed_states": sum(printed) if printed else None,
    }
    unsafe = any(not r.is_safe for r in results)
    if err is not None:
        msg = str(err).strip().splitlines()
        first = msg[0] if msg else ""
        # A deadlock/race found by the exhaustive checker is raised as
        # ValueError("Exhaustive checker found ..."): that is an UNSAFE verdict.
        if unsafe or first.startswith("Exhaustive checker found"):
            res["verdict"] = "UNSAFE"
        else:
            res["verdict"] = f"ERROR: {type(err).__name__}: {first[:200]}"
        res["error"] = str(err)
    elif unsafe:
        res["verdict"] = "UNSAFE"
    elif incomplete:
        res["verdict"] = "INCOMPLETE"
    elif results:
        res["verdict"] = "SAFE"
    else:
        res["verdict"] = "SAFE (checker did not run)"
    res["log_tail"] = out[-2000:]
    return res


def main(argv=None):
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument("S", type=int)
    p.add_argument("K", type=int)
    p.add_argument("--max-states", type=int, default=None)
    p.add_argument("--verbose", action="store_true",
                   help="TaskManager(verbose=True), the reference default")
    p.add_argument("--log", action="store_true", help="print the captured log tail")
    a = p.parse_args(argv)
    r = run_reference(a.variant, a.S, a.K, a.max_states, verbose=a.verbose)
    tail = r.pop("log_tail")
    print(json.dumps(r))
    if a.log:
        print(tail)


if __name__ == "__main__":
    sys.exit(main())
