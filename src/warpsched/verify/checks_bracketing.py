"""Work bracketing (incl. try-before-blocking) and DMA ordering, per task.

Each task's schedule is unrolled into a few concrete executions (checks_traces) and a
small state machine tracks, per resource, whether the producer bracket (acquire..commit)
and the consumer bracket (wait..release) are open. Cross-task facts decide the legal
exceptions: split-consumer (wait in one task, release in another, joined by a proxy that
is downstream in the graph), split producer/consumer roles of asymmetric interleaved
pipelines (advance_on_acquire / advance_on_wait), and ping-pong reads inside the
producer bracket. Value routing lives in checks_dataflow.
"""
from __future__ import annotations

from typing import Dict, Iterable, List

from ..errors import Finding
from ..model.enums import WorkAttr
from ..model.ir import TRY_PAIRS, ScheduleResult, Section, Step, StepKind
from ..model.resources import work_spec_of
from ..model.task import Task
from ..model.tripcount import TripCount
from ..protocol.barriers import protocol_of
from . import checks_dataflow
from .checks_traces import condition, executions
from .findings_util import (F, TRY_KINDS, config_of, dedupe, good_config, graph_upstream, is_pdl, is_queue,
                            reads_stage, returns_stage, rname, self_edge, steps, targets, tasks_with,
                            transitive_upstream)
from .program import Program

BRACKET = "work bracketing"
DMA = "dma ordering"

_SYNC_NAMES = {StepKind.ProducerAcquire: "acquire", StepKind.ProducerCommit: "commit",
               StepKind.ConsumerWait: "wait", StepKind.ConsumerRelease: "release"}


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    ctx = _Context(program)
    for t in program.tasks:
        if not isinstance(t, Task) or not isinstance(t.schedule, ScheduleResult):
            continue
        out += _try_before_blocking(program, t)
        out += _unpipelined_sync(program, t)
        for run in executions(t.schedule):
            out += _simulate(ctx, t, run)
    out += _never_waited(program)
    out += checks_dataflow.check(program)
    return dedupe(out)


class _Context:
    """Cross-task facts about every resource."""

    def __init__(self, program: Program):
        self.program = program
        self._who: Dict = {}

    def tasks(self, r, kind: StepKind) -> List[Task]:
        key = (id(r), kind)
        if key not in self._who:
            self._who[key] = tasks_with(self.program, r, [kind])
        return self._who[key]

    def others(self, r, kind: StepKind, task: Task) -> bool:
        return any(t is not task for t in self.tasks(r, kind))

    def releases(self, r, task: Task) -> bool:
        return any(t is task for t in self.tasks(r, StepKind.ConsumerRelease))

    def bracketed(self, r) -> bool:
        return is_queue(r) or good_config(r) is not None

    def adv_acquire(self, r) -> bool:
        cfg = good_config(r)
        return bool(cfg and cfg.advance_on_acquire)

    def adv_wait(self, r) -> bool:
        cfg = good_config(r)
        return bool(cfg and cfg.advance_on_wait)


