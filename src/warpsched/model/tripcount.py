"""Trip counts the checker knows: exact ints, and runtime values with declared facts.

A ``domain_loop`` end (or a ``work_tile_loop`` tile count) is read by the checker as a *set*
of possible values, and the verdict holds for every value in it:

- a Python ``int`` is that exact count (the kernel is compiled with it);
- a :class:`TripCount` is every value of a runtime symbol that its declared facts allow:
  ``value >= min`` and ``value % divisibility == 0`` (what ``cute.sym_int32(divisibility=...)``
  says of a shape). ``K + 1`` and ``K - 1`` are the same symbol with an offset, so a producer
  that loops ``K`` times and a consumer that loops ``K + 1`` times are checked against one K;
- any other runtime value (a DSL ``Int32`` passed as is, a per-tile domain provider) is every
  count >= 1.

In a kernel, wrap the runtime value once and use the wrapper everywhere::

    K = trip_count("k_tiles", k_tiles, divisibility=4)     # k_tiles: a cutlass.Int32
    with domain_loop(0, K): ...                           # the producer
    with domain_loop(0, K + 1): ...                       # a consumer with one prefetched tile

On the CPU, declare it without a value: ``trip_count("k_tiles", divisibility=4)``.
"""
from __future__ import annotations

from typing import Any, Optional

from .source import SourceLoc, caller_location


class TripCount:
    """A runtime loop bound with declared facts (see the module docstring).

    ``root`` is the declared symbol, ``offset`` the integer added to it: ``K + 1`` has the root
    ``K`` and offset 1. ``value`` is the runtime value the kernel uses (None on the CPU)."""

    __slots__ = ("name", "value", "min", "divisibility", "root", "offset", "location")

    def __init__(self, name: str, value: Any = None, *, min: int = 1, divisibility: int = 1,
                 _root: Optional["TripCount"] = None, _offset: int = 0, _location: Optional[SourceLoc] = None):
        if _root is None:
            if not isinstance(name, str) or not name:
                raise TypeError("trip_count(name, ...): name must be a non-empty string")
            if type(min) is not int or type(divisibility) is not int or divisibility < 1:
                raise TypeError(f"trip_count({name!r}): min must be an int and divisibility an int >= 1 "
                                f"(got min={min!r}, divisibility={divisibility!r})")
        self.name = name
        self.value = value
        self.min = min
        self.divisibility = divisibility
        self.root = self if _root is None else _root
        self.offset = _offset
        self.location = _location if _location is not None else caller_location()

    # ------------------------------------------------------------------ arithmetic
    def _shifted(self, k: int) -> "TripCount":
        if type(k) is not int:
            return NotImplemented
        r = self.root
        return TripCount(r.name, r.value, min=r.min, divisibility=r.divisibility, _root=r,
                         _offset=self.offset + k, _location=self.location)

    def __add__(self, k):
        return self._shifted(k)

    __radd__ = __add__

    def __sub__(self, k):
        return self._shifted(-k) if type(k) is int else NotImplemented

    def _unsupported(self, *_):
        raise TypeError(f"trip count {self!r} (declared at {self.location}) supports only + and - of an int; "
                        f"for a scaled or derived count declare its own trip_count(name, value, min=..., "
                        f"divisibility=...) with the facts it has")

    __mul__ = __rmul__ = __floordiv__ = __truediv__ = __mod__ = __rsub__ = __neg__ = _unsupported

    def __index__(self):
        """``range(K)`` / ``int(K)`` on a runtime count: say what a schedule writes instead."""
        raise TypeError(f"trip count {self!r} (declared at {self.location}) is a runtime value, not a Python int: "
                        f"a schedule loops over it with `with domain_loop(0, {self!r}):`, not `for _ in range(...)` "
                        "(a Python loop would be unrolled while the schedule is captured)")

    __int__ = __index__

    # ------------------------------------------------------------------ queries
    @property
    def runtime_value(self) -> Any:
        """The value the kernel computes with: the root's runtime value plus the offset."""
        v = self.root.value
        if v is None:
            return None
        return v + self.offset if self.offset else v

    @property
    def exact(self) -> Optional[int]:
        """The count when the runtime value is a plain int (then the set is that one value)."""
        v = self.runtime_value
        return v if type(v) is int else None

    def describe(self) -> str:
        r = self.root
        facts = [f"{r.name} >= {r.min}"]
        if r.divisibility > 1:
            facts.append(f"{r.name} % {r.divisibility} == 0")
        return ", ".join(facts)

    def __repr__(self) -> str:
        base = self.root.name
        if self.offset:
            base += f" {'+' if self.offset > 0 else '-'} {abs(self.offset)}"
        return base


def trip_count(name: str, value: Any = None, *, min: int = 1, divisibility: int = 1) -> TripCount:
    """Declare a runtime loop bound and the facts the checker may assume about it.

    ``value``: the runtime value inside a kernel (e.g. ``cute.size(mA, mode=[1]) // 64``), or
    None on the CPU; a plain int makes the count exact. ``min``: the smallest possible value.
    ``divisibility``: every possible value is a multiple of it. The checker proves the schedule
    for every value allowed, and a kernel whose runtime value breaks a declared fact is outside
    that proof (the fact is the user's promise, as ``cute.sym_int32(divisibility=...)`` is)."""
    return TripCount(name, value, min=min, divisibility=divisibility, _location=caller_location())


def runtime_bound(b: Any) -> Any:
    """What the lowering computes with: a TripCount's runtime value, anything else as is."""
    if isinstance(b, TripCount):
        v = b.runtime_value
        if v is None:
            raise ValueError(f"trip count {b!r} (declared at {b.location}) has no runtime value: "
                             f"pass value= to trip_count() inside the kernel")
        return v
    return b
