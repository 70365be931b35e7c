"""Differential fuzzing: warpsched against NVIDIA's reference TS (nvidia-cutlass-dsl 4.8.1), on the CPU.

Generates small programs (2-4 tasks, 1-3 pipelines), mostly well-formed with one random
mutation each, as a *description* (plain data). The description is instantiated twice, once
against each library's classes: one schedule interpreter (``_emit``) serves both, only the
imported names differ. Each instance goes through the library's ``TaskManager`` (static
checks plus the exhaustive checker) under a wall-clock limit, every exception caught.

    PYTHONPATH=src .venv/bin/python benchmarks/diff_fuzz.py [--n 300] [--seed 0] [--out FILE] [--show K]

Classes: both accept / both reject / only warpsched rejects / only reference rejects / crash
(an internal error on either side: not a clean rejection) / timeout. Every disagreement is
bucketed by (warpsched's finding check names, the reference check that raised) and labelled
by RULES (read by hand). warpsched never imports the reference; this script does.

Loop bounds are Python ints, so both sides check exactly that trip count (the reference
unrolls it; warpsched reads ``len(range(start, end, step))`` exactly, model/iteration.py), in any
direction and stride (diff_fuzz_programs.LOOP_FORMS).

Unrolled twins: a program without when_true is also checked with every loop written out as
straight-line code (before an empty loop); on exact trip counts the exhaustive checker must give
the same verdict (a static check reads the loop body as written, for every count, so it may not).

Loop-form twins: every program is checked again by warpsched with each loop rewritten in another
form of the same trip count (reversed, strided, offset); the verdict may not change (``form_key``).

Results, and what every disagreement bucket means (warpsched gaps, reference gaps, deliberate
differences), are in docs/porting_differences.md, encoded in RULES.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import dataclasses
import functools
import io
import os
import random
import re
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff_fuzz_programs import MUTATIONS, TMA, Pipe, Prog, generate, reformed, unrolled  # noqa: E402

MAX_STATES = 200_000  # the same search budget on both sides


# ====================================================================== the two libraries
class Lib:
    """The names a program uses, bound to one implementation."""


def _resource_classes(lib: Lib) -> None:
    MR, cw, pw = lib.MemoryResource, lib.consumer_work, lib.producer_work

    class Buf(MR):  # a pipelined stage buffer
        @pw
        def fill(self, stage_info):
            pass

        @cw
        def read(self, stage_info):
            pass

    class GmemIn(MR):
        @cw
        def load(self, stage_info):
            pass

    class GmemOut(MR):
        @pw
        def store(self, stage_info):
            pass

    @dataclasses.dataclass(kw_only=True, eq=False)
    class Meta(MR):  # a per-iteration runtime flag
        flag: object = lib.TaskLocalVariable.uninitialized()

        def __post_init__(self):
            getattr(super(), "__post_init__", lambda: None)()
            self.flag = lib.TaskLocalVariable(dtype=lib.flag_dtype, default=0)

        @cw(returns=flag, work_attrs=lib.WorkAttr.AUXILIARY)
        def decide(self, stage_info):
            pass

    lib.Buf, lib.GmemIn, lib.GmemOut, lib.Meta = Buf, GmemIn, GmemOut, Meta


@functools.lru_cache(maxsize=None)
def warpsched_lib() -> Lib:
    import warpsched as W
    from warpsched.examples._groups import thread_group

    lib = Lib()
    lib.name = "warpsched"
    for n in ("MemoryResource", "PipelineConfig", "SignalingThreads", "Task", "TaskLocalVariable", "TaskManager",
              "WorkAttr", "consumer_work", "domain_loop", "producer_work", "schedule", "when_true"):
        setattr(lib, n, getattr(W, n))
    lib.group = thread_group
    lib.flag_dtype = "Boolean"
    lib.clean = (W.ValidationError,)  # ScheduleError is a ValidationError
    _resource_classes(lib)
    return lib


@functools.lru_cache(maxsize=None)
def reference_lib() -> Lib:
    import cutlass
    import cutlass.pipeline as pipeline
    from cutlass.experimental.task_scheduling import enums, resources, schedule_builder, task, task_manager

    lib = Lib()
    lib.name = "reference"
    lib.MemoryResource, lib.PipelineConfig = resources.MemoryResource, resources.PipelineConfig
    lib.TaskLocalVariable = resources.TaskLocalVariable
    lib.consumer_work, lib.producer_work = resources.consumer_work, resources.producer_work
    lib.SignalingThreads, lib.WorkAttr = enums.SignalingThreads, enums.WorkAttr
    lib.domain_loop, lib.schedule = schedule_builder.domain_loop, schedule_builder.schedule
    lib.when_true = schedule_builder.when_true
    lib.Task, lib.TaskManager = task.Task, task_manager.TaskManager
    lib.group = lambda n: pipeline.CooperativeGroup(pipeline.Agent.Thread, n)
    lib.flag_dtype = cutlass.Boolean
    # the reference's checks raise ValueError (ScheduleError is one) or RuntimeError
    lib.clean = (ValueError, RuntimeError)
    _resource_classes(lib)
    return lib


# ====================================================================== instantiation (both libraries)
def _config(lib: Lib, p: Pipe):
    PC = lib.PipelineConfig
    kw = dict(num_stages=p.stages, producer_group=lib.group(p.prod_size), consumer_group=lib.group(p.cons_size),
              cta_layout_vmnk=(1, 1, 1, 1))
    if p.prod_sig != "All":
        kw["producer_signaling_threads"] = getattr(lib.SignalingThreads, p.prod_sig)
    if p.ptype in TMA:
        kw["num_bytes"] = p.num_bytes
        if p.bytes_per_warp is not None:
            kw["num_bytes_per_warp_per_cta"] = p.bytes_per_warp
    factory = {"AsyncAsync": PC.create_async_async_pipeline_cfg, "TmaAsync": PC.create_tma_async_pipeline_cfg,
               "TmaUmma": PC.create_tma_umma_pipeline_cfg, "UmmaAsync": PC.create_umma_async_pipeline_cfg}
    return factory[p.ptype](**kw)


def _emit(lib: Lib, nodes, env: Dict[str, Any], loop, tokens: Dict[str, Any]) -> None:
    """The one schedule body both libraries capture."""
    for n in nodes:
        kind = n[0]
        if kind == "op":
            res, method = n[1], n[2]
            if method == "decide":
                tokens[res] = env[res].decide()
            elif method == "decide_again":  # writes the flag's slot again; the token is dropped
                env[res].decide()
            else:
                getattr(env[res], method)()
        elif kind == "loop":
            with lib.domain_loop(n[1], n[2], n[3]) as d:
                _emit(lib, n[4], env, d, tokens)
        elif kind in ("first_iter", "last_iter"):
            with getattr(loop, kind)():
                _emit(lib, n[1], env, loop, tokens)
        elif kind == "every":
            with loop.every(n[1], start=n[2]):
                _emit(lib, n[3], env, loop, tokens)
        elif kind == "when":
            with lib.when_true(tokens[n[1]], key=n[1]):
                _emit(lib, n[2], env, loop, tokens)


def instantiate(lib: Lib, prog: Prog):
    res: Dict[str, Any] = {}
    for p in prog.pipes:
        res[p.name] = lib.Buf(name=p.name, pipeline_config=_config(lib, p))
    for t in prog.tasks:
        for r in t.src + t.dst:
            if r in res:
                continue
            cls = lib.Meta if r.startswith("cond_") else (lib.GmemIn if r.startswith("in_") else lib.GmemOut)
            res[r] = cls(name=r)
    tasks = []
    graph: Dict[Any, List[Any]] = {}
    for t in prog.tasks:
        names = list(dict.fromkeys(t.src + t.dst))

        def body(*resources, _t=t, _names=names):
            _emit(lib, _t.body, dict(zip(_names, resources)), None, {})

        body.__name__ = body.__qualname__ = f"{t.name}_schedule"
        sched = lib.schedule(body)(*[res[n] for n in names])
        tasks.append(lib.Task(name=t.name, src_resources=[res[n] for n in t.src],
                              dst_resources=[res[n] for n in t.dst], warp_idx=t.warp_idx, num_warps=t.num_warps,
                              schedule=sched))
        for d in t.dst:
            ups = graph.setdefault(res[d], [])
            ups.extend(res[s] for s in t.src if res[s] not in ups)
    return tasks, graph


# ====================================================================== running one side
class Timeout(BaseException):
    """Raised by the alarm; a BaseException so the libraries' `except Exception` cannot eat it."""


