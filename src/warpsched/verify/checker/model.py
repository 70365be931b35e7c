"""Compile a Program into what the exhaustive checker executes.

Every task becomes one or more *executors* (a warp-lane task on an interleaved side is one
executor per warp, since each warp walks its own lane). Each executor runs a small control
program: the schedule's steps in section order, with tile-loop and domain-loop heads. Each
sync step is resolved against the sync plan (``protocol.plan``, which the lowering reads too):
which mbarrier it waits on or arrives at, how many arrivals and transaction bytes, which
counter (cursor) it reads and advances. Nothing about the protocol is derived here.

CTA pairs (V = 2, ``SyncPlan.cta_pair``): every task runs as one executor per CTA of the pair
(``@leader`` / ``@peer``; a leader-only task in the leader alone), every barrier and every
resource's bytes exist once per CTA, and each operation lands where the plan routes it
(``PipelinePlan.pair_full / pair_empty``): its own CTA, the leader's, or both (a tcgen05.commit
multicast). A CtaLeader-gated verb is skipped in the peer but still advances its counter, as the
lowering emits it; a pair's MMA (UMMA side) reads / writes both CTAs' bytes.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from ...model.enums import PipelineGroupMode, WorkAttr
from ...model.ir import Section, Step, StepKind
from ...model.pipeline_group import PipelineGroup
from ...model.resources import PdlWaitBarrier, WorkQueue, work_spec_of
from ...model.tripcount import TripCount
from ...protocol.plan import (CLOSE_KIND, FULL, OPEN_KIND, SKIP_KIND, VERB_BARRIER, BarrierArray, PairRoute, SidePlan,
                              SyncPlan)
from ..checks_pdl import ordered_through_fill
from ..program import Program, name_of
from .bulk import bulk_periods
from .memory import RegionMap
from .parts import _is_local, _mark_private

from .compiled import (CLOSE_VERBS, CONSUMER, NOP_KINDS, OPEN_VERBS, PRODUCER, Action,  # noqa: F401
                       Barrier, Compiled, Cursor, Executor, Instr, LoopGroup, Op)


def _cfg(res):
    return getattr(res, "pipeline_config", None)


class _Builder:
    def __init__(self, program: Program, include=None):
        self.p = program
        self.include = include
        self.plan = SyncPlan.of(program)  # the plan the lowering emits
        self.barriers: List[Barrier] = []
        self.bar_base: Dict[Tuple[int, str], int] = {}
        self.key_ids: Dict[str, int] = {}
        self.key_members: List[List[int]] = []
        self.group_keys: Dict[Any, int] = {}
        self.group_bound: Dict[int, Any] = {}  # group -> the end bound its first member declared
        self.bulk_starts: List[Tuple[int, int, int]] = []  # skip(count=K): (group, member, start before origin)
        self.declared_tiles: Any = None
        self.groups: List[LoopGroup] = []
        self.regions = RegionMap(program)
        self.problems: List[str] = []

    # ------------------------------------------------------------ barriers
    def _fork_view(self, res) -> bool:
        """A Fork member: its producer bracket's hold opens at the load, not at its own acquire
        (members may be views of one buffer that the other views' readers still hold)."""
        g = self.plan.group_of.get(id(res))
        return g is not None and g.mode is PipelineGroupMode.Fork

    def base(self, array: BarrierArray, cta: int = 0) -> int:
        """Index of stage 0 of one of the plan's barrier arrays in CTA ``cta`` (created on first use)."""
        key = (id(array.owner), array.kind, cta)
        if key not in self.bar_base:
            b = self.bar_base[key] = len(self.barriers)
            for st in range(array.num_stages):
                self.barriers.append(Barrier(b + st, array.owner, array.kind, st, array.init, array.tx_bytes, cta,
                                             self.plan.cta_pair > 1))
        return self.bar_base[key]

    def _dests(self, route: PairRoute, cta: int) -> Tuple[int, ...]:
        """The CTAs an operation of CTA ``cta`` lands on (the plan's pair routing)."""
        if self.plan.cta_pair == 1 or route is PairRoute.LOCAL:
            return (cta,)
        return (0,) if route is PairRoute.LEADER else tuple(range(self.plan.cta_pair))

    def _rid(self, res, ex: Executor, pair_wide: bool = False) -> Tuple[int, ...]:
        """Region ids of ``res`` as ``ex`` touches it: its own CTA's copy, or (a pair's MMA) both."""
        if self.plan.cta_pair == 1:
            return (id(res),)
        ctas = range(self.plan.cta_pair) if pair_wide else (ex.cta,)
        return tuple(self.regions.in_cta(id(res), c) for c in ctas)

    # ------------------------------------------------------------ executors
    def build(self) -> Compiled:
        execs: List[Executor] = []
        pair = self.plan.cta_pair
        for task in self.p.tasks:
            sched = self.p.schedule_of(task)
            if sched is None:
                continue
            lanes = self.plan.splits_by_warp(task)
            for cta in ((0,) if self.plan.leader_only(task) else range(pair)):
                for w in (range(task.num_warps) if lanes else [None]):
                    if self.include is not None and (id(task), w, cta) not in self.include:
                        continue
                    name = task.name if w is None else f"{task.name}.w{w}"
                    if pair > 1:
                        name += ("@leader", "@peer")[cta]
                    ex = Executor(len(execs), name, task, 1 if w is not None else task.num_warps, w, cta)
                    ex.persistent = sched.work_tile_loop is not None
                    execs.append(ex)
        self.execs = execs
        for ex in execs:
            self._compile(ex, self.p.schedule_of(ex.task))
        persistent = any(e.persistent for e in execs)
        if persistent:
            self.declared_tiles = self._declared_tile_count(execs)
            tg = self._group(("tiles",), "work tiles", execs=[e.index for e in execs if e.persistent])
            for e in execs:
                if e.persistent:
                    e.tile_group = tg
        for g in self.groups:
            _declare(g, self.group_bound.get(g.index), self.declared_tiles)
            g.lcm = _lcm(g.steps + [g.modulus])
        # a member that skips stages runs unsynchronized through the loop, so the gap between clusters
        # of members may shrink only by whole cycles of its cursors (2 x stages x stride: the same
        # stage and parity), or the shrunk run would skip a count the owner of the stages never ran
        for e in execs:
            cycles = [2 * e.cursors[c].num_stages * e.cursors[c].stride for ins in e.program
                      if ins.kind == "step" and ins.action.op is Op.SKIP and ins.action.bulk is None
                      and ins.action.bulk_const is None for c in ins.action.advance]
            for ins in e.program if cycles else ():
                if ins.kind == "loop_head":
                    g = self.groups[ins.group]
                    g.gap_period = _lcm([g.lcm, g.gap_period, e.counter_p] + cycles)
        bulk_periods(self, execs)
        # domain starts are relative to the smallest start in their group (lanes keep residues)
        origin = {}
        for gid, _, start in self.bulk_starts:
            origin[gid] = min(origin.get(gid, start), start)
        for e in execs:
            for ins in e.program:
                if ins.kind == "loop_head":
                    origin[ins.group] = min(origin.get(ins.group, ins.start), ins.start)
        for e in execs:
            for ins in e.program:
                if ins.kind == "loop_head":
                    ins.start -= origin[ins.group]
        for g in self.groups:
            g.starts = [0] * len(g.members)
        for e in execs:
            for ins in e.program:
                if ins.kind == "loop_head":
                    self.groups[ins.group].starts[ins.member] = ins.start
        for gid, member, start in self.bulk_starts:
            self.groups[gid].starts[member] = start - origin[gid]
        for g in self.groups:
            _relative_to_origin(g, origin.get(g.index, 0), execs)
            if g.jumpers:
                g.jump_period = _lcm([g.jump_period, g.gap_period] + ([g.lift_period] if g.exact is not None else []))
        # members further apart than this cannot be coupled through a pipeline
        depth = max(1, len(self.barriers) // 2)  # every stage of every pipeline, chained
        stride = max([1] + [c.stride for e in execs for c in e.cursors] + [g.lcm for g in self.groups])
        gap = 2 * depth * stride + 2
        key_names = [""] * len(self.key_ids)
        for k, i in self.key_ids.items():
            key_names[i] = k
        skippable = any(g.kind == "skippable" for e in execs for ins in e.program for g in ins.guards)
        _mark_private(execs, self.regions)
        return Compiled(self.p, execs, self.barriers, self.groups, key_names, self.key_members, self.regions,
                        persistent, skippable, self.p.options.assume_pdl_wait_completed, self.problems, gap)

    def _declared_tile_count(self, execs):
        """The work-tile count the persistent tasks declare (``work_tile_loop(tile_count=)``)."""
        seen = {}
        for e in execs:
            wtl = self.p.schedule_of(e.task).work_tile_loop if e.persistent else None
            tc = getattr(wtl, "tile_count", None) if wtl is not None else None
            if tc is not None:
                seen.setdefault(id(tc.root) if isinstance(tc, TripCount) else ("int", tc), (tc, e.task.name))
        if len(seen) > 1:
            self.problems.append("tasks declare different work_tile_loop(tile_count=...): " + ", ".join(
                f"{name}: {tc!r}" for tc, name in seen.values()) + "; every tile count >= 1 is checked instead")
            return None
        return next(iter(seen.values()))[0] if seen else None

    def _group(self, key, label, execs=None) -> int:
        if key not in self.group_keys:
            self.group_keys[key] = len(self.groups)
            self.groups.append(LoopGroup(len(self.groups), label, [], []))
        g = self.groups[self.group_keys[key]]
        for e in execs or []:
            g.members.append(e)
            g.steps.append(1)
            g.offsets.append(0)
        return g.index

    def _key(self, guard, ex: Executor) -> int:
        name = repr(guard.key)
        if name not in self.key_ids:
            self.key_ids[name] = len(self.key_ids)
            self.key_members.append([])
        kid = self.key_ids[name]
        if ex.index not in self.key_members[kid]:
            self.key_members[kid].append(ex.index)
        return kid

    def _compile(self, ex: Executor, sched) -> None:
        steps = list(sched.steps)
        # guard keys: which step produces which key's value
        produces: Dict[int, List[int]] = {}
        keys: List[int] = []
        for s in steps:
            for g in s.guards:
                if g.kind in ("when_true", "when_false"):
                    kid = self._key(g, ex)
                    if kid not in keys:
                        keys.append(kid)
                    if g.token is not None:
                        produces.setdefault(g.token.producer_index, [])
                        if kid not in produces[g.token.producer_index]:
                            produces[g.token.producer_index].append(kid)
        ex.keys = tuple(keys)
        self._cursors(ex)
        # loop counter abstraction: exact below C, periodic with P above
        starts, periods, first = [0], [1], False
        for s in steps:
            for g in s.guards:
                if g.kind == "every":
                    starts.append(g.start)
                    periods.append(g.period)
                elif g.kind == "first_iter":
                    first = True
        ex.counter_c = max(starts) + 1 if (first or len(periods) > 1) else 0
        ex.uses_last = any(g.kind == "last_iter" for s in steps for g in s.guards)
        ex.uses_empty = any(g.kind == "loop_empty" for s in steps for g in s.guards)
        ex.counter_p = _lcm(periods)

        prog = ex.program
        by = {sec: [s for s in steps if s.section is sec] for sec in Section}
        d = sched.domain_loop
        static_n = None if d is None else (d.trip_count if d.trip_count is not None else
                                            (d.count if type(d.count) is int else None))

        def emit(sec):
            for s in by[sec]:
                guards = tuple(s.guards)
                if static_n is not None and any(g.kind == "loop_empty" for g in guards):
                    if static_n:  # a compile-time trip count: the if_empty() block never runs, or always does
                        continue
                    guards = tuple(g for g in guards if g.kind != "loop_empty")
                act = self._action(ex, s, produces.get(s.index, ()))
                prog.append(Instr("step", act, guards, local=_is_local(act, self.regions)))

        emit(Section.PROLOGUE)
        tile_head = None
        if sched.work_tile_loop is not None:
            tile_head = len(prog)
            prog.append(Instr("tile_head"))
        emit(Section.HEAD)
        loop_steps = by[Section.LOOP]
        if d is not None and loop_steps and not (d.trip_count == 0):
            head = len(prog)
            # the loop's forward form has its trip count (a reversed loop runs as many iterations
            # as range(end, start, -step)); guards read the zero-based counter, not the value
            first, end, stride = d.forward
            start = first if type(first) is int else 0
            step = stride if type(stride) is int and stride > 0 else 1
            syncs = any(s.kind.is_sync or s.kind in (StepKind.QueueFetch, StepKind.QueueAdvance) for s in loop_steps)
            offset = 0
            runtime_lattice = type(first) is not int or type(stride) is not int
            if d.count is not None or runtime_lattice:
                # a grid-stride loop: the count is not the end's; declared by count=, else >= 0
                end = d.count if d.count is not None else _AnyCount(d)
                start, step = 0, 1
            if isinstance(end, _AnyCount):
                gkey, label = ("lattice", id(d.start), id(d.end), id(d.step)), "grid-stride loop"
            elif isinstance(end, TripCount):
                gkey, offset = ("sym", id(end.root)), end.offset
                label = f"domain end {end.root.name}"
            elif type(end) is int:  # every compile-time bound: one exact group, ends as offsets
                gkey, offset, label = ("const",), end, "domain end (compile-time)"
            else:
                gkey = ("fn", getattr(end, "__func__", end))
                label = f"domain end {getattr(end, '__name__', 'runtime value')}"
            if not syncs and not ex.uses_empty:  # no barrier traffic in the body (nor an if_empty() block after
                # it, which reads the count): its trip count need not match anyone's
                gkey, label = ("local", ex.index), f"{ex.name} local loop"
            gid = self._group(gkey, label)
            grp = self.groups[gid]
            grp.members.append(ex.index)
            grp.steps.append(step)
            grp.offsets.append(offset)
            self.group_bound.setdefault(gid, end)
            prog.append(Instr("loop_head", group=gid, start=start - offset, step=step, member=len(grp.members) - 1))
            emit(Section.LOOP)
            prog.append(Instr("jump", target=head))
            prog[head].target = len(prog)
        emit(Section.TAIL)
        if tile_head is not None:
            prog.append(Instr("jump", target=tile_head))
            prog[tile_head].target = len(prog)
        emit(Section.EPILOGUE)
        prog.append(Instr("done"))
        for ins in prog:
            if ins.kind == "loop_head":  # the loop's steps all sit under skippable()
                body = [x for x in prog if x.kind == "step" and x.action.step.section is Section.LOOP]
                ins.all_skippable = bool(body) and all(any(g.kind == "skippable" for g in x.guards) for x in body)

    # ------------------------------------------------------------ cursors
    def _cursors(self, ex: Executor) -> None:
        """One cursor per counter of the plan (a warp-lane executor starts on its warp's lane)."""
        ex._slots = {}
        for sp in self.plan.sides_of(ex.task):
            for c in sp.counters:
                cur = Cursor(len(ex.cursors), sp.target, sp.side, c.name, c.stride,
                             c.first_stage(ex.lane_warp) % max(1, c.num_stages), c.num_stages)
                ex.cursors.append(cur)
                ex._slots[(id(sp.target), sp.side, c.name)] = cur

    @staticmethod
    def _slot(ex: Executor, sp: SidePlan, c) -> Optional[Cursor]:
        return ex._slots.get((id(sp.target), sp.side, c.name))

    def _cursor(self, ex: Executor, sp: SidePlan, kind: StepKind) -> Optional[Cursor]:
        c = sp.counter_for(kind)
        return ex._slots.get((id(sp.target), sp.side, c.name)) if c is not None else None

    # ------------------------------------------------------------ steps
    def _action(self, ex: Executor, s: Step, keys) -> Action:
        k = s.kind
        res = s.resource
        keys = tuple(keys)
        if k in NOP_KINDS:
            return Action(Op.NOP, s, keys=keys)
        if k is StepKind.PdlWait:
            return Action(Op.PDL_WAIT, s, keys=keys)
        if k is StepKind.PdlLaunch:
            return Action(Op.PDL_LAUNCH, s, keys=keys)
        if isinstance(res, WorkQueue) and _cfg(res) is None:
            return Action(Op.NOP, s, keys=keys)  # static queue: bookkeeping is local arithmetic
        if k in OPEN_VERBS or k in CLOSE_VERBS:
            return self._sync(ex, s, keys)
        if k is SKIP_KIND:
            return self._skip(ex, s, keys)
        return self._work(ex, s, keys)

    def _skip(self, ex: Executor, s: Step, keys) -> Action:
        """``skip``: the counters the task's own wait / release use move one stage on (the plan's
        ``skip_counters``, which the lowering advances too); the next wait reads the stage after."""
        act = Action(Op.SKIP, s, keys=keys, owner=s.resource, side=CONSUMER)
        sp = self.plan.side(ex.task, s.resource, CONSUMER)
        slots = [self._slot(ex, sp, c) for c in (sp.skip_counters if sp is not None else ())]
        if not slots or None in slots:  # the static checks name it (a skip without the task's wait / release)
            self.problems.append(f"{ex.name}: {s.describe()} skips a stage of {name_of(s.resource)}, on which it "
                                 f"neither waits nor releases")
            return Action(Op.NOP, s, keys=keys)
        act.advance = tuple(c.slot for c in slots)
        count = s.const_args.get("count")
        if count is None:
            return act
        if type(count) is int and count >= 0:
            act.bulk_const = count
        elif isinstance(count, TripCount) and ex.persistent and s.section not in (Section.HEAD, Section.TAIL, Section.LOOP):
            # outside the work-tile loop there is no tile whose end it could read (the static checks
            # reject it; a program checked without them gets a fault where it runs, not an IndexError)
            act.fault = f"{ex.name}: {s.describe()} skips count={count!r} outside the work-tile loop"
            return act
        elif isinstance(count, TripCount):
            # K stages at once: a member of K's loop group that never iterates, it reads the end
            gid = self._group(("sym", id(count.root)), f"domain end {count.root.name}")
            grp = self.groups[gid]
            grp.members.append(ex.index)
            grp.steps.append(1)
            grp.offsets.append(count.offset)
            self.group_bound.setdefault(gid, count)
            grp.jumpers += (len(grp.members) - 1,)
            act.bulk = (gid, len(grp.members) - 1)
            self.bulk_starts.append((gid, len(grp.members) - 1, -count.offset))
        else:  # the static checks name it
            self.problems.append(f"{ex.name}: {s.describe()} skips count={count!r}: an int or a trip_count is needed")
            return Action(Op.NOP, s, keys=keys)
        return act

    def _sync(self, ex: Executor, s: Step, keys) -> Action:
        k = s.kind
        side = k.side
        opening = k in OPEN_VERBS
        owner = s.resource
        group = owner if isinstance(owner, PipelineGroup) else None
        members = list(group.members) if group else [owner]
        sp = self.plan.side(ex.task, owner, side)
        if sp is None:
            return Action(Op.NOP, s, keys=keys)
        pp = self.plan.group(group).lead_plan if group else self.plan.pipeline(owner)
        proto = pp.protocol
        cur = self._cursor(ex, sp, k)
        act = Action((Op.ACQUIRE if side == PRODUCER else Op.WAIT) if opening else
                     (Op.COMMIT if side == PRODUCER else Op.RELEASE), s, keys=keys, owner=owner, side=side)
        act.cursor = cur.slot
        act.stride, act.num_stages = cur.stride, cur.num_stages
        act.group_members = tuple(members)
        act.advance = (cur.slot,) if sp.advances(k) is not None else ()
        array = self.plan.barrier(owner, VERB_BARRIER[k])
        if ex.cta and k in sp.cta_gated:
            # CtaLeader: the peer CTA skips the barrier operation, its counter still advances
            act.op, act.barrier_base, act.arrive_kind = Op.COMMIT, self.base(array, ex.cta), "skipped (CtaLeader)"
            return act
        # a wait / acquire reads its own CTA's barrier; arrivals land where the pair routes them
        dests = (ex.cta,) if opening else self._dests(pp.pair_full if side == PRODUCER else pp.pair_empty, ex.cta)
        act.barrier_base = self.base(array, dests[0])
        act.also_bases = tuple(self.base(array, c) for c in dests[1:])
        umma_side = (proto.consumer_engine if side == CONSUMER else proto.producer_engine) == "umma"
        act.regions = tuple((rid, None) for m in members for rid in self._rid(m, ex, pair_wide=umma_side))
        arrivals = sp.arrivals(ex.lane_warp)  # a warp-lane executor is one warp's own operation
        if opening:
            if sp.bracket_closes and not (side == PRODUCER and self._fork_view(owner)):
                act.hold_open = "w" if side == PRODUCER else "r"
            if side == PRODUCER and sp.arms_at is StepKind.ProducerAcquire:
                act.deliver_base = self.base(self.plan.barrier(owner, FULL), self._dests(pp.pair_full, ex.cta)[0])
                if ex.cta and pp.arms_in_leader:  # CUTLASS arms the pair's barrier in the leader CTA only
                    act.arrive_kind = "none (the leader CTA arms the pair's barrier)"
                    return act
                act.arrivals = arrivals
                act.tx_expect = sp.arm_tx_bytes
                act.arrive_kind = "arrive.expect_tx"
            if side == CONSUMER and proto.consumer_async_release:
                act.umma_wait_window = True
            return act
        act.hold_close = "w" if side == PRODUCER else "r"
        act.hold_hw = side == PRODUCER and proto.producer_async_completion
        if side == PRODUCER:
            if sp.arms_at is not StepKind.ProducerCommit:
                act.arrivals = 0  # TMA / CLC: the arming happened at acquire (a Fork's, at group.commit())
                act.arrive_kind = "none (armed at acquire)"
            elif sp.arm_tx_bytes:  # a Fork of TMA producers: the one load's bytes, once
                act.arrivals = arrivals
                act.tx_expect = sp.arm_tx_bytes
                act.arrive_kind = "arrive.expect_tx"
            else:
                act.arrivals = arrivals
                act.arrive_kind = proto.producer_arrive.value
                act.completes_umma = proto.producer_commits_mma
        else:
            act.arrivals = arrivals
            act.arrive_kind = proto.consumer_arrive.value
            if proto.consumer_async_release:
                act.umma_release = True
        return act

    def _work(self, ex: Executor, s: Step, keys) -> Action:
        res = s.resource
        act = Action(Op.WORK, s, keys=keys, owner=res)
        spec = work_spec_of(getattr(type(res), s.method, None))
        attrs = spec.attrs if spec is not None else WorkAttr.NONE
        if WorkAttr.WGMMA_WAIT in attrs:
            pending = s.const_args.get("pending", 0)
            act.wgmma_wait = pending if type(pending) is int and pending >= 0 else 0
            return act
        side = PRODUCER if s.kind in (StepKind.ProducerWork, StepKind.ProducerAux, StepKind.QueueFetch) else CONSUMER
        act.side = side
        if s.kind in (StepKind.ConsumerWork,) and any(isinstance(u, PdlWaitBarrier)
                                                      and not ordered_through_fill(self.p, ex.task, res, u)
                                                      for u in self.p.upstream(res)):
            act.pdl_dependent = True  # not ordered through a filler that waited (checks_pdl's rule)
        if s.kind.is_aux or (spec is not None and spec.auxiliary):
            return act
        cfg = _cfg(res)
        if cfg is not None:
            # the resource's own counters, else its group's (the group waited, the member works)
            sp = self.plan.work_side(ex.task, res, side)
            after_open = sp is not None and sp.open_advances
            # an opening op that advances (advance_on_wait / advance_on_acquire, or a wait-only
            # consumer) records its stage: the work uses that one, one stride behind the cursor
            cur = None
            if sp is not None:
                cur = self._cursor(ex, sp, CLOSE_KIND[side]) if not after_open else None
                cur = cur or self._cursor(ex, sp, OPEN_KIND[side])
            if cur is None:
                self.problems.append(f"{ex.name}: {s.describe()} has no {side} bracket on {name_of(res)}")
                return act
            act.cursor = cur.slot
            act.stride, act.num_stages = cur.stride, cur.num_stages
            act.after_open = after_open
            pp = self.plan.pipeline(res)
            umma = (pp.protocol.producer_engine if side == PRODUCER else pp.protocol.consumer_engine) == "umma"
            act.regions = tuple((rid, None) for rid in self._rid(res, ex, pair_wide=umma))
            has_open, has_close = sp.bracket_opens, sp.bracket_closes
            if not has_open:  # release-only half of a split bracket: the work opens the hold
                act.hold_open = "w" if side == PRODUCER else "r"
            elif not has_close:  # wait-only half: no hold, the call itself is tracked
                act.unheld = True
            elif side == PRODUCER and self._fork_view(res):
                act.hold_open = "w"  # Fork views of one buffer: written once every view is acquired
            proto = pp.protocol
            if WorkAttr.WGMMA_OPERAND in attrs:
                act.wgmma_operand = True  # a read by the next WGMMA group: held until that group retires
                if side == PRODUCER:  # after the commit: the stage just handed over, one stride behind
                    act.after_open = True
                    act.hold_open = ""
            elif side == PRODUCER:
                act.write = True
                act.hw_window = proto.producer_async_completion
                if proto.transaction_bytes or act.hw_window:  # a pair's TMA completes on the leader's barrier
                    act.deliver_base = self.base(pp.full, self._dests(pp.pair_full, ex.cta)[0])
                    act.tx_deliver = pp.delivered_tx(ex.task.num_warps)
            else:
                if proto.consumer_async_release:
                    act.umma_wait_window = True  # reads continue until the async release arrives
                elif WorkAttr.WGMMA in attrs:
                    act.wgmma = True
        else:
            if self.regions.has_region(res):
                act.regions = ((self._rid(res, ex)[0], -1),)
                act.write = side == PRODUCER
        return act


def _lcm(xs) -> int:
    out = 1
    for x in xs:
        out = out * max(1, x) // math.gcd(out, max(1, x))
    return out


def compile_program(program: Program, include=None) -> Compiled:
    return _Builder(program, include).build()


__all__ = ["Action", "Barrier", "Compiled", "Cursor", "Executor", "Instr", "LoopGroup", "compile_program"]


def _declare(g: LoopGroup, bound, declared_tiles) -> None:
    """The set of trip counts a group is checked for, in absolute terms (made relative later).

    Member m runs while ``value - offset_m < N``: compile-time ends are offsets of N = 0 (one
    exact group), a TripCount's offset is its ``+ k``, anything else has offset 0."""
    if g.label == "work tiles":
        bound = declared_tiles
        if bound is None:
            g.abs = ("min", 1, 1)
            g.describe = "every count >= 1"
            return
    if type(bound) is int:
        g.abs = ("exact", 0 if g.label != "work tiles" else bound)
        g.symbol = "tiles" if g.label == "work tiles" else "compile-time"
        return
    if isinstance(bound, TripCount):
        r = bound.root
        g.symbol = r.name
        if r.exact is not None:
            g.abs = ("exact", r.exact)
        else:
            g.abs = ("min", r.min, r.divisibility)
            g.modulus = r.divisibility
            g.describe = f"every {r.describe()}"
        return
    if isinstance(bound, _AnyCount):
        g.abs = ("min", 0, 1)
        g.describe = "every count >= 0 (runtime start/step; declare domain_loop(count=...) to narrow)"
        g.symbol = "count"
        return
    g.abs = ("first", None, 1)  # a runtime value / provider: every count >= 1 of the earliest member
    g.describe = "every count >= 1"


class _AnyCount:
    """The trip count of a loop with a runtime start or step and no declared count: any N >= 0."""

    def __init__(self, loop):
        self.loop = loop


def _relative_to_origin(g: LoopGroup, origin: int, execs) -> None:
    kind = g.abs[0]
    if kind == "exact":
        g.exact = g.abs[1] - origin
        periods = list(g.steps)
        for m in dict.fromkeys(g.members):
            ex = execs[m]
            periods.append(ex.counter_p)
            periods.extend(2 * c.num_stages * c.stride for c in ex.cursors)
        g.lift_period = _lcm(periods)
        counts = [max(0, -(-(g.exact - st) // sp)) for st, sp in zip(g.starts, g.steps)]
        if g.label == "work tiles":
            g.describe = f"exactly {g.abs[1]} tile(s)"
        elif len(set(counts)) == 1:
            g.describe = f"exactly {counts[0]}"
        else:
            g.describe = "exactly " + ", ".join(f"{execs[m].name}: {n}" for m, n in zip(g.members, counts))
    elif kind == "min":
        g.min_bound = g.abs[1] - origin - 1
        g.modulus = g.abs[2]
        g.residue = (-origin) % g.modulus
    else:
        g.min_bound = 0
