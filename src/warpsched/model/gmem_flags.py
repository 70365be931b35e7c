"""Hand-overs between CTAs through global memory: GMEM flags (semaphores, counters) and workspace tiles.

A hand-over between CTAs is a GMEM word per slot (a tile or work-unit index) that one CTA sets with
release semantics after writing a workspace tile and another CTA spins on with acquire loads before
reading it (serial / parallel split-K, stream-K fix-up, atomic split-K). Inside a CTA the checker
proves barriers on the traced schedule; these resources make the cross-CTA part checkable too.

A ``CrossCtaProtocol`` declares the hand-over as plain Python: ``assignment(cta, ctas, units)``
lists the work units a CTA runs in order (the kernel's own scheduler function, shared with it), and
``body(grid, unit)`` issues, for one unit, the flag and workspace calls the kernel makes:

    flag.signal(slot, value)        release store: flag[slot] = value (after the unit's writes)
    flag.wait(slot, value)          spin with acquire loads until flag[slot] == value
    flag.wait_at_least(slot, value) ... until flag[slot] >= value
    ticket = flag.add(slot, value)  atomic add (acq_rel); ``with ticket.when(old):`` runs a block only
                                    when the add returned ``old`` (e.g. the last of n shares: n - 1);
                                    ``acquire=False``: a release-only add (a share that only counts itself)
    flag.reset(slot)                relaxed store of 0 (the slot's last user, for the next launch): it
                                    orders nothing, so a wait it satisfies synchronizes with no one
    ws.write(tile)                  a plain store of a whole workspace tile (one writer per tile)
    ws.accumulate(tile, atomic=)    a declared accumulation: read-modify-write ordered after the tile's
                                    earlier writes, or ``atomic=True`` (red.add, unordered among themselves)
    ws.read(tile)                   a read that needs every write of the tile ordered before it

The checker (verify/checker/grid.py) captures these calls with their ``file:line`` per CTA and unit,
for every grid size and unit count up to the protocol's bound, and explores every interleaving of the
CTAs. Flags start at 0 each launch (the kernel resets them, as the GEMM's last share does). Inside a
kernel, lower/gmem_flags.py binds a flag to its GMEM tensor and emits the PTX for the same verbs.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .capture import fail
from .resources import MemoryResource
from .source import SourceLoc, caller_location

FLAG_VERBS = ("signal", "wait", "wait_at_least", "add", "reset")
WORKSPACE_VERBS = ("write", "accumulate", "read")


@dataclass(frozen=True)
class GridOp:
    """One captured cross-CTA call: ``kind`` is a FLAG_VERBS / WORKSPACE_VERBS name."""

    kind: str
    resource: Any  # the GmemFlag or GmemWorkspace
    slot: int
    value: int = 0  # signal / wait / add: the value; accumulate: 1 when atomic
    location: SourceLoc = SourceLoc("<unknown>", 0)
    cta: int = 0
    unit: Any = None
    index: int = 0  # position in the CTA's op list
    guards: Tuple[Tuple[int, int], ...] = ()  # (index of the add op, old value it must return)
    acquire: bool = True  # add: acq_rel (True) or release only

    @property
    def is_sync(self) -> bool:
        return self.kind in FLAG_VERBS

    @property
    def is_wait(self) -> bool:
        return self.kind in ("wait", "wait_at_least")

    @property
    def is_signal(self) -> bool:
        return self.kind in ("signal", "add")

    def describe(self) -> str:
        name = self.resource.display_name
        if self.kind == "add":
            call = f"{name}.add({self.slot}, {self.value}{'' if self.acquire else ', acquire=False'})"
        elif self.kind == "reset":
            call = f"{name}.reset({self.slot})"
        elif self.is_sync:
            call = f"{name}.{self.kind}({self.slot}, {self.value})"
        elif self.kind == "accumulate" and self.value:
            call = f"{name}.accumulate({self.slot}, atomic=True)"
        else:
            call = f"{name}.{self.kind}({self.slot})"
        return f"CTA {self.cta} unit {self.unit!r}: {call} at {self.location}"


class _GridCapture:
    """The op list of one CTA while its units' bodies run."""

    def __init__(self, cta: int):
        self.cta = cta
        self.unit: Any = None
        self.ops: List[GridOp] = []
        self.guards: List[Tuple[int, int]] = []

    def record(self, kind: str, resource: Any, slot: int, value: int, location: SourceLoc,
               acquire: bool = True) -> GridOp:
        op = GridOp(kind, resource, slot, value, location, self.cta, self.unit, len(self.ops), tuple(self.guards),
                    acquire)
        self.ops.append(op)
        return op


