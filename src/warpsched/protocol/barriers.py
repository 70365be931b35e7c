"""Barrier protocol per pipeline type.

Each stage ``s`` of a pipeline owns two mbarriers, ``full[s]`` (producer -> consumer) and
``empty[s]`` (consumer -> producer). A side's cursor holds ``(stage, phase)``; producers
start at phase 1 (the empty barriers are free), consumers at phase 0. A blocking wait on
parity ``p`` passes once the barrier's phase with parity ``p`` has completed, i.e. when
the barrier's current phase bit differs from ``p``. A phase completes when its pending
arrival count reaches zero and its transaction bytes are all delivered; the count then
re-arms with the init count (the cooperative group's ``size``).

What an operation contributes to a barrier depends on the engine on that side:

- ``THREAD``   every signaling thread arrives (``mbarrier.arrive``): async-thread
               producers (AsyncThread) and the async consumer of AsyncAsync / UmmaAsync.
- ``CPASYNC``  every signaling thread's ``cp.async.mbarrier.arrive.noinc``; arrives when
               its copies land (AsyncLoad producers).
- ``WARP``     one elected thread per signaling warp arrives: TMA arming
               (``arrive.expect_tx``) and async consumers of TMA / CLC fed pipelines.
- ``UMMA``     one ``tcgen05.commit`` per issuing CTA; arrives when the MMAs complete.

Clusters: the CTAs that multicast into one barrier along M / N are modelled on one
representative CTA (an operation counts the arrivals of every CTA that signals the same
barrier, ``signaling_ctas``). The two CTAs of a tcgen05 pair (V = 2) are modelled one by
one: CUTLASS's sm100 pipeline classes route a pair's traffic per side (``PairRoute``), and
the static counts multiply by the CTAs of the pair whose operations land on one barrier
(``pair_ctas``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Optional, Tuple

from ..model.enums import AsyncProducerOp, PipelineType, SignalingThreads
from ..model.pipeline_config import PipelineConfig

WARP_SIZE = 32
CLC_RESPONSE_BYTES = 16  # one CLC try_cancel response per stage: the ClcFetchAsync transaction bytes


class PairRoute(enum.Enum):
    """Where one CTA's operation on a side lands in a CTA pair (V = 2), as CUTLASS's sm100
    classes route it (PipelineTmaUmma / PipelineUmmaAsync / PipelineAsyncUmma)."""

    LOCAL = "local"  # its own CTA's barrier
    LEADER = "leader"  # the leader CTA's barrier: a remote mbarrier.arrive, or the TMA's masked barrier address
    PAIR = "pair"  # the barrier of every CTA of the pair: one tcgen05.commit multicast


class ArriveKind(enum.Enum):
    THREAD = "thread"
    CPASYNC = "cp.async"
    WARP = "warp"
    UMMA = "umma"


@dataclass(frozen=True)
class PipelineProtocol:
    """Every per-type fact of one pipeline type; nothing else in warpsched keeps a table per type."""

    ptype: PipelineType
    producer_engine: str  # what fills the buffer: 'async', 'tma', 'umma' or 'clc'
    consumer_engine: str  # what drains it: 'async' or 'umma'
    producer_arrive: ArriveKind  # how the producer signals full[s]
    consumer_arrive: ArriveKind  # how the consumer signals empty[s]
    transaction_bytes: bool  # full[s] also waits for num_bytes delivered by hardware
    producer_arms_on_acquire: bool  # TMA / CLC arm the barrier at acquire; commit is a no-op
    cutlass_class: str  # the cutlass.pipeline class the lowering instantiates
    producer_op: str  # the cutlass PipelineOp of full[s] / empty[s] (how each side arrives)
    consumer_op: str
    interleave_producer: bool
    interleave_consumer: bool
    interleave_single_cta_only: bool = False
    needs_cta_layout: bool = False  # the cutlass class needs cta_layout_vmnk (no single-CTA default)
    pair_routed: bool = False  # CUTLASS routes a V pair's barrier traffic to the leader CTA
    pair_full: "PairRoute" = PairRoute.LOCAL  # where a pair CTA's producer arrivals / TMA bytes land
    pair_empty: "PairRoute" = PairRoute.LOCAL  # where a pair CTA's consumer arrivals land
    pair_arms_in_leader: bool = False  # TMA: only the leader CTA's acquire arms (arrive.expect_tx)

    @property
    def producer_is_hardware(self) -> bool:
        """The producer completes by a hardware signal (TMA, UMMA, CLC), not by thread arrivals."""
        return self.producer_engine != "async"

    @property
    def producer_commits_mma(self) -> bool:
        """The producer's commit is a tcgen05.commit: it completes every earlier MMA of the task."""
        return self.producer_arrive is ArriveKind.UMMA

    @property
    def producer_async_completion(self) -> bool:
        """Producer writes land after the issuing thread moved on (TMA, UMMA, CLC, cp.async)."""
        return self.producer_arrive in (ArriveKind.UMMA, ArriveKind.CPASYNC) or self.transaction_bytes

    @property
    def consumer_async_release(self) -> bool:
        """Consumer reads continue after release was issued, until the commit arrives (UMMA)."""
        return self.consumer_arrive is ArriveKind.UMMA