def _alarm(signum, frame):
    raise Timeout()


@dataclass
class Outcome:
    kind: str  # accept | reject | crash | timeout | incomplete
    checks: Tuple[str, ...] = ()
    message: str = ""
    seconds: float = 0.0
    where: str = ""  # crash: the innermost frame
    sig: str = ""  # the first message, names and numbers blanked (sub-bucket)


_REF_CHECK = re.compile(r"^_(verify|validate|exhaustive|print_task_schedules|check)")


def _ref_check_name(exc: BaseException) -> str:
    """The reference check that raised: the innermost TaskManager check / capture frame."""
    names = [f.name for f in traceback.extract_tb(exc.__traceback__) if "task_scheduling" in f.filename]
    checks = [n for n in names if _REF_CHECK.match(n)]
    if checks:
        return checks[-1]
    return names[-1] if names else "capture"


def _signature(text: str) -> str:
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "X", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return text[:70]


def _ws_check_names(exc) -> Tuple[str, ...]:
    out = []
    for f in exc.findings:
        if f.severity != "error":
            continue
        name = f.check
        if name == "exhaustive interleaving":  # the checker: name the problem kind
            msg = f.message.lower()
            kind = next((k for k in ("deadlock", "race", "over-arriv", "pdl", "balance", "never")
                         if k in msg), msg.split(":")[0][:30])
            name = f"checker:{kind}"
        out.append(name)
    return tuple(sorted(set(out)))


