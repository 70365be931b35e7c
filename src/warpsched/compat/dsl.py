"""DSL-side porting adapters, used by the lowering (this module imports CuTe DSL).

* Resource base fields are compile-time to the DSL. A work method that assigns under a runtime
  ``if`` (``if gid < self.num_entries: self.dst[gid] = v``) makes the DSL carry ``self``
  through the ``if``; it flattens the dataclass field by field and keeps a field static only
  when it is annotated ``cutlass.Constexpr``. User fields carry their own annotations
  (``num_entries: cutlass.Int32`` is runtime, ``num_warps: cutlass.Constexpr[int]`` is not);
  warpsched's own fields (``name``, ``pipeline_config``, ``tile_scheduler_config``) are
  declared in pure-Python model code, so they are marked here, once, before any kernel traces.
* ``smem_block_array``: the unified SMEM block as the ``cutlass.Array`` of bytes that
  ``StageInfo.context.smem_base`` is (``smem_base.data_ptr() + allocation.offset``).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import cutlass

from ..model.resources import MemoryResource, WorkQueue

_COMPILE_TIME_FIELDS = {MemoryResource: ("name", "pipeline_config"), WorkQueue: ("tile_scheduler_config",)}


def mark_base_fields_compile_time() -> None:
    """Annotate warpsched's resource base fields as ``cutlass.Constexpr`` for the DSL's flattening.
    Subclass dataclasses share the base classes' Field objects, so every resource class sees it."""
    for cls, names in _COMPILE_TIME_FIELDS.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in names:
            fields[name].type = cutlass.Constexpr


mark_base_fields_compile_time()


def smem_block_array(base_ptr, nbytes: int) -> Optional[object]:
    """The SMEM block at ``base_ptr`` (a CuTe pointer) viewed as ``nbytes`` Uint8 elements."""
    if base_ptr is None:
        return None
    return cutlass.Array(base_ptr, dtype=cutlass.Uint8, shape=(int(nbytes),), addrspace=3)
