"""The sync plan: every barrier-protocol decision of one program, made once.

``SyncPlan.of(program)`` (one per program) answers, per pipelined resource or group and per task side, what the
static checks, the exhaustive checker (``verify/checker/model.py``) and the lowering
(``lower/pipelines.py``, ``lower/groups.py``, ``lower/loops.py``) used to work out each on
their own:

* ``pipeline(resource)``  -> ``PipelinePlan``: the barrier arrays its full / empty sides use
  (its own, or its group's shared one), their init counts and transaction bytes, who arms
  full[s] (``Arming``), multicast partners.
* ``group(group)``        -> ``GroupPlan``: the group's barrier layout, member by member, and
  the arrays of its collapsed verbs (a Fork of TMA producers arms its shared full once).
* ``side(task, target, side)`` -> ``SidePlan``: one task's use of one side of a resource
  or group: its counters (which verb advances each, stride, warp-lane / domain-lane and
  lane), which counter each verb reads, whether the opening verb advances (the work then
  uses the stage one stride behind), arrivals per operation, leader gating, arming and bytes.
* CTA pairs (V = 2): ``cta_pair`` (CTAs of a pair the checker runs), ``leader_only(task)``
  (a task whose every barrier operation is CtaLeader-gated runs in the leader CTA only),
  ``SidePlan.cta_gated`` (verbs skipped in the peer CTA; their counters still advance) and
  ``PipelinePlan.pair_full / pair_empty / arms_in_leader`` (which CTA's barrier an
  operation lands on, as CUTLASS's sm100 classes route it).

Pure Python (model and protocol imports only).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from ..model.enums import PipelineGroupMode, SignalingThreads
from ..model.ir import StepKind
from ..model.pipeline_group import PipelineGroup
from ..model.program import Program, step_targets
from .counters import (ROLE, VERB_COUNTER, Counter, LaneMode, counter_plan, counter_stride,  # noqa: F401
                       is_producer_counter, make_counter, role_stride)
from .barriers import (BarrierInit, PairRoute, PipelineProtocol, SideCount, arrivals_per_op, barrier_init,
                       collapsed_lead, collapsed_lead_index, cta_group_size, delivered_tx_bytes, expected_group_size, group_barrier_init, mcast_partners,
                       pair_route, protocol_of, signaling_warps, tx_pair_ctas)

PRODUCER, CONSUMER = "producer", "consumer"
FULL, EMPTY = "full", "empty"

SYNC_KINDS = frozenset(ROLE)
OPENING = {StepKind.ProducerAcquire: PRODUCER, StepKind.ConsumerWait: CONSUMER}
CLOSING = {StepKind.ProducerCommit: PRODUCER, StepKind.ConsumerRelease: CONSUMER}
OPEN_KIND = {side: kind for kind, side in OPENING.items()}
CLOSE_KIND = {side: kind for kind, side in CLOSING.items()}
# ``skip``: a consumer passes one stage it does not own (another consumer task waits for and
# releases it): every counter of the task's consumer side moves on by the side's stride, no
# barrier operation. Not a barrier verb (outside SYNC_KINDS); the counters are the ones the task's
# own wait / release define (``SidePlan.skip_counters``), so the lowering and the checker advance
# the same ones.
SKIP_KIND = StepKind.ConsumerSkip
# the barrier each verb waits on (acquire, wait) or arrives at (commit, release)
VERB_BARRIER = {StepKind.ProducerTryAcquire: EMPTY, StepKind.ProducerAcquire: EMPTY, StepKind.ProducerCommit: FULL,
                StepKind.ConsumerTryWait: FULL, StepKind.ConsumerWait: FULL, StepKind.ConsumerRelease: EMPTY}
# the barrier kinds a group's members share, and the verbs the group object itself emits
SHARED_BARRIERS = {PipelineGroupMode.Merge: (EMPTY,), PipelineGroupMode.Fork: (FULL,),
                   PipelineGroupMode.FusedMerge: (FULL, EMPTY)}
GROUP_VERBS = {
    PipelineGroupMode.Merge: frozenset({StepKind.ConsumerRelease}),
    PipelineGroupMode.Fork: frozenset({StepKind.ProducerCommit}),
    PipelineGroupMode.FusedMerge: frozenset({StepKind.ConsumerTryWait, StepKind.ConsumerWait,
                                             StepKind.ConsumerRelease}),
}


# ---------------------------------------------------------------------- per-config rules
def op_warps(config, kind: StepKind, task_num_warps: int) -> int:
    """Warps one operation of a verb covers: in warp-lane interleaving (the verb's stride equals
    the task's warp count) every warp runs its own lane's operation."""
    return 1 if task_num_warps > 1 and role_stride(config, kind) == task_num_warps else task_num_warps


def signaling_verb(config, side: str) -> StepKind:
    """The verb whose operation arrives on the side's barrier: TMA / CLC producers arm full[s] at
    acquire, every other producer arrives at commit; consumers arrive at release."""
    if side == PRODUCER:
        return StepKind.ProducerAcquire if protocol_of(config).producer_arms_on_acquire else StepKind.ProducerCommit
    return StepKind.ConsumerRelease


def verb_signaling(config, kind: StepKind) -> SignalingThreads:
    """The signaling set that applies to a verb (the wait side may differ: split consumers)."""
    if kind.side == PRODUCER:
        return config.producer_signaling_threads
    if kind in (StepKind.ConsumerTryWait, StepKind.ConsumerWait):
        return config.wait_signaling_threads
    return config.consumer_signaling_threads


def cta_gated(config, kind: StepKind) -> bool:
    """The verb runs in the leader CTA of each CTA group only (CtaLeader over V > 1; on a V = 1
    cluster every CTA leads its own group, so the gate is the identity). Not the producer verbs of a
    pair whose protocol arms in the leader (TmaUmma): there CtaLeader is the seed's leader-routed
    completion -- the leader arms the pair's transaction barrier, every CTA issues its loads."""
    if cta_group_size(config) <= 1 or not verb_signaling(config, kind).cta_leader:
        return False
    return not (kind.side == PRODUCER and protocol_of(config).pair_arms_in_leader)


def tx_per_arming_warp(config, task_num_warps: int) -> int:
    """Bytes each arming warp's ``arrive.expect_tx`` announces: the stage's bytes split over the
    warps that arm one operation (a warp-lane producer warp arms its own stage whole)."""
    warps = op_warps(config, StepKind.ProducerAcquire, task_num_warps)
    return config.num_bytes // max(1, signaling_warps(config.producer_signaling_threads, warps))


def tma_bytes_per_cta(config, task_num_warps: int) -> Tuple[int, int, str]:
    """What one producer bracket's TMA copies must deliver into each CTA's stage, as (the warps
    whose copies make it up, the bytes, the derivation): the lowering compares it with the copies
    the work really issues (``StageInfo.tma_copy``)."""
    warps = op_warps(config, StepKind.ProducerAcquire, task_num_warps)
    per = config.num_bytes_per_warp_per_cta
    if per is not None:
        return warps, per * warps, f"num_bytes_per_warp_per_cta={per} x {warps} warp(s)"
    pair = tx_pair_ctas(config)
    return warps, config.num_bytes // pair, f"num_bytes={config.num_bytes}" + (
        f" / {pair} CTAs of a pair" if pair > 1 else "")


