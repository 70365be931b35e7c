"""Schedule walking: one task's captured steps become straight-line CuTe DSL code.

Sections are emitted in order PROLOGUE, [work tile loop: HEAD, domain loop, TAIL],
EPILOGUE. Guards become ``scf.if`` on the iteration index (first / last / every), on a
stored token (when_true / when_false) or on the tile's skip predicate (skippable). The
domain loop and the static persistent tile loop are ``scf.for`` with runtime bounds.

Values live in one environment per task (a dict keyed by the typed keys below): pipeline
counters (PipelineState, one per counter of the sync plan), the stage each side last acquired /
waited (``cur``), token values, pending try_ tokens and the CLC loop's tile. A region (loop
body, guarded block) carries exactly the entries it rebinds.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import cutlass
import cutlass.cute as cute

from ..model.ir import Section, StepKind
from ..model.resources import LAUNCH_COUNTER, StageInfo, TaskLocalVariable, WorkQueue, WorkTileInfo, work_spec_of
from ..model.iteration import (ITERATION_GUARDS, forward_form, guard_on_value, is_nonempty, loop_ran_none,
                               value_of_forward)
from ..model.tripcount import TripCount, runtime_bound
from ..protocol.plan import SKIP_KIND, SYNC_KINDS, Counter, LaneMode, config_of
from . import LoweringError, region_state, tile_queues
from .dsl import dyn_for, dyn_if, dyn_while
from .pdl import emit_pdl
from .pipelines import make_state
from .traced_checks import TracedWorkChecks

WORK_KINDS = {StepKind.ProducerWork, StepKind.ProducerAux, StepKind.ConsumerWork, StepKind.ConsumerAux}


# ---- environment keys (frozen dataclasses: equal only to keys of the same kind)
@dataclass(frozen=True)
class StateKey:
    """A counter of the sync plan: ``target`` is id() of the resource or group."""
    target: int
    counter: str


@dataclass(frozen=True)
class CurKey:
    """The state the side's last acquire / wait ran with (the stage its work uses)."""
    target: int
    side: str


@dataclass(frozen=True)
class TokenKey:
    token: int


@dataclass(frozen=True)
class TryKey:
    """A try_acquire / try_wait result waiting for its blocking verb."""
    target: int
    side: str


@dataclass(frozen=True)
class TileKey:
    coord: str


TILE_KEYS = tuple(TileKey(c) for c in ("x", "y", "z", "valid"))  # the CLC loop's current tile


class Frame:
    """What guards and StageInfo see at a point of the schedule."""

    def __init__(self, loop_offset=None, start=None, end=None, step=None, work_tile=None, skip=None):
        self.loop_offset, self.start, self.end, self.step = loop_offset, start, end, step
        self.work_tile, self.skip = work_tile, skip
        self.first = None  # True in a peeled first iteration, False in the loop after it, None: unknown
        self.min_count = 0  # smallest zero-based iteration count this code can run at

    def with_(self, **kw) -> "Frame":
        f = Frame(self.loop_offset, self.start, self.end, self.step, self.work_tile, self.skip)
        f.first, f.min_count = self.first, self.min_count
        for k, v in kw.items():
            setattr(f, k, v)
        return f


