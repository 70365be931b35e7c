"""One ``cutlass.pipeline`` object per pipelined resource, driven by the protocol table.

The class, the arrival kind of each side, whether the producer arms the transaction
barrier at acquire, and the transaction bytes per arming warp all come from
``warpsched.protocol.barriers`` -- the same description the checker executes. The
user's cooperative groups are passed unchanged, so the mbarrier init counts are the
counts the checker verified.

Signaling threads: a side whose signaling is ``TaskWarpLeader`` arrives from the task's
first warp only (the other warps still wait). ``CtaLeader`` restricts a side to the leader
CTA of each CTA group (the V mode of ``cta_layout_vmnk``; the reference TS gates the same
way). On the (1, m, n, 1) clusters lowered here every CTA leads its own group, so the gate
is the identity: each CTA arms its own transaction barrier -- for the bytes that every
CTA multicasts into it when the producer is leader-routed. Clusters with V > 1 (2-CTA UMMA
pairs) are rejected with a LoweringError until they are lowered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as cpipe

from ..model.enums import PipelineType
from ..model.ir import StepKind
from ..protocol.barriers import barrier_init, mcast_partners, protocol_of, tx_bytes_per_arm
from . import LoweringError
from .dsl import dyn_if

PRODUCER_VERBS = (StepKind.ProducerTryAcquire, StepKind.ProducerAcquire, StepKind.ProducerCommit)
CONSUMER_VERBS = (StepKind.ConsumerTryWait, StepKind.ConsumerWait, StepKind.ConsumerRelease)


def _group(g: Any):
    """The user's CooperativeGroup, or an equivalent one built from a duck-typed ``.size``."""
    if isinstance(g, cpipe.CooperativeGroup):
        return g
    size = getattr(g, "size", g)
    if not isinstance(size, int):
        raise LoweringError(f"cooperative group {g!r} has no integer size")
    return cpipe.CooperativeGroup(cpipe.Agent.Thread, size)


def _first_step(program, resource, kinds):
    for t in program.tasks:
        for s in program.steps_of(t):
            if s.resource is resource and s.kind in kinds:
                return t, s
    return None, None