@contextlib.contextmanager
def _ref_max_states(results: list):
    """TaskManager does not pass max_states through: wrap the module attribute (as ref_schedules does)."""
    from cutlass.experimental.task_scheduling import exhaustive_checker as ec

    orig = ec.check_all_interleavings

    def wrapped(*a, **kw):
        kw["max_states"] = MAX_STATES
        r = orig(*a, **kw)
        results.append(r)
        return r

    ec.check_all_interleavings = wrapped
    try:
        yield
    finally:
        ec.check_all_interleavings = orig


def run_side(lib: Lib, prog: Prog, timeout: float) -> Outcome:
    buf = io.StringIO()
    t0 = time.perf_counter()
    out = Outcome("accept")
    results: list = []
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings(record=True) as wl, contextlib.redirect_stdout(buf), \
                contextlib.redirect_stderr(buf):
            warnings.simplefilter("always")
            ctx = _ref_max_states(results) if lib.name == "reference" else contextlib.nullcontext()
            with ctx:
                tasks, graph = instantiate(lib, copy.deepcopy(prog))
                kw = dict(max_states=MAX_STATES) if lib.name == "warpsched" else {}
                tm = lib.TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=False, **kw)
            if lib.name == "warpsched":
                if tm.result.checker is not None and tm.result.checker.verdict == "INCOMPLETE":
                    out.kind = "incomplete"
            elif any(r.hit_state_limit for r in results) or any("max_states" in str(w.message) for w in wl):
                out.kind = "incomplete"
    except Timeout:
        out.kind = "timeout"
    except lib.clean as e:  # a clean rejection
        out.kind = "reject"
        if lib.name == "warpsched":
            out.checks = _ws_check_names(e)
            first = next((f for f in e.findings if f.severity == "error"), None)
            out.sig = _signature(first.message if first else "")
        else:
            out.checks = (_ref_check_name(e),)
            out.sig = _signature(str(e).strip().splitlines()[0] if str(e).strip() else "")
        out.message = str(e).strip()
    except Exception as e:  # noqa: BLE001 - an internal error is what we are looking for
        out.kind = "crash"
        tb = traceback.extract_tb(e.__traceback__)
        frame = tb[-1]
        out.where = f"{os.path.relpath(frame.filename, ROOT)}:{frame.lineno} in {frame.name}"
        out.message = f"{type(e).__name__}: {e}"
        out.checks = (type(e).__name__,)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out.seconds = time.perf_counter() - t0
    return out