_P = PipelineProtocol
_T, _W, _U = ArriveKind.THREAD, ArriveKind.WARP, ArriveKind.UMMA
_LOCAL, _LEADER, _PAIR = PairRoute.LOCAL, PairRoute.LEADER, PairRoute.PAIR
PROTOCOLS = {
    PipelineType.AsyncAsync: _P(PipelineType.AsyncAsync, "async", "async", _T, _T, False, False, "PipelineAsync",
                                "AsyncThread", "AsyncThread", True, True),
    PipelineType.TmaAsync: _P(PipelineType.TmaAsync, "tma", "async", _W, _W, True, True, "PipelineTmaAsync",
                              "TmaLoad", "AsyncThread", True, True, interleave_single_cta_only=True),
    PipelineType.TmaUmma: _P(PipelineType.TmaUmma, "tma", "umma", _W, _U, True, True, "PipelineTmaUmma",
                             "TmaLoad", "TCGen05Mma", True, True, needs_cta_layout=True, pair_routed=True,
                             pair_full=_LEADER, pair_empty=_PAIR, pair_arms_in_leader=True),
    PipelineType.UmmaAsync: _P(PipelineType.UmmaAsync, "umma", "async", _U, _T, False, False, "PipelineUmmaAsync",
                               "TCGen05Mma", "AsyncThread", False, True, needs_cta_layout=True, pair_routed=True,
                               pair_full=_PAIR, pair_empty=_LEADER),
    PipelineType.AsyncUmma: _P(PipelineType.AsyncUmma, "async", "umma", _T, _U, False, False, "PipelineAsyncUmma",
                               "AsyncThread", "TCGen05Mma", True, False, needs_cta_layout=True, pair_routed=True,
                               pair_full=_LEADER, pair_empty=_PAIR),
    PipelineType.UmmaUmma: _P(PipelineType.UmmaUmma, "umma", "umma", _U, _U, False, False, "PipelineUmmaUmma",
                              "TCGen05Mma", "TCGen05Mma", False, False, needs_cta_layout=True, pair_routed=True,
                              pair_full=_PAIR, pair_empty=_PAIR),
    PipelineType.ClcFetchAsync: _P(PipelineType.ClcFetchAsync, "clc", "async", _W, _T, True, True,
                                   "PipelineClcFetchAsync", "ClcLoad", "AsyncThread", False, False,
                                   needs_cta_layout=True),
}
ARRIVE_KIND = {t: (p.producer_arrive, p.consumer_arrive) for t, p in PROTOCOLS.items()}


def protocol_of(config: PipelineConfig) -> PipelineProtocol:
    """The type's protocol; an AsyncLoad producer (cp.async) arrives when its copies land."""
    proto = PROTOCOLS[config.pipeline_type]
    if proto.producer_arrive is ArriveKind.THREAD and config.async_producer_op is AsyncProducerOp.AsyncLoad:
        # cp.async arrives on its own CTA's barrier, also in a pair
        proto = replace(proto, producer_arrive=ArriveKind.CPASYNC, producer_op="AsyncLoad",
                        cutlass_class="PipelineCpAsync", pair_full=PairRoute.LOCAL)
    return proto


def signaling_warps(signaling: SignalingThreads, task_num_warps: int) -> int:
    """Warps of a task that execute the side's barrier instruction."""
    return 1 if signaling.warp_leader else task_num_warps