class TaskEmitter:
    def __init__(self, lowering, task):
        self.L = lowering
        self.task = task
        self.program = lowering.program
        self.sched = self.program.schedule_of(task)
        self.steps = list(self.sched.steps) if self.sched is not None else []
        self.plan = lowering.plan
        self._readers: Dict[int, List[int]] = {}
        self.checks = TracedWorkChecks(self.program, task)  # what work bodies report, held to the checked program
        for s in self.steps:
            for tok in s.token_args.values():
                self._readers.setdefault(id(tok), []).append(s.index)
            for g in s.guards:
                if g.token is not None:
                    self._readers.setdefault(id(g.token), []).append(s.index)
            self._check_step(s)

    # ------------------------------------------------------------------ validation
    def _check_step(self, s):
        res = s.resource
        if s.kind in SYNC_KINDS and not isinstance(res, WorkQueue) and config_of(res) is None:
            raise LoweringError(f"{s.kind.label} on a resource without a pipeline_config", task=self.task,
                                resource=res, location=s.location, fix="give the resource a pipeline_config")

    # ------------------------------------------------------------------ env keys
    def _pipe(self, res):
        return self.L.pipes[id(res)]

    def _side(self, res, side):
        return self.plan.side(self.task, res, side)

    def _counter(self, res, kind) -> Counter:
        sp = self._side(res, kind.side)
        c = sp.counter_for(kind) if sp is not None else None
        if c is None:
            raise LoweringError(f"no counter for {kind.label}", task=self.task, resource=res)
        return c

    @staticmethod
    def _skey(res, counter: Counter) -> StateKey:
        return StateKey(id(res), counter.name)

    @staticmethod
    def _cur(res, side) -> CurKey:
        return CurKey(id(res), side)

    @staticmethod
    def _tkey(tok) -> TokenKey:
        return TokenKey(id(tok))

    @staticmethod
    def _trykey(res, side) -> TryKey:
        return TryKey(id(res), side)

    def _pipelined(self, res) -> bool:
        return config_of(res) is not None  # a static WorkQueue has none: its verbs are the loop's arithmetic

    def _writes(self, steps: Sequence) -> List[Any]:
        """Environment entries the steps rebind, in first-write order (a set of id()-keyed
        tuples would order the loop-carried values differently from run to run)."""
        keys: Dict[Any, None] = {}
        for s in steps:
            res = s.resource
            if s.kind in SYNC_KINDS and self._pipelined(res):
                side = s.kind.side
                for c in self._side(res, side).counters:
                    keys[self._skey(res, c)] = None
                keys[self._cur(res, side)] = None
            if s.kind is SKIP_KIND and self._pipelined(res):
                keys.update(dict.fromkeys(self._skey(res, c) for c in self._side(res, s.kind.side).skip_counters))
            for tok in s.returns:
                keys[self._tkey(tok)] = None
            if s.kind is StepKind.QueueAdvance and self._pipelined(res):
                keys.update(dict.fromkeys(TILE_KEYS))
        return list(keys)

    # ------------------------------------------------------------------ tokens
    def _slot_var(self, tok, res) -> Optional[TaskLocalVariable]:
        if tok.slot is None:
            return None
        var = getattr(res, tok.slot, None)
        return var if isinstance(var, TaskLocalVariable) and not var.is_uninitialized else None

    def _seed(self, env, steps: Sequence, is_loop: bool) -> None:
        """Give tokens produced in a region, and read outside it (or in a later iteration), their default."""
        inside = {s.index for s in steps}
        for s in steps:
            for tok in s.returns:
                key = self._tkey(tok)
                readers = self._readers.get(id(tok), [])
                escapes = any(r not in inside for r in readers) or (is_loop and any(r <= s.index for r in readers))
                if not escapes or key in env:
                    continue
                var = self._slot_var(tok, s.resource)
                if var is None or var.default_value() is None or not _is_numeric_type(var.dtype):
                    raise LoweringError(
                        f"value {tok!r} is produced inside a runtime loop or guard and read outside it (or in a "
                        "later iteration), so it needs a typed default", task=self.task, resource=s.resource,
                        location=s.location,
                        fix=f"declare {tok.slot or 'the result'} as TaskLocalVariable(dtype=cutlass.<Numeric>, "
                            "default=...)")
                env[key] = var.dtype(var.default_value())

    def _store_token(self, env, tok, res, value):
        key = self._tkey(tok)
        if key in env:
            var = self._slot_var(tok, res)
            if var is not None and _is_numeric_type(var.dtype):
                value = var.dtype(value)
        env[key] = value

    # ------------------------------------------------------------------ emission
    def emit(self):
        if self.sched is None:
            return
        env: Dict[Any, Any] = {}
        for res in self._touched():
            if not self._pipelined(res):
                continue
            sides = [sp for sp in (self._side(res, "producer"), self._side(res, "consumer")) if sp is not None]
            for sp in sides:
                for c in sp.counters:
                    env[self._skey(res, c)] = make_state(c, self._lane(res, c))
            for sp in sides:
                env[self._cur(res, sp.side)] = env[self._skey(res, sp.counters[0])].clone()
        wtl = self.sched.work_tile_loop
        frame = Frame()
        if wtl is not None:
            self._block(env, self.sched.by_section(Section.PROLOGUE), frame, 0)
            for k in [k for k in env if isinstance(k, TryKey)]:  # a try_ token never crosses into a loop
                del env[k]
            self._tile_loop(env, wtl, frame)
            self._block(env, self.sched.by_section(Section.EPILOGUE), frame, 0)
        else:
            self._sections(env, frame)
        if self.L.producer_tail:  # dense producers only: an interleaved lane cannot drain the others' stages
            for res in self._touched():
                if self._pipelined(res) and any(s.resource is res and s.kind is StepKind.ProducerAcquire
                                                for s in self.steps):
                    c = self._counter(res, StepKind.ProducerAcquire)
                    if c.stride == 1:
                        self._pipe(res).tail(self.task, env[self._skey(res, c)])

    def _touched(self):
        """Resources and pipeline groups the steps name, first use first (a group's collapsed verbs
        run on the group's own counters)."""
        seen: Dict[int, Any] = {}
        for s in self.steps:
            seen.setdefault(id(s.resource), s.resource)
        return list(seen.values())

    # ------------------------------------------------------------------ interleave lanes
    def _lane(self, res, counter: Counter):
        """The counter's first stage, as the sync plan decides it. Warp-lane mode (task num_warps ==
        stride): warp i of the task owns lane i. Domain-lane mode (sibling tasks): the lane is the
        compile-time domain start modulo the stride."""
        stride = counter.stride
        if counter.lane_mode is LaneMode.NONE:
            return 0
        if counter.lane_mode is LaneMode.WARP:
            return self.L.warp_idx - self.task.warp_idx
        dl = self.sched.domain_loop
        if dl is None or type(dl.start) is not int:
            raise LoweringError(f"domain-lane interleaving (stride {stride}, {self.task.num_warps} warp(s)) needs a "
                                "compile-time domain_loop start", task=self.task, resource=res,
                                location=dl.location if dl is not None else self.task.location,
                                fix=f"give the task {stride} warps (warp-lane), or domain_loop(lane, end, {stride})")
        if dl.step != stride:
            raise LoweringError(f"domain-lane interleaving (stride {stride}) needs domain_loop(lane, end, {stride}); "
                                f"got step {dl.step!r}", task=self.task, resource=res, location=dl.location,
                                fix=f"step the domain loop by {stride}, or give the task {stride} warps (warp-lane)")
        return counter.lane

    def _sections(self, env, frame):
        loop_steps = self.sched.by_section(Section.LOOP)
        dl = self.sched.domain_loop
        if dl is not None:  # bounds first: StageInfo.loop_start / loop_end / loop_step hold in head and tail too
            start, end, step = (self._bound(b, frame, dl) for b in (dl.start, dl.end, dl.step))
            frame = frame.with_(start=start, end=end, step=step)
        self._block(env, self.sched.by_section(Section.HEAD), frame, 0)
        if dl is not None:
            self._seed(env, loop_steps, True)
            keys = [k for k in self._writes(loop_steps) if k in env]
            for k in list(env):  # a try_ token never crosses into a loop: it belongs to one bracket
                if isinstance(k, TryKey):
                    del env[k]

            base = frame.with_(start=start, end=end, step=step)
            loop_start = start
            if any(g.kind == "first_iter" for s in loop_steps for g in s.guards):
                # Peel iteration 0: first_iter() blocks resolve at compile time, the loop body
                # runs without them (what a hand-written prologue does).
                def first(inner):
                    self._block(inner, loop_steps, base.with_(loop_offset=start, first=True), 0)

                dyn_if(env, keys, is_nonempty(start, end, step), first)
                self._drop_try(env, loop_steps)
                loop_start = start + step
                base = base.with_(first=False, min_count=1)

            # scf.for wants a positive step: a reversed loop runs its forward form (the same
            # trip count) and maps each forward value back (model/iteration.py)
            f_start, f_end, f_step = forward_form(loop_start, end, step)

            def body(j, inner):
                i = value_of_forward(j, loop_start, end, step)
                self._block(inner, loop_steps, base.with_(loop_offset=i), 0)

            dyn_for(env, keys, f_start, f_end, f_step, body, unroll=dl.unroll)
            self._drop_try(env, loop_steps)
        self._block(env, self.sched.by_section(Section.TAIL), frame, 0)

    def _bound(self, b, frame, dl):
        if isinstance(b, TripCount):  # the checker reads the declared set, the kernel the value
            return runtime_bound(b)
        if callable(b) and not isinstance(b, (int, float)) and not hasattr(b, "ir_value"):
            tile = frame.work_tile.tile_idx if frame.work_tile is not None else None
            if inspect.ismethod(b):
                return b(tile)
            return b(self.task, tile)
        return b

    def _tile_loop(self, env, wtl, frame):
        wq = wtl.work_queue
        if wq.is_dynamic:
            return self._clc_tile_loop(env, wtl, frame)
        cfg = wq.tile_scheduler_config
        if cfg is not None and cfg.tile_scheduler_params is not None:
            return self._scheduler_tile_loop(env, wtl, frame, cfg.tile_scheduler_params)
        if cfg is None or cfg.num_tiles is None:
            raise LoweringError("a static WorkQueue needs tile_scheduler_config=TileSchedulerConfig(num_tiles=...)",
                                task=self.task, resource=wq, location=wtl.location)
        dims, total = tile_queues.tile_dims(wq), tile_queues.tile_total(wq)
        bid, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        inner_steps = [s for s in self.steps if s.section in (Section.HEAD, Section.LOOP, Section.TAIL)]
        self._seed(env, inner_steps, True)
        keys = [k for k in self._writes(inner_steps) if k in env]

        def body(t, inner):
            coords, rest = [], t
            for d in dims[:-1]:
                coords.append(rest % d)
                rest = rest // d
            coords.append(rest)
            while len(coords) < 3:
                coords.append(cutlass.Int32(0))
            tile = WorkTileInfo(tile_idx=tuple(coords), is_valid_tile=cutlass.Boolean(True))
            skip = None
            if wtl.has_skippable and wtl.skip_if is not None:
                skip = _call_skip(wtl.skip_if, wq, tile)
            self._sections(inner, frame.with_(work_tile=tile, skip=skip))

        dyn_for(env, keys, bid, total, gdim, body, unroll=1)

    def _scheduler_tile_loop(self, env, wtl, frame, params):
        """Static queue built from ``PersistentTileSchedulerParams``: the tile order and CTA mapping of
        ``cutlass.utils.StaticPersistentTileScheduler`` (cluster index from blockIdx.z, stride = the
        number of persistent clusters), as a runtime loop over the linear cluster index."""
        from cutlass.utils import StaticPersistentTileScheduler as Sched

        wq = wtl.work_queue
        sched = Sched.create(params, cute.arch.block_idx(), cute.arch.grid_dim())
        total = cute.size(sched.params.problem_layout_ncluster_mnl)
        inner_steps = [s for s in self.steps if s.section in (Section.HEAD, Section.LOOP, Section.TAIL)]
        self._seed(env, inner_steps, True)
        keys = [k for k in self._writes(inner_steps) if k in env]

        def body(t, inner):
            work = Sched(sched.params, sched.num_persistent_clusters, t, sched.cta_id_in_cluster,
                         cutlass.Int32(0)).get_current_work()
            tile = WorkTileInfo(tile_idx=tuple(work.tile_idx), is_valid_tile=work.is_valid_tile)
            skip = _call_skip(wtl.skip_if, wq, tile) if wtl.has_skippable and wtl.skip_if is not None else None
            self._sections(inner, frame.with_(work_tile=tile, skip=skip))

        _, _, bz = cute.arch.block_idx()
        dyn_for(env, keys, cutlass.Int32(bz), total, sched.num_persistent_clusters, body, unroll=1)

    def _clc_tile_loop(self, env, wtl, frame):
        """CLC dynamic persistent loop: the first tile is this CTA's own; each
        ``get_and_advance_work_tile()`` decodes the waited response into the next one; the loop ends
        when a response carries no tile."""
        wq = wtl.work_queue
        if wq.counter_fed and wq.tile_scheduler_config.num_tiles is None:
            raise LoweringError("a WorkQueue on an atomic counter needs the tile count it hands out",
                                task=self.task, resource=wq, location=wtl.location,
                                fix="pass TileSchedulerConfig(num_tiles=..., counter=...)")
        if wq.counter_fed and wq.tile_scheduler_config.counter is LAUNCH_COUNTER:
            raise LoweringError("a WorkQueue on an atomic counter needs the counter's tensor in the kernel",
                                task=self.task, resource=wq, location=wtl.location,
                                fix="pass TileSchedulerConfig(counter=<a one-word int32 tensor>) when the kernel is "
                                    "traced (LAUNCH_COUNTER only stands for it where the program is checked)")
        env.update(zip(TILE_KEYS, tile_queues.first_tile(wq)))
        inner_steps = [s for s in self.steps if s.section in (Section.HEAD, Section.LOOP, Section.TAIL)]
        self._seed(env, inner_steps, True)
        keys = [k for k in self._writes(inner_steps) if k in env]
        for k in TILE_KEYS:
            if k not in keys:
                keys.append(k)

        def body(inner):
            x, y, z, valid = (inner[k] for k in TILE_KEYS)
            tile = WorkTileInfo(tile_idx=(x, y, z), is_valid_tile=valid != 0)
            skip = None
            if wtl.has_skippable and wtl.skip_if is not None:
                skip = _call_skip(wtl.skip_if, wq, tile)
            self._sections(inner, frame.with_(work_tile=tile, skip=skip))

        dyn_while(env, keys, lambda e: e[TILE_KEYS[3]] != 0, body)

    def _clc_fetch(self, env, s):
        """``fetch_work_tile()``: one thread asks the hardware to cancel a not-yet-started cluster; the
        16-byte response lands in the acquired stage and completes its full barrier."""
        wq = s.resource
        cur = env[self._cur(wq, "producer")]
        mbar = self._pipe(wq).pipe.producer_get_barrier(cur)
        tile_queues.fetch(wq, mbar, tile_queues.response(self.L.clc_response[id(wq)], cur.index))

    def _clc_advance(self, env, s):
        """``get_and_advance_work_tile()``: decode the waited stage's response into the next tile."""
        wq = s.resource
        cur = env[self._cur(wq, "consumer")]
        x, y, z, valid = tile_queues.decode(wq, tile_queues.response(self.L.clc_response[id(wq)], cur.index))
        env.update(zip(TILE_KEYS, (x, y, z, valid)))

    def _drop_try(self, env, steps):
        touched = {self._trykey(s.resource, s.kind.side) for s in steps if s.kind in SYNC_KINDS}
        for k in list(env):
            if k in touched:
                del env[k]

    def _block(self, env, steps: Sequence, frame: Frame, depth: int):
        i = 0
        steps = list(steps)
        while i < len(steps):
            s = steps[i]
            if len(s.guards) <= depth:
                self._step(env, s, frame)
                i += 1
                continue
            g = s.guards[depth]
            j = i
            while j < len(steps) and len(steps[j].guards) > depth and steps[j].guards[depth] is g:
                j += 1
            run = steps[i:j]
            self._guarded(env, g, run, frame, depth)
            i = j

    def _guarded(self, env, g, run, frame, depth):
        pred = self._predicate(env, g, frame, run[0])
        self._seed(env, run, False)
        keys = [k for k in self._writes(run) if k in env]
        dyn_if(env, keys, pred, lambda inner: self._block(inner, run, frame, depth + 1))
        self._drop_try(env, run)

    def _predicate(self, env, g, frame, step):
        i = frame.loop_offset
        if g.kind in ITERATION_GUARDS:
            if i is None:
                raise LoweringError(f"{g.describe()} outside the domain loop", task=self.task, location=g.location)
            return guard_on_value(g.kind, g.period, g.start, i, frame.start, frame.end, frame.step, peeled=frame.first,
                                  min_count=frame.min_count)
        if g.kind in ("when_true", "when_false"):
            key = self._tkey(g.token)
            if key not in env:
                raise LoweringError(f"{g.describe()} reads {g.token!r}, which has no value at this point", task=self.task,
                                    location=g.location, fix="produce the value before the guarded block, in "
                                    "the same loop iteration, or give its TaskLocalVariable a default")
            v = env[key]
            if isinstance(v, bool):
                return v if g.kind == "when_true" else (not v)
            truth = v if isinstance(v, cutlass.Boolean) else (v != 0)
            return truth if g.kind == "when_true" else (truth == cutlass.Boolean(False))
        if g.kind == "loop_empty":
            if frame.start is None or frame.loop_offset is not None:
                raise LoweringError(f"{g.describe()} outside the code after its domain loop", task=self.task,
                                    location=g.location)
            return loop_ran_none(frame.start, frame.end, frame.step)
        if g.kind == "skippable":
            if frame.skip is None:
                return True
            if isinstance(frame.skip, bool):
                return not frame.skip
            return cutlass.Boolean(frame.skip) == cutlass.Boolean(False)
        raise LoweringError(f"unknown guard {g.kind}", task=self.task, location=g.location)

    # ------------------------------------------------------------------ one step
    def _step(self, env, s, frame):
        res, kind = s.resource, s.kind
        if kind in (StepKind.PdlWait, StepKind.PdlLaunch):
            emit_pdl(kind)
            return
        if isinstance(res, WorkQueue) and not res.is_dynamic:
            return  # static queue: the tile loop's induction variable is the queue state
        if kind is StepKind.QueueFetch:
            return self._clc_fetch(env, s)
        if kind is StepKind.QueueAdvance:
            return self._clc_advance(env, s)
        if kind in SYNC_KINDS:
            self._sync(env, s)
            return
        if kind is SKIP_KIND:  # register-only: the counters of the task's own wait / release move on
            for c in self._side(res, kind.side).skip_counters:  # (a skip without them: a static finding)
                env[self._skey(res, c)] = _advanced(env[self._skey(res, c)], c, s.const_args.get("count", 1))
            return
        if kind in WORK_KINDS:
            self._work(env, s, frame)
            return
        raise LoweringError(f"step kind {kind.label} is not lowered", task=self.task, resource=res,
                            location=s.location)

    def _sync(self, env, s):
        res, kind = s.resource, s.kind
        pipe = self._pipe(res)
        side = kind.side
        counter = self._counter(res, kind)
        skey = self._skey(res, counter)
        state = env[skey]
        warp = self.L.warp_idx
        if kind is StepKind.ProducerTryAcquire:
            env[self._trykey(res, side)] = pipe.try_acquire(state)
            return
        if kind is StepKind.ConsumerTryWait:
            env[self._trykey(res, side)] = pipe.try_wait(state)
            return
        token = env.pop(self._trykey(res, side), None)
        if kind is StepKind.ProducerAcquire:
            pipe.acquire(self.task, warp, state, token)
            self.checks.tx.acquired(res, pipe.proto)
        elif kind is StepKind.ConsumerWait:
            pipe.wait(self.task, warp, state, token)
        elif kind is StepKind.ProducerCommit:
            pipe.commit(self.task, warp, state)
            self.checks.tx.committed(res)
        elif kind is StepKind.ConsumerRelease:
            pipe.release(self.task, warp, state)
        if kind in (StepKind.ProducerAcquire, StepKind.ConsumerWait):
            env[self._cur(res, side)] = state.clone()
        if counter.advanced_by is kind:
            env[skey] = _advanced(state, counter)

    def _work(self, env, s, frame):
        res = s.resource
        spec = work_spec_of(getattr(type(res), s.method, None))
        if spec is None:
            raise LoweringError(f"{s.method} is not a work method", task=self.task, resource=res, location=s.location)
        side = spec.role
        stage_idx = barrier = None
        if self._pipelined(res):
            # the resource's own counters, else its group's (e.g. FusedMerge: the group waited)
            sp = self.plan.work_side(self.task, res, side)
            cur = env.get(self._cur(sp.target, side)) if sp is not None else None
            if cur is not None and not sp.opens:
                # split consumer: another task waited; this task works and closes, so the work's
                # stage is this task's closing counter (its `cur` would stay on stage 0)
                cur = env.get(self._skey(sp.target, sp.counters[0]), cur)
            if cur is not None:
                stage_idx = cur.index
                barrier = self._pipe(res).barrier(side, cur)
        info = StageInfo(loop_offset=frame.loop_offset, stage_idx=stage_idx, barrier=barrier,
                         work_tile=frame.work_tile, context=self.L.context_for(self.task),
                         loop_start=frame.start, loop_end=frame.end, loop_step=frame.step)
        kwargs, mark = dict(s.const_args), self.checks.mark(info.context)
        for pname, tok in s.token_args.items():
            key = self._tkey(tok)
            if key not in env:
                raise LoweringError(f"{s.method}({pname}=...) reads {tok!r}, which has no value at this point",
                                    task=self.task, resource=res, location=s.location,
                                    fix="produce it earlier in the same iteration, or declare its "
                                        "TaskLocalVariable with dtype= and default=")
            kwargs[pname] = env[key]
        with region_state.writing(res, self.task, s):
            out = spec.fn(res, info, **kwargs)
        self.checks.worked(res, s, info.context, mark)
        if not s.returns:
            return
        values = (out,) if len(s.returns) == 1 else tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(values) != len(s.returns):
            raise LoweringError(f"{s.method}() returned {len(values)} value(s), the schedule expects "
                                f"{len(s.returns)}", task=self.task, resource=res, location=s.location)
        for tok, v in zip(s.returns, values):
            self._store_token(env, tok, res, v)


def _advanced(state, counter, count=1):  # count strides on (skip(count=K): K's runtime value), modulo the ring
    new, n = state.clone(), runtime_bound(count)
    if not (type(n) is int and n == 0):
        new.advance(n if counter.stride == 1 else n * counter.stride)
    return new


def _static_pair(a, b) -> bool:
    return isinstance(a, int) and isinstance(b, int)


def _is_numeric_type(t) -> bool:
    return isinstance(t, type) and issubclass(t, cutlass.Numeric)


def _call_skip(fn, wq, tile):
    if inspect.ismethod(fn):
        return fn(tile)
    try:
        n = len([p for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        n = 2
    return fn(wq, tile) if n >= 2 else fn(tile)
