"""The whole program: tasks, graph, allocators and options, with the lookups every layer
above the model shares (the static checks, the sync plan, the checker, the lowering, the report)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .ir import ScheduleResult, Step
from .pipeline_group import PipelineGroup, viewed_groups
from .task import Task


@dataclass
class Options:
    skip_validation: bool = False
    exhaustive_deadlock_race_check: bool = True
    assume_pdl_wait_completed: bool = False
    smem_capacity_bytes: Optional[int] = None
    tmem_capacity_columns: Optional[int] = None
    max_states: int = 500_000  # generous: the largest bundled builder (interleaved build_per_role) needs ~36k
    max_seconds: Optional[float] = None  # wall-clock limit of the exhaustive search; None: none
    register_file_size: int = 65536
    max_threads_per_block: int = 1024


@dataclass
class Program:
    tasks: List[Task]
    graph: Dict[Any, List[Any]]
    smem_allocator: Any = None
    tmem_allocator: Any = None
    barrier_allocator: Any = None
    options: Options = field(default_factory=Options)

    # ---- lookups shared by the check families ----
    def schedule_of(self, task: Task) -> Optional[ScheduleResult]:
        s = getattr(task, "schedule", None)
        return s if isinstance(s, ScheduleResult) else None

    def steps_of(self, task: Task) -> Tuple[Step, ...]:
        s = self.schedule_of(task)
        return s.steps if s is not None else ()

    @property
    def resources(self) -> List[Any]:
        """Every resource named by a task, the graph, or a schedule (first-seen order)."""
        seen: Dict[int, Any] = {}
        for t in self.tasks:
            for r in list(getattr(t, "src_resources", [])) + list(getattr(t, "dst_resources", [])):
                seen.setdefault(id(r), r)
            for step in self.steps_of(t):
                for r in step_targets(step):
                    seen.setdefault(id(r), r)
        for k, vs in self.graph_items():
            seen.setdefault(id(k), k)
            for v in vs:
                seen.setdefault(id(v), v)
        return list(seen.values())

    def graph_items(self) -> List[Tuple[Any, List[Any]]]:
        """(downstream, [upstream, ...]) pairs; a malformed graph or value (reported by the
        structure checks) is read as leniently as possible instead of crashing."""
        if not isinstance(self.graph, dict):
            return []
        out = []
        for k, v in self.graph.items():
            if v is None:
                v = []
            elif not isinstance(v, (list, tuple, set, frozenset)):
                v = [v]
            out.append((k, list(v)))
        return out

    @property
    def pipelined_resources(self) -> List[Any]:
        return [r for r in self.resources if getattr(r, "pipeline_config", None) is not None]

    @property
    def pipeline_groups(self) -> List[PipelineGroup]:
        seen: Dict[int, PipelineGroup] = {}
        for t in self.tasks:
            for step in self.steps_of(t):
                g = step.resource if isinstance(step.resource, PipelineGroup) else step.via_group
                if g is not None:
                    seen.setdefault(id(g), g)
        for alloc in (self.smem_allocator, self.barrier_allocator):
            for g in getattr(alloc, "pipeline_groups", []) or []:
                if isinstance(g, PipelineGroup):
                    seen.setdefault(id(g), g)
            for g in getattr(alloc, "owners", []) or []:
                if isinstance(g, PipelineGroup):
                    seen.setdefault(id(g), g)
        # a group whose member views were handed to the schedules as arguments (they arrive bare)
        ids = {id(r) for r in self.resources}
        for g in viewed_groups():
            if isinstance(g.members, list) and any(id(m) in ids for m in g.members):
                seen.setdefault(id(g), g)
        return list(seen.values())

    def producers_of(self, resource: Any) -> List[Task]:
        return [t for t in self.tasks if t.writes(resource)]

    def consumers_of(self, resource: Any) -> List[Task]:
        return [t for t in self.tasks if t.reads(resource)]

    def upstream(self, resource: Any) -> List[Any]:
        for k, v in self.graph_items():
            if k is resource:
                return v
        return []

    def transitive_upstream(self, resource: Any) -> List[Any]:
        out: Dict[int, Any] = {}
        stack = self.upstream(resource)
        while stack:
            r = stack.pop()
            if id(r) in out:
                continue
            out[id(r)] = r
            stack.extend(self.upstream(r))
        return list(out.values())

    def in_graph(self, resource: Any) -> bool:
        return any(k is resource or any(v is resource for v in vs) for k, vs in self.graph_items())

    @property
    def num_warps(self) -> int:
        return max((t.warp_end for t in self.tasks if isinstance(t, Task)), default=0)


def step_targets(step: Step) -> List[Any]:
    """The resources a step touches: a group's collapsed op touches all its members."""
    if isinstance(step.resource, PipelineGroup):
        return list(step.resource.members)
    return [step.resource]


def name_of(resource: Any) -> str:
    return getattr(resource, "display_name", None) or getattr(resource, "name", None) or type(resource).__name__