# ------------------------------------------------------------------ try_ before blocking
def _try_before_blocking(program: Program, t: Task) -> List[Finding]:
    """A try_ result feeds the next call on the same resource and side, which must be its blocking
    verb: ``a.try_wait(); b.try_wait(); a.wait(); b.wait()`` probes two rings before blocking on
    either (the TS tutorials batch probes so). Calls on other resources may sit between: a probe's
    answer cannot go stale, since only this task's own verb on that resource moves the phase it
    probed. The lowering never carries a token into a loop or out of a guarded block, so placements
    where it cannot reach its call are legal but wasted probes: warnings, because the reference TS
    accepts them and reuses the stored result for later blocking calls (see docs/porting.md)."""
    out = []
    st = steps(program, t)
    for i, s in enumerate(st):
        if s.kind not in TRY_KINDS:
            continue
        want = TRY_PAIRS[s.kind]
        verb = "acquire" if want is StepKind.ProducerAcquire else "wait"
        nxt = next((x for x in st[i + 1:] if x.resource is s.resource and x.kind.side == s.kind.side
                    and (x.kind.is_sync or x.kind in TRY_KINDS)), None)
        problem, severity = None, "error"
        if nxt is None or nxt.kind is not want:
            problem = (f"{s.method}() on {rname(s.resource)} is not followed by its blocking {verb}() on "
                       f"{rname(s.resource)}"
                       + (f" (the next {rname(s.resource)} call is {nxt.method}() at {nxt.location})" if nxt
                          else " (no later call on it)"))
        elif nxt.section is not s.section:
            problem, severity = (f"{s.method}() on {rname(s.resource)} is in the {s.section.value} but its {verb}() "
                                 f"is in the {nxt.section.value}: the probe's result is discarded at the loop "
                                 f"boundary, so the {verb}() always blocks (the reference TS would reuse it for every "
                                 f"later {verb}(), skipping waits on stages that are not ready)"), "warning"
        else:
            mine, theirs = {condition(g) for g in s.guards}, {condition(g) for g in nxt.guards}
            if not (mine <= theirs or theirs <= mine):
                problem, severity = (f"{s.method}() on {rname(s.resource)} and its {verb}() sit under unrelated "
                                     f"guards ({_guards(s)} vs {_guards(nxt)}): the probe's result is discarded "
                                     f"when its guarded block ends, so the {verb}() always blocks"), "warning"
        if problem:
            out.append(F(BRACKET, problem, task=t, resource=s.resource, location=s.location, severity=severity,
                         expected=f"{rname(s.resource)}.{verb}() as the next call on {rname(s.resource)}, in the "
                         "same section, under the same guards or guards that extend the try's",
                         fix=f"call {rname(s.resource)}.{verb}() after {s.method}() before any other "
                         f"{rname(s.resource)} call, under the same guards (or drop the {s.method}())"))
    return out


def _guards(s: Step) -> str:
    return ", ".join(g.describe() for g in s.guards) or "no guard"


def _unpipelined_sync(program: Program, t: Task) -> List[Finding]:
    out = []
    for s in steps(program, t):
        if s.kind is StepKind.ConsumerSkip:
            out += _unpipelined_skip(t, s)
            continue
        if s.kind not in _SYNC_NAMES and s.kind not in TRY_KINDS:
            continue
        for r in targets(s):
            if config_of(r) is None and not is_queue(r) and not is_pdl(r) and not s.is_group_op:
                out.append(F(BRACKET, f"{rname(r)}.{s.method}() but {rname(r)} has no pipeline_config",
                             task=t, resource=r, location=s.location,
                             expected="acquire/commit/wait/release only on pipelined resources",
                             fix=f"attach a PipelineConfig to {rname(r)}, or drop the {s.method}() call"))
    return out


def _unpipelined_skip(t: Task, s: Step) -> List[Finding]:
    """A skip passes one stage of a ring: a resource without stages (no pipeline_config: a static
    queue, a PDL barrier, plain memory) has none to pass (the lowering would fail on it)."""
    return [F(BRACKET, f"{rname(r)}.skip() but {rname(r)} has no pipeline_config: it has no stages to skip",
              task=t, resource=r, location=s.location,
              expected=f"skip() only on a pipelined ring whose other stages task {t.name!r} waits for and releases",
              fix=f"drop the {rname(r)}.skip() call" + ("" if is_pdl(r) or is_queue(r) else
                                                       f" (or attach a PipelineConfig to {rname(r)} and wait for / "
                                                       "release the stages this task owns)"))
            for r in targets(s) if config_of(r) is None]