# ====================================================================== classification
# ---------------------------------------------------------------------- hand classification
# Written after reading samples of every bucket (see RESULTS in the module docstring). A rule
# matches (class prefix, warpsched check + message regex, reference check + message regex);
# the first match labels the disagreement. A disagreement no rule matches prints UNCLASSIFIED.
DELIBERATE, REF_GAP, WS_GAP, BUDGET = "deliberate", "reference gap", "warpsched gap", "search budget"
RULES = [
    ("only reference", None, r"TaskWarpLeader is only supported for TMA", DELIBERATE,
     "TaskWarpLeader on a non-TMA producer: warpsched lowers it (bar.sync over the task's warps, then the "
     "leader warp arrives) and counts that warp; the reference allows it on TMA producers only"),
    ("only reference", None, r"ProducerCommit from \w+ not consumed", WS_GAP,
     "a commit no consumer waits for before the kernel ends (producer runs more iterations than a "
     "consumer): warpsched on main accepts; the balance check of branch hw-agree rejects it"),
    ("only reference", None, r"Loop guards can only be used with ScheduleStageType.Loop", DELIBERATE,
     "when_true in the head / tail (outside domain_loop): warpsched lowers it as a runtime if and checks "
     "both branches; the reference's legacy schedule lists allow guards on loop entries only"),
    ("only reference", None, r"TmaUmma\): consumer_group.size=\d+ but TCGen05Mma", DELIBERATE,
     "two MMA tasks release one TmaUmma stage: warpsched counts one tcgen05.commit arrival per releasing "
     "task; the reference wants 1 whatever the number of tasks (the stage would free after the first MMA)"),
    ("only warpsched", r"producer_group is size \d+, but task .* \((\d+) warp\(s\)\) makes \1 producer arrival\(s\) "
     r"per stage on a UmmaAsync pipeline", r"^$", DELIBERATE,
     "a UmmaAsync producer task of several warps: each warp's elected thread issues a tcgen05.commit (CUTLASS "
     "elects per warp) and warpsched counts each; the generator and the reference assume one commit per task"),
    ("only warpsched", r"consumer_group is size \d+, but tasks? .* on a TmaUmma pipeline", r"^$", DELIBERATE,
     "the same TmaUmma arrival count, seen from the other side (two MMA tasks, consumer_group size 1)"),
    ("only reference", None, r"cannot be nested", DELIBERATE,
     "nested guards (first_iter in first_iter, when_true in first_iter): warpsched lowers and checks "
     "nested ifs; the reference forbids nesting"),
    ("only reference", None, r"condition token is stale", WS_GAP,
     "a when_true on a token whose slot was written again: fixed on this branch (value routing)"),
    ("only warpsched", r"try_(acquire|wait)\(\) on \w+ (is not followed by its blocking|runs where)", r"^$",
     DELIBERATE, "stricter: a try_* probe's next call on its resource must be its blocking call, under the same "
     "guards (else the probe answers for another stage, or is dropped at a guard's end); the reference accepts it"),
    ("only warpsched", r"num_bytes=0 on a Tma", r"^$", REF_GAP,
     "a TMA full barrier armed with 0 bytes completes on the arrival alone, before any byte lands"),
    ("only warpsched", r"num_bytes=-\d+ is invalid", r"^$", REF_GAP, "negative num_bytes accepted"),
    ("only warpsched", r"deadlock(.|\n)*transaction byte\(s\) outstanding", r"^$", REF_GAP,
     "an acquire whose TMA load is missing on some iteration arms num_bytes that never land: a hang; the "
     "reference's search does not model transaction bytes"),
    ("only warpsched", r"deadlock.*ProducerAcquire on \w+\.empty.*of \d+ arrival", r"^$", REF_GAP,
     "a broadcast consumer skips its release on some path: the empty barrier never gets every consumer's "
     "arrivals; the reference's search lets one consumer's release free the stage"),
    ("only warpsched", r"deadlock.*ConsumerWait", r"^$", REF_GAP,
     "a consumer's flag differs from the producer's on some iteration (a decide under first_iter, a "
     "one-sided guard): the reference gives each when_true key one value for the whole run"),
    ("only reference", None, r"ProducerAcquire from \w+ not matched by ConsumerRelease", WS_GAP,
     "a waited stage never released before the kernel ends: the producer_tail the lowering emits then waits "
     "forever; warpsched on main accepts, the balance check of branch hw-agree rejects it"),
    ("only warpsched", r"(acquire|wait)\(\) while the stage (acquired|waited) at .* is not (committed|released)",
     r"^$", REF_GAP, "an acquire (wait) before the previous stage's commit (release): the late commit / release "
     "lands on another stage; the reference only balances the counts"),
    ("only warpsched", r"release\(\) without a preceding wait\(\)", r"^$", REF_GAP,
     "an extra release: an over-arrival on the next stage's empty barrier frees a stage still being read"),
    ("only warpsched", r"(producer|consumer) work \S+ runs outside an? ", r"^$", REF_GAP,
     "work outside its acquire/commit (wait/release) bracket in the head / tail: not flagged by the reference "
     "there (a race on a thread-arrival pipeline; harmless on TMA, whose commit is a no-op)"),
    ("only warpsched", r"\[task declaration\] warps .* overlap", r"^$", REF_GAP,
     "two tasks on overlapping warp ranges are accepted"),
    ("only warpsched", r"race: .* \(between its acquire and commit\)", r"^$", DELIBERATE,
     "conservative: TS's pipeline window (a producer holds the stage from acquire to commit); here the "
     "commit moved past another acquire. On TMA the commit is a no-op, so the hardware would not race"),
    ("only warpsched", r"\[dma ordering\] \S+\(\) \(\w+ producer\) reads \w+ outside its wait\(\)/release\(\) window",
     r"^$", REF_GAP, "a hardware producer's load (TMA / UMMA) on iterations where the task holds no stage of its "
     "upstream (every() guards out of phase, a wait deleted): it reads a stage already handed back or not yet "
     "waited; the reference's DMA-edge rule reads the order of the loop body, not the guards' iterations (it "
     "rejects the unrolled twin of the handed-back case)"),
    ("only warpsched", r"unconsumed commit: ", r"^$", REF_GAP,
     "a committed stage that a consumer never waits for on some path (its when_true only it has): a dropped "
     "tile, and the producer's end-of-kernel drain waits for it forever"),
    ("only warpsched", r"\.wait\(\) is never released \(and no other task releases", r"^$", REF_GAP,
     "the release sits under a when_true only this task has: on the false path the waited stage is never "
     "handed back"),
    ("only reference", None, r"missing ProducerCommit after ProducerWork group", DELIBERATE,
     "the acquire with no commit sits under an every() guard that never fires at the compiled trip count (dead "
     "code): warpsched checks the trip count the kernel is compiled with, the reference the code as written"),
    ("timeout", None, None, BUDGET,
     "per-iteration runtime flags multiply the states past max_states (warpsched explores every flag "
     "value on every iteration; the reference one value per key per run)"),
]


