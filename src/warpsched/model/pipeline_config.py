"""PipelineConfig: which barrier protocol guards a resource. Built only by factories, validated
when built (``pipeline_fields``) and immutable after."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple, Union

from ..errors import ValidationError, user_facing
from .enums import AsyncProducerOp, PipelineType, SignalingThreads
from .pipeline_fields import field_findings, parse_strides
from .source import SourceLoc, caller_location

Stride = Union[int, Tuple[int, int, int, int]]


def group_size(group: Any) -> Optional[int]:
    """Thread count of a cutlass.pipeline.CooperativeGroup (duck-typed: no MLIR import)."""
    if group is None:
        return None
    size = getattr(group, "size", group if isinstance(group, int) else None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None


@dataclass(eq=False, frozen=True)
class PipelineConfig:
    """Barrier protocol of one pipelined resource. Use the ``create_*_pipeline_cfg`` factories: a
    configuration whose fields are malformed is refused there (ValidationError naming the field and
    the factory call's file:line), so a PipelineConfig that exists is well formed."""

    pipeline_type: PipelineType
    num_stages: int
    num_bytes: int = 0
    producer_group: Any = None
    consumer_group: Any = None
    cta_layout_vmnk: Any = None
    producer_signaling_threads: SignalingThreads = SignalingThreads.All
    consumer_signaling_threads: SignalingThreads = SignalingThreads.All
    consumer_wait_signaling_threads: Optional[SignalingThreads] = None
    interleave_stride: Stride = 1
    advance_on_wait: bool = False
    advance_on_acquire: bool = False
    num_bytes_per_warp_per_cta: Optional[int] = None
    partial_stage: bool = False
    mcast_mode_mn: Any = None
    async_producer_op: AsyncProducerOp = AsyncProducerOp.AsyncThread
    barrier_ptr: Any = None
    location: SourceLoc = field(default_factory=caller_location, repr=False)

    @user_facing
    def __post_init__(self):
        findings = field_findings(self)
        if findings:
            raise ValidationError(findings, title="warpsched rejected a pipeline configuration")
        object.__setattr__(self, "_strides", parse_strides(self.interleave_stride))

    # ---- derived facts used by checks, the checker and the lowering ----
    @property
    def pipeline_type_name(self) -> str:
        return self.pipeline_type.value if isinstance(self.pipeline_type, PipelineType) else "a"

    @property
    def strides(self) -> Tuple[int, int, int, int]:
        """(producer_acquire, producer_commit, consumer_wait, consumer_release), parsed once."""
        return self._strides  # type: ignore[attr-defined]

    @property
    def is_interleaved(self) -> bool:
        return max(self.strides) > 1

    @property
    def producer_size(self) -> Optional[int]:
        return group_size(self.producer_group)

    @property
    def consumer_size(self) -> Optional[int]:
        return group_size(self.consumer_group)

    @property
    def wait_signaling_threads(self) -> SignalingThreads:
        return self.consumer_wait_signaling_threads or self.consumer_signaling_threads

    @property
    def cluster_shape(self) -> Optional[Tuple[int, ...]]:
        """cta_layout_vmnk as a tuple of ints when it can be inspected, else None."""
        return cluster_shape_of(self.cta_layout_vmnk)

    @property
    def num_ctas(self) -> int:
        shape = self.cluster_shape
        if not shape:
            return 1
        n = 1
        for x in shape:
            n *= x
        return n

    # ---- factories (the only supported constructors) ----
    @classmethod
    @user_facing
    def create_async_async_pipeline_cfg(cls, *, num_stages, producer_group=None, consumer_group=None,
                                        async_producer_op=AsyncProducerOp.AsyncThread, **kw):
        """Threads write the stage, threads read it (SMEM produced by ordinary stores or cp.async).

        ``producer_group`` / ``consumer_group``: the threads that arrive per stage, counted in
        threads (``warpsched.threads(n)`` or ``CooperativeGroup(Agent.Thread, n)``): all threads
        of the producing / consuming warps unless a signaling mode narrows it.
        ``async_producer_op``: ``AsyncThread`` (plain stores, one arrival per thread) or
        ``AsyncLoad`` (cp.async, the arrival is ``cp.async.mbarrier.arrive``)."""
        return cls._make(PipelineType.AsyncAsync, num_stages, producer_group, consumer_group,
                         async_producer_op=async_producer_op, **kw)

    @classmethod
    @user_facing
    def create_tma_async_pipeline_cfg(cls, *, num_stages, num_bytes, producer_group=None,
                                      consumer_group=None, **kw):
        """A TMA bulk copy writes the stage, threads read it (the Hopper mainloop shape).

        ``num_bytes``: bytes the TMA delivers per stage *in total*: per-warp-per-CTA bytes x
        producing warps x CTAs it lands in; the full barrier is armed with it
        (``arrive.expect_tx``) at acquire. ``producer_group``: one elected thread per producing
        warp, so ``warpsched.threads(n)`` for n producing warps (``threads(1)`` for one TMA warp;
        ``warps(1)`` would be 32 arrivals); ``consumer_group``: the consuming warps, in warps or in
        threads (both are accepted: they arm the same count)."""
        return cls._make(PipelineType.TmaAsync, num_stages, producer_group, consumer_group,
                         num_bytes=num_bytes, **kw)

    @classmethod
    @user_facing
    def create_tma_umma_pipeline_cfg(cls, *, num_stages, num_bytes, producer_group=None,
                                     consumer_group=None, **kw):
        """A TMA bulk copy writes the stage, a tcgen05 MMA reads it (Blackwell mainloop).

        ``num_bytes`` as for TmaAsync. The consumer's release arrives when the MMAs that read the
        stage complete (``tcgen05.commit``), so release right after issuing the MMA is safe."""
        return cls._make(PipelineType.TmaUmma, num_stages, producer_group, consumer_group,
                         num_bytes=num_bytes, **kw)

    @classmethod
    @user_facing
    def create_umma_async_pipeline_cfg(cls, *, num_stages, producer_group=None, consumer_group=None, **kw):
        """A tcgen05 MMA writes the stage (a TMEM accumulator), threads read it (the epilogue).

        The producer's commit is a ``tcgen05.commit``: it arrives when the MMAs complete.
        ``consumer_group``: the epilogue threads (e.g. ``warpsched.threads(128)``)."""
        return cls._make(PipelineType.UmmaAsync, num_stages, producer_group, consumer_group, **kw)

    @classmethod
    @user_facing
    def create_async_umma_pipeline_cfg(cls, *, num_stages, producer_group=None, consumer_group=None,
                                       umma_consumer_producer_op=AsyncProducerOp.AsyncThread, **kw):
        """Threads write the stage, a tcgen05 MMA reads it (e.g. P of attention written by softmax warps).

        ``umma_consumer_producer_op``: how the producing threads arrive (``AsyncThread`` or
        ``AsyncLoad``)."""
        return cls._make(PipelineType.AsyncUmma, num_stages, producer_group, consumer_group,
                         async_producer_op=umma_consumer_producer_op, **kw)

    @classmethod
    @user_facing
    def create_umma_umma_pipeline_cfg(cls, *, num_stages, producer_group=None, consumer_group=None, **kw):
        """One tcgen05 MMA chain writes the stage, another reads it (TMEM to TMEM hand-off)."""
        return cls._make(PipelineType.UmmaUmma, num_stages, producer_group, consumer_group, **kw)

    @classmethod
    @user_facing
    def create_clc_fetch_async_pipeline_cfg(cls, *, num_stages, producer_group=None, consumer_group=None,
                                            num_bytes=16, **kw):
        """Cluster launch control: the hardware writes the next work tile (``num_bytes=16``, the CLC
        response) and threads read it. The pipeline of a dynamic ``WorkQueue``."""
        return cls._make(PipelineType.ClcFetchAsync, num_stages, producer_group, consumer_group,
                         num_bytes=num_bytes, **kw)

    @classmethod
    def _make(cls, ptype, num_stages, producer_group, consumer_group, **kw):
        unknown = set(kw) - _OPTIONAL_FIELDS
        if unknown:
            raise TypeError(
                f"{ptype.value} pipeline factory got unknown argument(s) {sorted(unknown)}; "
                f"accepted: num_stages, producer_group, consumer_group, {', '.join(sorted(_OPTIONAL_FIELDS))}")
        return cls(pipeline_type=ptype, num_stages=num_stages, producer_group=producer_group,
                   consumer_group=consumer_group, location=caller_location(), **kw)


_OPTIONAL_FIELDS = {
    "num_bytes", "cta_layout_vmnk", "producer_signaling_threads", "consumer_signaling_threads",
    "consumer_wait_signaling_threads", "interleave_stride", "advance_on_wait", "advance_on_acquire",
    "num_bytes_per_warp_per_cta", "mcast_mode_mn", "async_producer_op", "barrier_ptr", "partial_stage",
}


def cluster_shape_of(layout: Any) -> Optional[Tuple[int, ...]]:
    """Extract (v, m, n, k) from a tuple or a CuTe layout's static shape; None when opaque."""
    if layout is None:
        return None
    shape = layout
    if not isinstance(layout, tuple):
        shape = getattr(layout, "shape", None)
    if isinstance(shape, tuple) and shape and all(isinstance(x, int) and not isinstance(x, bool) for x in shape):
        return shape
    return None


_COMMON_ARGS = """

Keyword arguments every factory takes (defaults in brackets):

- ``num_stages``: stages of the ring; stage ``s`` has a full and an empty mbarrier.
- ``producer_group`` / ``consumer_group`` [derived]: left out, a group's size is derived from
  the tasks whose operations signal that side (signaling warps, and the CTAs that multicast
  into one, counted by the protocol); a declared group is checked against the same count.
- ``cta_layout_vmnk`` [(1, 1, 1, 1)]: the cluster as (V, M, N, K); V = 2 is a Blackwell CTA
  pair (one tcgen05.mma.cta_group::2 over both CTAs), whose traffic CUTLASS routes per side:
  a TmaUmma pair arms and completes only the leader's full barrier, UmmaAsync releases and
  AsyncUmma commits arrive on the leader's barrier, tcgen05.commit multicasts into both CTAs;
  the group sizes count both CTAs where they land on one barrier (docs/patterns.md). Cluster
  pipelines must multicast or stay local (see ``mcast_mode_mn``).
- ``mcast_mode_mn`` [None]: (multicast along M, along N): which peer CTAs a TMA stage is
  multicast into, and so which CTAs' consumers release it.
- ``producer_signaling_threads`` / ``consumer_signaling_threads`` [``All``]: which threads
  execute the barrier instructions: ``All``, ``TaskWarpLeader`` (warp 0 of the task),
  ``CtaLeader`` (the leader CTA of each V group), or both ORed.
- ``consumer_wait_signaling_threads`` [same as the release side]: the wait side, when it
  differs (split-consumer patterns).
- ``interleave_stride`` [1]: lanes sharing the stages; an int, or a 4-tuple
  (producer_acquire, producer_commit, consumer_wait, consumer_release) per role. A task
  with ``num_warps == stride`` is warp-lane (warp i owns lane i); sibling tasks with
  ``domain_loop(lane, end, stride)`` are domain-lane.
- ``advance_on_wait`` / ``advance_on_acquire`` [False]: advance the cursor on the opening
  op instead of the closing one (needed when wait and release, or acquire and commit,
  use different strides or live in different tasks).
- ``num_bytes_per_warp_per_cta`` [None]: the bytes one producing warp loads into one CTA
  (the lowering splits a stage's TMA between warps with it); ``num_bytes`` must equal it
  times producing warps times CTAs.
- ``partial_stage`` [False]: a transaction-byte pipeline whose copies deliberately fill only part of
  each SMEM stage (``num_bytes`` less than the resource's allocations / ``num_stages``). Without it
  such a ``num_bytes`` is an error: the copies of a full stage would complete the phase before
  their last bytes land, or, fewer than armed, never complete it.
- ``barrier_ptr`` [None]: place the barriers at an explicit SMEM address.

The static checks verify the counts and bytes against the tasks that use the resource
(docs/validation.md) and the exhaustive checker runs the protocol (docs/checker.md).
"""
# the keyword arguments every factory shares are documented once and appended to each docstring
for _name in ("create_async_async_pipeline_cfg", "create_tma_async_pipeline_cfg", "create_tma_umma_pipeline_cfg",
              "create_umma_async_pipeline_cfg", "create_async_umma_pipeline_cfg", "create_umma_umma_pipeline_cfg",
              "create_clc_fetch_async_pipeline_cfg"):
    _fn = vars(PipelineConfig)[_name].__func__
    _fn.__doc__ = (_fn.__doc__ or "").rstrip() + "\n" + _COMMON_ARGS
