"""A fingerprint of a captured program: the key under which a verdict is cached.

Two programs with the same fingerprint are the same program to every check: the same tasks
(names, warp ranges, registers, source lines), the same schedules step by step (kind,
resource, method, section, guards, routed values, constant arguments, ``file:line``), the
same pipeline configurations, groups, SMEM / TMEM allocations and layouts, and the same
trip-count facts. What verification never reads is left out: tensors, TMA atoms, kernel
objects held by resources, the runtime value of a ``trip_count`` (only its declared facts
count, or the int when it is one), and a ``TileSchedulerConfig``'s tile count (the checker
reads ``work_tile_loop(tile_count=...)`` instead).

Classes and functions are named by ``__qualname__``, and a source file by its path from the top
of its package (``warpsched/examples/gemm.py``; a file outside any package by its name), so the
program ``warpsched check`` loads by path and the one a kernel traces after a normal import get
the same fingerprint, and so does the same program in another clone, checkout or installed wheel:
a verdict cached or shipped for it matches everywhere. Any other runtime value (a DSL ``Int32`` used as a bound) is
recorded by identity only: loops that share one such value share it in the fingerprint too.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import os
from typing import Any, Dict, List

from ..model.ir import DomainLoop, Guard, ScheduleResult, Step, Token, WorkTileLoop
from ..model.memory import SmemAllocation, TmemAllocation
from ..model.pipeline_config import PipelineConfig, cluster_shape_of, group_size
from ..model.pipeline_group import PipelineGroup
from ..model.resources import MemoryResource, WorkQueue
from ..model.source import SourceLoc
from ..model.task import Task
from ..model.tripcount import TripCount
from .program import Program

_PLAIN = (type(None), bool, int, float, str)
_CONFIG_FIELDS = ("pipeline_type", "num_stages", "num_bytes", "producer_group", "consumer_group",
                  "cta_layout_vmnk", "producer_signaling_threads", "consumer_signaling_threads",
                  "consumer_wait_signaling_threads", "interleave_stride", "advance_on_wait", "advance_on_acquire",
                  "num_bytes_per_warp_per_cta", "mcast_mode_mn", "async_producer_op", "partial_stage",
                  "location")


@functools.lru_cache(maxsize=None)
def stable_file(path: str) -> str:
    """``path`` from the top of its package (the folders above it that hold an ``__init__.py``):
    the same in every checkout and install. ``<string>``-like names are kept as they are."""
    if path.startswith("<"):
        return path
    real = os.path.realpath(path)
    parts = [os.path.basename(real)]
    folder = os.path.dirname(real)
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.append(os.path.basename(folder))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return "/".join(reversed(parts))


def _qualname(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


class _Canon:
    """Walks the program once; objects are numbered in first-seen order."""

    def __init__(self):
        self.index: Dict[int, int] = {}
        self.objects: List[Any] = []  # numbered objects, kept alive so ids stay unique
        self.runtime: Dict[int, int] = {}
        self.runtime_objects: List[Any] = []

    def ref(self, obj: Any) -> tuple:
        if id(obj) not in self.index:
            self.index[id(obj)] = len(self.objects)
            self.objects.append(obj)
        return ("ref", self.index[id(obj)])

    def value(self, v: Any) -> Any:
        if isinstance(v, _PLAIN):
            return v
        if isinstance(v, enum.Enum):
            return ("enum", type(v).__qualname__, v.name if v.name is not None else repr(v.value))
        if isinstance(v, (tuple, list)):
            return ("seq",) + tuple(self.value(x) for x in v)
        if isinstance(v, dict):
            return ("map",) + tuple(sorted(((repr(k), self.value(x)) for k, x in v.items()), key=lambda kv: kv[0]))
        if isinstance(v, SourceLoc):
            return ("loc", stable_file(v.file), v.line)
        if isinstance(v, TripCount):
            root = v.root
            return ("trip", self.ref(root), root.name, root.min, root.divisibility, v.offset, root.exact,
                    self.value(root.location))
        if isinstance(v, Token):
            return ("token", v.producer_index, v.position, v.slot, v.resource_name, v.method)
        if isinstance(v, (MemoryResource, PipelineGroup, Task, SmemAllocation, TmemAllocation)):
            return self.ref(v)
        if isinstance(v, type):
            return ("type", v.__qualname__, getattr(v, "width", None) if isinstance(getattr(v, "width", None), int)
                    else None)
        if callable(v) and hasattr(v, "__qualname__"):  # a domain provider, a skip_if predicate
            return ("fn", _qualname(getattr(v, "__func__", v)))
        if id(v) not in self.runtime:  # a runtime value: only which loops share it counts
            self.runtime[id(v)] = len(self.runtime)
            self.runtime_objects.append(v)
        return ("runtime", self.runtime[id(v)])

    # ------------------------------------------------------------------ program parts
    def config(self, cfg: Any) -> Any:
        if cfg is None:
            return None
        if not isinstance(cfg, PipelineConfig):
            return ("config?", type(cfg).__qualname__)
        out = []
        for name in _CONFIG_FIELDS:
            v = getattr(cfg, name, None)
            if name in ("producer_group", "consumer_group"):
                agent = getattr(v, "agent", None)
                out.append(("group", group_size(v), getattr(agent, "name", None) if agent is not None else None)
                           if v is not None else None)
            elif name == "cta_layout_vmnk" and v is not None and not isinstance(v, tuple):
                shape = cluster_shape_of(v)
                out.append(("layout", shape) if shape is not None else self.value(v))
            else:
                out.append(self.value(v))
        out.append(("barrier_ptr", getattr(cfg, "barrier_ptr", None) is not None))
        return tuple(out)

    def guard(self, g: Guard) -> tuple:
        return (g.kind, g.period, g.start, repr(g.key), self.value(g.token), self.value(g.location))

    def step(self, s: Step) -> tuple:
        return (s.index, s.kind.name, self.value(s.resource), s.method, s.section.name,
                tuple(self.guard(g) for g in s.guards), self.value(s.location),
                tuple(self.value(t) for t in s.returns),
                tuple(sorted((k, self.value(t)) for k, t in s.token_args.items())),
                tuple(sorted((k, self.value(v)) for k, v in s.const_args.items())),
                self.value(s.via_group) if s.via_group is not None else None, s.call_idx)

    def schedule(self, sched: Any) -> Any:
        if not isinstance(sched, ScheduleResult):
            return ("schedule?", type(sched).__qualname__)
        d: DomainLoop = sched.domain_loop
        w: WorkTileLoop = sched.work_tile_loop
        loop = None if d is None else (self.value(d.start), self.value(d.end), self.value(d.step), d.unroll,
                                        self.value(d.location), self.value(getattr(d, "count", None)))
        tiles = None if w is None else (self.value(w.work_queue), self.value(w.skip_if), self.value(w.location),
                                        w.has_skippable, self.value(w.tile_count))
        return (sched.name, self.value(sched.location), tuple(self.step(s) for s in sched.steps), loop, tiles)

    def task(self, t: Any) -> tuple:
        if not isinstance(t, Task):
            return ("task?", type(t).__qualname__)
        return (type(t).__qualname__, t.name, self.value(t.warp_idx), self.value(t.num_warps),
                self.value(t.num_registers), self.value(t.location),
                tuple(self.value(r) for r in t.src_resources), tuple(self.value(r) for r in t.dst_resources),
                self.schedule(t.schedule))

    def describe(self, obj: Any) -> tuple:
        """The content of a numbered object (resources, groups, allocations)."""
        if isinstance(obj, PipelineGroup):
            return ("group", obj.name, self.value(obj.mode), tuple(self.value(m) for m in obj.members),
                    self.config(obj.pipeline_config), self.value(obj.location))
        if isinstance(obj, SmemAllocation):
            return ("smem", obj.name, self.value(obj.dtype), self.value(obj.count),
                    self.value(getattr(obj, "declared_bytes", None)), self.value(obj.alignment),
                    self.value(obj.offset), self.value(obj.location))
        if isinstance(obj, TmemAllocation):
            return ("tmem", obj.name, self.value(obj.columns), self.value(obj.offset), self.value(obj.location))
        if isinstance(obj, TripCount):
            return ("symbol", obj.name)
        if isinstance(obj, Task):
            return ("task", obj.name)
        if not isinstance(obj, MemoryResource):
            return ("object", type(obj).__qualname__, getattr(obj, "name", None))
        methods = tuple(sorted(
            (name, spec.role, self.value(spec.attrs), spec.slot_names(obj), spec.returns_single)
            for name, spec in type(obj).work_methods().items()))
        reqs = []
        for getter in ("get_smem_requirements", "get_tmem_requirements"):
            try:
                got = getattr(obj, getter)() or []
            except Exception:  # noqa: BLE001 - a hook that needs a kernel context reads as none (as the checker does)
                got = []
            reqs.append(tuple(self.value(a) for a in got))
        queue = None
        if isinstance(obj, WorkQueue):
            tsc = obj.tile_scheduler_config
            queue = (obj.is_dynamic, self.value(getattr(tsc, "cluster_shape_mn", None)) if tsc is not None else None,
                     _qualname(type(obj).skip_work_tile_if), obj.counter_fed)  # a counter's protocol differs
        return ("resource", type(obj).__qualname__, obj.name, obj.display_name, self.config(obj.pipeline_config),
                methods, tuple(reqs), queue)


def canonical_program(program: Program) -> tuple:
    """The nested tuple the fingerprint hashes (useful to diff two programs)."""
    c = _Canon()
    o = program.options
    options = (o.assume_pdl_wait_completed, o.smem_capacity_bytes, o.tmem_capacity_columns, o.max_states,
               o.max_seconds, o.register_file_size, o.max_threads_per_block)
    tasks = tuple(c.task(t) for t in program.tasks)
    graph = tuple((c.value(k), tuple(c.value(v) for v in vs)) for k, vs in program.graph_items())
    smem = program.smem_allocator
    smem_part = None
    if smem is not None:
        smem_part = (getattr(smem, "capacity_bytes", None),
                     tuple(c.value(r) for r in getattr(smem, "resources", []) or []),
                     tuple(c.value(a) for a in getattr(smem, "allocations", []) or []),
                     tuple(tuple(tuple(c.value(a) for a in phase) for phase in grp)
                           for grp in getattr(smem, "alias_groups", []) or []),
                     tuple(c.value(g) for g in getattr(smem, "pipeline_groups", []) or []),
                     c.value(getattr(smem, "tmem_ptr", None)), c.value(getattr(smem, "total_bytes", None)))
    tmem = program.tmem_allocator
    tmem_part = None if tmem is None else (
        getattr(tmem, "capacity_columns", None), tuple(c.value(a) for a in getattr(tmem, "allocations", []) or []),
        c.value(getattr(tmem, "total_columns", None)))
    bar = program.barrier_allocator
    bar_part = None if bar is None else (
        tuple(c.value(w) for w in getattr(bar, "owners", []) or []), c.value(getattr(bar, "num_barriers", None)),
        c.value(getattr(bar, "allocation", None)))
    described = []
    i = 0
    while i < len(c.objects):  # describing an object may number new ones (a group's members)
        described.append(c.describe(c.objects[i]))
        i += 1
    return ("warpsched-program/1", options, tasks, graph, smem_part, tmem_part, bar_part, tuple(described))


def program_fingerprint(program: Program) -> str:
    """sha256 of the canonical program, as hex."""
    return hashlib.sha256(repr(canonical_program(program)).encode()).hexdigest()


__all__ = ["canonical_program", "program_fingerprint", "stable_file"]