def skips(program: Program, task, resource) -> bool:
    """The task skips stages of ``resource`` (``skip``): it waits for and releases only some."""
    return any(s.kind is SKIP_KIND and s.resource is resource for s in program.steps_of(task))


def expected_groups(program: Program, resource, side: str) -> List[Tuple[Any, SideCount, Tuple[Any, ...]]]:
    """The cooperative-group size the side's barrier needs, from the tasks whose operations
    arrive on it: ``[(task, SideCount, tasks that make it)]``, one entry per task when the
    signaling verb is interleaved (each task or warp signals its own lane's stages, so every
    entry must be the same size), else one summed entry (every task arrives on every stage).
    Consumers that all ``skip`` (each stage released by the one task that owns it, the others
    skip it) count per task too. Empty when no task signals the side. The static checks
    compare a declared group with it; a group left out is derived from it."""
    cfg = resource.pipeline_config
    verb = signaling_verb(cfg, side)
    tasks = [t for t in program.tasks if type(getattr(t, "num_warps", None)) is int and t.num_warps > 0
             and any(s.kind is verb and any(x is resource for x in step_targets(s)) for s in program.steps_of(t))]
    per_task = [(t, expected_group_size(cfg, side, op_warps(cfg, verb, t.num_warps)), (t,)) for t in tasks]
    if len(per_task) <= 1 or role_stride(cfg, verb) > 1:
        return per_task
    if side == CONSUMER and all(skips(program, t, resource) for t in tasks):
        return per_task  # each stage is released by the one task that did not skip it
    alts = [sc.alternative for _, sc, _ in per_task]
    how = " + ".join(f"{t.name}: {sc.derivation}" for t, sc, _ in per_task)
    return [(per_task[0][0], SideCount(sum(sc.arrivals for _, sc, _ in per_task), how,
                                       sum(alts) if all(a is not None for a in alts) else None), tuple(tasks))]


