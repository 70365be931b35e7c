"""Fuzz the model: random (often malformed) resources, configs, schedules, graphs, groups
and tasks must make warpsched accept the program or raise its own errors -- never crash.

``build_and_check(data)`` is shared with ``tools/fuzz_model.py`` (the longer run).
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import warpsched
from warpsched import (LAUNCH_COUNTER, PdlLaunchBarrier, PdlWaitBarrier, PipelineConfig, PipelineGroup,
                       PipelineGroupMode, ScheduleError, SignalingThreads, SmemAllocation, SmemAllocator, Task,
                       TaskManager, TileSchedulerConfig, TmemAllocation, TmemAllocator, ValidationError, WorkQueue,
                       domain_loop, schedule, trip_count, when_false, when_true, work_tile_loop)
from warpsched.model.memory import LayoutError
from warpsched.model.schedule import ScheduleFunction

from test_checker_builders import WgmmaWorks
from test_checks_support import Buf, Gmem, cg

ST = SignalingThreads
FACTORIES = ["async_async", "tma_async", "tma_umma", "umma_async", "async_umma", "umma_umma", "clc_fetch_async"]
GARBAGE = [None, "x", -1, 0, 2.5, (1,), [], object()]


@dataclass(kw_only=True)
class FuzzQueue(WorkQueue):
    def skip_work_tile_if(self, work_tile):
        return False


class WgmmaBuf(WgmmaWorks, Buf):
    """A Buf with Hopper WGMMA works."""


class DynTask(Task):
    def get_domain_size(self, tile_coord):
        return 3


def one_of(data, good, bad=(), p_bad=0.15):
    """Mostly a sensible value, sometimes garbage."""
    if bad and data.draw(st.floats(0, 1)) < p_bad:
        return data.draw(st.sampled_from(list(bad)))
    return data.draw(st.sampled_from(list(good)))


def draw_config(data):
    kind = data.draw(st.sampled_from(FACTORIES))
    kw = dict(num_stages=one_of(data, [1, 2, 4, 8], [0, -1, "2", None, 2.5]),
              producer_group=one_of(data, [cg(1), cg(32), cg(128), cg(4)], [None, "grp", 7, cg(0)]),
              consumer_group=one_of(data, [cg(1), cg(32), cg(128), cg(4)], [None, "grp", 7, cg(0)]))
    if kind in ("tma_async", "tma_umma") or data.draw(st.booleans()):
        kw["num_bytes"] = one_of(data, [1024, 4096, 16, 0], [-5, "x", None])
    if data.draw(st.booleans()):
        kw["interleave_stride"] = one_of(data, [1, 2, 4, (1, 1, 2, 1), (2, 2, 1, 1), (1, 1, 2, 2)],
                                         [(1, 2), "2", 0, -1, (1, 1, 1, "a"), None])
    if data.draw(st.booleans()):
        sig = [ST.All, ST.CtaLeader, ST.TaskWarpLeader, ST.CtaLeader | ST.TaskWarpLeader]
        kw["producer_signaling_threads"] = one_of(data, sig, [ST.All | ST.CtaLeader, None, "All"])
        kw["consumer_signaling_threads"] = one_of(data, sig, [ST.All | ST.TaskWarpLeader, None])
        kw["consumer_wait_signaling_threads"] = one_of(data, [None] + sig, ["both", 3])
    kw["cta_layout_vmnk"] = one_of(data, [None, (1, 1, 1, 1), (1, 2, 1, 1), (2, 1, 1, 1)],
                                   [(2, 1), "x", (0, 1, 1, 1), (1, "a", 1, 1), object()])
    if data.draw(st.booleans()):
        kw["mcast_mode_mn"] = one_of(data, [None, True, (True, False), (False, True)], [(1,), "m", (1, 2, 3)])
        kw["advance_on_wait"] = one_of(data, [True, False], [None, "yes"])
        kw["advance_on_acquire"] = one_of(data, [True, False], [None, "yes"])
        kw["num_bytes_per_warp_per_cta"] = one_of(data, [None, 512, 1024], [-1, "a", 0])
    if kind == "async_async" and data.draw(st.booleans()):
        kw["async_producer_op"] = one_of(data, [warpsched.AsyncThread, warpsched.AsyncLoad], ["load", None])
    return getattr(PipelineConfig, f"create_{kind}_pipeline_cfg")(**kw)


def draw_resources(data):
    out = []
    for i in range(data.draw(st.integers(1, 5))):
        cls = data.draw(st.sampled_from(["gmem", "buf", "buf", "queue", "pdl_wait", "pdl_launch"]))
        name = one_of(data, [f"r{i}"], [None, f"r{max(0, i - 1)}"])
        cfg = None
        if data.draw(st.booleans()):
            try:
                cfg = draw_config(data)
            except ValidationError as e:  # malformed fields: refused by the factory, with clean findings
                assert e.findings and all(f.location is not None and f.expected and f.fix for f in e.findings)
        if cls == "gmem":
            r = Gmem(name=name, pipeline_config=cfg if data.draw(st.floats(0, 1)) < 0.2 else None)
        elif cls == "buf":
            r = (WgmmaBuf if data.draw(st.booleans()) else Buf)(name=name, pipeline_config=cfg)
        elif cls == "queue":
            r = FuzzQueue(name=name, pipeline_config=cfg if data.draw(st.booleans()) else None)
            if data.draw(st.booleans()):  # a counter queue (Hopper), or garbage where its config goes
                r.tile_scheduler_config = data.draw(st.sampled_from(
                    [TileSchedulerConfig(num_tiles=8, counter=LAUNCH_COUNTER), TileSchedulerConfig(num_tiles=4),
                     "garbage", TileSchedulerConfig(counter=3)]))
        elif cls == "pdl_wait":
            r = PdlWaitBarrier(name=name)
        else:
            r = PdlLaunchBarrier(name=name)
        if data.draw(st.floats(0, 1)) < 0.05:
            r.pipeline_config = data.draw(st.sampled_from(GARBAGE))
        out.append(r)
    return out


VERBS = ["acquire", "try_acquire", "commit", "wait", "try_wait", "release", "skip"]
WORK = {Gmem: ["compute_coords", "load", "store", "load_header"],
        Buf: ["tma_load_a", "produce_tile", "mma", "build_desc", "aux_desc", "read", "read_current",
              "write_next", "needs_epilogue", "consume_tile", "produce_and_report"],
        FuzzQueue: ["fetch_work_tile", "get_and_advance_work_tile"],
        PdlWaitBarrier: ["wait_griddep"], PdlLaunchBarrier: ["launch_griddep"]}
WORK[WgmmaBuf] = WORK[Buf] + ["wgmma", "operand", "own_operand", "wgmma_wait", "wgmma"]


def draw_ops(data, n_res, group):
    ops = []
    for _ in range(data.draw(st.integers(0, 10))):
        target = data.draw(st.integers(-1 if group is not None else 0, n_res - 1))
        ops.append((target, data.draw(st.integers(0, 1000)), data.draw(st.integers(0, 7)),
                    data.draw(st.booleans())))
    return ops


def draw_k(data):
    """The program's K (shared by every task, so loops and skip(count=) join one loop group)."""
    return data.draw(st.sampled_from([trip_count("K"), trip_count("K", 2), trip_count("K", 3, min=2), 3]))


