"""Resources: what tasks read and write, their work methods and task-local values."""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Tuple

from .capture import capturing, fail
from .enums import WorkAttr
from .pipeline_config import PipelineConfig


class _ResourceMeta(type):
    """Keeps resources hashable by identity even when a subclass is a ``@dataclass``.

    A ``@dataclass`` subclass would otherwise get a field-wise ``__eq__`` and lose
    ``__hash__``, and resources are dictionary keys of the dependency graph.
    """

    def __setattr__(cls, name, value):
        if name == "__hash__" and value is None:
            return
        if name == "__eq__" and getattr(getattr(value, "__code__", None), "co_filename", "") == "<string>":
            return  # a dataclass-generated field-wise __eq__
        super().__setattr__(name, value)


@dataclass(kw_only=True, eq=False)
class MemoryResource(metaclass=_ResourceMeta):
    """Base of every resource. Subclass it (usually as ``@dataclass(kw_only=True)``)."""

    name: Optional[str] = None
    pipeline_config: Optional[PipelineConfig] = None

    def __post_init__(self) -> None:
        pass

    def __eq__(self, other):
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display_name!r})"

    @property
    def display_name(self) -> str:
        return self.name or type(self).__name__

    @property
    def is_pipelined(self) -> bool:
        return self.pipeline_config is not None

    def get_smem_requirements(self):
        return []

    def get_tmem_requirements(self):
        return []

    @classmethod
    def work_methods(cls) -> dict:
        """name -> WorkSpec for every ``@producer_work`` / ``@consumer_work`` method."""
        out = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                spec = work_spec_of(value)
                if spec is not None:
                    out[name] = spec
        return out


# ------------------------------------------------------------------ task-local variables
class TaskLocalVariable:
    """A typed value carried between work calls of one task (a register slot)."""

    def __init__(self, dtype: Any = None, default: Any = None, docs: str = "", *, default_factory=None,
                 runtime_slot_name: Optional[str] = None, _uninitialized=False):
        self.dtype = dtype
        self.default = default
        self.default_factory = default_factory  # called inside the kernel when a default is needed
        self.docs = docs
        self.runtime_slot_name = runtime_slot_name  # reference-TS naming hint; slots are named by attribute
        self.is_uninitialized = _uninitialized

    def default_value(self) -> Any:
        if self.default is None and self.default_factory is not None:
            return self.default_factory()
        return self.default

    @classmethod
    def uninitialized(cls) -> "TaskLocalVariable":
        """Placeholder for the class attribute; bind the real variable in ``__post_init__``."""
        return cls(_uninitialized=True)

    def __repr__(self) -> str:
        if self.is_uninitialized:
            return "TaskLocalVariable.uninitialized()"
        return f"TaskLocalVariable(dtype={self.dtype!r})"


@dataclass(frozen=True)
class StageInfo:
    """What every work method receives.

    ``loop_offset`` is the domain-loop index (None outside the loop); ``loop_start`` /
    ``loop_end`` / ``loop_step`` are that loop's bounds for the current tile. ``stage_idx`` and
    ``barrier`` (the stage's mbarrier: a pointer TMA copies and mbarrier primitives accept, with
    TS's ``cutlass.Array`` ``data_ptr()`` too, lower/memory.ArrayPointer) are
    None on a resource without a pipeline. ``context`` is the kernel context (lower/context.py):
    ``values`` (what the kernel passed to ``TaskManager.run(**values)``), ``smem_view(allocation,
    layout)``, ``smem_base`` (the unified SMEM block, a cutlass.Array of Uint8), ``tmem_base`` /
    ``tmem_ptr_i32``, ``warp_idx``, ``cluster_coord`` / ``mcast_mask(mode)``. ``label``, ``num_active_stages`` and
    ``task_cache`` exist for reference-TS work methods that read them: warpsched has no named
    work labels, no delayed commits and no task caches, so they are always None / 0 / None.
    """

    loop_offset: Any = None
    stage_idx: Any = None
    barrier: Any = None
    work_tile: Any = None
    context: Any = None
    loop_start: Any = None
    loop_end: Any = None
    loop_step: Any = None
    label: Any = None
    num_active_stages: int = 0
    task_cache: Any = None

    def tma_copy(self, atom, src, dst, *, mcast_mode=None, **copy_kwargs):
        """``cute.copy(atom, src, dst, tma_bar_ptr=self.barrier)``: a TMA load of ``src`` into the
        stage's SMEM tensor ``dst`` that completes on this stage's full barrier, issued by the
        calling warp. ``mcast_mode`` (0: m, 1: n) multicasts it to the CTAs along that cluster mode
        (``context.mcast_mask(mode)``). The lowering records the copy's static byte count (dst's
        size x its element width: the tile that lands in each CTA's stage) and checks each producer bracket's
        copies against the bytes its acquire arms (``num_bytes``): a mismatch fails the kernel's
        compilation. Only inside a kernel (``StageInfo.context`` is the lowering's KernelContext)."""
        copy = getattr(self.context, "tma_copy", None)
        if copy is None:
            raise RuntimeError("StageInfo.tma_copy() runs only while a kernel is traced (StageInfo.context is "
                               "the lowering's KernelContext)")
        return copy(self, atom, src, dst, mcast_mode=mcast_mode, **copy_kwargs)

    def touches(self, part, mode="r", *, resource=None):
        """Reports that the work is about to read (``mode`` "r") or write ("w") part ``part`` of the stage of
        its resource, or of ``resource`` (the resource or its name: an operand read through another resource's
        ``WGMMA_OPERAND`` declaration). Where that resource declares ``consumer_footprint``, the lowering holds
        the report to the running task's footprint, and a ``WRITES`` work must report what it writes: the
        checker proved the footprints disjoint, and this ties the body to them (lower/footprints.py). A
        consumer work that reports a write must be marked ``WRITES``. Only inside a kernel."""
        touch = getattr(self.context, "touch", None)
        if touch is None:
            raise RuntimeError("StageInfo.touches() runs only while a kernel is traced (StageInfo.context is "
                               "the lowering's KernelContext)")
        if mode not in ("r", "w"):
            raise ValueError(f"StageInfo.touches(mode={mode!r}): 'r' (reads) or 'w' (writes)")
        touch(resource, part, mode)