def derived_group(program: Program, resource, side: str) -> Optional[int]:
    """The arrivals a left-out cooperative group stands for (None: no task signals the side, or
    interleaved lanes disagree -- the static checks then ask for an explicit group)."""
    sizes = {sc.arrivals for _, sc, _ in expected_groups(program, resource, side)}
    return sizes.pop() if len(sizes) == 1 else None


def config_of(target) -> Any:
    """The config a resource's -- or a group's collapsed verbs' -- counters follow."""
    if isinstance(target, PipelineGroup):
        if target.pipeline_config is not None:
            return target.pipeline_config
        lead = collapsed_lead(target)
        return lead.pipeline_config if lead is not None else None
    return getattr(target, "pipeline_config", None)


# ---------------------------------------------------------------------- barriers
class Arming(enum.Enum):
    """Who completes the producer's part of full[s]."""

    AT_COMMIT = "commit"  # thread / cp.async / tcgen05 arrivals at commit
    AT_ACQUIRE = "acquire"  # TMA / CLC: arrive.expect_tx at acquire, the copies complete it; commit is a no-op
    BY_GROUP_COMMIT = "group commit"  # Fork of TMA producers: group.commit() arms the shared full once


@dataclass(frozen=True)
class BarrierArray:
    """``num_stages`` mbarriers of one kind; ``position`` orders them inside their owner's
    storage (units of num_stages: a plain resource is [full, empty])."""

    owner: Any  # the resource, or the PipelineGroup whose members share it
    kind: str  # FULL / EMPTY
    num_stages: int
    init: int  # arrivals that complete one phase (the cooperative-group size, >= 1)
    tx_bytes: int  # bytes one full phase also waits for (0: no transaction barrier)
    op: str  # cutlass PipelineOp of the side that arrives on it
    position: int


@dataclass(frozen=True)
class PipelinePlan:
    resource: Any
    config: Any
    protocol: PipelineProtocol
    full: BarrierArray  # what its producer arrives at and its consumer waits on
    empty: BarrierArray
    arming: Arming
    arm_tx_bytes: int  # what its own arming operation expects (a FusedMerge member: its own bytes)
    mcast_partners: int  # CTAs whose consumers release into one CTA's empty barrier
    init: BarrierInit  # the counts as the protocol derives them (declared, or derived from the tasks)
    group: Optional[PipelineGroup] = None
    pair_full: PairRoute = PairRoute.LOCAL  # where a pair CTA's producer arrivals / TMA bytes land
    pair_empty: PairRoute = PairRoute.LOCAL  # where a pair CTA's consumer arrivals land
    arms_in_leader: bool = False  # only the leader CTA's acquire arms full[s] (TmaUmma pair)
    # the producer's arrival is made inside its fetch (a counter queue's thread, after storing the response) and
    # modelled at the commit() that follows it: the lowering's commit emits nothing
    arrives_in_fetch: bool = False

    @property
    def multicast(self) -> bool:
        return self.mcast_partners > 1

    def delivered_tx(self, task_num_warps: int) -> int:
        """Bytes one producer bracket's copies deliver to full[s] (0 without a transaction barrier)."""
        return delivered_tx_bytes(self.config, task_num_warps) if self.protocol.transaction_bytes else 0


