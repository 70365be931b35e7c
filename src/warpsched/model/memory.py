"""SMEM / TMEM / barrier allocators: the layout is pure Python; lowering binds pointers."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .source import SourceLoc, caller_location

BARRIER_BYTES_PER_STAGE = 16  # a full and an empty mbarrier, 8 bytes each
TMEM_COLUMNS = 512
SM90_SMEM_CAPACITY = 232448  # bytes of dynamic SMEM per block on H100/H200
SM100_SMEM_CAPACITY = 232448


def _dtype_bytes(dtype: Any) -> int:
    width = getattr(dtype, "width", None)
    if isinstance(width, int):
        return max(1, width // 8)
    if isinstance(dtype, int):
        return dtype
    name = getattr(dtype, "__name__", str(dtype)).lower()
    for key, size in (("64", 8), ("32", 4), ("16", 2), ("8", 1)):
        if key in name:
            return size
    return 4


@dataclass(eq=False, init=False)
class SmemAllocation:
    """A named SMEM region: ``count`` elements of ``dtype``, or ``size_bytes`` raw bytes.

    ``SmemAllocation(name, size_bytes=None, alignment=128, dtype=None, count=1)``: the reference TS
    order, so ``SmemAllocation("ring", 4096, alignment=128)`` is 4096 bytes; keywords work in either
    style. Without a dtype, ``get()`` gives a byte pointer. An explicit non-zero ``size_bytes`` wins
    over ``count x dtype`` (as in TS, 0 with a dtype means "compute it"). ``offset`` is assigned by
    ``compute_layout()``.
    """

    name: str
    dtype: Any = None
    count: int = 1
    alignment: int = 128
    offset: Optional[int] = None
    declared_bytes: Optional[int] = None
    location: SourceLoc = field(default=None, repr=False)  # type: ignore[assignment]

    def __init__(self, name: str, size_bytes: Optional[int] = None, alignment: int = 128, dtype: Any = None,
                 count: Any = 1, *, offset: Optional[int] = None, location: Optional[SourceLoc] = None):
        self.name, self.dtype, self.count, self.alignment, self.offset = name, dtype, count, alignment, offset
        self.declared_bytes = None if (size_bytes == 0 and dtype is not None) else size_bytes
        self.location = location if location is not None else caller_location()

    @property
    def size_bytes(self) -> int:
        if self.declared_bytes is not None:
            return _non_negative(self.declared_bytes, f"SmemAllocation {self.name!r}: size_bytes")
        return _non_negative(self.count, f"SmemAllocation {self.name!r}: count") * _dtype_bytes(self.dtype)

    @property
    def end(self) -> Optional[int]:
        return None if self.offset is None else self.offset + self.size_bytes


def _non_negative(value: Any, what: str) -> int:
    try:
        n = operator.index(value)  # ints and numpy ints, not floats or strings
    except TypeError:
        n = -1
    if n < 0:
        raise LayoutError(f"{what}={value!r} is not an int >= 0")
    return n


@dataclass(eq=False, init=False)
class TmemAllocation:
    """A named range of TMEM columns (Blackwell): ``TmemAllocation(name, columns)`` (or
    ``num_columns=``, the reference TS keyword); ``offset`` is assigned by ``TmemAllocator``."""

    name: str
    columns: int = 0
    offset: Optional[int] = None
    location: SourceLoc = field(default=None, repr=False)

    def __init__(self, name: str, columns: Any = 0, *, num_columns: Any = None, offset: Optional[int] = None):
        self.name = name
        self.columns = num_columns if num_columns is not None else columns
        self.offset = offset
        self.location = caller_location()

    @property
    def num_columns(self):
        return self.columns

    @property
    def end(self) -> Optional[int]:
        return None if self.offset is None else self.offset + self.columns


def _align(x: int, a: int) -> int:
    a = max(1, int(a))
    return (x + a - 1) // a * a


class LayoutError(ValueError):
    pass


class SmemAllocator:
    """Lays out every resource's SmemAllocation in one block, with alias groups."""

    def __init__(self, capacity_bytes: Optional[int] = None):
        self.capacity_bytes = capacity_bytes
        self.resources: List[Any] = []
        self.allocations: List[SmemAllocation] = []
        self.alias_groups: List[List[List[SmemAllocation]]] = []
        self.adjacent_runs: List[List[SmemAllocation]] = []
        self.pipeline_groups: List[Any] = []
        self.tmem_ptr: Optional[SmemAllocation] = None
        self.total_bytes: Optional[int] = None
        self._kernel: Any = None  # bound by the kernel's setup: owns the block and its pointers

    @classmethod
    def for_resources(cls, *resources: Any, capacity_bytes: Optional[int] = None) -> "SmemAllocator":
        """An allocator holding every resource's ``get_smem_requirements()``, laid out
        (``add_resource`` for each, then ``compute_layout()``): pass it to TaskManager as is.
        Declare alias groups with the step-by-step calls instead."""
        allocator = cls(capacity_bytes)
        for resource in resources:
            allocator.add_resource(resource)
        allocator.compute_layout()
        return allocator

    def add(self, allocation: SmemAllocation) -> SmemAllocation:
        """Register a standalone allocation (not owned by a resource); returns it."""
        if allocation not in self.allocations:
            self.allocations.append(allocation)
        return allocation

    def add_resource(self, resource: Any) -> None:
        self.resources.append(resource)
        for a in resource.get_smem_requirements() or []:
            self.add(a)

    def add_pipeline_group(self, group: Any) -> None:
        self.pipeline_groups.append(group)

    def add_tmem_ptr(self, allocation: SmemAllocation) -> SmemAllocation:
        """The SMEM slot the kernel's own ``tcgen05.alloc`` writes the TMEM base into. With it, the
        kernel allocates and frees TMEM around ``run()`` (the lowering then emits neither) and
        ``StageInfo.context.tmem_ptr_i32`` points at this slot."""
        self.tmem_ptr = allocation
        return self.add(allocation)

    @property
    def tmem_ptr_alloc(self) -> Optional[SmemAllocation]:
        return self.tmem_ptr

    def bind(self, kernel_context: Any) -> None:
        """The kernel's setup hands over the context that owns the SMEM block (``smem_base``) and
        turns an allocation into a typed pointer (``smem(allocation, dtype)``); the model keeps no
        pointer of its own and imports nothing of the lowering."""
        self._kernel = kernel_context

    @property
    def is_bound(self) -> bool:
        return self._kernel is not None and self._kernel.smem_ptr is not None

    @property
    def smem_base(self):
        """Inside a kernel, after ``setup_resources_and_tasks()``: the unified block (cutlass.Array)."""
        return self._kernel.smem_base if self._kernel is not None else None

    @property
    def total(self) -> int:
        return self.total_bytes if self.total_bytes is not None else self.unaliased_bytes

    total_smem_bytes = total

    def add_alias_group(self, phases: List[List[SmemAllocation]]) -> None:
        if self.total_bytes is not None:
            raise LayoutError("add_alias_group() after compute_layout(); declare alias groups first")
        self.alias_groups.append([list(p) for p in phases])
        for phase in phases:
            for a in phase:
                if a not in self.allocations:
                    self.allocations.append(a)

    def add_adjacent(self, allocations: List[SmemAllocation]) -> None:
        """Place ``allocations`` back to back in this order (each at its alignment, with no gap if the sizes
        keep it), so one GEMM operand can span them (``view_span``). Each stays its own resource's region for
        the checker: a GEMM reading the span declares every resource it reads."""
        if self.total_bytes is not None:
            raise LayoutError("add_adjacent() after compute_layout(); declare adjacent runs first")
        run, aliased = list(allocations), self.aliased()
        if any(a in r for r in self.adjacent_runs for a in run) or any(id(a) in aliased for a in run):
            raise LayoutError("add_adjacent(): an allocation is already in an adjacent run or an alias group")
        self.adjacent_runs.append(run)
        for a in run:
            self.add(a)

    def aliased(self) -> Dict[int, int]:
        """id(allocation) -> alias group number (1-based)."""
        return {id(a): gi + 1 for gi, g in enumerate(self.alias_groups) for p in g for a in p}

    def compute_layout(self) -> int:
        """Assign offsets: aliased regions first (phases share a base), then the rest by size."""
        if self.total_bytes is not None:
            raise LayoutError("compute_layout() was already called; it runs once")
        cursor = 0
        placed = set()
        for group in self.alias_groups:
            base = _align(cursor, max((a.alignment for p in group for a in p), default=1))
            region = 0
            for phase in group:
                off = base
                for a in phase:
                    off = _align(off, a.alignment)
                    a.offset = off
                    off += a.size_bytes
                    placed.add(id(a))
                region = max(region, off - base)
            cursor = base + region
        for run in self.adjacent_runs:  # each run back to back, before the rest
            for a in run:
                a.offset = cursor = _align(cursor, a.alignment)
                cursor += a.size_bytes
                placed.add(id(a))
        rest = sorted((a for a in self.allocations if id(a) not in placed),
                      key=lambda a: (-a.alignment, -a.size_bytes))
        for a in rest:
            a.offset = _align(cursor, a.alignment)
            cursor = a.offset + a.size_bytes
        self.total_bytes = cursor
        return cursor

    @property
    def unaliased_bytes(self) -> int:
        return sum(a.size_bytes for a in self.allocations)

    def get(self, allocation: SmemAllocation):
        """Inside a kernel: the typed pointer of ``allocation`` (bound by the lowering)."""
        if not self.is_bound:
            raise LayoutError("SmemAllocator.get() is only available after setup_resources_and_tasks()")
        return self._kernel.smem(allocation)

    def get_as_type(self, allocation: SmemAllocation, dtype: Any, count: int = 1):
        """Inside a kernel: ``allocation``'s address as a pointer to ``dtype`` (a reinterpret cast)."""
        if not self.is_bound:
            raise LayoutError("SmemAllocator.get_as_type() is only available after setup_resources_and_tasks()")
        return self._kernel.smem(allocation, dtype=dtype)

    get_typed_ptr = get_as_type

    def view(self, allocation: SmemAllocation, layout: Any):
        """Inside a kernel: a tensor over ``allocation`` with a cute Layout, or a ComposedLayout
        (swizzle o layout, e.g. ``sm90_utils.make_smem_layout_a``) whose swizzle goes onto the pointer."""
        if not self.is_bound:
            raise LayoutError("SmemAllocator.view() is only available after setup_resources_and_tasks()")
        return self._kernel.smem_view(allocation, layout)

    def view_span(self, allocations: List[SmemAllocation], layout: Any):
        """Inside a kernel: ``view`` over several allocations that ``add_adjacent`` placed back to back, as one
        tensor from the first one's start; refused unless they are adjacent with no gap and ``layout`` covers
        no more than their bytes."""
        if not self.is_bound:
            raise LayoutError("SmemAllocator.view_span() is only available after setup_resources_and_tasks()")
        run = list(allocations)
        for a, b in zip(run, run[1:]):
            if a.offset is None or b.offset != a.offset + a.size_bytes:
                raise LayoutError(f"view_span: {b.name!r} does not start where {a.name!r} ends; place them with "
                                  "SmemAllocator.add_adjacent before compute_layout()")
        return self._kernel.smem_view(run[0], layout, span_bytes=sum(a.size_bytes for a in run))

    def print_usage_report(self) -> None:
        print(self.usage_report())

    def usage_report(self) -> str:
        aliased = self.aliased()
        rows = ["[smem-layout] Memory Usage Report",
                f"  {'Name':<28}{'Size':>8}{'Align':>7}{'Offset':>10}{'End':>10}", "  " + "─" * 62]
        for a in sorted(self.allocations, key=lambda a: (a.offset or 0, a.name)):
            star = " *" if id(a) in aliased else ""
            rows.append(f"  {(a.name + star):<28}{a.size_bytes:>8}{a.alignment:>7}{a.offset!s:>10}{a.end!s:>10}")
        rows.append("  " + "─" * 62)
        for gi, g in enumerate(self.alias_groups):
            rows.append(f"  Alias group {gi + 1}:")
            for pi, phase in enumerate(g):
                rows.append(f"    Phase {pi + 1}: " + ", ".join(f"{a.name} ({a.size_bytes} B)" for a in phase))
        if self.alias_groups:
            rows.append("  " + "─" * 62)
        total = self.total_bytes if self.total_bytes is not None else self.unaliased_bytes
        rows.append(f"  Total:              {total} B")
        rows.append(f"  Saved (aliasing):   {max(0, self.unaliased_bytes - total)} B")
        return "\n".join(rows)


