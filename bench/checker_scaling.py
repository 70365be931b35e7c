"""Exhaustive-checker scaling: warpsched vs the reference TS checker, same schedules, one run.

Variants (the same shapes as tools/reference_ts/ref_schedules.py):

  a  3 tasks, non-persistent: Load (1 warp) -> SmemAB (TmaUmma, S stages) -> Mma (1 warp;
     acquires the TMEM accumulator in the head, commits in the tail) -> TmemC (UmmaAsync,
     2 stages) -> Store (4 warps). Every task has domain_loop(0, K, 1).
  b  the same 3 data tasks in work_tile_loop(wq), plus a 1-warp scheduler task driving a CLC
     WorkQueue (ClcFetchAsync, 2 stages): 4 tasks, persistent.

For each S in {2, 4, 8}: warpsched's verdict, states and seconds for a symbolic K
(``trip_count("K")``: one proof for every K >= 1, row "any") and for each exact K in
{4, 8, ..., 128, 1024} (run_checker on the Program, i.e. the exhaustive checker alone), and the
reference's verdict, states and seconds (TaskManager construction: its validation plus its BFS;
the reference simulates the K given, and 2 work tiles for persistent kernels; warpsched's
verdicts cover every tile count >= 1).

    .venv/bin/python bench/checker_scaling.py              # full table, both checkers
    .venv/bin/python bench/checker_scaling.py --no-reference
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from warpsched import (MemoryResource, PipelineConfig, SignalingThreads, Task, TileSchedulerConfig,  # noqa: E402
                       WorkQueue, consumer_work, domain_loop, producer_work, schedule, trip_count,
                       work_tile_loop)
from warpsched.verify import Options, Program  # noqa: E402
from warpsched.verify.checker import run_checker  # noqa: E402
from tools.reference_ts.scaling_schedules import (ACC_STAGES, NUM_EPI_WARPS, WQ_STAGES,  # noqa: E402
                                                  persistent_schedules, plain_schedules, resource_classes)

_API = type("WarpschedApi", (), {"domain_loop": staticmethod(domain_loop), "schedule": staticmethod(schedule),
                                 "work_tile_loop": staticmethod(work_tile_loop)})  # the schedules' side

class _Group:
    def __init__(self, size):
        self.size = size


GmemAb, SmemAb, TmemC, GmemD = resource_classes(MemoryResource, consumer_work, producer_work,
                                                wrap=dataclass(kw_only=True))


def build_program(variant: str, S: int, K: int, max_states: int = 200_000) -> Program:
    gmem_ab = GmemAb(name="GmemAb")
    smem_ab = SmemAb(name="SmemAb", pipeline_config=PipelineConfig.create_tma_umma_pipeline_cfg(
        num_stages=S, num_bytes=(128 * 64 + 256 * 64) * 2, producer_group=_Group(1), consumer_group=_Group(1),
        cta_layout_vmnk=(1, 1, 1, 1)))
    tmem_c = TmemC(name="TmemC", pipeline_config=PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=ACC_STAGES, producer_group=_Group(1), consumer_group=_Group(NUM_EPI_WARPS * 32),
        cta_layout_vmnk=(1, 1, 1, 1)))
    gmem_d = GmemD(name="GmemD")
    if variant == "a":
        load_s, mma_s, store_s = plain_schedules(_API, K)
        tasks = [Task(name="LoadTask", src_resources=[gmem_ab], dst_resources=[smem_ab], warp_idx=4,
                      schedule=load_s(gmem_ab, smem_ab)),
                 Task(name="MmaTask", src_resources=[smem_ab], dst_resources=[tmem_c], warp_idx=5,
                      schedule=mma_s(smem_ab, tmem_c)),
                 Task(name="StoreTask", src_resources=[tmem_c], dst_resources=[gmem_d], warp_idx=0,
                      num_warps=NUM_EPI_WARPS, schedule=store_s(tmem_c, gmem_d))]
        graph = {smem_ab: [gmem_ab], tmem_c: [smem_ab], gmem_d: [tmem_c]}
        return Program(tasks=tasks, graph=graph, options=Options(max_states=max_states))

    total_warps = 1 + 1 + NUM_EPI_WARPS + 1
    wq = WorkQueue(name="WorkQueue", tile_scheduler_config=TileSchedulerConfig(),
                   pipeline_config=PipelineConfig.create_clc_fetch_async_pipeline_cfg(
                       num_stages=WQ_STAGES, num_bytes=16, producer_group=_Group(1),
                       consumer_group=_Group(32 * total_warps), cta_layout_vmnk=(1, 1, 1, 1),
                       producer_signaling_threads=SignalingThreads.CtaLeader,
                       consumer_signaling_threads=SignalingThreads.All))

    load_p, mma_p, store_p, sched_p = persistent_schedules(_API, K)

    tasks = [Task(name="LoadTask", src_resources=[gmem_ab, wq], dst_resources=[smem_ab], warp_idx=4,
                  schedule=load_p(gmem_ab, smem_ab, wq)),
             Task(name="MmaTask", src_resources=[smem_ab, wq], dst_resources=[tmem_c], warp_idx=5,
                  schedule=mma_p(smem_ab, tmem_c, wq)),
             Task(name="StoreTask", src_resources=[tmem_c, wq], dst_resources=[gmem_d], warp_idx=0,
                  num_warps=NUM_EPI_WARPS, schedule=store_p(tmem_c, gmem_d, wq)),
             Task(name="SchedTask", src_resources=[wq], dst_resources=[wq], warp_idx=6,
                  schedule=sched_p(wq))]
    graph = {smem_ab: [gmem_ab, wq], tmem_c: [smem_ab, wq], gmem_d: [tmem_c, wq], wq: [wq]}
    return Program(tasks=tasks, graph=graph, options=Options(max_states=max_states))


def build_per_role(tiles, num_stages=8):
    """The per-role interleaved example (src/warpsched/examples/interleaved.py:build_per_role):
    ``tiles`` an int (exact) or "any" (``trip_count("tiles", divisibility=4)``)."""
    from warpsched.examples import interleaved
    num_tiles = trip_count("tiles", divisibility=4) if tiles == "any" else int(tiles)
    return interleaved.build_per_role(verbose=False, exhaustive_deadlock_race_check=False, num_stages=num_stages,
                                      num_tiles=num_tiles).program


def run_warpsched(variant, S, K, max_states=200_000):
    prog = build_program(variant, S, K, max_states)
    t0 = time.perf_counter()
    r = run_checker(prog)
    return {"verdict": r.verdict, "states": r.states, "seconds": time.perf_counter() - t0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["a", "b"])
    ap.add_argument("--stages", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--ks", nargs="+", type=int, default=[4, 8, 16, 32, 64, 128, 1024])
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--no-symbolic", dest="symbolic", action="store_false",
                    help="skip the symbolic-K rows (K = trip_count('K'): every K >= 1 in one proof)")
    ap.add_argument("--no-per-role", dest="per_role", action="store_false",
                    help="skip the per-role interleaved example rows (8 stages, 16 tiles and any multiple of 4)")
    ap.add_argument("--ref-max-states", type=int, default=None, help="reference cap (default: its own, 1e6)")
    a = ap.parse_args(argv)
    run_reference = None
    if not a.no_reference:
        from tools.reference_ts.ref_schedules import run_reference
    print(f"# checker scaling on {os.cpu_count()} CPU(s); warpsched seconds = run_checker(); reference seconds = "
          "TaskManager(verbose=False) (its checks + BFS)")
    hdr = (f"{'var':<4}{'S':>3}{'K':>5}  {'ws verdict':<11}{'ws states':>10}{'ws sec':>9}  "
           f"{'ref verdict':<12}{'ref states':>11}{'ref sec':>9}{'ref/ws':>8}")
    print(hdr)
    print("-" * len(hdr))
    worst = 0.0
    for v in a.variants:
        for S in a.stages:
            if a.symbolic:  # one proof for every K >= 1: trip_count("K")
                ws = run_warpsched(v, S, trip_count("K"))
                worst = max(worst, ws["seconds"])
                print(f"{v:<4}{S:>3}{'any':>5}  {ws['verdict']:<11}{ws['states']:>10}{ws['seconds']:>9.3f}", flush=True)
            for K in a.ks:
                ws = run_warpsched(v, S, K)
                worst = max(worst, ws["seconds"])
                line = f"{v:<4}{S:>3}{K:>5}  {ws['verdict']:<11}{ws['states']:>10}{ws['seconds']:>9.3f}  "
                if run_reference is not None:
                    ref = run_reference(v, S, K, max_states=a.ref_max_states)
                    rv = ref["verdict"] if len(ref["verdict"]) < 12 else ref["verdict"][:11]
                    both = ws["verdict"] == "SAFE" and ref["verdict"] == "SAFE"
                    ratio = f"{ref['seconds'] / ws['seconds']:>8.2f}" if both else f"{'-':>8}"
                    line += f"{rv:<12}{(ref['states'] or 0):>11}{ref['seconds']:>9.3f}{ratio}"
                print(line, flush=True)
    print(f"# slowest warpsched configuration: {worst:.3f} s")
    if a.per_role:
        print("\n# per-role interleaved example (src/warpsched/examples/interleaved.py:build_per_role), 8 stages")
        for tiles in ("16", "any"):
            prog = build_per_role(tiles)
            t0 = time.perf_counter()
            r = run_checker(prog)
            print(f"tiles={tiles:<6} {r.verdict:<6} {r.states:>6} states {time.perf_counter() - t0:6.3f} s", flush=True)


if __name__ == "__main__":
    main()