def draw_count(data, K):
    """skip(count=...): K, K +- 1, a fixed int, or a malformed count (the static checks name it)."""
    good = [K, K, K + 1, K - 1, 0, 1, 2, 4] if not isinstance(K, int) else [K, K + 1, K - 1, 0, 1]
    return one_of(data, good, [-1, "K", 2.5, None])


def make_schedule(data, resources, group, K=3):
    """A schedule whose body replays random ops inside random loops and guards."""
    ops = draw_ops(data, len(resources), group)
    persistent = data.draw(st.floats(0, 1)) < 0.3
    queue = one_of(data, [r for r in resources if isinstance(r, WorkQueue)] or [None], resources + ["q"])
    skip_if = one_of(data, [None, FuzzQueue.skip_work_tile_if, lambda t: False], [5, Gmem.store, lambda a, b, c: 1])
    # reversed, strided and empty loops are well formed too (issue 30); a zero step is not
    bounds = one_of(data, [(0, 4, 1), (0, 3, 1), (1, 8, 2), (0, DynTask.get_domain_size, 1), (0, K, 1), (0, K, 1),
                           (4, 0, -1), (7, -2, -3), (3, 3, 1), (0, 4, -1), (5, 0, -2)] +
                    ([(K, 0, -1), (K - 1, -1, -1)] if not isinstance(K, int) else [(K, 0, -1)]),
                    [(0, 4, 0), ("a", 4, 1), (0, None, 1), (0, 2.5, 1), (0, Gmem.store, 1)])
    has_loop = data.draw(st.booleans())
    split = data.draw(st.integers(0, len(ops)))
    tail = data.draw(st.integers(split, len(ops)))  # ops[tail:] run after the loop, where if_empty() may guard them
    counts = [draw_count(data, K) for _ in range(3)]

    def run_ops(proxies, g, d, wtl, chunk, after=None):
        tokens = []
        for target, pick, guard, pass_token in chunk:
            obj = g if target < 0 else proxies[target]
            res = group if target < 0 else resources[target]
            names = VERBS + (WORK.get(type(res), []) if target >= 0 else [m.name for m in group.members
                                                                           if isinstance(getattr(m, "name", 0), str)])
            attr = names[pick % len(names)]
            ctx = None
            if guard == 1 and d is not None:
                ctx = d.first_iter()
            elif guard == 2 and d is not None:
                ctx = d.last_iter()
            elif guard == 3 and d is not None:
                ctx = d.every(2, start=pick % 3)
            elif guard == 4 and tokens:
                ctx = (when_true if pick % 2 else when_false)(tokens[pick % len(tokens)])
            elif guard == 5 and wtl is not None:
                ctx = wtl.skippable()
            elif guard == 6 and after is not None:
                ctx = after.if_empty()  # the loop ran no iteration (after its block only)
            kwargs = {}
            if pass_token and tokens and attr not in VERBS:
                kwargs[["value", "desc_a", "cur", "coord_k", "acc"][pick % 5]] = tokens[-1]
            elif pass_token and attr == "skip" and pick % 4 == 0:
                kwargs["stages"] = pick % 3  # a verb takes no arguments: the capture must say so
            elif attr == "wgmma_wait":
                kwargs["pending"] = pick % 3  # wgmma.wait_group(0 / 1 / 2)
            elif attr == "skip" and pick % 4 in (1, 2):
                kwargs["count"] = counts[pick % len(counts)]  # skip(count=...): a whole loop's stages

            def call():
                member = getattr(obj, attr)
                result = member(**kwargs) if callable(member) else member
                if isinstance(result, warpsched.model.ir.Token):
                    tokens.append(result)
            if ctx is None:
                call()
            else:
                with ctx:
                    call()

    @schedule
    def body(*proxies):
        g = proxies[-1] if group is not None else None
        proxies = proxies[:-1] if group is not None else proxies

        def inner(wtl):
            run_ops(proxies, g, None, wtl, ops[:split])
            if has_loop:
                with domain_loop(*bounds) as d:
                    run_ops(proxies, g, d, wtl, ops[split:tail])
                run_ops(proxies, g, None, wtl, ops[tail:], after=d)
            else:
                run_ops(proxies, g, None, wtl, ops[split:])

        if persistent:
            with work_tile_loop(queue, skip_if=skip_if) as wtl:
                inner(wtl)
        else:
            inner(None)

    args = list(resources) + ([group] if group is not None else [])
    return body(*args)