_ACTIVE: List[_GridCapture] = []


@contextmanager
def grid_capture(cta: int):
    """Record the GMEM hand-over calls of one CTA (used by the grid checker)."""
    cap = _GridCapture(cta)
    _ACTIVE.append(cap)
    try:
        yield cap
    finally:
        _ACTIVE.pop()


def _capture(name: str, verb: str) -> _GridCapture:
    if not _ACTIVE:
        fail("gmem hand-over", f"{name}.{verb}() called outside a CrossCtaProtocol body, so nothing records it",
             resource=name, expected="a call from the body of a CrossCtaProtocol the grid checker runs",
             fix="put the call in the protocol's body(grid, unit); inside a kernel bind the flag to its GMEM "
                 "tensor with warpsched.lower.gmem_flags.bind(flag, tensor) and call the bound flag")
    return _ACTIVE[-1]


def _index(name: str, verb: str, what: str, value: Any, limit: Optional[int], loc: SourceLoc) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail("gmem hand-over", f"{name}.{verb}() got {what}={value!r} ({type(value).__name__}), not an int",
             location=loc, resource=name, expected=f"an int {what} computed from the CTA's unit (tile or unit index)",
             fix=f"pass a Python int {what}: the protocol body runs on the scheduler's integer assignment")
    if value < 0 or (limit is not None and value >= limit):
        bound = f"0 <= {what} < {limit}" if limit is not None else f"{what} >= 0"
        fail("gmem hand-over", f"{name}.{verb}() got {what}={value}, outside the declared slots",
             location=loc, resource=name, expected=bound,
             fix=f"compute the {what} from the unit's tile index, or declare more slots on {name}")
    return value


@dataclass(kw_only=True, eq=False)
class _GridResource(MemoryResource):
    """``slots``: an int, or ``slots(ctas, units) -> int``, the number of slots a launch has (None: unchecked)."""

    slots: Any = None

    def slot_count(self, ctas: int, units: int) -> Optional[int]:
        if callable(self.slots):
            return self.slots(ctas, units)
        return self.slots

    def _record(self, kind: str, slot: Any, value: Any = 0, acquire: bool = True) -> GridOp:
        loc = caller_location()
        cap = _capture(self.display_name, kind)
        grid = getattr(cap, "grid", None)
        limit = self.slot_count(grid.ctas, grid.units) if grid is not None else None
        slot = _index(self.display_name, kind, "slot", slot, limit, loc)
        if kind in FLAG_VERBS:
            value = _index(self.display_name, kind, "value", value, None, loc)
        return cap.record(kind, self, slot, int(value), loc, bool(acquire))


class Ticket:
    """What ``flag.add()`` returned: the flag's value before the add, known only at run time."""

    def __init__(self, op: GridOp, capture: _GridCapture):
        self.op, self._capture = op, capture

    @contextmanager
    def when(self, old: int):
        """The calls in this block run only when the add returned ``old`` (``old = shares - 1``: the last one)."""
        if isinstance(old, bool) or not isinstance(old, int):
            fail("gmem hand-over", f"ticket.when({old!r}): the value the add returned is compared with an int",
                 resource=self.op.resource.display_name, expected="an int", fix="pass the count as an int")
        self._capture.guards.append((self.op.index, old))
        try:
            yield
        finally:
            self._capture.guards.pop()