# ------------------------------------------------------------------ work decorators
@dataclass(frozen=True)
class WorkSpec:
    role: str  # 'producer' | 'consumer'
    returns: Tuple[Any, ...]  # TaskLocalVariable placeholders, in order
    returns_single: bool
    attrs: WorkAttr
    fn: Callable

    @property
    def auxiliary(self) -> bool:
        return bool(self.attrs & WorkAttr.AUXILIARY)

    def keyword_params(self) -> Optional[Tuple[str, ...]]:
        """Parameter names after ``stage_info``, or None when the signature is opaque."""
        try:
            sig = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return None
        names = [p.name for p in sig.parameters.values()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return None
        return tuple(names[2:]) if len(names) >= 2 else ()

    def slot_names(self, resource: Any) -> Tuple[Optional[str], ...]:
        """Attribute names of the ``returns=`` placeholders on the resource's class."""
        names = []
        for placeholder in self.returns:
            names.append(_attribute_name_of(type(resource), placeholder))
        return tuple(names)


def _attribute_name_of(cls: type, placeholder: Any) -> Optional[str]:
    if isinstance(placeholder, str):
        return placeholder
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if value is placeholder:
                return name
        fields = getattr(klass, "__dataclass_fields__", {})
        for name, f in fields.items():
            if f.default is placeholder:
                return name
    return None


WORK_ATTR = "__warpsched_work__"


def work_spec_of(obj: Any) -> Optional[WorkSpec]:
    return getattr(obj, WORK_ATTR, None)


def _work_decorator(role: str, fn=None, *, returns=None, work_attrs=WorkAttr.NONE):
    if returns is None:
        rets, single = (), False
    elif isinstance(returns, (tuple, list)):
        rets, single = tuple(returns), False
    else:
        rets, single = (returns,), True
    if work_attrs is None:
        work_attrs = WorkAttr.NONE

    def wrap(f):
        @functools.wraps(f)
        def work(self, *args, **kwargs):
            _refuse_during_capture(self, f.__name__)
            return f(self, *args, **kwargs)

        setattr(work, WORK_ATTR, WorkSpec(role, rets, single, work_attrs, f))
        return work

    return wrap(fn) if fn is not None else wrap


def _refuse_during_capture(resource: Any, method: str) -> None:
    """A work method called on the resource object itself (not on the schedule's parameter) while a
    schedule is being captured would run its body and record nothing: refuse it at that line."""
    if capturing():
        name = getattr(resource, "name", None) or type(resource).__name__
        fail("schedule capture", f"{name}.{method}() was called on the resource object itself inside a "
              "@schedule, so it would execute instead of being recorded", resource=name,
              fix="pass the resource to the schedule function as an argument and call the method on "
              "that parameter")


def consumer_work(fn=None, *, returns=None, work_attrs=WorkAttr.NONE):
    """Mark a method that reads data *out of* its resource.

    ``returns=`` names the TaskLocalVariable (or a tuple of them) the method's result
    is stored in; the schedule receives a token for it.
    """
    return _work_decorator("consumer", fn, returns=returns, work_attrs=work_attrs)


def producer_work(fn=None, *, returns=None, work_attrs=WorkAttr.NONE):
    """Mark a method that writes data *into* its resource."""
    return _work_decorator("producer", fn, returns=returns, work_attrs=work_attrs)


# ------------------------------------------------------------------ work queues and PDL
@dataclass
class WorkTileInfo:
    """The current work tile of a persistent loop: its index and whether it is valid."""

    tile_idx: Any = None
    is_valid_tile: Any = True


@dataclass
class TileSchedulerConfig:
    """Static persistent scheduling: tiles are visited block-strided over ``num_tiles``.

    Built from CuTe DSL scheduler params (``create_static_persistent_tile_scheduler_params`` /
    ``create_clc_dynamic_persistent_tile_scheduler_params``, as in the reference TS), the static
    loop follows ``cutlass.utils.StaticPersistentTileScheduler``: the same tile order and CTA
    mapping as a hand-written kernel launched with ``get_grid_shape``.
    """

    num_tiles: Any = None  # int or (m, n, l) tile counts
    cluster_shape_mn: Tuple[int, int] = (1, 1)
    max_active_clusters: Any = None
    tile_scheduler_params: Any = None  # cutlass.utils.PersistentTileSchedulerParams (or the CLC one)
    response_ptr: Any = None  # CLC: accepted; the lowering keeps its own response buffer per stage
    # a dynamic queue on Hopper: a one-word int32 tensor, zero before each launch, whose atomic add hands out the
    # tiles past the grid's own (lower/tile_queues.py); LAUNCH_COUNTER where the program is built before the
    # tensor exists (``warpsched check``, proofs); None: Cluster Launch Control (sm_100)
    counter: Any = None

    @classmethod
    def create_static_persistent_tile_scheduler_params(cls, tile_scheduler_params) -> "TileSchedulerConfig":
        from ..compat import tile_scheduler_fields

        return cls(**tile_scheduler_fields(tile_scheduler_params))

    @classmethod
    def create_clc_dynamic_persistent_tile_scheduler_params(cls, tile_scheduler_params,
                                                            response_ptr=None) -> "TileSchedulerConfig":
        from ..compat import tile_scheduler_fields

        return cls(response_ptr=response_ptr, **tile_scheduler_fields(tile_scheduler_params))


class _LaunchCounter:
    """``TileSchedulerConfig(counter=LAUNCH_COUNTER)``: a counter queue whose word is bound when the kernel is
    traced. The checker proves the counter's protocol (``WorkQueue.counter_fed``) for a build that has no
    tensor yet; the lowering needs the tensor itself."""

    def __repr__(self) -> str:
        return "LAUNCH_COUNTER"


LAUNCH_COUNTER = _LaunchCounter()


@dataclass(kw_only=True, eq=False)
class WorkQueue(MemoryResource):
    """Persistent tile queue. Static when ``pipeline_config`` is None, dynamic with a ``ClcFetchAsync``
    pipeline (then a scheduler task drives the fetch side): Cluster Launch Control, or with
    ``TileSchedulerConfig.counter`` an atomic counter (Hopper)."""

    tile_scheduler_config: Optional[TileSchedulerConfig] = None

    @property
    def is_dynamic(self) -> bool:
        return self.pipeline_config is not None

    @property
    def counter_fed(self) -> bool:
        """A dynamic queue on an atomic counter: its fetching thread writes each response and arrives on the
        stage's full barrier itself (no transaction bytes), where the CLC hardware completes armed bytes."""
        return self.is_dynamic and getattr(self.tile_scheduler_config, "counter", None) is not None

    def skip_work_tile_if(self, work_tile) -> bool:  # default predicate: never skip
        return False


QUEUE_VERBS = {"fetch_work_tile", "get_and_advance_work_tile"}


@dataclass(kw_only=True, eq=False)
class PdlWaitBarrier(MemoryResource):
    """Ordering-only resource: ``wait_griddep()`` waits for the predecessor grid."""

    def wait_griddep(self):  # replaced by the capture proxy inside a schedule
        raise RuntimeError("wait_griddep() is only meaningful inside a @schedule")


@dataclass(kw_only=True, eq=False)
class PdlLaunchBarrier(MemoryResource):
    """Notification-only resource: ``launch_griddep()`` lets dependent grids launch."""

    def launch_griddep(self):
        raise RuntimeError("launch_griddep() is only meaningful inside a @schedule")


_ = field  # re-exported helpers stay importable for subclasses