def mcast_partners(config: PipelineConfig) -> int:
    """CTAs whose consumers release into one CTA's empty barrier (TMA multicast)."""
    shape = config.cluster_shape
    if not shape or len(shape) < 3:
        return 1
    mode = config.mcast_mode_mn
    if mode is None:
        return 1
    m_on, n_on = (bool(mode[0]), bool(mode[1])) if isinstance(mode, tuple) else (bool(mode), bool(mode))
    m_size = shape[2] if m_on else 0
    n_size = shape[1] if n_on else 0
    return max(1, m_size + n_size - (1 if m_on and n_on else 0))


def cta_group_size(config: PipelineConfig) -> int:
    """V of ``cta_layout_vmnk``: the CTAs of one CTA group (a tcgen05 pair when 2); ``CtaLeader``
    is the first CTA of each group. 1 without an inspectable layout."""
    shape = config.cluster_shape
    return shape[0] if shape and len(shape) == 4 and shape[0] >= 1 else 1


def pair_route(config: PipelineConfig, side: str) -> PairRoute:
    """Where one CTA's ``side`` operation lands (its arrivals, and a producer's TMA bytes)."""
    if cta_group_size(config) == 1:
        return PairRoute.LOCAL
    proto = protocol_of(config)
    return proto.pair_full if side == "producer" else proto.pair_empty


def pair_ctas(config: PipelineConfig, side: str, signaling: SignalingThreads) -> Tuple[int, str]:
    """CTAs of one pair whose ``side`` operations arrive on one barrier, and why (static counts)."""
    route = pair_route(config, side)
    v = cta_group_size(config)
    ptype = config.pipeline_type.value
    if route is PairRoute.LOCAL:
        return 1, ""
    if side == "producer" and protocol_of(config).pair_arms_in_leader:
        return 1, f" (CUTLASS arms the transaction barrier of a {ptype} pair in the leader CTA only)"
    if signaling.cta_leader:
        return 1, " (CtaLeader: the leader CTA of the pair alone)"
    if route is PairRoute.LEADER:
        return v, f" x {v} CTAs of the pair (CUTLASS routes every CTA's {side} arrivals of a {ptype} pair to the leader CTA)"
    return v, (f" x {v} CTAs of the pair (each CTA's tcgen05.commit multicasts into the {side} barrier of "
               "both CTAs)")


def tx_pair_ctas(config: PipelineConfig) -> int:
    """CTAs of one pair whose TMA bytes complete on one transaction barrier (the leader's)."""
    if protocol_of(config).transaction_bytes and pair_route(config, "producer") is PairRoute.LEADER:
        return cta_group_size(config)
    return 1


def signaling_ctas(config: PipelineConfig, side: str, signaling: SignalingThreads) -> int:
    """CTAs whose operation arrives on one (representative) CTA's barrier of this side."""
    if signaling.cta_leader:
        return 1
    proto = protocol_of(config)
    if side == "consumer" and proto.transaction_bytes:
        return mcast_partners(config)
    return 1


@dataclass(frozen=True)
class SideCount:
    """Arrivals one task operation contributes, and how that number was derived.

    ``alternative`` is the other accepted way to declare the same group: on a side where one
    elected thread per warp arrives (the async consumer of a TMA / CLC fed pipeline), TS and
    CUTLASS also accept the thread count (warps x 32), from which the per-warp arrival count
    is recomputed (see ``declared_to_init``).
    """

    arrivals: int
    derivation: str
    alternative: Optional[int] = None


def arrivals_per_op(config: PipelineConfig, side: str, task_num_warps: int, *, wait_side: bool = False
                    ) -> SideCount:
    """Arrivals that one ``commit`` (producer) / ``release`` (consumer) of a task adds to
    one barrier of its pipeline."""
    proto = protocol_of(config)
    kind = proto.producer_arrive if side == "producer" else proto.consumer_arrive
    signaling = (config.producer_signaling_threads if side == "producer" else
                 (config.wait_signaling_threads if wait_side else config.consumer_signaling_threads))
    warps = signaling_warps(signaling, task_num_warps)
    ctas = signaling_ctas(config, side, signaling)
    if kind in (ArriveKind.THREAD, ArriveKind.CPASYNC):
        per, unit = warps * WARP_SIZE, f"{warps} signaling warp(s) x {WARP_SIZE} threads"
    elif kind is ArriveKind.WARP:
        per, unit = warps, f"{warps} signaling warp(s) x 1 elected thread"
    else:  # UMMA: each signaling warp's elected thread issues one tcgen05.commit (cutlass elects per warp)
        per, unit = warps, f"{warps} signaling warp(s) x 1 tcgen05.commit"
    cta_txt = f" x {ctas} signaling CTA(s)" if ctas != 1 else ""
    alternative = warps * WARP_SIZE if (kind is ArriveKind.WARP and side == "consumer") else None
    return SideCount(per * ctas, f"{unit}{cta_txt} ({kind.value} arrivals, {signaling.name or signaling})",
                     alternative)


