"""KernelContext: what a work method reads from the kernel (``StageInfo.context``).

One typed object per kernel, filled by the lowering's setup, in place of values a kernel would
otherwise hang on its own object for its work methods to find:

* the SMEM block and typed views of its allocations (``smem(allocation)``,
  ``smem_view(allocation, layout)``), TMEM base and slot, the warp index, the task being emitted;
* the cluster: ``cluster_mn`` (from the pipeline configs), ``cluster_coord`` (this CTA's
  (m, n, 0) coordinate in it) and ``mcast_mask(mode)`` (the CTAs a multicast along one cluster
  mode reaches); without a cluster these are compile-time constants, so a work method needs no
  second code path for the single-CTA case;
* ``values``: the kernel's own trace-time values (TMA atoms, global tiles, MMAs), passed by name to
  ``TaskManager.run(**values)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import cutlass.cute as cute
from cutlass import pipeline

from . import LoweringError
from .memory import smem_pointer
from .pipelines import task_barrier_id

TMA_SMEM_ALIGN = 128  # bytes: the SMEM address of a cp.async.bulk.tensor copy


class KernelValues:
    """The kernel's trace-time values, read by name (``context.values.tma_a``); read-only."""

    def __init__(self, values: Dict[str, Any]):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        passed = ", ".join(sorted(values)) or "none"
        raise AttributeError(f"StageInfo.context.values has no {name!r} (the kernel passed: {passed}); "
                             f"fix: pass it by name to TaskManager.run({name}=...) in the kernel")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"StageInfo.context.values is read-only: pass {name!r} to TaskManager.run() instead")

    def __contains__(self, name: str) -> bool:
        return name in object.__getattribute__(self, "_values")

    def __repr__(self) -> str:
        return f"KernelValues({', '.join(sorted(object.__getattribute__(self, '_values')))})"