@dataclass(kw_only=True, eq=False)
class GmemFlag(_GridResource):
    """A GMEM word per slot (zero at launch) that hands a tile from one CTA to another: ``signal`` /
    ``add`` release, ``wait`` / ``wait_at_least`` acquire (see the module docstring)."""

    def signal(self, slot, value=1) -> None:
        self._record("signal", slot, value)

    def wait(self, slot, value=1) -> None:
        self._record("wait", slot, value)

    def wait_at_least(self, slot, value=1) -> None:
        self._record("wait_at_least", slot, value)

    def reset(self, slot) -> None:
        self._record("reset", slot, 0)

    def add(self, slot, value=1, acquire: bool = True) -> Ticket:
        op = self._record("add", slot, value, acquire)
        return Ticket(op, _ACTIVE[-1])


@dataclass(kw_only=True, eq=False)
class GmemWorkspace(_GridResource):
    """Workspace tiles in GMEM (fp32 partials) that flags hand over: ``write`` / ``accumulate`` / ``read``."""

    def write(self, tile) -> None:
        self._record("write", tile)

    def accumulate(self, tile, atomic: bool = False) -> None:
        self._record("accumulate", tile, 1 if atomic else 0)

    def read(self, tile) -> None:
        self._record("read", tile)

    def write_or_accumulate(self, tile, first) -> None:
        """A chain's store: its first share writes the tile, the later ones accumulate into it (a
        declared accumulation the chain's flags order). One verb, as the kernel runs it: one store,
        whichever share it is (``first`` is a runtime value there)."""
        if first:
            self.write(tile)
        else:
            self.accumulate(tile)


@dataclass(frozen=True)
class GridPoint:
    """What a protocol body sees: its CTA, the grid size and the launch's unit count."""

    cta: int
    ctas: int
    units: int


@dataclass
class CrossCtaProtocol:
    """A cross-CTA hand-over: the units each CTA runs and what each unit does with flags and workspace.

    ``assignment(cta, ctas, units)`` -> the CTA's units in the order it runs them (any hashable values;
    the kernel's scheduler function). ``body(grid, unit)`` issues the unit's flag / workspace calls.
    ``grids`` and ``unit_counts`` are the launches the checker covers: every pair is explored;
    ``valid(ctas, units)`` (optional) leaves out pairs the kernel cannot launch (e.g. stream-K needs
    ctas <= tiles x K tiles). Beyond the largest ones the verdict says UNPROVEN. ``resident``: the waits
    assume every CTA of the grid is resident at once (a persistent grid); with False the checker
    also explores launches where CTAs start one at a time, in order, each after the previous ones end.
    """

    name: str
    assignment: Callable[[int, int, int], Sequence[Any]]
    body: Callable[[GridPoint, Any], None]
    grids: Sequence[int] = (1, 2, 3, 4)
    unit_counts: Sequence[int] = (1, 2, 3, 4)
    valid: Optional[Callable[[int, int], bool]] = None
    resident: bool = True
    location: SourceLoc = field(default_factory=caller_location)

    def launches(self) -> List[Tuple[int, int]]:
        out = []
        for ctas in self.grids:
            for units in self.unit_counts:
                if self.valid is None or self.valid(ctas, units):
                    out.append((ctas, units))
        return out

    def bound(self) -> str:
        return (f"grid sizes {_span(self.grids)} x unit counts {_span(self.unit_counts)}"
                + (" (launches the protocol's valid() admits)" if self.valid is not None else ""))


def _span(xs: Sequence[int]) -> str:
    xs = sorted(xs)
    if xs and xs == list(range(xs[0], xs[-1] + 1)) and len(xs) > 2:
        return f"{xs[0]}..{xs[-1]}"
    return ", ".join(str(x) for x in xs)


def capture_cta(protocol: CrossCtaProtocol, cta: int, ctas: int, units: int) -> List[GridOp]:
    """Run the protocol's assignment and body for one CTA of one launch; its ops in program order."""
    with grid_capture(cta) as cap:
        cap.grid = GridPoint(cta, ctas, units)
        for unit in protocol.assignment(cta, ctas, units):
            cap.unit = unit
            protocol.body(cap.grid, unit)
        if cap.guards:  # pragma: no cover - the context managers pop their guards
            cap.guards.clear()
    return cap.ops