def form_key(o: "Outcome") -> Tuple[str, Tuple[str, ...], bool]:
    """What a loop's form may not change: the verdict, the static checks that reject, and whether the
    exhaustive checker rejects. (Which problem kinds the checker reports beyond the first depends on
    the order it meets them in: it searches only a little further once the program is UNSAFE.)"""
    return (o.kind, tuple(c for c in o.checks if not c.startswith("checker:")),
            any(c.startswith("checker:") for c in o.checks))


def twin_conflict(loop: "Outcome", twin: Optional["Outcome"]) -> bool:
    """The exhaustive checker's verdict changes when the loops are written out. (A static check
    reads a loop body as written, for every trip count, so a structural rejection of the loop
    form that the straight-line twin avoids, e.g. a first_iter guard when K = 1, is no conflict.)"""
    if twin is None or twin.kind == loop.kind or {loop.kind, twin.kind} != {"accept", "reject"}:
        return False
    rejecting = loop if loop.kind == "reject" else twin
    return any(c.startswith("checker:") for c in rejecting.checks)


def hand_label(cls: str, ws: "Outcome", ref: "Outcome", ws_twin: Optional["Outcome"] = None) -> Tuple[str, str]:
    if twin_conflict(ws, ws_twin):
        return ("WARPSCHED BUG", f"its verdict on the loop ({ws.kind}) and on the unrolled twin ({ws_twin.kind}) "
                "differ: one of them is wrong for this exact trip count")
    for prefix, ws_re, ref_re, label, why in RULES:
        if not cls.startswith(prefix):
            continue
        ws_text = ws.message if ws.kind == "reject" else ""
        ref_text = ref.message if ref.kind == "reject" else ""
        if ws_re is not None and not re.search(ws_re, ws_text):
            continue
        if ref_re is not None and not re.search(ref_re, ref_text):
            continue
        return label, why
    return "UNCLASSIFIED", "read it"