def draw_group(data, resources):
    if data.draw(st.floats(0, 1)) > 0.25:
        return None
    members = data.draw(st.lists(st.sampled_from(resources + ["junk", 3]), min_size=0, max_size=3))
    mode = one_of(data, list(PipelineGroupMode), ["Merge", None])
    return PipelineGroup(name=one_of(data, ["grp"], [None, 4]), members=members, mode=mode)


def draw_tasks(data, resources, group, K=3):
    tasks = []
    for i in range(data.draw(st.integers(1, 4))):
        src = data.draw(st.lists(st.sampled_from(resources), max_size=4, unique_by=id))
        dst = data.draw(st.lists(st.sampled_from(resources), max_size=4, unique_by=id))
        if data.draw(st.floats(0, 1)) < 0.05:
            src = data.draw(st.sampled_from([None, [5], ["s"], (resources[0],)]))
        try:
            sched = make_schedule(data, resources, group, K) if data.draw(st.floats(0, 1)) < 0.95 else \
                one_of(data, [None], [ScheduleFunction(lambda: None), "s"])
        except ScheduleError:
            sched = None
        cls = DynTask if data.draw(st.booleans()) else Task
        tasks.append(cls(name=one_of(data, [f"t{i}"], [None, "t0"]), src_resources=src, dst_resources=dst,
                         warp_idx=one_of(data, [i, 4 * i, i + 1], [-1, "0", None, 2.5]),
                         num_warps=one_of(data, [1, 4, 2], [0, -1, "2", None, 64]), schedule=sched,
                         num_registers=one_of(data, [None, 40, 232, 128], [100, "x", 0, 512])))
    return tasks