class TmemAllocator:
    """Column offsets for TmemAllocations (no allocation intrinsics are emitted here)."""

    def __init__(self, capacity_columns: int = TMEM_COLUMNS):
        self.capacity_columns = capacity_columns
        self.allocations: List[TmemAllocation] = []
        self.total_columns: Optional[int] = None

    @classmethod
    def for_resources(cls, *resources: Any, capacity_columns: int = TMEM_COLUMNS) -> "TmemAllocator":
        """An allocator holding every resource's ``get_tmem_requirements()``, laid out."""
        allocator = cls(capacity_columns)
        for resource in resources:
            allocator.add_resource(resource)
        allocator.compute_layout()
        return allocator

    def add(self, allocation: TmemAllocation) -> TmemAllocation:
        if allocation not in self.allocations:
            self.allocations.append(allocation)
        return allocation

    def add_resource(self, resource: Any) -> None:
        for a in resource.get_tmem_requirements() or []:
            self.add(a)

    @property
    def total(self) -> int:
        return self.total_columns if self.total_columns is not None else sum(
            a.columns for a in self.allocations if type(a.columns) is int)

    total_tmem_columns = total

    def print_usage_report(self) -> None:
        rows = ["[tmem-layout] TMEM Usage Report"]
        rows += [f"  {a.name:<28}{a.columns!s:>8} cols at {a.offset!s}" for a in self.allocations]
        rows.append(f"  Total: {self.total} columns")
        print("\n".join(rows))

    def compute_layout(self) -> int:
        if self.total_columns is not None:
            raise LayoutError("compute_layout() was already called; it runs once")
        cursor = 0
        for a in self.allocations:
            if type(a.columns) is not int or a.columns < 0:
                raise LayoutError(f"TmemAllocation {a.name!r}: columns={a.columns!r} is not an int >= 0")
            a.offset = cursor
            cursor += a.columns
        self.total_columns = cursor
        return cursor