@dataclass
class KernelContext:
    """``StageInfo.context``: what work methods may need from the kernel setup."""

    smem_allocator: Any = None
    smem_base: Any = None  # the unified SMEM block, a cutlass.Array of Uint8 (None when no allocations)
    smem_ptr: Any = None  # the block's start as a pointer (what smem() offsets)
    tmem_allocator: Any = None
    tmem_base: Any = None  # TMEM base address (Int32) on sm_100a, None otherwise
    tmem_ptr_i32: Any = None  # SMEM slot holding the TMEM base
    task: Any = None  # the Task being emitted
    warp_idx: Any = None  # warp-uniform warp index in the CTA
    cluster_mn: Tuple[int, int] = (1, 1)  # the pipelines' (m, n) cluster shape
    cluster_coord: Any = (0, 0, 0)  # this CTA's (m, n, 0) in the cluster: Int32s inside a cluster, else ints
    values: KernelValues = field(default_factory=lambda: KernelValues({}))
    extra: Dict[str, Any] = field(default_factory=dict)
    # per tma_copy(): (bytes into this CTA, what, the destination's address alignment or None, its layout)
    tma_copies: List[Tuple[int, str, Optional[int], str]] = field(default_factory=list)
    # per StageInfo.touches(): (the resource or its name, None for the work's own; part; "r" / "w")
    touches: List[Tuple[Any, str, str]] = field(default_factory=list)
    program: Any = None  # the program being lowered (a task's named barrier is its index in it)
    # wgmma commit_group / wait_group calls traced (lower/wgmma_watch.py): ("commit", None) / ("wait", pending)
    wgmma_events: List[Tuple[str, Any]] = field(default_factory=list)

    def smem(self, allocation, dtype=None):
        """Typed pointer of one SmemAllocation (``SmemAllocator.get()`` / ``get_as_type()`` call this)."""
        return smem_pointer(self.smem_ptr, allocation, dtype=dtype)

    def smem_view(self, allocation, layout, span_bytes=None):
        """A tensor over ``allocation``'s bytes: ``layout`` is a cute Layout, or a ComposedLayout
        (swizzle o layout, what ``sm90_utils.make_smem_layout_a`` / ``_b`` / ``_epi`` return) whose
        swizzle goes onto the pointer, as CuTe's own ``get_tensor(outer, swizzle=inner)`` does.
        A static layout that reaches past the allocation is refused (it would overlap its neighbours,
        which the checker's memory model assumes it does not). ``span_bytes``: the bytes of the adjacent run
        that starts at ``allocation`` (``SmemAllocator.view_span``), the view's limit instead of its own."""
        ptr = self.smem(allocation)
        need = cute.cosize(layout)
        limit = allocation.size_bytes if span_bytes is None else span_bytes
        if isinstance(need, int) and need * ptr.dtype.width // 8 > limit:
            raise LoweringError(f"SMEM view of {allocation.name!r} spans {need} x {ptr.dtype.__name__} = "
                                f"{need * ptr.dtype.width // 8} bytes; the allocation has {limit}",
                                location=allocation.location, fix="size the SmemAllocation for the layout "
                                "(count = cute.cosize(layout)) or view it with a smaller layout")
        if isinstance(layout, cute.ComposedLayout):
            return cute.make_tensor(cute.recast_ptr(ptr, layout.inner, dtype=ptr.dtype), layout.outer)
        return cute.make_tensor(ptr, layout)

    def touch(self, resource, part, mode):
        """``StageInfo.touches``: record the access for the task's FootprintLedger (lower/footprints.py)."""
        self.touches.append((resource, part, mode))

    def sync_task(self):
        """``bar.sync`` over the warps of the task running the work, on the task's own named barrier (the one
        the lowering's leader-only arrivals use): a work orders its warps' SMEM writes before one thread's
        TMA store without picking a barrier id by hand, so no id can be shared with another task's."""
        cute.arch.barrier(barrier_id=self.sync_task_id(), number_of_threads=self.task.num_warps * 32)

    def task_named_barrier(self):
        """The running task's named barrier as a ``cutlass.pipeline.NamedBarrier`` (``arrive_and_wait()``...,
        for code that takes one): ``sync_task()``'s barrier."""
        return pipeline.NamedBarrier(barrier_id=self.sync_task_id(), num_threads=self.task.num_warps * 32)

    def sync_task_id(self) -> int:
        """The running task's named-barrier id (``pipelines.task_barrier_id``); a LoweringError outside a task's
        work or past 15 tasks."""
        if self.task is None or self.program is None:
            raise LoweringError("KernelContext.sync_task() outside a task's work",
                                fix="call it from a work method while the kernel is traced")
        return task_barrier_id(self.program, self.task)

    def tma_copy(self, info, atom, src, dst, *, mcast_mode=None, **copy_kwargs):
        """``StageInfo.tma_copy``: issue the copy on ``info``'s barrier and record what it delivers
        into this CTA's stage: dst's static size x its element width. With multicast, ``dst`` (from
        ``tma_partition``) still spans the whole tile: this CTA's copy sends its slice of it to every
        CTA along the mode, and receives the other slices from them, so the tile lands whole."""
        size, width = cute.size(dst), getattr(getattr(dst, "element_type", None), "width", None)
        if not isinstance(size, int) or not isinstance(width, int):
            raise LoweringError(f"StageInfo.tma_copy(): the destination {dst} has no compile-time size, so the "
                                "bytes the copy delivers cannot be checked against num_bytes", task=self.task,
                                fix="pass the stage's SMEM tensor with a static layout (e.g. t_s[(None, stage)])")
        # with the alignment CuTe derives for the destination's address (its base's, reduced by any offset,
        # e.g. a stage index times the stage's stride), checked by the TxLedger (TMA_SMEM_ALIGN)
        align = getattr(getattr(dst, "iterator", None), "alignment", None)
        self.tma_copies.append((size * width // 8, f"{size} x {width // 8} B", align if isinstance(align, int) else None,
                                f"{dst.layout}"))
        mask = None if mcast_mode is None else self.mcast_mask(mcast_mode)
        if mask is not None:
            copy_kwargs["mcast_mask"] = mask
        return cute.copy(atom, src, dst, tma_bar_ptr=info.barrier, **copy_kwargs)

    @property
    def clustered(self) -> bool:
        return tuple(self.cluster_mn) != (1, 1)

    def mcast_mask(self, mode: int) -> Optional[Any]:
        """16-bit mask of the CTAs of this CTA's cluster that differ from it along cluster ``mode``
        only (0: m, 1: n), itself included: the peers a TMA load shared along that mode multicasts
        to. None when the cluster has one CTA along ``mode`` (a TMA atom without multicast ignores
        the ``mcast_mask`` keyword, so one ``cute.copy`` serves both)."""
        if self.cluster_mn[mode] == 1:
            return None
        return cute.make_layout_image_mask(cute.make_layout((*self.cluster_mn, 1)), self.cluster_coord, mode=mode)


def cluster_coordinate(cluster_mn: Tuple[int, int]):
    """This CTA's (m, n, 0) coordinate in a (m, n) cluster (block_idx_in_cluster, column-major as
    CuTe's cluster layouts); plain zeros without a cluster, so no instruction is emitted."""
    if tuple(cluster_mn) == (1, 1):
        return (0, 0, 0)
    rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    return cute.make_layout((*cluster_mn, 1)).get_flat_coord(rank)


__all__ = ["KernelContext", "KernelValues", "cluster_coordinate"]