def verdict_class(ws: Outcome, ref: Outcome) -> str:
    if "crash" in (ws.kind, ref.kind):
        return "crash (" + ", ".join(n for n, o in (("warpsched", ws), ("reference", ref)) if o.kind == "crash") + ")"
    if "timeout" in (ws.kind, ref.kind) or "incomplete" in (ws.kind, ref.kind):
        return "timeout / incomplete"
    if ws.kind == ref.kind:
        return f"both {ws.kind}"
    return "only warpsched rejects" if ws.kind == "reject" else "only reference rejects"


def bucket(ws: Outcome, ref: Outcome) -> str:
    """Which checks rejected on each side (the finding's check family / the reference's check function)."""
    return f"ws[{', '.join(ws.checks) or ws.kind}] vs ref[{', '.join(ref.checks) or ref.kind}]"


def sub_bucket(ws: Outcome, ref: Outcome) -> str:
    return ws.sig if ws.kind == "reject" else ref.sig


def _short(msg: str, n: int = 220) -> str:
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    # warpsched's message starts with a title line; the first finding follows
    text = " | ".join(lines[1:3] if lines and lines[0].startswith("warpsched rejected") else lines[:2])
    return text[:n]


@dataclass
class Run:
    """Everything one fuzzing run measured."""

    n: int
    seed: int
    timeout: float
    seconds: float = 0.0
    secs: Dict[str, float] = field(default_factory=lambda: {"warpsched": 0.0, "reference": 0.0})
    classes: collections.Counter = field(default_factory=collections.Counter)
    per_mut: Dict[str, collections.Counter] = field(default_factory=lambda: collections.defaultdict(
        collections.Counter))
    agree: collections.Counter = field(default_factory=collections.Counter)  # both reject: (ws, ref) checks
    buckets: Dict[Tuple[str, str], list] = field(default_factory=lambda: collections.defaultdict(list))
    crashes: list = field(default_factory=list)
    twin_classes: collections.Counter = field(default_factory=collections.Counter)
    twin_same: collections.Counter = field(default_factory=collections.Counter)
    twin_diff: list = field(default_factory=list)
    forms: int = 0  # programs checked again with their loops in another form (same trip counts)
    form_diff: list = field(default_factory=list)  # (i, prog, twin, outcome, twin outcome): the verdict changed