def draw_graph(data, resources):
    if data.draw(st.floats(0, 1)) < 0.03:
        return data.draw(st.sampled_from([[], "g", 5]))
    graph = {}
    for r in data.draw(st.lists(st.sampled_from(resources), max_size=len(resources), unique_by=id)):
        ups = data.draw(st.lists(st.sampled_from(resources), max_size=3))
        graph[r] = ups if data.draw(st.floats(0, 1)) > 0.1 else data.draw(st.sampled_from(GARBAGE + resources))
    return graph


def draw_allocators(data, resources):
    smem = tmem = None
    if data.draw(st.floats(0, 1)) < 0.3:
        smem = SmemAllocator(capacity_bytes=one_of(data, [None, 4096, 232448], [0, -1]))
        for _ in range(data.draw(st.integers(0, 3))):
            smem.allocations.append(SmemAllocation("a", dtype=one_of(data, [2, 4], ["f16", None]),
                                                   count=one_of(data, [10, 100_000], [-3, "n", None])))
        if data.draw(st.booleans()):
            try:
                smem.compute_layout()
            except LayoutError:  # the allocator's own error for a malformed allocation
                pass
    if data.draw(st.floats(0, 1)) < 0.2:
        tmem = TmemAllocator(capacity_columns=one_of(data, [512, 128], [0, None]))
        for _ in range(data.draw(st.integers(0, 3))):
            tmem.allocations.append(TmemAllocation("t", one_of(data, [128, 256], [-1, "c", None])))
    return smem, tmem