class PipelineLowering:
    """Barrier storage, init and the six verbs of one pipelined resource."""

    def __init__(self, program, resource, barrier_ptr, *, pipe=None, config=None):
        cfg = config if config is not None else resource.pipeline_config
        self.program = program
        self.resource, self.config, self.proto = resource, cfg, protocol_of(cfg)
        self.arms_on_acquire = self.proto.producer_arms_on_acquire  # a Fork member arms at group.commit()
        loc = cfg.location
        for verb, stride in zip(("producer_acquire", "producer_commit", "consumer_wait", "consumer_release"),
                                cfg.strides):
            if not isinstance(stride, int) or stride < 1 or cfg.num_stages % stride:
                raise LoweringError(f"interleave stride {stride!r} of {verb} does not divide num_stages="
                                    f"{cfg.num_stages}", resource=resource, location=loc,
                                    fix="use a stride that divides num_stages")
        self.cluster_shape = cfg.cluster_shape or (1, 1, 1, 1)
        if cfg.num_ctas != 1:
            self._check_cluster(cfg, resource, loc)
        self.producer_warps = self._side_warps(program, (StepKind.ProducerAcquire, StepKind.ProducerCommit))
        self.tx_count = 0
        if self.proto.transaction_bytes:
            # warp-lane interleaving: every producer warp arms its own lane's stage with the whole stage
            warp_lane = self.producer_warps > 1 and self.producer_warps == cfg.strides[0]
            self.tx_count = cfg.num_bytes if warp_lane else tx_bytes_per_arm(cfg, self.producer_warps)
        cls = getattr(cpipe, self.proto.cutlass_class, None)
        # Init counts come from the shared protocol (thread-count declarations on per-warp
        # sides are normalized there), so the barriers are armed exactly as the checker models.
        init = barrier_init(cfg)
        full, empty = _group(init.full_arrivals), _group(init.empty_arrivals)
        kw: Dict[str, Any] = dict(num_stages=cfg.num_stages, producer_group=full,
                                  consumer_group=empty, barrier_storage=barrier_ptr,
                                  defer_sync=True)
        multicast = mcast_partners(cfg) > 1
        if cfg.pipeline_type is not PipelineType.AsyncAsync:
            # without multicast each CTA's stages are its own: a single-CTA layout keeps the releases local
            kw["cta_layout_vmnk"] = cute.make_layout(tuple(self.cluster_shape) if multicast else (1, 1, 1, 1))
        if multicast:
            # consumer releases reach every CTA whose TMA multicasts into this one (cutlass picks the
            # signaling lanes and destination ranks from the layout and the multicast mode)
            kw["mcast_mode_mn"] = _mcast_mode(cfg.mcast_mode_mn)
        if self.proto.transaction_bytes:
            kw["tx_count"] = self.tx_count
        if cfg.pipeline_type is PipelineType.AsyncAsync and self.proto.producer_arrive.value == "cp.async":
            cls = cpipe.PipelineCpAsync
        if pipe is None and cfg.pipeline_type is PipelineType.UmmaUmma:
            pipe = make_umma_umma(cfg.num_stages, full, empty, barrier_ptr)
        self.pipe = pipe if pipe is not None else cls.create(**kw)

    def _check_cluster(self, cfg, resource, loc) -> None:
        shape = cfg.cluster_shape
        if shape is None or len(shape) != 4:
            raise LoweringError("cta_layout_vmnk must be a static (v, m, n, k) tuple or layout to lower a cluster",
                                resource=resource, location=loc)
        if cfg.pipeline_type is PipelineType.AsyncAsync and shape[0] == 1:
            return  # thread arrivals stay in the CTA (no cluster routing); CtaLeader is the identity at V = 1
        if cfg.pipeline_type is not PipelineType.TmaAsync or shape[0] != 1 or shape[3] != 1:
            raise LoweringError(f"{cfg.pipeline_type.value} pipelines over a {shape} cluster are checked but not "
                                "lowered yet (only TmaAsync and AsyncAsync over an (1, m, n, 1) cluster are: "
                                "2-CTA UMMA pairs, V > 1, need per-CTA barrier routing the checker does not model)",
                                resource=resource, location=loc,
                                fix="use TmaAsync / AsyncAsync over cta_layout_vmnk=(1, m, n, 1), or (1, 1, 1, 1)")
        if cfg.consumer_signaling_threads.cta_leader and mcast_partners(cfg) > 1:
            # every CTA leads its own (V = 1) group, so every CTA's consumer releases into each of its
            # multicast partners: the barrier would see more arrivals than the one leader CTA declared
            raise LoweringError("consumer_signaling_threads=CtaLeader on a multicast pipeline over a V=1 cluster: "
                                f"every CTA is the leader of its CTA group, so each empty barrier receives "
                                f"{mcast_partners(cfg)} releases where CtaLeader declares one",
                                resource=resource, location=loc,
                                fix="use consumer_signaling_threads=SignalingThreads.All with multicast")

    def _side_warps(self, program, kinds) -> int:
        warps = {t.num_warps for t in program.tasks
                 for s in program.steps_of(t) if s.resource is self.resource and s.kind in kinds}
        if len(warps) > 1:
            raise LoweringError(f"tasks with different warp counts {sorted(warps)} drive the same side of the "
                                "pipeline; the per-warp transaction bytes would differ", resource=self.resource,
                                location=self.config.location)
        return warps.pop() if warps else 1

    # ------------------------------------------------------------------ signaling
    def _leader_only(self, side: str) -> bool:
        cfg = self.config
        sig = cfg.producer_signaling_threads if side == "producer" else cfg.consumer_signaling_threads
        return bool(sig.warp_leader)

    def _gate(self, task, side: str, warp_idx, fn, otherwise=None, sync_task=True):
        strides = self.config.strides[:2] if side == "producer" else self.config.strides[2:]
        if self._leader_only(side) and task.num_warps > 1 and task.num_warps in strides:
            raise LoweringError(f"{side} signaling TaskWarpLeader on a warp-lane interleaved side: each warp "
                                "owns its own lane's stages, a leader cannot arrive for them", task=task,
                                resource=self.resource, location=self.config.location,
                                fix="use SignalingThreads.All with warp-lane interleaving")
        if self._leader_only(side) and task.num_warps > 1:
            if sync_task:
                # the leader arrives for the whole task: every warp's accesses to the stage must be
                # done first (warps of one task drift apart; the barrier protocol counts one arrival)
                task_sync(self.program, task)
            dyn_if({}, [], warp_idx == task.warp_idx, lambda env: fn(), (lambda env: otherwise()) if otherwise else None)
        else:
            fn()

    # ------------------------------------------------------------------ verbs
    def try_acquire(self, state):
        return self.pipe.producer_try_acquire(state)

    def acquire(self, task, warp_idx, state, token=None):
        if not self.arms_on_acquire:
            self._wait_empty(state, token)
            return
        if self._leader_only("producer") and task.num_warps > 1:
            # every warp waits for the empty stage; only the leader warp arms the full barrier
            # leader-routed TMA: the other warps' copies complete on the barrier the leader armed
            self._gate(task, "producer", warp_idx, lambda: self.pipe.producer_acquire(state, token),
                       lambda: self._wait_empty(state, token), sync_task=False)
        else:
            self.pipe.producer_acquire(state, token)

    def _wait_empty(self, state, token):
        if token is None:
            self.pipe.sync_object_empty.wait(state.index, state.phase)
        else:
            dyn_if({}, [], token == 0, lambda env: self.pipe.sync_object_empty.wait(state.index, state.phase))

    def commit(self, task, warp_idx, state):
        if self.arms_on_acquire:
            return  # the TMA / CLC transaction completes the full barrier
        self._gate(task, "producer", warp_idx, lambda: self.pipe.producer_commit(state))

    def try_wait(self, state):
        return self.pipe.consumer_try_wait(state)

    def wait(self, task, warp_idx, state, token=None):
        self.pipe.consumer_wait(state, token)

    def release(self, task, warp_idx, state):
        self._gate(task, "consumer", warp_idx, lambda: self.pipe.consumer_release(state))

    def tail(self, state):
        self.pipe.producer_tail(state.clone())

    def barrier(self, side: str, state):
        if side == "producer":
            return self.pipe.producer_get_barrier(state)
        return self.pipe.consumer_get_barrier(state)