@dataclass(frozen=True)
class GroupPlan:
    group: PipelineGroup
    config: Any  # the collapsed verbs' config
    arrays: Tuple[BarrierArray, ...]  # storage order, ``group.num_barriers`` mbarriers
    members: Tuple[PipelinePlan, ...]
    full: BarrierArray  # the collapsed verbs' arrays (the shared one, else member 0's)
    empty: BarrierArray
    fork_tx_bytes: int = 0  # a Fork of TMA producers: what group.commit() arms once (0 otherwise)
    lead: int = 0  # index in ``members`` of the member whose protocol the collapsed verbs follow

    @property
    def lead_plan(self) -> "PipelinePlan":
        return self.members[self.lead]

    @property
    def fork_arms_once(self) -> bool:
        return self.group.mode is PipelineGroupMode.Fork and self.members[0].protocol.producer_arms_on_acquire


# ---------------------------------------------------------------------- one task's side
@dataclass(frozen=True)
class SidePlan:
    """One task's use of one side of a resource (or of a group's collapsed verbs)."""

    task: Any
    target: Any  # the resource or group the verbs name
    side: str
    config: Any
    counters: Tuple[Counter, ...]
    verbs: Tuple[StepKind, ...]  # this side's sync verbs on ``target`` in the task
    bracket_opens: bool  # the task opens the bracket (on the target, or through its group's verb)
    bracket_closes: bool
    leader_only: bool  # TaskWarpLeader over several warps: one warp signals for the task
    arms_at: Optional[StepKind]  # producer: the verb whose operation arrives on full[s] (None: the group's)
    arm_tx_bytes: int  # bytes the arming operation expects (TMA / CLC / Fork group commit)
    tx_per_arming_warp: int  # what each arming warp announces (the lowering's tx_count)
    signaling: SignalingThreads = field(default=SignalingThreads.All)
    cta_gated: FrozenSet[StepKind] = frozenset()  # verbs that run in the leader CTA of a pair only

    @property
    def opens(self) -> bool:
        return OPEN_KIND[self.side] in self.verbs

    @property
    def closes(self) -> bool:
        return CLOSE_KIND[self.side] in self.verbs

    def counter_for(self, kind: StepKind) -> Optional[Counter]:
        for name in VERB_COUNTER[kind]:
            for c in self.counters:
                if c.name == name:
                    return c
        return None

    @property
    def open_counter(self) -> Optional[Counter]:
        return self.counter_for(OPEN_KIND[self.side])

    @property
    def close_counter(self) -> Optional[Counter]:
        return self.counter_for(CLOSE_KIND[self.side])

    @property
    def open_advances(self) -> bool:
        """The opening verb advances its counter (advance_on_* split, or a wait-only / acquire-only
        task): the work after it uses the stage one stride behind the counter."""
        c = self.open_counter
        return c is not None and c.advanced_by is OPEN_KIND[self.side]

    @property
    def warp_lane(self) -> bool:
        return any(c.lane_mode is LaneMode.WARP for c in self.counters)

    @property
    def skip_counters(self) -> Tuple[Counter, ...]:
        """What one ``skip`` advances: every counter of this (consumer) side, each by its stride
        (split wait / release counters both, so the next wait and release land on the stage after)."""
        return self.counters if self.side == CONSUMER else ()

    def advances(self, kind: StepKind) -> Optional[Counter]:
        """The counter ``kind`` advances after it runs, if any."""
        c = self.counter_for(kind)
        return c if c is not None and c.advanced_by is kind else None

    def arrivals(self, warp: Optional[int] = None) -> int:
        """Arrivals one operation adds to its barrier: the whole task's (``warp`` None), or one
        warp's own operation (a warp-lane task runs each warp as its own operation)."""
        if warp is None:
            return arrivals_per_op(self.config, self.side, self.task.num_warps).arrivals
        if self.signaling.warp_leader and warp != 0:
            return 0
        return arrivals_per_op(self.config, self.side, 1).arrivals



