"""The captured schedule IR: plain data, no behaviour beyond small queries.

A captured schedule is a flat list of ``Step`` in program order. Each step carries its
section (prologue / head / loop / tail / epilogue), the guards that enclose it, the value
routes it reads and writes, and the user's source location.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .source import SourceLoc
from .iteration import forward_form, static_trip_count


class Section(enum.Enum):
    PROLOGUE = "prologue"  # before work_tile_loop
    HEAD = "head"  # before the domain loop
    LOOP = "loop"  # domain loop body
    TAIL = "tail"  # after the domain loop
    EPILOGUE = "epilogue"  # after work_tile_loop

    @property
    def tag(self) -> str:
        return {"prologue": "P", "head": "H", "loop": "", "tail": "T", "epilogue": "E"}[self.value]


class StepKind(enum.Enum):
    # label, short label, side ('producer' / 'consumer' / None), is sync verb
    ProducerTryAcquire = ("ProducerTryAcquire", "ProdTrA", "producer", True)
    ProducerAcquire = ("ProducerAcquire", "ProdAcq", "producer", True)
    ProducerWork = ("ProducerWork", "ProdWrk", "producer", False)
    ProducerAux = ("ProducerAux", "ProdAux", "producer", False)
    ProducerCommit = ("ProducerCommit", "ProdCmt", "producer", True)
    ConsumerTryWait = ("ConsumerTryWait", "ConsTrW", "consumer", True)
    ConsumerWait = ("ConsumerWait", "ConsWai", "consumer", True)
    ConsumerWork = ("ConsumerWork", "ConsWrk", "consumer", False)
    ConsumerAux = ("ConsumerAux", "ConsAux", "consumer", False)
    ConsumerRelease = ("ConsumerRelease", "ConsRel", "consumer", True)
    # the consumer's position moves one stage on without waiting or arriving (another task owns it)
    ConsumerSkip = ("ConsumerSkip", "ConsSkp", "consumer", True)
    QueueFetch = ("QueueFetch", "QFetch", "producer", False)
    QueueAdvance = ("QueueAdvance", "QAdvnc", "consumer", False)
    PdlWait = ("PdlWait", "PdlWait", None, True)
    PdlLaunch = ("PdlLaunch", "PdlLnch", None, True)

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def short(self) -> str:
        return self.value[1]

    @property
    def side(self) -> Optional[str]:
        return self.value[2]

    @property
    def is_sync(self) -> bool:
        return self.value[3]

    @property
    def is_work(self) -> bool:
        return self in (StepKind.ProducerWork, StepKind.ConsumerWork, StepKind.QueueFetch, StepKind.QueueAdvance)

    @property
    def is_aux(self) -> bool:
        return self in (StepKind.ProducerAux, StepKind.ConsumerAux)


SYNC_VERBS = {
    "try_acquire": StepKind.ProducerTryAcquire,
    "acquire": StepKind.ProducerAcquire,
    "commit": StepKind.ProducerCommit,
    "try_wait": StepKind.ConsumerTryWait,
    "wait": StepKind.ConsumerWait,
    "release": StepKind.ConsumerRelease,
    "skip": StepKind.ConsumerSkip,
}
# The blocking verb each try_ verb belongs to.
TRY_PAIRS = {StepKind.ProducerTryAcquire: StepKind.ProducerAcquire, StepKind.ConsumerTryWait: StepKind.ConsumerWait}


# ---------------------------------------------------------------- guards
@dataclass(frozen=True)
class Guard:
    """A runtime condition enclosing a step."""

    kind: str  # 'first_iter' | 'last_iter' | 'every' | 'when_true' | 'when_false' | 'skippable' | 'loop_empty'
    period: int = 0
    start: int = 0
    key: Any = None  # when_true/when_false correlation key
    token: Optional["Token"] = None
    location: Optional[SourceLoc] = None

    @property
    def tag(self) -> str:
        return {"first_iter": "F", "last_iter": "L", "every": "N", "when_true": "?", "when_false": "!",
                "skippable": "S", "loop_empty": "0"}[self.kind]

    def describe(self) -> str:
        if self.kind == "every":
            return f"every({self.period}, start={self.start})"
        if self.kind in ("when_true", "when_false"):
            return f"{self.kind}({self.key!r})"
        if self.kind == "loop_empty":
            return "if_empty()"
        return self.kind

    def __hash__(self) -> int:  # tokens hash by identity; keys may be any hashable
        return hash((self.kind, self.period, self.start, repr(self.key)))


# ---------------------------------------------------------------- values
@dataclass(eq=False)
class Token:
    """A task-local value produced by a work call (``returns=``) and routed into others."""

    slot: Optional[str]  # name of the TaskLocalVariable attribute, None when undeclared
    resource_name: str
    method: str
    producer_index: int  # index of the Step that writes it
    position: int = 0  # which of the returned values

    def __repr__(self) -> str:
        slot = self.slot or f"result{self.position}"
        return f"<{self.resource_name}.{self.method} -> {slot}>"


# ---------------------------------------------------------------- steps
@dataclass(eq=False)
class Step:
    index: int
    kind: StepKind
    resource: Any  # a MemoryResource, or a PipelineGroup for collapsed ops
    method: str
    section: Section
    guards: Tuple[Guard, ...]
    location: SourceLoc
    returns: Tuple[Token, ...] = ()
    token_args: Dict[str, Token] = field(default_factory=dict)
    const_args: Dict[str, Any] = field(default_factory=dict)
    via_group: Any = None  # the PipelineGroup when called as ``group.member.verb()``
    call_idx: int = 0  # distinguishes repeated (resource, kind, section) slots

    @property
    def resource_name(self) -> str:
        name = getattr(self.resource, "name", None)
        return name if isinstance(name, str) and name else type(self.resource).__name__

    @property
    def is_group_op(self) -> bool:
        from .pipeline_group import PipelineGroup

        return isinstance(self.resource, PipelineGroup)

    def guard_kinds(self) -> Tuple[str, ...]:
        return tuple(g.kind for g in self.guards)

    def describe(self) -> str:
        return f"{self.resource_name}.{self.method}() at {self.location}"


# ---------------------------------------------------------------- loops
@dataclass
class DomainLoop:
    start: Any
    end: Any
    step: Any
    unroll: Optional[int]
    location: SourceLoc
    count: Any = None  # int | TripCount: the trip count declared directly (grid-stride loops)

    @staticmethod
    def is_provider(bound: Any) -> bool:
        return callable(bound) and not isinstance(bound, (int, float))

    @property
    def dynamic_bounds(self) -> Tuple[str, ...]:
        return tuple(n for n, b in (("start", self.start), ("end", self.end), ("step", self.step))
                     if self.is_provider(b))

    @property
    def is_static(self) -> bool:
        return all(type(b) is int for b in (self.start, self.end, self.step))

    @property
    def trip_count(self) -> Optional[int]:
        """``len(range(start, end, step))`` for compile-time bounds (model/iteration.py)."""
        return static_trip_count(self.start, self.end, self.step)

    @property
    def forward(self) -> Tuple[Any, Any, Any]:
        """``(first, bound, stride)`` of the forward loop with the same trip count: the loop
        itself, or ``(end, start, -step)`` for a compile-time negative step (model/iteration.py)."""
        return forward_form(self.start, self.end, self.step)

    @property
    def static_start(self) -> Optional[int]:
        return self.start if type(self.start) is int else None

    @property
    def static_step(self) -> Optional[int]:
        return self.step if type(self.step) is int else None


@dataclass
class WorkTileLoop:
    work_queue: Any
    skip_if: Any
    location: SourceLoc
    has_skippable: bool = False
    tile_count: Any = None  # int | TripCount | None: the tile counts the checker covers


@dataclass(eq=False)
class ScheduleResult:
    """What calling a ``@schedule`` function returns: the captured schedule of one task."""

    name: str
    location: SourceLoc
    params: Tuple[Any, ...]
    steps: Tuple[Step, ...]
    domain_loop: Optional[DomainLoop]
    work_tile_loop: Optional[WorkTileLoop]

    def by_section(self, section: Section) -> Tuple[Step, ...]:
        return tuple(s for s in self.steps if s.section is section)

    @property
    def resources(self) -> Tuple[Any, ...]:
        """Distinct resources touched, in first-use order (group members resolved)."""
        seen: Dict[int, Any] = {}
        for s in self.steps:
            from .pipeline_group import PipelineGroup

            targets = s.resource.members if isinstance(s.resource, PipelineGroup) else [s.resource]
            for r in targets:
                seen.setdefault(id(r), r)
        return tuple(seen.values())

    @property
    def is_persistent(self) -> bool:
        return self.work_tile_loop is not None