def fuzz(n: int, seed: int, timeout: float, twins: bool = True, forms: bool = True) -> Run:
    """``twins``: also check each program's unrolled twin on both sides; ``forms``: also check it on
    warpsched with every loop rewritten in another form of the same trip count (the verdict and the
    checks that reject must not change)."""
    t_start = time.time()
    ws_lib, ref_lib = warpsched_lib(), reference_lib()
    rng = random.Random(seed)
    form_rng = random.Random(seed + 1_000_003)  # its own stream: the programs stay those of the seed
    run = Run(n, seed, timeout)
    for i in range(n):
        prog = generate(rng)
        ws, ref = run_side(ws_lib, prog, timeout), run_side(ref_lib, prog, timeout)
        run.secs["warpsched"] += ws.seconds
        run.secs["reference"] += ref.seconds
        twin = unrolled(prog) if twins else None
        ws_t = None
        if twin is not None:
            ws_t, ref_t = run_side(ws_lib, twin, timeout), run_side(ref_lib, twin, timeout)
            run.secs["warpsched"] += ws_t.seconds
            run.secs["reference"] += ref_t.seconds
            run.twin_classes[verdict_class(ws_t, ref_t)] += 1
            for side, a, b in (("warpsched", ws, ws_t), ("reference", ref, ref_t)):
                run.twin_same[side] += a.kind == b.kind
                if a.kind != b.kind:
                    run.twin_diff.append((i, side, prog, a, b))
        if forms:
            form_twin = reformed(prog, form_rng)
            ws_f = run_side(ws_lib, form_twin, timeout)
            run.secs["warpsched"] += ws_f.seconds
            if "timeout" not in (ws.kind, ws_f.kind) and "incomplete" not in (ws.kind, ws_f.kind):
                run.forms += 1
                if form_key(ws) != form_key(ws_f):
                    run.form_diff.append((i, prog, form_twin, ws, ws_f))
        cls = verdict_class(ws, ref)
        run.classes[cls] += 1
        run.per_mut[prog.mutation][cls] += 1
        if cls.startswith("only") or cls.startswith("timeout"):
            run.buckets[(cls, bucket(ws, ref))].append((i, prog, ws, ref, ws_t))
        elif cls == "both reject":
            run.agree[(", ".join(ws.checks), ", ".join(ref.checks))] += 1
        elif cls.startswith("crash"):
            run.crashes.append((i, prog, ws, ref))
    run.seconds = time.time() - t_start
    return run