# ------------------------------------------------------------------ the state machine
def _simulate(ctx: _Context, t: Task, run) -> List[Finding]:
    out: List[Finding] = []
    prod: Dict[int, List[Step]] = {}  # open producer brackets: the acquire steps
    cons: Dict[int, List[Step]] = {}  # open consumer brackets: the wait steps
    released: Dict[int, Step] = {}  # last release of a resource, for DMA messages
    res: Dict[int, object] = {}
    handed_back = set()  # resources released since their last wait (or their proxy's last wait)
    committed = set()  # resources this run has committed (a producer's own WGMMA_OPERAND reads come after)
    opened_ever = set()  # resources this run has waited on (directly or through a proxy)
    program = ctx.program
    by_index = {x.index: x for x in steps(program, t)}

    def proxy_open(r) -> bool:
        for pid, opened in cons.items():
            if opened and any(u is r for u in transitive_upstream(program, res[pid])):
                return True
        return False

    def add(msg, s, r, expected, fix, check=BRACKET):
        out.append(F(check, msg, task=t, resource=r, location=s.location, expected=expected, fix=fix))

    run = list(run)
    for pos, (s, _) in enumerate(run):
        k = s.kind
        if s.token_args:
            _stage_refs(s, by_index, prod, cons, proxy_open, handed_back, add)
        if k is StepKind.ConsumerWait:
            for r in targets(s):
                covered = {id(r)} | {id(u) for u in transitive_upstream(program, r)}
                handed_back.difference_update(covered)
                opened_ever.update(covered)
        elif k is StepKind.ConsumerRelease:
            handed_back.update(id(r) for r in targets(s))
        if k.is_aux:
            _stage_aux(ctx, s, prod, cons, proxy_open, add)
        if k.is_aux or k in TRY_KINDS or k.side is None:
            continue
        for r in targets(s):
            if not ctx.bracketed(r):
                if k is StepKind.ProducerWork:
                    _dma(ctx, t, s, r, cons, released, proxy_open, add)
                    _reads_upstream(ctx, t, s, r, opened_ever, run[pos + 1:], add)
                continue
            rid = id(r)
            res[rid] = r
            p, c = prod.setdefault(rid, []), cons.setdefault(rid, [])
            n = rname(r)
            if k is StepKind.ProducerAcquire:
                if p and not ctx.adv_acquire(r):
                    add(f"{n}.acquire() while the stage acquired at {p[-1].location} is not committed yet", s, r,
                        "one commit() between consecutive acquire() calls",
                        "commit the stage before acquiring the next one (or set advance_on_acquire=True)")
                p.append(s)
            elif k is StepKind.ProducerCommit:
                committed.add(rid)
                if p:
                    p.pop(0)
                elif not (ctx.adv_acquire(r) and ctx.others(r, StepKind.ProducerAcquire, t)):
                    add(f"{n}.commit() without a preceding acquire()", s, r, f"{n}.acquire() before {n}.commit()",
                        f"acquire the stage first: {n}.acquire(); <work>; {n}.commit()")
            elif k is StepKind.ProducerWork and _has_attr(r, s, WorkAttr.WGMMA_OPERAND):
                # the writer's own wgmma read of the stage it handed over: after that commit, before the
                # next acquire (inside a bracket the stage is not handed over yet: a plain read of it)
                if p or rid not in committed:
                    add(f"{n}.{s.method}() declares a read of the stage this task last committed, but "
                        + (f"runs inside the acquire() at {p[-1].location}" if p else f"no {n}.commit() precedes it"),
                        s, r, f"{n}.{s.method}() after {n}.commit() and before the next {n}.acquire()",
                        f"move {s.method}() after {n}.commit(), just before the WGMMA work that reads the stage")
            elif k in (StepKind.ProducerWork, StepKind.QueueFetch):
                if not p and not (ctx.adv_acquire(r) and ctx.others(r, StepKind.ProducerAcquire, t)):
                    add(f"producer work {n}.{s.method}() runs outside an acquire()/commit() bracket", s, r,
                        f"{n}.acquire() before and {n}.commit() after {s.method}()",
                        f"move {s.method}() between {n}.acquire() and {n}.commit()")
                if k is StepKind.ProducerWork:
                    _dma(ctx, t, s, r, cons, released, proxy_open, add)
                    _reads_upstream(ctx, t, s, r, opened_ever, run[pos + 1:], add)
            elif k is StepKind.ConsumerWait:
                # a WorkQueue has no split consumers: every task runs its own queue epilogue
                if not ctx.releases(r, t) and ctx.others(r, StepKind.ConsumerRelease, t) and not is_queue(r):
                    c[:] = [s]  # wait-only consumer: the wait itself advances the state
                    continue
                if c and not ctx.adv_wait(r):
                    add(f"{n}.wait() while the stage waited at {c[-1].location} is not released yet", s, r,
                        "one release() between consecutive wait() calls",
                        "release the stage before waiting on the next one (or set advance_on_wait=True)")
                c.append(s)
            elif k is StepKind.ConsumerRelease:
                if c:
                    c.pop(0)
                    released[rid] = s
                elif proxy_open(r) and ctx.others(r, StepKind.ConsumerWait, t):
                    released[rid] = s  # split consumer: another task waited, a downstream wait covers us
                elif ctx.adv_wait(r) and ctx.others(r, StepKind.ConsumerWait, t):
                    released[rid] = s
                else:
                    add(f"{n}.release() without a preceding wait()", s, r,
                        f"{n}.wait() before {n}.release() (or, split-consumer: a wait on a resource downstream of "
                        f"{n} while another task waits on {n})",
                        f"wait first: {n}.wait(); <work>; {n}.release()")
            elif k is StepKind.ConsumerSkip:
                call = f"{n}.skip(count={s.const_args['count']!r})" if "count" in s.const_args else f"{n}.skip()"
                if c:
                    add(f"{call} while the stage waited at {c[-1].location} is not released yet", s, r,
                        f"every {n}.wait() of this task released before it skips a stage",
                        f"release the waited stage first: a skip moves the position this task's {n}.release() uses")
                if not (ctx.releases(r, t) and any(x is t for x in ctx.tasks(r, StepKind.ConsumerWait))):
                    add(f"{call} in a task that never waits for and releases {n}", s, r,
                        f"{n}.wait() and {n}.release() on the stages this task owns, {n}.skip() on the others",
                        f"skip only on a ring the task also consumes (a task that reads no stage of {n} "
                        f"needs no position in it: drop the skip)")
                _bulk_skip(s, n, r, add)
            elif k in (StepKind.ConsumerWork, StepKind.QueueAdvance):
                if k is StepKind.ConsumerWork and _has_attr(r, s, WorkAttr.WGMMA_WAIT):
                    continue  # wgmma.wait_group reads no stage: it may run where this task holds none
                ok = c or proxy_open(r) or (p and self_edge(program, r))
                if not ok:
                    add(f"consumer work {n}.{s.method}() runs outside a wait()/release() bracket", s, r,
                        f"{n}.wait() before and {n}.release() after {s.method}()",
                        f"move {s.method}() between {n}.wait() and {n}.release()")
    for rid, p in prod.items():
        if p and not (ctx.adv_acquire(res[rid]) and ctx.others(res[rid], StepKind.ProducerCommit, t)):
            n = rname(res[rid])
            add(f"{n}.acquire() is never committed", p[-1], res[rid], f"{n}.commit() after each {n}.acquire()",
                f"add {n}.commit() after the producer work")
    for rid, c in cons.items():
        if c and is_queue(res[rid]):
            n = rname(res[rid])
            add(f"{n}.wait() is never released: every persistent task ends each work tile with its own "
                f"{n}.release()", c[-1], res[rid], f"{n}.release() after {n}.get_and_advance_work_tile()",
                f"complete the queue epilogue: {n}.wait(); {n}.get_and_advance_work_tile(); {n}.release()")
        elif c and not ctx.others(res[rid], StepKind.ConsumerRelease, t):
            n = rname(res[rid])
            add(f"{n}.wait() is never released (and no other task releases {n})", c[-1], res[rid],
                f"{n}.release() after each {n}.wait() in some task",
                f"add {n}.release() after the consumer work (or release it in the split-consumer task)")
    return out


