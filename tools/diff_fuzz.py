"""Differential fuzzing: warpsched against NVIDIA's reference TS (nvidia-cutlass-dsl 4.8.1), on the CPU.

Generates small programs (2-4 tasks, 1-3 pipelines), mostly well-formed with one random
mutation each, as a *description* (plain data). The description is instantiated twice, once
against each library's classes: one schedule interpreter (``_emit``) serves both, only the
imported names differ. Each instance goes through the library's ``TaskManager`` (static
checks plus the exhaustive checker) under a wall-clock limit, every exception caught.

    PYTHONPATH=src .venv/bin/python tools/diff_fuzz.py [--n 300] [--seed 0] [--out FILE] [--show K]

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
from typing import Any, Dict, List, Tuple

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
# the hand-written rules and the verdict classes: diff_fuzz_rules.py
from diff_fuzz_rules import (BUDGET, DELIBERATE, REF_GAP, RULES, WS_GAP, bucket, form_key, hand_label,  # noqa: E402,F401
                             sub_bucket, twin_conflict, verdict_class)


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