# ---------------------------------------------------------------------- the plan
class SyncPlan:
    """The sync plan of one program (built on demand, cached per resource, group and task side).
    ``SyncPlan.of(program)`` is the one plan of a program that the checker runs and the lowering
    emits; constructing another is for tests that look at a plan alone."""

    @classmethod
    def of(cls, program: Program) -> "SyncPlan":
        plan = program.__dict__.get("_sync_plan")  # kept on the program: not a dataclass field
        if plan is None:
            plan = program.__dict__["_sync_plan"] = cls(program)
        return plan

    def __init__(self, program: Program):
        self.program = program
        self.group_of: Dict[int, PipelineGroup] = {}
        for g in program.pipeline_groups:
            for m in g.members:
                self.group_of[id(m)] = g
        self._pipes: Dict[int, PipelinePlan] = {}
        self._groups: Dict[int, GroupPlan] = {}
        self._sides: Dict[Tuple[int, int, str], Optional[SidePlan]] = {}
        groups = {cta_group_size(r.pipeline_config) for r in program.pipelined_resources}
        # CTAs of one CTA group the checker runs one by one: 2 for a tcgen05 pair (V > 2 is refused)
        self.cta_pair = 2 if max(groups, default=1) > 1 else 1

    def leader_only(self, task) -> bool:
        """In a CTA pair, a task whose every barrier operation is CtaLeader-gated runs in the
        leader CTA only (the whole task: its work too, as CUTLASS's MMA warp under is_leader_cta)."""
        if self.cta_pair == 1:
            return False
        kinds = [(s.kind, config_of(s.resource)) for s in self.program.steps_of(task) if s.kind in SYNC_KINDS]
        kinds = [(k, c) for k, c in kinds if c is not None]
        return bool(kinds) and all(cta_gated(c, k) for k, c in kinds)

    # ------------------------------------------------------------ barriers
    def pipeline(self, resource) -> PipelinePlan:
        key = id(resource)
        if key not in self._pipes:
            g = self.group_of.get(key)
            if g is not None:
                self.group(g)  # builds every member's plan with the group's layout
            else:
                self._pipes[key] = self._plain(resource)
        return self._pipes[key]

    def group(self, group: PipelineGroup) -> GroupPlan:
        key = id(group)
        if key not in self._groups:
            members = [m for m in group.members if getattr(m, "pipeline_config", None) is not None]
            gp = _group_plan(group, [self._plain(m) for m in members])
            self._groups[key] = gp
            for mp in gp.members:
                self._pipes[id(mp.resource)] = mp
        return self._groups[key]

    def barrier(self, target, kind: str) -> BarrierArray:
        """The array a verb on ``target`` (a resource or a group's collapsed verb) uses."""
        if isinstance(target, PipelineGroup):
            gp = self.group(target)
            return gp.full if kind == FULL else gp.empty
        pp = self.pipeline(target)
        return pp.full if kind == FULL else pp.empty

    # ------------------------------------------------------------ task sides
    def side(self, task, target, side: str) -> Optional[SidePlan]:
        """``task``'s plan for one side of ``target``; None when it names no verb of that side on it."""
        key = (id(task), id(target), side)
        if key not in self._sides:
            self._sides[key] = self._side(task, target, side)
        return self._sides[key]

    def sides_of(self, task) -> List[SidePlan]:
        """Every side plan of a task, first use first."""
        out, seen = [], set()
        for s in self.program.steps_of(task):
            if s.kind not in SYNC_KINDS or config_of(s.resource) is None:
                continue
            key = (id(s.resource), s.kind.side)
            if key not in seen:
                seen.add(key)
                out.append(self.side(task, s.resource, s.kind.side))
        return out

    def splits_by_warp(self, task) -> bool:
        """A task runs as one executor per warp when one of its verbs is warp-lane interleaved."""
        if task.num_warps <= 1:
            return False
        for s in self.program.steps_of(task):
            if s.kind not in SYNC_KINDS:
                continue
            for r in (s.resource.members if isinstance(s.resource, PipelineGroup) else [s.resource]):
                cfg = getattr(r, "pipeline_config", None)
                if cfg is not None and role_stride(cfg, s.kind) == task.num_warps:
                    return True
        return False

    def work_side(self, task, resource, side: str) -> Optional[SidePlan]:
        """The side plan whose stage a work call on ``resource`` uses: the resource's own, else its
        group's (e.g. a FusedMerge consumer waits and releases on the group, then reads a member)."""
        sp = self.side(task, resource, side)
        if sp is None and id(resource) in self.group_of:
            sp = self.side(task, self.group_of[id(resource)], side)
        return sp

    def _side(self, task, target, side: str) -> Optional[SidePlan]:
        cfg = config_of(target)
        steps = self.program.steps_of(task)
        verbs = tuple(dict.fromkeys(s.kind for s in steps
                                    if s.resource is target and s.kind in SYNC_KINDS and s.kind.side == side))
        if cfg is None or not verbs:
            return None
        sched = self.program.schedule_of(task)
        start = sched.domain_loop.start if sched.domain_loop is not None else None
        counters = tuple(make_counter(cfg, name, adv[0], task, side, start)
                         for name, adv in counter_plan(cfg, verbs).items())
        # a group's collapsed verb opens / closes the bracket of every member too
        group = self.group_of.get(id(target))
        via_group = tuple(s.kind for s in steps if group is not None and s.resource is group and s.kind.side == side)
        opens = OPEN_KIND[side] in verbs or OPEN_KIND[side] in via_group
        closes = CLOSE_KIND[side] in verbs or CLOSE_KIND[side] in via_group
        sig = cfg.producer_signaling_threads if side == PRODUCER else cfg.consumer_signaling_threads
        arms_at, arm_tx, per_warp = None, 0, 0
        if side == PRODUCER:
            if isinstance(target, PipelineGroup):
                gp = self.group(target)
                arms_at, arm_tx = StepKind.ProducerCommit, gp.fork_tx_bytes
            else:
                pp = self.pipeline(target)
                arms_at = {Arming.AT_ACQUIRE: StepKind.ProducerAcquire, Arming.AT_COMMIT: StepKind.ProducerCommit,
                           Arming.BY_GROUP_COMMIT: None}[pp.arming]
                arm_tx = pp.arm_tx_bytes if pp.arming is Arming.AT_ACQUIRE else 0
                per_warp = tx_per_arming_warp(cfg, task.num_warps) if pp.protocol.transaction_bytes else 0
        gated = frozenset(k for k in verbs if cta_gated(cfg, k))
        return SidePlan(task, target, side, cfg, counters, verbs, opens, closes,
                        bool(sig.warp_leader) and task.num_warps > 1, arms_at, arm_tx, per_warp, sig, gated)


    def _plain(self, resource) -> PipelinePlan:
        """A resource's own barriers; a cooperative group left out of its config is derived."""
        cfg = resource.pipeline_config
        full = derived_group(self.program, resource, PRODUCER) if cfg.producer_group is None else None
        empty = derived_group(self.program, resource, CONSUMER) if cfg.consumer_group is None else None
        return _plain_pipeline(resource, barrier_init(cfg, full, empty))