def _has_attr(r, s: Step, attr: WorkAttr) -> bool:
    """Whether ``s`` calls a work method of ``r`` marked ``attr``."""
    spec = work_spec_of(getattr(type(r), s.method, None))
    return spec is not None and attr in spec.attrs


def _dma(ctx: _Context, t: Task, s: Step, down, cons, released, proxy_open, add) -> None:
    """A hardware producer (TMA/UMMA/CLC) reads its upstream buffers until its work completes:
    they must still be inside their wait/release window at the producer work."""
    cfg = good_config(down)
    if cfg is None or not protocol_of(cfg).producer_is_hardware:
        return
    for up in graph_upstream(ctx.program, down):
        if up is down or is_queue(up) or is_pdl(up) or good_config(up) is None:
            continue
        uses = [x for x in steps(ctx.program, t) if x.kind in (StepKind.ConsumerWait, StepKind.ConsumerRelease)
                and any(y is up for y in targets(x))]
        if not uses or cons.get(id(up)) or proxy_open(up):
            continue
        rel = released.get(id(up))
        where = (f"{rname(up)} was released at {rel.location}" if rel is not None
                 else f"{rname(up)} is not waited yet")
        add(f"{rname(down)}.{s.method}() ({cfg.pipeline_type.value} producer) reads {rname(up)} outside its "
            f"wait()/release() window: {where}", rel if rel is not None else s, up,
            f"{rname(up)}.release() after {rname(down)}.{s.method}()",
            f"move {rname(up)}.release() after {rname(down)}.{s.method}() so the next load cannot overwrite "
            "the tile the hardware producer still reads", check=DMA)


