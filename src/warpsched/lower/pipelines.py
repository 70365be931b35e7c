"""One ``cutlass.pipeline`` object per pipelined resource, built from the sync plan.

The class, the init counts, whether the producer arms the transaction barrier at acquire,
the transaction bytes per arming warp and the multicast partners all come from
``warpsched.protocol.plan`` -- the plan the checker executes -- so the mbarriers are
initialised and armed exactly as the checker verified.

Signaling threads: a side whose signaling is ``TaskWarpLeader`` arrives from the task's
first warp only (the other warps still wait). ``CtaLeader`` restricts a verb to the leader
CTA of each CTA group (the V mode of ``cta_layout_vmnk``, ``block_idx_in_cluster() % V == 0``;
the reference TS gates the same way): on a V = 1 cluster every CTA leads its own group, so the
gate is the identity; in a CTA pair (V = 2) the peer skips the barrier operation and its
counter still advances (the checker runs exactly that), and a task whose every barrier
operation is gated runs in the leader CTA only (``SyncPlan.leader_only``, dispatch.py).

CTA pairs: TmaUmma / UmmaAsync / AsyncUmma over ``cta_layout_vmnk=(2, 1, 1, 1)`` go through
CUTLASS's pair-aware sm100 classes with the pair's layout, which route each side as the sync
plan says (``PipelinePlan.pair_full / pair_empty``): the leader CTA arms the TMA barrier,
tcgen05.commit ``cta_group::2`` multicasts into both CTAs, thread arrivals of the peer reach
the leader's barrier through ``mapa`` + a remote ``mbarrier.arrive``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as cpipe

from ..model.enums import PipelineType
from ..model.ir import StepKind
from ..protocol.plan import (Arming, Counter, PairRoute, SyncPlan, config_of, cta_gated, op_warps,
                             tx_per_arming_warp)
from . import LoweringError
from .dsl import dyn_if
from .memory import ArrayPointer


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

    def __init__(self, plan: SyncPlan, target, barrier_ptr, *, pipe=None):
        """``target``: a pipelined resource, or a PipelineGroup for its collapsed verbs (then
        ``pipe`` is the group's assembled pipeline)."""
        pp = plan.group(target).lead_plan if hasattr(target, "members") else plan.pipeline(target)
        cfg = config_of(target)
        self.program = program = plan.program
        self.plan = plan
        self.resource, self.config, self.proto = target, cfg, pp.protocol
        self.pair = pp.pair_full is not PairRoute.LOCAL or pp.pair_empty is not PairRoute.LOCAL
        self.arms_on_acquire = pp.arming is Arming.AT_ACQUIRE  # a Fork member's is group.commit()'s
        self.arrives_in_fetch = pp.arrives_in_fetch
        loc = cfg.location
        self.cluster_shape = cfg.cluster_shape or (1, 1, 1, 1)
        if cfg.num_ctas != 1:
            self._check_cluster(cfg, target, loc, pp.mcast_partners)
        self.producer_warps = self._side_warps(program, (StepKind.ProducerAcquire, StepKind.ProducerCommit))
        self.tx_count = 0
        if self.proto.transaction_bytes:
            self.tx_count = tx_per_arming_warp(cfg, self.producer_warps)
        if pipe is not None:
            self.pipe = pipe
            return
        full, empty = _group(pp.full.init), _group(pp.empty.init)
        kw: Dict[str, Any] = dict(num_stages=cfg.num_stages, producer_group=full,
                                  consumer_group=empty, barrier_storage=barrier_ptr,
                                  defer_sync=True)
        multicast = pp.multicast
        if cfg.pipeline_type is not PipelineType.AsyncAsync:
            # without multicast each CTA's stages are its own: a single-CTA layout keeps the releases local;
            # a pair's class needs the pair's layout (leader CTA, commit masks, cta_group::2)
            kw["cta_layout_vmnk"] = cute.make_layout(tuple(self.cluster_shape) if multicast or self.pair
                                                     else (1, 1, 1, 1))
        if multicast:
            # consumer releases reach every CTA whose TMA multicasts into this one (cutlass picks the
            # signaling lanes and destination ranks from the layout and the multicast mode)
            kw["mcast_mode_mn"] = _mcast_mode(cfg.mcast_mode_mn)
        if self.proto.transaction_bytes or cfg.pipeline_type is PipelineType.ClcFetchAsync:
            kw["tx_count"] = self.tx_count  # a counter queue's (no transaction bytes): 0, never armed
        if cfg.pipeline_type is PipelineType.UmmaUmma:  # no cutlass class in 4.8.1: assembled here
            self.pipe = make_umma_umma(cfg.num_stages, full, empty, barrier_ptr)
        else:
            self.pipe = getattr(cpipe, self.proto.cutlass_class).create(**kw)

    def _check_cluster(self, cfg, resource, loc, partners: int) -> None:
        shape = cfg.cluster_shape
        if shape is None or len(shape) != 4:
            raise LoweringError("cta_layout_vmnk must be a static (v, m, n, k) tuple or layout to lower a cluster",
                                resource=resource, location=loc)
        if cfg.pipeline_type is PipelineType.AsyncAsync and shape[0] <= 2 and shape[3] == 1:
            return  # thread arrivals stay in the CTA (no cluster routing); CtaLeader gates on the V group's leader
        if shape[0] == 2:
            if self.pair and tuple(shape) == (2, 1, 1, 1) and cfg.pipeline_type is not PipelineType.UmmaUmma \
                    and self.proto.cutlass_class != "PipelineCpAsync":
                return  # CUTLASS's pair-aware class routes the pair (see the module docstring)
            raise LoweringError(f"{cfg.pipeline_type.value} pipelines over a {shape} cluster are checked but not "
                                "lowered yet (CTA pairs are lowered for TmaUmma, UmmaAsync and AsyncUmma with "
                                "async-thread producers over (2, 1, 1, 1), through CUTLASS's pair-aware classes)",
                                resource=resource, location=loc,
                                fix="use cta_layout_vmnk=(2, 1, 1, 1) with TmaUmma / UmmaAsync / AsyncUmma, or V = 1")
        if cfg.pipeline_type is not PipelineType.TmaAsync or shape[0] != 1 or shape[3] != 1:
            raise LoweringError(f"{cfg.pipeline_type.value} pipelines over a {shape} cluster are checked but not "
                                "lowered yet (only TmaAsync and AsyncAsync over an (1, m, n, 1) cluster, and "
                                "TmaUmma / UmmaAsync / AsyncUmma pairs over (2, 1, 1, 1), are)",
                                resource=resource, location=loc,
                                fix="use TmaAsync / AsyncAsync over cta_layout_vmnk=(1, m, n, 1), or (1, 1, 1, 1)")
        if cfg.consumer_signaling_threads.cta_leader and partners > 1:
            # every CTA leads its own (V = 1) group, so every CTA's consumer releases into each of its
            # multicast partners: the barrier would see more arrivals than the one leader CTA declared
            raise LoweringError("consumer_signaling_threads=CtaLeader on a multicast pipeline over a V=1 cluster: "
                                f"every CTA is the leader of its CTA group, so each empty barrier receives "
                                f"{partners} releases where CtaLeader declares one",
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

    def _gate(self, task, kind, warp_idx, fn, otherwise=None, sync_task=True):
        side = kind.side  # "producer" / "consumer"
        warp_lane = op_warps(self.config, kind, task.num_warps) < task.num_warps  # the plan's rule
        if self._leader_only(side) and warp_lane:
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

    def _cta(self, task, kind, fn):
        """CtaLeader in a CTA pair: the verb runs in the leader CTA only (a leader-only task is
        already dispatched in the leader alone). The caller advances the counter either way."""
        if cta_gated(self.config, kind) and not self.plan.leader_only(task):
            dyn_if({}, [], is_leader_cta(self.config), lambda env: fn())
        else:
            fn()

    # ------------------------------------------------------------------ verbs
    def try_acquire(self, state):
        return self.pipe.producer_try_acquire(state)

    def acquire(self, task, warp_idx, state, token=None):
        self._cta(task, StepKind.ProducerAcquire, lambda: self._acquire(task, warp_idx, state, token))

    def _acquire(self, task, warp_idx, state, token):
        if not self.arms_on_acquire:
            self._wait_empty(state, token)
            return
        if self._leader_only("producer") and task.num_warps > 1:
            # every warp waits for the empty stage; only the leader warp arms the full barrier
            # leader-routed TMA: the other warps' copies complete on the barrier the leader armed
            # (in a TmaUmma pair CUTLASS's producer_acquire itself arms in the leader CTA only)
            self._gate(task, StepKind.ProducerAcquire, warp_idx, lambda: self.pipe.producer_acquire(state, token),
                       lambda: self._wait_empty(state, token), sync_task=False)
        else:
            self.pipe.producer_acquire(state, token)

    def _wait_empty(self, state, token):
        if token is None:
            self.pipe.sync_object_empty.wait(state.index, state.phase)
        else:
            dyn_if({}, [], token == 0, lambda env: self.pipe.sync_object_empty.wait(state.index, state.phase))

    def commit(self, task, warp_idx, state):
        if self.arms_on_acquire or self.arrives_in_fetch:
            # the TMA / CLC transaction completes the full barrier; a counter queue's fetching thread arrived
            # right after its store (lower/tile_queues.py), the arrival the plan places here
            return
        self._cta(task, StepKind.ProducerCommit,
                  lambda: self._gate(task, StepKind.ProducerCommit, warp_idx, lambda: self.pipe.producer_commit(state)))

    def try_wait(self, state):
        return self.pipe.consumer_try_wait(state)

    def wait(self, task, warp_idx, state, token=None):
        self._cta(task, StepKind.ConsumerWait, lambda: self.pipe.consumer_wait(state, token))

    def release(self, task, warp_idx, state):
        self._cta(task, StepKind.ConsumerRelease,
                  lambda: self._gate(task, StepKind.ConsumerRelease, warp_idx, lambda: self.pipe.consumer_release(state)))

    def tail(self, task, state):
        # a producer gated to the leader CTA has nothing to drain in the peer
        self._cta(task, StepKind.ProducerAcquire, lambda: self.pipe.producer_tail(state.clone()))

    def barrier(self, side: str, state):
        """``StageInfo.barrier`` of a work call: the stage's full (producer) / empty (consumer) mbarrier."""
        if side == "producer":
            return StageBarrier.of(self.pipe.producer_get_barrier(state))
        return StageBarrier.of(self.pipe.consumer_get_barrier(state))


# ``StageInfo.barrier``: the stage's mbarrier as a CuTe pointer with TS's ``cutlass.Array`` data_ptr()
StageBarrier = ArrayPointer


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


def is_leader_cta(config):
    """Warp-uniform Boolean: this CTA leads its CTA group (``block_idx_in_cluster() % V == 0``)."""
    rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    return rank % config.cluster_shape[0] == 0


def cluster_shape_mn(program) -> Tuple[int, int]:
    """The (m, n) cluster every pipelined resource agrees on; (1, 1) without clusters."""
    shapes = {tuple(r.pipeline_config.cluster_shape[1:3]) for r in program.pipelined_resources
              if r.pipeline_config.num_ctas != 1 and r.pipeline_config.cluster_shape}
    if len(shapes) > 1:
        raise LoweringError(f"pipelines disagree on the cluster shape: {sorted(shapes)}",
                            fix="give every pipeline the same cta_layout_vmnk")
    return shapes.pop() if shapes else (1, 1)


def task_barrier_id(program, task) -> int:
    """The named barrier of one task's warps: ids from 15 down, one per task (0 is the CTA barrier)."""
    idx = next(i for i, t in enumerate(program.tasks) if t is task)
    bid = 15 - idx
    if bid < 1:
        raise LoweringError("more than 15 tasks need a task-wide named barrier", task=task, location=task.location)
    return bid


def task_sync(program, task) -> None:
    """``bar.sync`` over one task's warps on its own named barrier."""
    cute.arch.barrier(barrier_id=task_barrier_id(program, task), number_of_threads=task.num_warps * 32)


# ---------------------------------------------------------------------- counters
def make_state(counter: Counter, lane=0):
    """Initial cursor of a counter: producers start on phase 1 (stages free), consumers on 0;
    an interleaved counter starts on its lane's first stage."""
    kind = cpipe.PipelineUserType.Producer if counter.side == "producer" else cpipe.PipelineUserType.Consumer
    stages = counter.num_stages
    state = cpipe.make_pipeline_state(kind, stages)
    if isinstance(lane, int) and lane == 0:
        return state
    return cpipe.PipelineState(stages, state.count, cutlass.Int32(lane), state.phase)


_ = cutlass