class BarrierAllocator:
    """One coalesced mbarrier array for every pipeline (resource or group), laid out by bucket."""

    def __init__(self):
        self.owners: List[Any] = []  # resources and PipelineGroups
        self.offsets: Dict[int, int] = {}
        self.num_barriers: Optional[int] = None
        self.backing: Optional[SmemAllocator] = None
        self.allocation: Optional[SmemAllocation] = None

    def add_resource(self, resource: Any) -> None:
        if resource.pipeline_config is None:
            raise LayoutError(f"BarrierAllocator.add_resource({resource.display_name}): resource has no pipeline")
        self.owners.append(resource)

    def add_pipeline_group(self, name_or_group: Any, group: Any = None) -> None:
        self.owners.append(group if group is not None else name_or_group)

    @staticmethod
    def barriers_of(owner: Any) -> int:
        from .pipeline_group import PipelineGroup

        if isinstance(owner, PipelineGroup):
            return owner.num_barriers
        return 2 * owner.pipeline_config.num_stages

    def compute_layout(self) -> int:
        if self.num_barriers is not None:
            raise LayoutError("compute_layout() was already called; it runs once")
        cursor = 0
        for owner in self.owners:
            self.offsets[id(owner)] = cursor
            cursor += self.barriers_of(owner)
        self.num_barriers = cursor
        return cursor

    def set_backing(self, smem_allocator: SmemAllocator) -> None:
        if self.num_barriers is None:
            raise LayoutError("BarrierAllocator.set_backing() needs compute_layout() first")
        self.backing = smem_allocator
        self.allocation = SmemAllocation("mbarriers", dtype=8, count=self.num_barriers, alignment=8)
        smem_allocator.allocations.append(self.allocation)
        if smem_allocator.total_bytes is not None:  # layout already computed: append at the end
            self.allocation.offset = smem_allocator.total_bytes = _align(smem_allocator.total_bytes, 8)
            smem_allocator.total_bytes += self.allocation.size_bytes