@dataclass(frozen=True)
class PipelineUmmaUmma(cpipe.PipelineUmmaAsync):
    """UMMA producer and UMMA consumer (CuTe DSL 4.8.1 has no class for it): both sides arrive with
    ``tcgen05.commit``; the consumer's release passes the CTA group like PipelineTmaUmma's."""

    def consumer_release(self, state, *, loc=None, ip=None):
        self.sync_object_empty.arrive(state.index, self.consumer_mask, self.cta_group, loc=loc, ip=ip)


def make_umma_umma(stages, full_group, empty_group, barrier_ptr, full=None, empty=None):
    from cutlass.pipeline.helpers import MbarrierArray, PipelineOp

    full = full or MbarrierArray(barrier_ptr, stages, (PipelineOp.TCGen05Mma, full_group))
    empty = empty or MbarrierArray(barrier_ptr + stages, stages, (PipelineOp.TCGen05Mma, empty_group))
    return PipelineUmmaUmma(full, empty, stages, None, None, cute.nvgpu.tcgen05.CtaGroup.ONE)


def _mcast_mode(mode) -> Tuple[int, int]:
    if mode is None:
        return (1, 1)
    if isinstance(mode, tuple):
        return (int(bool(mode[0])), int(bool(mode[1])))
    return (int(bool(mode)), int(bool(mode)))