def declared_to_init(config: PipelineConfig, side: str, declared: Optional[int]) -> int:
    """Barrier init count for a declared cooperative-group size.

    On a per-warp consumer side a multiple of 32 is the thread-count convention: it means
    ``declared // 32`` warps, each arriving once per multicast partner CTA. Everywhere else the
    declared size is the init count. An unreadable size falls back to one arrival.
    """
    if declared is None:
        return 1
    kind = protocol_of(config).consumer_arrive if side == "consumer" else protocol_of(config).producer_arrive
    if side == "consumer" and kind is ArriveKind.WARP and declared % WARP_SIZE == 0:
        ctas = signaling_ctas(config, "consumer", config.consumer_signaling_threads)
        return declared // WARP_SIZE * ctas
    return declared


def expected_group_size(config: PipelineConfig, side: str, task_num_warps: int) -> SideCount:
    """The cooperative-group size that makes one operation complete one barrier phase: one
    CTA's arrivals, times the CTAs of a pair that CUTLASS routes onto the same barrier."""
    sc = arrivals_per_op(config, side, task_num_warps)
    sig = config.producer_signaling_threads if side == "producer" else config.consumer_signaling_threads
    ctas, why = pair_ctas(config, side, sig)
    if ctas == 1:
        return replace(sc, derivation=sc.derivation + why)
    return SideCount(sc.arrivals * ctas, sc.derivation + why,
                     sc.alternative * ctas if sc.alternative is not None else None)


def expected_num_bytes(config: PipelineConfig, producer_warps: int) -> Optional[Tuple[int, str]]:
    """Leader-routed TMA: num_bytes = per-warp-per-CTA bytes x covered warps x covered CTAs."""
    per = config.num_bytes_per_warp_per_cta
    if per is None:
        return None
    pair = tx_pair_ctas(config)
    ctas = pair * _leader_covers(config, pair)
    total = per * producer_warps * ctas
    why = (f" (the {pair} CTAs of a {config.pipeline_type.value} pair load into the leader CTA's barrier)"
           if pair > 1 else "")
    return total, (f"num_bytes_per_warp_per_cta {per} x {producer_warps} producing warp(s) x "
                   f"{ctas} producing CTA(s) = {total}{why}")


def _leader_covers(config: PipelineConfig, pair: int) -> int:
    """CTA groups whose bytes a CtaLeader producer arms for (its own when not CtaLeader). In a pair
    whose protocol arms in the leader (TmaUmma), the leader arms for its own pair: a pair's TMA
    completes on its own leader's barrier only, so CtaLeader covers the same CTAs as All."""
    if pair > 1 and protocol_of(config).pair_arms_in_leader:
        return 1
    return config.num_ctas // pair if config.producer_signaling_threads.cta_leader else 1


# ---------------------------------------------------------------- barrier init and tx accounting
# Shared by the exhaustive checker (which executes them) and the lowering (which emits them).
@dataclass(frozen=True)
class BarrierInit:
    """What one stage's full / empty mbarrier is initialised with."""

    full_arrivals: int  # init count of full[s]: the producer cooperative group's size
    empty_arrivals: int  # init count of empty[s]: the consumer cooperative group's size
    full_tx_bytes: int  # bytes one full[s] phase expects (0 when no transaction barrier)