# ------------------------------------------------------------------ stage reads outside a bracket
def _stage_aux(ctx: _Context, s: Step, prod, cons, proxy_open, add) -> None:
    """Auxiliary work sits outside brackets, but one whose body reads ``stage_info.stage_idx`` (or
    ``.barrier``) names the stage of the bracket it runs in. Outside every bracket of its resource
    that is a stage the task does not hold: a descriptor built before the wait points at the previous
    (released) stage."""
    for r in targets(s):
        if is_queue(r) or good_config(r) is None or not reads_stage(r, s.method):
            continue
        if prod.get(id(r)) or cons.get(id(r)) or proxy_open(r):
            continue
        n = rname(r)
        add(f"auxiliary work {n}.{s.method}() reads stage_info.stage_idx outside every {n} bracket: the stage it "
            "names is not one this task holds", s, r,
            f"{n}.{s.method}() after {n}.wait() (or acquire(), or a split consumer's proxy wait) and before the "
            "matching release() / commit()", f"move {n}.{s.method}() after the wait() that opens the bracket")


def _stage_refs(s: Step, by_index, prod, cons, proxy_open, handed_back, add) -> None:
    """A value that names a stage -- returned by work whose body returns ``stage_info.stage_idx``, or
    by stage-indexed auxiliary work (a descriptor) -- is a reference to that stage: whoever uses it
    reads the stage (a TMA store, an MMA), so it must still be held -- its own bracket open, or
    (split consumer) the proxy window open and the stage not yet released."""
    for tok in s.token_args.values():
        w = by_index.get(tok.producer_index)
        if w is None or w.kind.side != "consumer" or not (w.kind.is_aux or w.kind.is_work):
            continue
        for u in targets(w):
            if is_queue(u) or good_config(u) is None:
                continue
            if not (returns_stage(u, w.method) or (w.kind.is_aux and reads_stage(u, w.method))):
                continue
            rid = id(u)
            if prod.get(rid) or cons.get(rid) or (proxy_open(u) and rid not in handed_back):
                continue
            n = rname(u)
            add(f"{s.resource_name}.{s.method}() uses {tok!r} (built by {n}.{w.method}() at {w.location} from the "
                f"stage index) after {n}'s stage was released: the stage it names may already be refilled", s, u,
                f"{s.resource_name}.{s.method}() before {n}.release()",
                f"move {n}.release() after {s.resource_name}.{s.method}()")


def _reads_upstream(ctx: _Context, t: Task, s: Step, down, opened_ever, rest, add) -> None:
    """Synchronous producer work reads what its resource depends on (the graph edges). In a task that
    consumes an upstream buffer of it, the work may not run before a wait that the same section makes
    on that buffer later (the same iteration, or a later one of the loop: an iteration whose guards skip
    the wait) -- it would read the stage before it is ready -- unless the task already waited on it
    earlier or the work takes a value (an argument or a guard) a read returned. After a wait the work
    may be an epilogue of values already in registers (a store of the accumulator after the loop),
    which the schedule cannot tell from a late read. Hardware producers: ``_dma``."""
    cfg = good_config(down)
    if cfg is not None and protocol_of(cfg).producer_is_hardware:
        return
    if _has_memory(down):  # on-chip bytes: the exhaustive checker follows the work's own accesses
        return
    program = ctx.program
    consumed = []
    for up in graph_upstream(program, down):
        if up is down or is_queue(up) or is_pdl(up) or good_config(up) is None:
            continue
        if any(x.kind in (StepKind.ConsumerWait, StepKind.ConsumerRelease) and any(y is up for y in targets(x))
               for x in steps(program, t)):
            consumed.append(up)
    if not consumed or any(id(up) in opened_ever for up in consumed) or s.token_args:
        return
    if any(getattr(g, "token", None) is not None for g in s.guards):
        return
    later = []
    for x, _ in rest:  # the section's later waits, in a loop this iteration's and the later ones': the task has
        # not waited yet (opened_ever), so an iteration whose guards skip the wait (every() out of phase) runs the
        # work before any stage was ready, as its unrolled twin shows
        if x.section is not s.section:
            break
        if x.kind is StepKind.ConsumerWait:
            later += [up for up in consumed if any(y is up for y in targets(x))]
    if not later:
        return
    n, u = rname(down), rname(later[0])
    add(f"{n}.{s.method}() runs before this task has waited on {u}, which {n} depends on, and takes no value: "
        f"it can read {u} before a stage is ready", s, consumed[0],
        f"{n}.{s.method}() after {u}.wait() (inside its window), or fed by the result of a {u} read",
        f"move {n}.{s.method}() after {u}.wait()")