# ---------------------------------------------------------------------- builders
def _plain_pipeline(resource, init) -> PipelinePlan:
    cfg = resource.pipeline_config
    proto = protocol_of(cfg)
    full = BarrierArray(resource, FULL, cfg.num_stages, max(1, init.full_arrivals), init.full_tx_bytes,
                        proto.producer_op, 0)
    empty = BarrierArray(resource, EMPTY, cfg.num_stages, max(1, init.empty_arrivals), 0, proto.consumer_op, 1)
    in_fetch = bool(getattr(resource, "counter_fed", False))
    if in_fetch:
        # a counter queue's fetching thread stores the response, then arrives (release) on full[s]: no
        # transaction bytes, the arrival modelled at commit, the verb after the fetch (lower/tile_queues.py)
        proto = replace(proto, transaction_bytes=False, producer_arms_on_acquire=False)
    arming = Arming.AT_ACQUIRE if proto.producer_arms_on_acquire else Arming.AT_COMMIT
    pair_full, pair_empty = pair_route(cfg, PRODUCER), pair_route(cfg, CONSUMER)
    return PipelinePlan(resource, cfg, proto, full, empty, arming, init.full_tx_bytes, mcast_partners(cfg), init,
                        None, pair_full, pair_empty, pair_full is not PairRoute.LOCAL and proto.pair_arms_in_leader,
                        in_fetch)


