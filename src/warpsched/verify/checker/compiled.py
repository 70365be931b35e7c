"""The compiled form the exhaustive checker executes: barriers, cursors, actions,
instructions, executors and loop groups (built by ``model.compile_program``)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from ...model.ir import Step, StepKind
from ..program import Program, name_of
from .memory import RegionMap

PRODUCER, CONSUMER = "producer", "consumer"
OPEN_VERBS = {StepKind.ProducerAcquire: PRODUCER, StepKind.ConsumerWait: CONSUMER}
CLOSE_VERBS = {StepKind.ProducerCommit: PRODUCER, StepKind.ConsumerRelease: CONSUMER}
NOP_KINDS = {StepKind.ProducerTryAcquire, StepKind.ConsumerTryWait}


@dataclass
class Barrier:
    """One mbarrier: ``kind`` 'full' / 'empty' of stage ``stage`` of ``owner``."""

    index: int
    owner: Any
    kind: str
    stage: int
    init: int
    tx: int
    cta: int = 0  # the CTA of a pair it lives in (0: the leader)
    pair: bool = False  # the program runs CTA pairs: the label names the CTA

    @property
    def label(self) -> str:
        where = ("@leader", "@peer")[self.cta] if self.pair else ""
        return f"{name_of(self.owner)}{where}.{self.kind}[{self.stage}]"


@dataclass
class Cursor:
    """A (stage, parity) pipeline state of one executor for one owner side."""

    slot: int
    owner: Any
    side: str
    which: str  # the sync plan's counter name: 'p' / 'c', or split 'acq' + 'cmt' / 'wait' + 'rel'
    stride: int
    lane: int
    num_stages: int


class Op(str, enum.Enum):
    """The engine rule a resolved step runs (a str enum: ``Op.WORK == "work"``)."""

    NOP = "nop"
    ACQUIRE = "acquire"
    COMMIT = "commit"
    WAIT = "wait"
    RELEASE = "release"
    WORK = "work"
    PDL_WAIT = "pdl_wait"
    PDL_LAUNCH = "pdl_launch"
    SKIP = "skip"  # a consumer's counters move one stage on: no barrier, no bytes


OPENING_OPS = (Op.ACQUIRE, Op.WAIT)
SYNC_OPS = (Op.ACQUIRE, Op.WAIT, Op.COMMIT, Op.RELEASE)


@dataclass
class Action:
    """A resolved step. ``op`` selects the engine rule."""

    op: Op
    step: Step
    cursor: Optional[int] = None  # slot read by the op
    advance: Tuple[int, ...] = ()  # slots advanced after the op
    bulk: Optional[Tuple[int, int]] = None  # skip(count=K): (loop group of K, this skip's member in it)
    bulk_const: Optional[int] = None  # skip(count=n) with an int n (0 included: it moves nothing)
    fault: Optional[str] = None  # a step the checker cannot run (its text): a 'fault' finding where it runs
    stride: int = 1
    num_stages: int = 1
    barrier_base: int = 0  # index of stage 0 of the barrier waited on / arrived at
    arrivals: int = 0
    tx_expect: int = 0
    tx_deliver: int = 0
    deliver_base: int = -1  # full barrier base the work's copies complete_tx on
    also_bases: Tuple[int, ...] = ()  # further barriers the arrivals land on (a pair's tcgen05.commit multicast)
    umma_release: bool = False  # empty arrival happens later, when the MMAs complete
    umma_wait_window: bool = False  # UMMA consumer reads from wait to its async release
    completes_umma: bool = False  # tcgen05.commit of a UMMA producer: every earlier MMA of the task is done
    regions: Tuple[Tuple[Any, int], ...] = ()  # (resource id, stage slot: -1 whole, else None=cursor)
    write: bool = False
    hw_window: bool = False  # producer hardware writes until full[s] completes
    wgmma: bool = False
    wgmma_operand: bool = False  # reads until the retire of the task's next WGMMA work's commit group
    wgmma_wait: int = -1  # pending groups kept by a WGMMA_WAIT work
    pdl_dependent: bool = False
    keys: Tuple[int, ...] = ()  # guard keys whose value this step produces
    arrive_kind: str = ""
    private: bool = False  # no other resource's bytes overlap these: no call window needed
    hold_open: str = ""  # 'r' / 'w': the bracket starts holding (resource, stage) (pipeline window)
    hold_close: str = ""  # the bracket ends; a hardware producer's hold lasts until full[s] completes
    hold_hw: bool = False
    unheld: bool = False  # work of a wait-only task: no bracket hold covers it
    group_members: Tuple[Any, ...] = ()
    owner: Any = None
    side: str = ""
    after_open: bool = False  # work after an opening op that advanced: its stage is one stride behind


@dataclass
class Instr:
    kind: str  # step | tile_head | loop_head | jump | done
    action: Optional[Action] = None
    guards: Tuple[Any, ...] = ()
    target: int = 0  # exit (heads) or jump target
    group: int = -1  # loop group id for loop_head
    start: int = 0
    step: int = 1
    local: bool = False  # touches executor-local state only (partial-order reduction)
    member: int = 0  # this executor's position in the loop group
    all_skippable: bool = False
    idle_guards: Optional[Tuple[Tuple[Tuple[int, bool], ...], ...]] = None  # see LoopGroup.jumpers


@dataclass
class Executor:
    index: int
    name: str
    task: Any
    warps: int
    lane_warp: Optional[int]
    cta: int = 0  # the CTA of a pair this executor runs in (0: the leader)
    program: List[Instr] = field(default_factory=list)
    cursors: List[Cursor] = field(default_factory=list)
    keys: Tuple[int, ...] = ()  # guard keys this executor reads
    counter_c: int = 0  # loop counter: exact below C, then periodic with P
    counter_p: int = 1
    persistent: bool = False
    tile_group: int = -1
    uses_last: bool = False  # the last-iteration flag is kept only where a guard reads it
    uses_empty: bool = False  # an if_empty() block after the loop: the exit records whether it ran (J = EMPTY)
    # (key, loop group, member, tile-head pc, producing pc, idle guards): the loop is idle on a
    # key value produced once per tile before it (see Engine._pre_idle)
    pre_idle: Optional[Tuple[int, int, int, int, int, Tuple]] = None


@dataclass
class LoopGroup:
    """Loops (or work-tile loops) that share one trip-count variable N.

    Member m runs while ``value - offsets[m] < N``; values are stored relative to the group's
    smallest ``start - offset``, so the group reads N relative to that origin. The set of N
    proven: ``exact`` (one value), else every N > ``min_bound`` with ``N % modulus == residue``
    (all relative)."""
    index: int
    label: str
    members: List[int]  # executor indices
    steps: List[int]
    lcm: int = 1  # values shift by multiples of this (steps and modulus: residues are kept)
    starts: List[int] = field(default_factory=list)
    offsets: List[int] = field(default_factory=list)
    exact: Optional[int] = None  # relative end of an exact trip count
    min_bound: int = 0  # undecided: N > min_bound (relative)
    modulus: int = 1
    residue: int = 0
    lift_period: int = 1  # an exact group's far end moves closer only by multiples of this
    gap_period: int = 1  # a symbolic group's gap shrinks by multiples of this (a skipping member's cursor period)
    # skip(count=K) members: a pending one keeps only its value modulo jump_period (it never runs
    # the loop, it reads the end once); they take no part in the gap and shift of the others
    jumpers: Tuple[int, ...] = ()
    jump_period: int = 1
    describe: str = "every count >= 1"  # what the verdict covers, for people
    symbol: str = "N"
    abs: tuple = ()  # the declared set before it is made relative: ('exact', N) / ('min', m, d) / ('first', ...)

    def initial(self):
        """The group state before any member entered: (decided, bound, next values)."""
        if self.exact is not None:
            return (True, self.exact, tuple(self.starts))
        return (False, self.min_bound, tuple(self.starts))

    def allows(self, end: int) -> bool:
        return self.modulus == 1 or end % self.modulus == self.residue


@dataclass
class Compiled:
    program: Program
    executors: List[Executor]
    barriers: List[Barrier]
    groups: List[LoopGroup]
    key_names: List[str]
    key_members: List[List[int]]
    regions: RegionMap
    persistent: bool
    has_skippable: bool
    pdl_assumed: bool
    problems: List[str] = field(default_factory=list)
    gap: int = 16
