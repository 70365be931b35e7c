"""Enumerations of the TS model: pipeline types, signaling modes, work attributes."""
from __future__ import annotations

import enum


class PipelineType(enum.Enum):
    """``<Producer><Consumer>``: what physically writes, then what physically reads."""

    AsyncAsync = "AsyncAsync"
    TmaAsync = "TmaAsync"
    TmaUmma = "TmaUmma"
    UmmaAsync = "UmmaAsync"
    AsyncUmma = "AsyncUmma"
    UmmaUmma = "UmmaUmma"
    ClcFetchAsync = "ClcFetchAsync"
    # Every per-type fact (engines, arrival kinds, cutlass classes and ops, interleaving support)
    # lives on the type's entry in protocol/barriers.py PROTOCOLS, nowhere else.


class SignalingThreads(enum.Flag):
    """Which threads of a cooperative group execute the barrier instructions.

    ``All`` is exclusive; the legal values are All, CtaLeader, TaskWarpLeader and
    ``CtaLeader | TaskWarpLeader``.
    """

    All = enum.auto()
    CtaLeader = enum.auto()
    TaskWarpLeader = enum.auto()

    @property
    def is_legal(self) -> bool:
        return self in _LEGAL_SIGNALING

    @property
    def cta_leader(self) -> bool:
        return bool(self & SignalingThreads.CtaLeader)

    @property
    def warp_leader(self) -> bool:
        return bool(self & SignalingThreads.TaskWarpLeader)


_LEGAL_SIGNALING = (
    SignalingThreads.All,
    SignalingThreads.CtaLeader,
    SignalingThreads.TaskWarpLeader,
    SignalingThreads.CtaLeader | SignalingThreads.TaskWarpLeader,
)


class WorkAttr(enum.Flag):
    """Attributes of a work method (``@consumer_work(work_attrs=...)``), ORed together.

    ``AUXILIARY``: a work that reads no stage data (a descriptor, a flag) and may run outside
    the wait/release bracket. ``WGMMA``: issues ``wgmma`` reading the waited stage; the reads
    continue after the call returns, until a ``WGMMA_WAIT`` work (``wgmma.wait_group(pending)``)
    retires them, so release the stage only after that wait; each WGMMA work is one commit group.
    ``WGMMA_OPERAND``: declares that the task's next WGMMA work (its commit group) also reads this
    stage; on a producer work, after the commit, the stage the task just handed over (its own reads
    must retire before it writes the stage again). ``WRITES``: a consumer work that writes
    part of its held stage. See docs/checker.md (WGMMA, consumer writes)."""

    NONE = 0
    AUXILIARY = enum.auto()
    # Hopper warpgroup MMA (warpsched extension, additive). A consumer work marked WGMMA
    # issues wgmma that keeps reading its resource's waited stage after the call returns;
    # the bytes stay in use until a later WGMMA_WAIT work of the same task retires that
    # group (``wgmma.wait_group(pending)``; pass ``pending=N`` in the schedule call to keep
    # the newest N groups in flight, default 0). Releasing the stage before that is a race.
    WGMMA = enum.auto()
    WGMMA_WAIT = enum.auto()
    # A declaration: the task's next WGMMA work (same commit group) also reads this stage, so the
    # read window opens here and joins that group's (a wgmma reads two SMEM operands, a work method
    # belongs to one resource). On a producer work it names the stage the task last committed (a tile
    # it wrote and handed over, and reads itself too): declared after that commit.
    WGMMA_OPERAND = enum.auto()
    # A consumer work that writes part of the stage it holds (an epilogue staging its output in
    # operand bytes it has finished reading). With more than one consumer task on the resource,
    # the resource declares consumer_footprint(task_name) and no part one task writes may be in
    # another's footprint (verify/checks_writes.py).
    WRITES = enum.auto()


class PipelineGroupMode(enum.Enum):
    """How a ``PipelineGroup`` shares barriers between its member pipelines.

    ``Merge``: N producers, one consumer that waits once for all (shared empty barrier);
    ``Fork``: one producer, N consumers (shared full barrier, armed once with the members'
    common ``num_bytes``); ``FusedMerge``: shared full and empty barriers."""

    Merge = "Merge"
    Fork = "Fork"
    FusedMerge = "FusedMerge"

    @property
    def collapsed_side(self) -> str:
        return "producer" if self is PipelineGroupMode.Fork else "consumer"


class AsyncProducerOp(enum.Enum):
    """How an async producer arrives on the full barrier."""

    AsyncThread = "AsyncThread"  # mbarrier.arrive after the stores
    AsyncLoad = "AsyncLoad"  # cp.async.mbarrier.arrive: completes when the copies land


AsyncThread = AsyncProducerOp.AsyncThread
AsyncLoad = AsyncProducerOp.AsyncLoad