def report(run: Run, show: int) -> str:
    lines: List[str] = []
    say = lines.append
    say(f"diff_fuzz: {run.n} programs, seed {run.seed}, {run.seconds:.1f} s wall "
        f"(warpsched {run.secs['warpsched']:.1f} s, reference {run.secs['reference']:.1f} s, twins included), "
        f"timeout {run.timeout:.0f} s per side, max_states {MAX_STATES} on both")
    say("")
    say("class                          programs")
    for cls, n in sorted(run.classes.items(), key=lambda kv: -kv[1]):
        say(f"  {cls:<28} {n:>6}")
    say("")
    cols = ["both accept", "both reject", "only warpsched rejects", "only reference rejects"]
    say(f"{'mutation':<20}" + "".join(f"{c[:22]:>24}" for c in cols) + f"{'other':>8}")
    for m in MUTATIONS:
        c = run.per_mut.get(m)
        if c:
            other = sum(v for k, v in c.items() if k not in cols)
            say(f"{m:<20}" + "".join(f"{c.get(k, 0):>24}" for k in cols) + f"{other:>8}")
    say("")
    say("both reject: the checks that rejected on each side (top pairs)")
    for (w, r), n in run.agree.most_common(12):
        say(f"  {n:>4} x ws[{w}] / ref[{r}]")
    say("")
    order = sorted(run.buckets.items(), key=lambda kv: (kv[0][0], -len(kv[1])))
    say("disagreements by bucket (warpsched finding checks vs the reference check that raised)")
    for (cls, b), items in order:
        muts = collections.Counter(p.mutation for _, p, _, _, _ in items)
        say(f"- [{cls}] {b}: {len(items)} program(s); mutations {dict(muts)}")
        for sub, n in collections.Counter(sub_bucket(ws, ref) for _, _, ws, ref, _ in items).most_common():
            say(f"    {n:>3} x {sub}")
        for i, prog, ws, ref, _ in items[:show]:
            say(f"    #{i} {prog.mutation}: {prog.note}")
            say("      " + prog.describe().replace("\n", "\n      "))
            if ws.kind == "reject":
                say(f"      warpsched: {_short(ws.message)}")
            if ref.kind == "reject":
                say(f"      reference: {_short(ref.message)}")
            if ws.kind not in ("reject", "accept") or ref.kind not in ("reject", "accept"):
                say(f"      outcomes: warpsched {ws.kind} ({ws.seconds:.1f} s), reference {ref.kind} "
                    f"({ref.seconds:.1f} s)")
    say("")
    say("every disagreement, with its hand classification")
    labels: collections.Counter = collections.Counter()
    for (cls, b), items in order:
        for i, prog, ws, ref, ws_t in items:
            label, why = hand_label(cls, ws, ref, ws_t)
            labels[(label, why)] += 1
            say(f"  #{i:<4} {cls:<23} {prog.mutation:<17} {label}: {why[:90]}")
    say("")
    say("hand classification summary")
    for (label, why), n in labels.most_common():
        say(f"  {n:>4} x {label}: {why}")
    say("")
    n_twins = sum(run.twin_classes.values())
    say(f"unrolled twins: {n_twins} programs without when_true, every loop written out as straight-line code")
    say(f"  same verdict as the loop form: warpsched {run.twin_same['warpsched']}/{n_twins}, "
        f"reference {run.twin_same['reference']}/{n_twins}")
    say("  differential classes on the twins: " + ", ".join(f"{k} {v}" for k, v in run.twin_classes.most_common()))
    conflicts = [d for d in run.twin_diff if d[1] == "warpsched" and twin_conflict(d[3], d[4])]
    say(f"  warpsched verdicts that differ because of the exhaustive checker: {len(conflicts)} (the rest: "
        "static checks read a loop body as written, for every trip count)")
    for i, side, prog, a, b in run.twin_diff:
        text = b.message if b.kind == "reject" else a.message
        tag = " CHECKER CONFLICT" if side == "warpsched" and twin_conflict(a, b) else ""
        say(f"  #{i} {side}{tag}: loop {a.kind}, unrolled {b.kind} ({prog.mutation}): {_short(text, 120)}")
    say("")
    say(f"loop-form twins: {run.forms} programs checked again with every loop in another form of the same "
        "trip count (reversed, strided, offset)")
    say(f"  verdicts changed by the loop form: {len(run.form_diff)}")
    for i, prog, twin, a, b in run.form_diff:
        say(f"  #{i} FORM CHANGED THE VERDICT: {a.kind}{list(a.checks)} -> {b.kind}{list(b.checks)}")
        say("      " + twin.describe().replace("\n", "\n      "))
        say(f"      {_short(b.message if b.kind == 'reject' else a.message, 200)}")
    say("")
    say(f"crashes: {len(run.crashes)}")
    for i, prog, ws, ref in run.crashes:
        for side, o in (("warpsched", ws), ("reference", ref)):
            if o.kind == "crash":
                say(f"  #{i} {side}: {o.message[:200]} at {o.where}")
        say("      " + prog.describe().replace("\n", "\n      "))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds per program per side")
    ap.add_argument("--show", type=int, default=2, help="programs printed per disagreement bucket")
    ap.add_argument("--out", default=None, help="also write the report here")
    ap.add_argument("--no-twins", action="store_true", help="skip the unrolled twins")
    ap.add_argument("--no-forms", action="store_true", help="skip the loop-form twins")
    args = ap.parse_args(argv)
    text = report(fuzz(args.n, args.seed, args.timeout, twins=not args.no_twins, forms=not args.no_forms),
                  args.show)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