def _group_plan(group: PipelineGroup, own: List[PipelinePlan]) -> GroupPlan:
    """Layouts (S stages, N members): Merge [full_0] .. [full_N-1] [shared empty]; Fork [shared full]
    [empty_0] .. [empty_N-1]; FusedMerge [shared full] [shared empty]."""
    members = [pp.resource for pp in own]
    inits = [pp.init for pp in own]
    shared_full, shared_empty = group_barrier_init(members, group.mode, inits)
    shared = SHARED_BARRIERS[group.mode]
    n = len(own)
    S = own[0].config.num_stages if own else 0
    lead = collapsed_lead_index([pp.config for pp in own], group.mode) if own else 0
    first = own[lead].protocol if own else None  # the collapsed side's ops follow the lead member
    arrays: List[BarrierArray] = []
    sf = se = None
    if FULL in shared and shared_full is not None:
        sf = BarrierArray(group, FULL, S, max(1, shared_full.full_arrivals), shared_full.full_tx_bytes,
                          first.producer_op, 0)
    if EMPTY in shared and shared_empty is not None:
        se = BarrierArray(group, EMPTY, S, max(1, shared_empty.empty_arrivals), 0, first.consumer_op,
                          1 if group.mode is PipelineGroupMode.FusedMerge else n)
    plans = []
    for i, pp in enumerate(own):
        full = sf if sf is not None else BarrierArray(pp.resource, FULL, S, pp.full.init, pp.full.tx_bytes,
                                                      pp.full.op, i)
        empty = se if se is not None else BarrierArray(pp.resource, EMPTY, S, pp.empty.init, 0, pp.empty.op, i + 1)
        arming = pp.arming
        if group.mode is PipelineGroupMode.Fork and arming is Arming.AT_ACQUIRE:
            arming = Arming.BY_GROUP_COMMIT  # the members are views of one buffer, loaded once
        plans.append(PipelinePlan(pp.resource, pp.config, pp.protocol, full, empty, arming, pp.arm_tx_bytes,
                                  pp.mcast_partners, pp.init, group, pp.pair_full, pp.pair_empty, pp.arms_in_leader,
                                  pp.arrives_in_fetch))
    if group.mode is PipelineGroupMode.Merge:
        arrays = [p.full for p in plans] + ([se] if se is not None else [])
    elif group.mode is PipelineGroupMode.Fork:
        arrays = ([sf] if sf is not None else []) + [p.empty for p in plans]
    else:
        arrays = [a for a in (sf, se) if a is not None]
    fork_tx = sf.tx_bytes if (group.mode is PipelineGroupMode.Fork and sf is not None and first is not None
                              and first.producer_arms_on_acquire) else 0
    full = sf if sf is not None else (plans[lead].full if plans else None)
    empty = se if se is not None else (plans[lead].empty if plans else None)
    return GroupPlan(group, config_of(group), tuple(arrays), tuple(plans), full, empty, fork_tx, lead)


__all__ = ["Arming", "BarrierArray", "CLOSE_KIND", "CLOSING", "Counter", "collapsed_lead", "FULL", "EMPTY", "GROUP_VERBS", "GroupPlan", "LaneMode",
           "PairRoute", "cta_gated", "verb_signaling",
           "OPEN_KIND", "OPENING", "PipelinePlan", "SHARED_BARRIERS", "SKIP_KIND", "SidePlan", "SyncPlan", "VERB_BARRIER", "VERB_COUNTER",
           "config_of", "counter_plan", "counter_stride", "is_producer_counter", "op_warps", "role_stride",
           "signaling_verb", "tma_bytes_per_cta", "tx_per_arming_warp"]