def cluster_shape_mn(program) -> Tuple[int, int]:
    """The (m, n) cluster every pipelined resource agrees on; (1, 1) without clusters."""
    shapes = {tuple(r.pipeline_config.cluster_shape[1:3]) for r in program.pipelined_resources
              if r.pipeline_config.num_ctas != 1 and r.pipeline_config.cluster_shape}
    if len(shapes) > 1:
        raise LoweringError(f"pipelines disagree on the cluster shape: {sorted(shapes)}",
                            fix="give every pipeline the same cta_layout_vmnk")
    return shapes.pop() if shapes else (1, 1)


def task_sync(program, task) -> None:
    """Named barrier over one task's warps (ids from 15 down, one per task; 0 is the CTA barrier)."""
    idx = next(i for i, t in enumerate(program.tasks) if t is task)
    bid = 15 - idx
    if bid < 1:
        raise LoweringError("more than 15 tasks need a task-wide named barrier", task=task, location=task.location)
    cute.arch.barrier(barrier_id=bid, number_of_threads=task.num_warps * 32)


# ---------------------------------------------------------------------- counters
def counter_plan(config, kinds: List[StepKind]) -> Dict[str, Tuple[str, ...]]:
    """Per side: counter names and which verb advances each.

    One counter per side, advanced by the side's last verb present in the task (commit /
    release; acquire / wait for acquire-only / wait-only tasks). With ``advance_on_acquire``
    (``advance_on_wait``) and both verbs in the task, acquire and commit (wait and release)
    run on split counters, each advanced by its own verb.
    """
    plan: Dict[str, Tuple[str, ...]] = {}
    has = set(kinds)
    if has & set(PRODUCER_VERBS):
        if config.advance_on_acquire and StepKind.ProducerAcquire in has and StepKind.ProducerCommit in has:
            plan["acq"] = (StepKind.ProducerAcquire,)
            plan["cmt"] = (StepKind.ProducerCommit,)
        else:
            plan["p"] = (StepKind.ProducerCommit if StepKind.ProducerCommit in has else StepKind.ProducerAcquire,)
    if has & set(CONSUMER_VERBS):
        if config.advance_on_wait and StepKind.ConsumerWait in has and StepKind.ConsumerRelease in has:
            plan["wait"] = (StepKind.ConsumerWait,)
            plan["rel"] = (StepKind.ConsumerRelease,)
        else:
            plan["c"] = (StepKind.ConsumerRelease if StepKind.ConsumerRelease in has else StepKind.ConsumerWait,)
    return plan


# which counter a verb reads
VERB_COUNTER = {
    StepKind.ProducerTryAcquire: ("acq", "p"), StepKind.ProducerAcquire: ("acq", "p"),
    StepKind.ProducerCommit: ("cmt", "p"), StepKind.ConsumerTryWait: ("wait", "c"),
    StepKind.ConsumerWait: ("wait", "c"), StepKind.ConsumerRelease: ("rel", "c"),
}


def is_producer_counter(name: str) -> bool:
    return name in ("acq", "cmt", "p")


def make_state(name: str, stages: int, lane=0):
    """Initial cursor of a counter: producers start on phase 1 (stages free), consumers on 0;
    an interleaved counter starts on its lane's first stage."""
    kind = cpipe.PipelineUserType.Producer if is_producer_counter(name) else cpipe.PipelineUserType.Consumer
    state = cpipe.make_pipeline_state(kind, stages)
    if isinstance(lane, int) and lane == 0:
        return state
    return cpipe.PipelineState(stages, state.count, cutlass.Int32(lane), state.phase)


# the interleave stride a counter advances by: the stride of the verb that advances it
COUNTER_STRIDE_ROLE = {"acq": 0, "cmt": 1, "wait": 2, "rel": 3}


def counter_stride(config, name: str, advancing_kind) -> int:
    if name in COUNTER_STRIDE_ROLE:
        return config.strides[COUNTER_STRIDE_ROLE[name]]
    role = {StepKind.ProducerAcquire: 0, StepKind.ProducerCommit: 1, StepKind.ConsumerWait: 2,
            StepKind.ConsumerRelease: 3}[advancing_kind]
    return config.strides[role]


_ = cutlass