def barrier_init(config: PipelineConfig, derived_full: Optional[int] = None,
                 derived_empty: Optional[int] = None) -> BarrierInit:
    """Init counts of one pipeline's barriers, exactly as the lowering initialises them.

    The counts are the declared cooperative-group sizes (the protocol executes what the
    developer declared; a wrong size shows up as a hang or an over-arrival). A group left out
    (None) takes the count derived from the tasks that signal that side (``derived_*``, from
    the sync plan); a group whose size cannot be read falls back to one arrival.
    """
    full = (derived_full if config.producer_group is None and derived_full is not None
            else declared_to_init(config, "producer", config.producer_size))
    empty = (derived_empty if config.consumer_group is None and derived_empty is not None
             else declared_to_init(config, "consumer", config.consumer_size))
    tx = config.num_bytes if protocol_of(config).transaction_bytes else 0
    return BarrierInit(full, empty, tx)


def collapsed_lead_index(configs, mode) -> int:
    """The member whose protocol a group's collapsed verbs and shared barrier follow.

    Member 0, except on a collapsed consumer side (Merge, FusedMerge) that mixes TMA-fed and
    other members: there the first non-TMA member leads. Its consumer group sizes the shared
    empty barrier and the collapsed release arrives as it does (every consuming thread of an
    AsyncAsync member), so a TMA member's per-warp consumer_group does not apply -- its stages are
    released by that same all-thread arrival (ts_pipeline_groups: the collapsed barrier takes the
    non-TMA member's group)."""
    from ..model.enums import PipelineGroupMode

    if mode not in (PipelineGroupMode.Merge, PipelineGroupMode.FusedMerge):
        return 0
    tma = [c is not None and protocol_of(c).producer_engine == "tma" for c in configs]
    if any(tma) and not all(tma):
        return tma.index(False)
    return 0


def collapsed_lead(group):
    """The member whose protocol the group's collapsed verbs follow (``collapsed_lead_index``:
    member 0, or the first non-TMA member of a Merge that mixes TMA-fed and other members)."""
    members = [m for m in group.members if getattr(m, "pipeline_config", None) is not None]
    if not members:
        return None
    return members[collapsed_lead_index([m.pipeline_config for m in members], group.mode)]


def group_barrier_init(members, mode, inits=None) -> Tuple[Optional[BarrierInit], ...]:
    """Init of a PipelineGroup's shared barrier, per ts_pipeline_groups: returns
    (shared_full_init, shared_empty_init); the entry for a side that is not shared is None.

    Merge: shared empty (the one consumer's size: the lead member's, ``collapsed_lead_index``).
    Fork: shared full (the one producer's size);
    the members are views of one buffer that the producer loads once, so the barrier expects
    the members' common ``num_bytes`` once, not their sum (``checks_groups`` rejects members
    that differ; the first member's value is armed). FusedMerge: shared full (producer sizes
    and bytes summed: each producer delivers its own data) and shared empty (the consumer's size).
    ``inits``: the members' own inits when the caller has them (the sync plan: derived sizes).
    """
    from ..model.enums import PipelineGroupMode

    cfgs = [m.pipeline_config for m in members if m.pipeline_config is not None]
    if inits is None:
        inits = [barrier_init(c) for c in cfgs]
    if not inits:
        return (None, None)
    lead = collapsed_lead_index(cfgs, mode) if len(cfgs) == len(inits) else 0
    if mode is PipelineGroupMode.Merge:
        return (None, BarrierInit(0, inits[lead].empty_arrivals, 0))
    if mode is PipelineGroupMode.Fork:
        return (BarrierInit(inits[0].full_arrivals, 0, inits[0].full_tx_bytes), None)
    full_sum = sum(i.full_arrivals for i in inits)
    tx_sum = sum(i.full_tx_bytes for i in inits)
    return (BarrierInit(full_sum, 0, tx_sum), BarrierInit(0, inits[lead].empty_arrivals, 0))


def delivered_tx_bytes(config: PipelineConfig, producer_warps: int) -> int:
    """Bytes one producer bracket's hardware copies deliver to full[s].

    With ``num_bytes_per_warp_per_cta`` the copies are per warp and per CTA (leader-routed
    completions); otherwise the work is assumed to issue exactly ``num_bytes`` (TS cannot see
    the copy instructions; see the verification gaps). In a TmaUmma pair each CTA's copies
    complete on the leader's barrier: this is one CTA's share (``num_bytes / 2`` undeclared).
    """
    per = config.num_bytes_per_warp_per_cta
    pair = tx_pair_ctas(config)  # each CTA of a pair delivers its own share
    if per is None:
        return config.num_bytes // pair
    return per * producer_warps * _leader_covers(config, pair)
