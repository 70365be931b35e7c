"""SMEM / TMEM / barrier storage inside the kernel.

* One SMEM block holds every ``SmemAllocation`` of the user's ``SmemAllocator`` at the
  offsets ``compute_layout()`` assigned (alias groups share bytes). The block lives on the
  ``KernelContext`` only (``smem_base`` / ``smem_ptr``, lower/context.py); ``smem_pointer`` gives a
  typed pointer into it, and the context is bound to the allocator for ``SmemAllocator.get()``.
* Pipeline barriers: from the ``BarrierAllocator``'s coalesced array when the resource
  (or its group) is registered there, else the config's ``barrier_ptr``, else a
  self-allocated array of ``2 * num_stages`` mbarriers (full[0..S) then empty[0..S)).
* TMEM (sm_100a): one warp allocates the allocator's columns (rounded up to a power of
  two >= 32), publishes the base through an SMEM slot, and frees it at kernel end.
"""
from __future__ import annotations

from typing import Any, Dict

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401  (cutlass.memory.SmemAllocator)
from cutlass._mlir import ir
from cutlass.cute.core import _Pointer

from . import LoweringError

BLOCK_ALIGN = 1024  # 128B-swizzled TMA / WGMMA tiles need 1024-byte aligned stages


def _numeric(dtype: Any):
    return dtype if isinstance(dtype, type) and hasattr(dtype, "width") else None


class ArrayPointer(_Pointer):
    """A CuTe pointer (``cute.copy(..., tma_bar_ptr=)``, ``cute.make_tensor``, the
    ``cutlass.experimental.primitives`` calls, ``toint()``, pointer arithmetic) that also has the
    ``data_ptr()`` of the ``cutlass.Array`` TS hands out where warpsched hands out a pointer
    (``StageInfo.barrier``, ``SmemAllocator.get()``, ``context.tmem_ptr_i32``), so TS work methods
    that call ``.data_ptr()`` on them (``.toint()``, the CTA-pair address masking of
    ``cp_async_bulk_tensor_shared_cluster_global``) port unchanged."""

    @classmethod
    def of(cls, ptr):
        return cls(ptr.value, ptr.dtype) if isinstance(ptr, _Pointer) and not isinstance(ptr, cls) else ptr

    def __new_from_mlir_values__(self, values):
        """Carried through a runtime ``if`` / loop, it stays an ArrayPointer (same structure)."""
        v = values[0]
        return ArrayPointer(v if isinstance(v, ir.Value) else v.value, self.dtype)

    def data_ptr(self, idx=0, *, loc=None, ip=None):
        """A ``cutlass.Pointer`` to element ``idx`` from this one (TS: ``Array.data_ptr(idx)``)."""
        return cutlass.Array(self, shape=(1,)).data_ptr(idx, loc=loc, ip=ip)


def smem_pointer(base, allocation, dtype=None):
    """Typed SMEM pointer of ``allocation`` inside the block that starts at ``base`` (``dtype``
    overrides the allocation's element type)."""
    if allocation.offset is None:
        raise LoweringError(f"SMEM allocation {allocation.name!r} has no offset",
                            location=allocation.location, fix="call SmemAllocator.compute_layout() before lowering")
    ptr = base + allocation.offset if allocation.offset else base
    dtype = _numeric(dtype) or _numeric(allocation.dtype)
    if dtype is None:
        width = allocation.dtype if isinstance(allocation.dtype, int) else 1
        dtype = {1: cutlass.Int8, 2: cutlass.Int16, 4: cutlass.Int32, 8: cutlass.Int64}.get(width, cutlass.Int8)
    align = max(1, min(int(allocation.alignment), BLOCK_ALIGN))
    typed = cute.recast_ptr(ptr, dtype=dtype).align(min_align=align) if align > 1 else cute.recast_ptr(ptr, dtype=dtype)
    return ArrayPointer.of(typed)


class SmemSetup:
    """Allocates the unified SMEM block and every pipeline's barrier array."""

    def __init__(self, program):
        self.program = program
        self.cutlass_alloc = cutlass.memory.SmemAllocator()
        self.barrier_ptrs: Dict[int, Any] = {}

    def block(self, allocator):
        if allocator is None:
            return None
        if allocator.total_bytes is None:
            allocator.compute_layout()
        if not allocator.total_bytes:
            return None
        return self.cutlass_alloc.allocate(int(allocator.total_bytes), BLOCK_ALIGN)

    def barriers_for(self, resource):
        """mbarrier storage (Int64 pointer) of one pipelined resource."""
        if id(resource) in self.barrier_ptrs:
            return self.barrier_ptrs[id(resource)]
        cfg = resource.pipeline_config
        ba = self.program.barrier_allocator
        ptr = None
        if ba is not None and id(resource) in getattr(ba, "offsets", {}):
            ptr = self._coalesced(ba) + ba.offsets[id(resource)]
        elif cfg.barrier_ptr is not None:
            ptr = cfg.barrier_ptr
        else:
            ptr = self.cutlass_alloc.allocate_array(cutlass.Int64, 2 * cfg.num_stages, byte_alignment=8)
        self.barrier_ptrs[id(resource)] = ptr
        return ptr

    def barriers_for_group(self, group):
        """mbarrier storage of a PipelineGroup's shared layout (``group.num_barriers`` entries)."""
        ba = self.program.barrier_allocator
        if ba is not None and id(group) in getattr(ba, "offsets", {}):
            return self._coalesced(ba) + ba.offsets[id(group)]
        if group.barrier_ptr is not None:
            return group.barrier_ptr
        return self.cutlass_alloc.allocate_array(cutlass.Int64, group.num_barriers, byte_alignment=8)

    def _coalesced(self, ba):
        key = ("coalesced", id(ba))
        if key not in self.barrier_ptrs:
            if ba.num_barriers is None:
                ba.compute_layout()
            if ba.allocation is not None and ba.backing is not None and ba.backing.is_bound:
                self.barrier_ptrs[key] = ba.backing.get(ba.allocation)
            else:
                self.barrier_ptrs[key] = self.cutlass_alloc.allocate_array(cutlass.Int64, ba.num_barriers,
                                                                          byte_alignment=8)
        return self.barrier_ptrs[key]

    def tmem_slot(self):
        return self.cutlass_alloc.allocate_array(cutlass.Int32, 1, byte_alignment=4)


def tmem_columns(total: int) -> int:
    """TMEM allocations are powers of two >= 32 columns, at most 512."""
    cols = 32
    while cols < total:
        cols *= 2
    if cols > 512:
        raise LoweringError(f"TMEM request of {total} columns exceeds the 512 columns of one SM",
                            fix="reduce the TmemAllocation columns")
    return cols
