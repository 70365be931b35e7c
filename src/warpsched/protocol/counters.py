"""Pipeline counters: the (stage, phase) states a task keeps per side of a resource, which verb
advances each and by what stride, and how an interleaved counter picks its lane. Part of the sync
plan (``plan.SyncPlan``), which the checker and the lowering both read. Pure Python."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ..model.ir import StepKind

# index of each verb's interleave stride in PipelineConfig.strides
ROLE = {StepKind.ProducerTryAcquire: 0, StepKind.ProducerAcquire: 0, StepKind.ProducerCommit: 1,
        StepKind.ConsumerTryWait: 2, StepKind.ConsumerWait: 2, StepKind.ConsumerRelease: 3}


def role_stride(config, kind: StepKind) -> int:
    """The interleave stride of a verb (parsed and validated when the configuration was built)."""
    return config.strides[ROLE[kind]]


PRODUCER_COUNTERS = ("acq", "cmt", "p")
# which counter a verb reads (the first one the task has)
VERB_COUNTER = {
    StepKind.ProducerTryAcquire: ("acq", "p"), StepKind.ProducerAcquire: ("acq", "p"),
    StepKind.ProducerCommit: ("cmt", "p"), StepKind.ConsumerTryWait: ("wait", "c"),
    StepKind.ConsumerWait: ("wait", "c"), StepKind.ConsumerRelease: ("rel", "c"),
}


def is_producer_counter(name: str) -> bool:
    return name in PRODUCER_COUNTERS


def counter_plan(config, kinds) -> Dict[str, Tuple[StepKind, ...]]:
    """Per side: counter names and which verb advances each.

    One counter per side, advanced by the side's last verb present in the task (commit /
    release; acquire / wait for acquire-only / wait-only tasks). With ``advance_on_acquire``
    (``advance_on_wait``) and both verbs in the task, acquire and commit (wait and release)
    run on split counters, each advanced by its own verb.
    """
    plan: Dict[str, Tuple[StepKind, ...]] = {}
    has = set(kinds)
    P = (StepKind.ProducerTryAcquire, StepKind.ProducerAcquire, StepKind.ProducerCommit)
    C = (StepKind.ConsumerTryWait, StepKind.ConsumerWait, StepKind.ConsumerRelease)
    if has & set(P):
        if config.advance_on_acquire and StepKind.ProducerAcquire in has and StepKind.ProducerCommit in has:
            plan["acq"] = (StepKind.ProducerAcquire,)
            plan["cmt"] = (StepKind.ProducerCommit,)
        else:
            plan["p"] = (StepKind.ProducerCommit if StepKind.ProducerCommit in has else StepKind.ProducerAcquire,)
    if has & set(C):
        if config.advance_on_wait and StepKind.ConsumerWait in has and StepKind.ConsumerRelease in has:
            plan["wait"] = (StepKind.ConsumerWait,)
            plan["rel"] = (StepKind.ConsumerRelease,)
        else:
            plan["c"] = (StepKind.ConsumerRelease if StepKind.ConsumerRelease in has else StepKind.ConsumerWait,)
    return plan


def counter_stride(config, name: str, advancing_kind: StepKind) -> int:
    """A counter moves by the stride of the verb that advances it."""
    return role_stride(config, advancing_kind)


class LaneMode(enum.Enum):
    NONE = "dense"  # stride 1: every stage in turn
    WARP = "warp-lane"  # the task's warp count equals the stride: warp i owns lane i
    DOMAIN = "domain-lane"  # sibling tasks: the compile-time domain_loop start owns the lane


@dataclass(frozen=True)
class Counter:
    """One (stage, phase) pipeline state a task keeps for one side of a resource or group."""

    name: str  # 'p' / 'c' (one per side), or 'acq' + 'cmt' / 'wait' + 'rel' (split)
    side: str
    advanced_by: StepKind
    stride: int
    num_stages: int
    lane_mode: LaneMode
    lane: Optional[int] = None  # DOMAIN: domain start % stride (None: not a compile-time int)

    def first_stage(self, warp: Optional[int] = None) -> int:
        """The counter's first stage; ``warp`` is the warp's index inside its task (warp-lane)."""
        if self.lane_mode is LaneMode.WARP:
            return (warp or 0) % self.stride
        if self.lane_mode is LaneMode.DOMAIN:
            return self.lane or 0
        return 0


def make_counter(config, name, advancing, task, side, domain_start) -> Counter:
    stride = counter_stride(config, name, advancing)
    if stride <= 1:
        mode, lane = LaneMode.NONE, None
    elif task.num_warps == stride:
        mode, lane = LaneMode.WARP, None
    else:
        mode, lane = LaneMode.DOMAIN, (domain_start % stride if type(domain_start) is int else None)
    return Counter(name, side, advancing, stride, config.num_stages, mode, lane)