def _has_memory(r) -> bool:
    for getter in ("get_smem_requirements", "get_tmem_requirements"):
        try:
            if getattr(r, getter)():
                return True
        except Exception:  # noqa: BLE001 - a requirement hook that needs a kernel context
            return True
    return False


def _never_waited(program: Program) -> List[Finding]:
    """A pipelined resource that some task commits to and no task ever waits on: every commit is left
    unconsumed (a TMA copy may still be writing when the CTA exits; the producer tail hangs)."""
    out = []
    try:
        resources = program.resources
    except Exception:  # noqa: BLE001
        return out
    for r in resources:
        if is_queue(r) or good_config(r) is None:
            continue
        if tasks_with(program, r, [StepKind.ConsumerWait]):
            continue
        for t in tasks_with(program, r, [StepKind.ProducerCommit, StepKind.ProducerAcquire]):
            s = next(x for x in steps(program, t) if x.kind in (StepKind.ProducerCommit, StepKind.ProducerAcquire)
                     and any(y is r for y in targets(x)))
            n = rname(r)
            out.append(F(BRACKET, f"{t.name} commits stages of {n} but no task ever waits on {n}: every commit is "
                         "left unconsumed", task=t, resource=r, location=s.location,
                         expected=f"a consumer task: {n}.wait(); <work>; {n}.release()",
                         fix=f"add the consumer of {n} (and {n} to its src_resources), or drop the producer"))
            break
    return out


def _bulk_skip(s, n, r, add) -> None:
    """skip(count=K) skips a whole loop's stages once per tile: outside the domain loop and inside
    the work-tile loop (a schedule without one: anywhere but the loop), K an int >= 0 or a
    trip_count whose every value (K + offset for K in the declared set) is >= 0: the lowering's
    PipelineState.advance(K) on a negative runtime K moves to a negative stage index."""
    if "count" not in s.const_args:
        return
    count = s.const_args["count"]
    call = f"{n}.skip(count={count!r})"
    if s.section is Section.LOOP:
        add(f"{call} inside the domain loop", s, r,
            f"{n}.skip(count=K) once per tile, before or after the domain loop",
            f"move it out of the domain loop (inside it, skip one stage per iteration: {n}.skip())")
    elif s.section not in (Section.HEAD, Section.TAIL):
        add(f"{call} outside the work-tile loop (it skips the stages of one tile's loop)", s, r,
            f"{n}.skip(count=K) once per work tile, inside work_tile_loop, before or after the domain loop",
            "move it into the work_tile_loop body (after the domain loop, where the owner's turn is known)")
    if not (isinstance(count, TripCount) or (type(count) is int and count >= 0)):
        add(f"{call}: the count is neither an int >= 0 nor a trip_count", s, r,
            "count=K with K the trip_count of the loop whose stages are skipped (or an int)",
            "pass the same trip_count(...) the owner's domain_loop runs to")
    elif isinstance(count, TripCount):
        low = count.exact if count.exact is not None else count.root.min + count.offset
        if low < 0:
            facts = f"{count.root.name} = {count.root.value}" if count.exact is not None else count.describe()
            add(f"{call} is negative for {facts} (count {low}): a ring position cannot move back", s, r,
                f"a count >= 0 for every {count.root.name} allowed",
                f"skip the count the owner's loop runs (count={count.root.name})"
                + (f", or declare trip_count({count.root.name!r}, ..., min={count.root.min - low})"
                   if count.exact is None else ""))