def build_and_check(data, *, exhaustive=False, programs=None):
    """Build one random program; return 'accepted', 'rejected' or raise the internal error.
    ``programs``: a list the accepted TaskManager is appended to (tools/fuzz_model.py)."""
    resources = draw_resources(data)
    group = draw_group(data, resources)
    tasks = draw_tasks(data, resources, group, draw_k(data))
    graph = draw_graph(data, resources)
    smem, tmem = draw_allocators(data, resources)
    opts = dict(verbose=data.draw(st.booleans()), out=io.StringIO(), exhaustive_deadlock_race_check=exhaustive,
                max_states=2000,
                skip_validation=data.draw(st.floats(0, 1)) < 0.1,
                assume_pdl_wait_completed=data.draw(st.booleans()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if programs is not None:
            _statically_valid(programs, lambda **o: TaskManager(tasks=tasks, resource_dependency_graph=graph,
                                                                smem_allocator=smem, tmem_allocator=tmem,
                                                                **{**opts, **o}))
        try:
            TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=smem, tmem_allocator=tmem,
                        **opts)
        except (ValidationError, ScheduleError):
            return "rejected"
    return "accepted"


def _statically_valid(programs, make):
    """Append the program ``make`` builds when the static checks accept it (its checker verdict,
    SAFE or not, is for the caller to compute: tools/fuzz_model.py runs it twice)."""
    try:
        programs.append(make(exhaustive_deadlock_race_check=False, skip_validation=False).program)
    except (ValidationError, ScheduleError):
        pass


# ------------------------------------------------------------------ mutated well-formed programs
# A GEMM-shaped program that passes every check, then 1-3 random mutations: this reaches the
# deeper checks (bracketing, DMA ordering, counts, interleaving, groups, PDL) with programs
# that are almost right, which is where real mistakes live.
GEMM_OPS = {
    "load": [("head", 4, "wait_griddep"), ("loop", 0, "compute_coords"), ("loop", 1, "try_acquire"),
             ("loop", 1, "acquire"), ("loop", 1, "tma_load_a"), ("loop", 1, "commit"), ("tail", 5, "launch_griddep")],
    "mma": [("head", 2, "acquire"), ("loop", 1, "try_wait"), ("loop", 1, "wait"), ("loop", 1, "build_desc"),
            ("loop", 2, "mma"), ("loop", 1, "release"), ("tail", 2, "commit")],
    "store": [("head", 2, "wait"), ("head", 2, "read"), ("head", 3, "store"), ("head", 2, "release")],
}
ROLES = {"load": ([0, 4], [1, 5]), "mma": ([1], [2]), "store": ([2], [3])}
QUEUE_TAIL = [("tail", 6, "try_wait"), ("tail", 6, "wait"), ("tail", 6, "get_and_advance_work_tile"),
              ("tail", 6, "release")]
# sections of a task's body: before, in and after the K loop; loop0 / loop1: even / odd K only
SECTIONS = ["head", "loop", "tail", "loop0", "loop1"]


def _split_smem_ring(ops, roles, warps, persistent):
    """Two consumers split the smem ring: mma waits for / releases the even stages and skips the odd
    ones, a new task ``peek`` the other way round (a valid program: every consumer skips)."""
    ops["mma"] = [("loop0",) + op[1:] if op[0] == "loop" else op for op in ops["mma"]]
    ops["mma"].append(("loop1", 1, "skip"))
    ops["peek"] = [("loop1", 1, "wait"), ("loop1", 1, "read"), ("loop1", 1, "release"), ("loop0", 1, "skip")]
    ops["peek"] += QUEUE_TAIL if persistent else []
    roles["peek"] = ([1], [])
    warps["peek"] = 1


def build_mutated(data, *, exhaustive=False, max_mutations=3, log=None, split=False, verdicts=None, programs=None):
    smem_cfg = dict(num_stages=4, num_bytes=4096, producer_group=cg(1), consumer_group=cg(1),
                    cta_layout_vmnk=(1, 1, 1, 1))
    tmem_cfg = dict(num_stages=2, producer_group=cg(1), consumer_group=cg(128), cta_layout_vmnk=(1, 1, 1, 1))
    persistent = data.draw(st.booleans())
    ops = {k: list(v) + (QUEUE_TAIL if persistent else []) for k, v in GEMM_OPS.items()}
    warps = {"load": 1, "mma": 1, "store": 4}
    roles = {k: (list(a), list(b)) for k, (a, b) in ROLES.items()}  # mutated below: copy the template
    graph_extra = []
    async_smem = False
    k_end = 4  # the domain loop's end (mutation k_end: a trip_count)
    if split:
        _split_smem_ring(ops, roles, warps, persistent)
    # a quarter of the cases: a skip(count=...) first (and maybe a trip_count end), then the usual
    forced = (["bulk"] + (["k_end"] if data.draw(st.booleans()) else [])
              if max_mutations and data.draw(st.floats(0, 1)) < 0.25 else [])
    for n in range(data.draw(st.integers(min(1, max_mutations), max_mutations))):
        what = forced[n] if n < len(forced) else data.draw(st.sampled_from(
            ["drop", "dup", "swap", "section", "smem_cfg", "tmem_cfg", "warps", "graph", "role", "type", "skip",
             "skip_pair", "split", "bulk", "k_end"]))
        task = data.draw(st.sampled_from(sorted(ops)))
        seq = ops[task]
        before = (list(seq), dict(smem_cfg), dict(tmem_cfg), dict(warps), list(graph_extra))
        if what == "split" and "peek" not in ops:
            _split_smem_ring(ops, roles, warps, persistent)
        elif what == "skip":  # a skip anywhere: consumer or producer side, any resource, in or out of loops
            sec = data.draw(st.sampled_from(SECTIONS))
            seq.insert(data.draw(st.integers(0, len(seq))), (sec, data.draw(st.sampled_from([1, 1, 2, 2, 0, 4, 6])),
                                                             "skip"))
        elif what == "bulk":  # skip(count=...) of the K loop's stages, anywhere (valid only outside the loop)
            sec = data.draw(st.sampled_from(["head", "tail", "tail", "loop"]))
            own = {"mma": 1, "store": 2, "peek": 1}.get(task, 1)  # mostly the ring the task consumes
            seq.insert(data.draw(st.integers(0, len(seq))), (sec, data.draw(st.sampled_from([own, own, own, 1, 2, 4])),
                                                             "skip",
                                                             data.draw(st.sampled_from(["K", "K", "K+1", "K-1", 4,
                                                                                        0, 3]))))
        elif what == "k_end":  # the K loop's end: an exact or a symbolic trip_count instead of 4
            k_end = data.draw(st.sampled_from([trip_count("K", 4), trip_count("K"), trip_count("K", 2)]))
        elif what == "skip_pair":  # a wait / release pair (or one of them) becomes a skip
            waits = [j for j, op in enumerate(seq) if op[2] in ("wait", "release")]
            if waits:
                j = data.draw(st.sampled_from(waits))
                sec, idx, verb = seq[j][:3]
                seq[j] = (sec, idx, "skip")
                if verb == "wait" and data.draw(st.booleans()):
                    rel = [i for i, e in enumerate(seq) if i > j and e[1:3] == (idx, "release")]
                    if rel:
                        seq.pop(rel[0])
        elif what in ("drop", "dup", "swap", "section") and seq:
            j = data.draw(st.integers(0, len(seq) - 1))
            if what == "drop":
                seq.pop(j)
            elif what == "dup":
                seq.insert(j, seq[j])
            elif what == "swap" and j + 1 < len(seq):
                seq[j], seq[j + 1] = seq[j + 1], seq[j]
            elif what == "section":
                seq[j] = (data.draw(st.sampled_from(SECTIONS)),) + seq[j][1:]
        elif what in ("smem_cfg", "tmem_cfg"):
            cfg = smem_cfg if what == "smem_cfg" else tmem_cfg
            key = data.draw(st.sampled_from(["num_stages", "num_bytes", "producer_group", "consumer_group",
                                             "interleave_stride", "cta_layout_vmnk", "advance_on_wait",
                                             "producer_signaling_threads", "num_bytes_per_warp_per_cta",
                                             "consumer_wait_signaling_threads"]))
            cfg[key] = data.draw(st.sampled_from([0, 1, 2, 3, 4, 8, -1, None, "x", cg(1), cg(32), cg(4), (1, 1, 2, 2),
                                                  (2, 1, 1, 1), True, ST.TaskWarpLeader, ST.CtaLeader, 1024]))
        elif what == "warps":
            warps[task] = data.draw(st.sampled_from([1, 2, 4, 0, -1, "w"]))
        elif what == "graph":
            graph_extra.append((data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))))
        elif what == "type":
            async_smem = True
        elif what == "role":
            src, dst = roles[task]
            (src if data.draw(st.booleans()) else dst).append(data.draw(st.integers(0, 6)))
        if log is not None:
            after = (seq, smem_cfg, tmem_cfg, warps, graph_extra)
            log.append((what, task, [(b, a) for b, a in zip(before, after) if b != a] or roles[task]))
    try:  # a mutated field the factory refuses (num_stages=0, say): warpsched's own error, nothing built
        if async_smem:
            smem = PipelineConfig.create_async_async_pipeline_cfg(**{k: v for k, v in smem_cfg.items()
                                                                     if k != "num_bytes"})
        else:
            smem_cfg.setdefault("num_bytes", 0)
            smem = PipelineConfig.create_tma_umma_pipeline_cfg(**smem_cfg)
        tmem = PipelineConfig.create_umma_async_pipeline_cfg(**tmem_cfg)
    except ValidationError as e:
        assert e.findings and all(f.location is not None and f.fix for f in e.findings)
        return "rejected"
    res = [Gmem(name="gmem"), Buf(name="smem", pipeline_config=smem),
           Buf(name="tmem", pipeline_config=tmem),
           Gmem(name="out"), PdlWaitBarrier(name="pdl_wait"), PdlLaunchBarrier(name="pdl_launch"),
           FuzzQueue(name="wq")]
    graph = {res[1]: [res[0]], res[2]: [res[1]], res[3]: [res[2]], res[0]: [res[4]], res[5]: []}
    if persistent:
        graph[res[1]].append(res[6])
    for a, b in graph_extra:
        graph.setdefault(res[a], []).append(res[b])
    tasks = []
    for i, name in enumerate(sorted(ops)):
        seq = ops[name]

        @schedule
        def body(*rs, seq=seq):
            tokens = []

            def emit(section):
                for sec, idx, verb, *count in seq:
                    if sec != section:
                        continue
                    kw = {}
                    if count:  # skip(count=...): the loop's K, K +- 1 or an int
                        kw = {"count": {"K": k_end, "K+1": k_end + 1, "K-1": k_end - 1}.get(count[0], count[0])}
                    if tokens and verb in ("tma_load_a", "mma", "store"):
                        kw = {"tma_load_a": "coord_k", "mma": "desc_a", "store": "value"}[verb]
                        kw = {kw: tokens[-1]}
                    out = getattr(rs[idx], verb)(**kw)
                    if isinstance(out, warpsched.model.ir.Token):
                        tokens.append(out)

            def tile():
                emit("head")
                with domain_loop(0, k_end, 1) as d:
                    emit("loop")
                    for start in (0, 1):
                        with d.every(2, start=start):
                            emit(f"loop{start}")
                emit("tail")

            if persistent:
                with work_tile_loop(rs[6]):
                    tile()
            else:
                tile()

        src, dst = roles[name]
        src_r = [res[j] for j in sorted(set(src) | ({6} if persistent else set()))]
        dst_r = [res[j] for j in sorted(set(dst))]
        try:
            sched = body(*res)
        except ScheduleError:
            return "rejected"
        tasks.append(Task(name=name, src_resources=src_r, dst_resources=dst_r, warp_idx=4 * i, num_warps=warps[name],
                          schedule=sched))
    verbose = data.draw(st.booleans())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if programs is not None:
            _statically_valid(programs, lambda **o: TaskManager(tasks=tasks, resource_dependency_graph=graph,
                                                                out=io.StringIO(), max_states=5000, **o))
        try:
            tm = TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=verbose,
                             out=io.StringIO(), exhaustive_deadlock_race_check=exhaustive, max_states=5000)
        except (ValidationError, ScheduleError):
            return "rejected"
    if verdicts is not None and tm.result is not None and tm.result.checker is not None:
        verdicts.append(tm.result.checker.verdict)
    return "accepted"


def test_random_programs_never_crash():
    """Bounded (a few seconds): every outcome is acceptance or warpsched's own error."""
    outcomes = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def run(data):
        outcomes.append(build_and_check(data))

    run()
    assert set(outcomes) <= {"accepted", "rejected"}
    assert outcomes.count("rejected") > 0


def test_mutated_programs_never_crash():
    outcomes = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def run(data):
        outcomes.append(build_mutated(data))

    run()
    assert set(outcomes) <= {"accepted", "rejected"}
    assert outcomes.count("rejected") > 0 and outcomes.count("accepted") > 0


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_unmutated_template_is_accepted(data):
    """The template the mutations start from is a valid program (else mutations prove little)."""
    assert build_mutated(data, max_mutations=0) == "accepted"


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_split_template_is_accepted(data):
    """The split-ring template (two consumers, each skipping the other's stages) is valid and proven
    SAFE, so the skip mutations start from a program the deepest checks accept."""
    verdicts = []
    assert build_mutated(data, max_mutations=0, split=True, exhaustive=True, verdicts=verdicts) == "accepted"
    assert verdicts == ["SAFE"]
