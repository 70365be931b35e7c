"""Probe how the reference TS reacts to classic schedule mistakes.

Each case builds a small GEMM-shaped schedule (variant "a" of ref_schedules,
S=2 stages, K=4) with one mistake, constructs the reference TaskManager, and
reports the exception class + first message line (or "accepted").  Evidence
for FACTS.md; rerun with:

    .venv/bin/python tools/reference_ts/probe_errors.py [-v]
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings

sys.path.insert(0, __file__.rsplit("/tools/", 1)[0])
from tools.reference_ts.ref_schedules import _ref, NUM_EPI_WARPS  # noqa: E402

K = 4


def _cg(n=None):
    R = _ref()
    if n is None:
        return R.pipeline.CooperativeGroup(R.pipeline.Agent.Thread)
    return R.pipeline.CooperativeGroup(R.pipeline.Agent.Thread, n)


def _smem_cfg(S=2, **kw):
    return _ref().PipelineConfig.create_tma_umma_pipeline_cfg(
        num_stages=S, num_bytes=1024, producer_group=_cg(), consumer_group=_cg(1),
        cta_layout_vmnk=(1, 1, 1, 1), **kw)


def _tmem_cfg(cons=NUM_EPI_WARPS * 32):
    return _ref().PipelineConfig.create_umma_async_pipeline_cfg(
        num_stages=2, producer_group=_cg(), consumer_group=_cg(cons),
        cta_layout_vmnk=(1, 1, 1, 1))


def gemm(*, load_body=None, mma_commit=True, store_wait=True, tmem_cons=128,
         smem_cfg=None, graph_fn=None, mma_acquire_in_loop=False):
    """Variant-a GEMM with knobs for injecting mistakes. Returns (tasks, graph)."""
    R = _ref()
    domain_loop, schedule = R.domain_loop, R.schedule
    g = R.GmemAb(name="GmemAb")
    s = R.SmemAb(name="SmemAb", pipeline_config=smem_cfg or _smem_cfg())
    t = R.TmemC(name="TmemC", pipeline_config=_tmem_cfg(tmem_cons))
    o = R.GmemD(name="GmemD")

    def default_load(g, s):
        g.compute_coords()
        s.acquire()
        s.tma_load()
        s.commit()

    body = load_body or default_load

    @schedule
    def load_s(g, s):
        with domain_loop(0, K, 1):
            body(g, s)

    @schedule
    def mma_s(s, t):
        if not mma_acquire_in_loop:
            t.acquire()
        with domain_loop(0, K, 1):
            if mma_acquire_in_loop:
                t.acquire()
            s.wait()
            s.build_desc()
            t.mma()
            s.release()
        if mma_commit:
            t.commit()

    @schedule
    def store_s(t, o):
        with domain_loop(0, K, 1):
            pass
        if store_wait:
            t.wait()
        t.load_subtile()
        o.store()
        t.release()

    tasks = [
        R.Task(name="LoadTask", src_resources=[g], dst_resources=[s], warp_idx=4,
               num_warps=1, schedule=load_s(g, s)),
        R.Task(name="MmaTask", src_resources=[s], dst_resources=[t], warp_idx=5,
               num_warps=1, schedule=mma_s(s, t)),
        R.Task(name="StoreTask", src_resources=[t], dst_resources=[o], warp_idx=0,
               num_warps=NUM_EPI_WARPS, schedule=store_s(t, o)),
    ]
    graph = {s: [g], t: [s], o: [t]}
    if graph_fn:
        graph = graph_fn(g, s, t, o)
    return tasks, graph


def pingpong(cfg):
    R = _ref()
    domain_loop, schedule = R.domain_loop, R.schedule
    pp = R.SmemAb(name="SmemPP", pipeline_config=cfg)

    @schedule
    def prod(r):
        with domain_loop(0, K, 1):
            r.acquire()
            r.tma_load()
            r.commit()

    @schedule
    def cons(r):
        with domain_loop(0, K, 1):
            r.wait()
            r.build_desc()
            r.release()

    tasks = [
        R.Task(name="ProdTask", src_resources=[], dst_resources=[pp], warp_idx=0,
               num_warps=1, schedule=prod(pp)),
        R.Task(name="ConsTask", src_resources=[pp], dst_resources=[], warp_idx=1,
               num_warps=1, schedule=cons(pp)),
    ]
    return tasks, {pp: [pp]}


def _bad_order(g, s):  # producer work before acquire
    g.compute_coords()
    s.tma_load()
    s.acquire()
    s.commit()


def _no_bracket(g, s):  # producer work with no acquire/commit at all
    g.compute_coords()
    s.tma_load()


def _no_commit(g, s):  # acquire + work, commit forgotten
    g.compute_coords()
    s.acquire()
    s.tma_load()


CASES = {
    "ok (control)": lambda: gemm(),
    "empty dependency graph": lambda: gemm(graph_fn=lambda g, s, t, o: {}),
    "resource missing from graph (GmemD)": lambda: gemm(
        graph_fn=lambda g, s, t, o: {s: [g], t: [s]}),
    "graph edge with no backing task": lambda: gemm(
        graph_fn=lambda g, s, t, o: {s: [g], t: [s], o: [t, g]}),
    "producer work before acquire": lambda: gemm(load_body=_bad_order),
    "producer work with no acquire/commit": lambda: gemm(load_body=_no_bracket),
    "consumer work with no wait (store)": lambda: gemm(store_wait=False),
    "wrong consumer_group size (TmemC 64 vs 4 warps)": lambda: gemm(tmem_cons=64),
    "interleave_stride=3, num_stages=4": lambda: gemm(
        smem_cfg=_smem_cfg(S=4, interleave_stride=3)),
    "ping-pong on TmaUmma pipeline": lambda: pingpong(_smem_cfg()),
    "missing commit: SmemAb (load task)": lambda: gemm(load_body=_no_commit),
    "missing commit: TmemC (mma tail)": lambda: gemm(mma_commit=False),
    "acquire TmemC every K iter, commit once": lambda: gemm(mma_acquire_in_loop=True),
}


def probe(name, verbose=False):
    R = _ref()
    buf = io.StringIO()
    with warnings.catch_warnings(record=True) as wl, contextlib.redirect_stdout(
        buf
    ), contextlib.redirect_stderr(buf):
        warnings.simplefilter("always")
        stage = "build"
        try:
            tasks, graph = CASES[name]()
            stage = "TaskManager"
            R.TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=True)
            outcome = "accepted"
        except Exception as e:  # noqa: BLE001
            msg = str(e).strip()
            outcome = f"{type(e).__module__}.{type(e).__name__} at {stage}: {msg}"
    out = buf.getvalue()
    blocked = [ln.strip() for ln in out.splitlines() if "is blocked" in ln or "not consumed" in ln
               or "not matched" in ln]
    bfs = [ln.strip() for ln in out.splitlines() if ln.startswith("BFS complete") or
           ln.startswith("Result:") or "*** DEADLOCK" in ln]
    print(f"== {name}")
    print("   " + (outcome if verbose else outcome.splitlines()[0][:400]))
    for ln in blocked[:3]:
        print(f"   [table] {ln[:300]}")
    for ln in bfs[:4]:
        print(f"   [bfs]   {ln[:300]}")
    for w in wl[:3]:
        print(f"   [warn]  {w.category.__name__}: {str(w.message)[:300]}")


def direct_checker_on_deadlock():
    """Call the reference BFS checker directly on a missing-TmemC-commit
    schedule (bypassing the structural checks that reject it first)."""
    R = _ref()
    tasks, _ = gemm(mma_commit=False)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        r = R.exhaustive_checker.check_all_interleavings(tasks, verbose=True)
    print("== direct check_all_interleavings on missing TmemC commit")
    print(f"   is_safe={r.is_safe} states={r.states_explored} "
          f"deadlocks={len(r.deadlock_states)} hit_limit={r.hit_state_limit}")
    for d in r.deadlock_states[:1]:
        for ln in d.format_lines():
            print(f"   {ln}")
    for ln in buf.getvalue().splitlines():
        if "DEADLOCK" in ln or ln.startswith("BFS complete") or ln.startswith("Result"):
            print(f"   [out] {ln.strip()[:300]}")


if __name__ == "__main__":
    v = "-v" in sys.argv
    for n in CASES:
        probe(n, v)
    direct_checker_on_deadlock()
