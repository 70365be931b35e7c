"""What a domain loop iterates, and when its guards fire: the one definition.

The checker, the static checks and the lowering all read a ``domain_loop(start, end, step)``
through this module, so the program that is proven is the program that runs:

- **Trip count**: ``len(range(start, end, step))`` for compile-time bounds, whatever the sign
  of the step, steps that do not divide the span and empty ranges included.
- **Forward form**: a loop with a negative step runs exactly as many iterations as the forward
  loop ``range(end, start, -step)`` (``len(range(a, b, -s)) == len(range(b, a, s))``). The
  checker only needs the count and the zero-based iteration number, so it models a reversed
  loop as its forward form; the lowering emits the forward ``scf.for`` (MLIR's ``scf.for``
  needs a positive step) and maps each forward value ``j`` back to ``start + end - j``.
- **Guards** fire on the *zero-based iteration count* ``c`` (0 for the first iteration the
  loop runs), independent of the loop's concrete start and step, as ts_schedules.rst defines
  them: ``first_iter`` at ``c == 0``, ``last_iter`` at ``c == n - 1``, ``every(period, start)``
  at ``c >= start`` and ``(c - start) % period == 0``.

The predicates are written with ``&`` and comparisons only, so the same functions evaluate on
Python ints (checker, static checks, tests) and on CuTe DSL integers (the lowering).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple


def static_trip_count(start: Any, end: Any, step: Any) -> Optional[int]:
    """The number of iterations when all three bounds are ints (None otherwise, or for step 0)."""
    if not all(type(b) is int for b in (start, end, step)) or step == 0:
        return None
    return len(range(start, end, step))


def is_reversed(step: Any) -> bool:
    """A compile-time negative step (a runtime step is taken as positive: a grid stride)."""
    return type(step) is int and step < 0


def forward_form(start: Any, end: Any, step: Any) -> Tuple[Any, Any, Any]:
    """``(first, bound, stride)`` of the forward loop with the same iterations' count: the loop
    itself for a positive (or runtime) step, ``(end, start, -step)`` for a negative one."""
    if is_reversed(step):
        return end, start, -step
    return start, end, step


def value_of_forward(j: Any, start: Any, end: Any, step: Any) -> Any:
    """The loop value at forward value ``j`` of ``forward_form``: ``j`` itself for a forward
    loop; ``start + end - j`` for a reversed one (``j = end + c * |step|`` gives
    ``start - c * |step|``, the c-th value of ``range(start, end, step)``)."""
    if is_reversed(step):
        return start + end - j
    return j


def is_nonempty(start: Any, end: Any, step: Any) -> Any:
    """True when the loop runs at least once (a Python bool or a DSL Boolean)."""
    return start > end if is_reversed(step) else start < end


def loop_ran_none(start: Any, end: Any, step: Any) -> Any:
    """The loop ran no iteration (an ``if_empty()`` block's condition): ``is_nonempty`` negated as a comparison,
    one expression for Python ints (a bool) and DSL integers (a Boolean; ``not`` does not apply to a traced
    value)."""
    return start <= end if is_reversed(step) else start >= end


def count_of(value: Any, start: Any, step: Any) -> Any:
    """The zero-based iteration count of loop value ``value`` (exact: ``value - start`` is a
    multiple of ``step``, so the rounding of a negative division never matters)."""
    count = value - start
    if type(step) is int and step == 1:
        return count
    if type(step) is int and step == -1:
        return start - value
    return count // step


def reached(value: Any, start: Any, step: Any, k: int) -> Any:
    """``count_of(value) >= k`` without a division: the value has passed ``start + k * step``
    in the direction of the step."""
    mark = start + k * step
    return value <= mark if is_reversed(step) else value >= mark


def is_last_value(value: Any, end: Any, step: Any) -> Any:
    """``value`` is the loop's last value: the next one would be past ``end``."""
    nxt = value + step
    return nxt <= end if is_reversed(step) else nxt >= end


def every_fires(count: Any, period: int, start: int) -> Any:
    """``every(period, start)`` at zero-based iteration ``count``."""
    if period == 1:
        return count >= start
    return ((count % period) == (start % period)) & (count >= start)


def guard_on_value(kind: str, period: int, start: int, value: Any, loop_start: Any, loop_end: Any, step: Any, *,
                   peeled: Optional[bool] = None, min_count: int = 0) -> Any:
    """The lowering's form of ``guard_fires``: the guard at loop *value* ``value`` (an int or a DSL
    integer) of ``range(loop_start, loop_end, step)``, without the trip count. ``peeled``: True in a
    peeled first iteration, False in the loop after it, None when unknown; ``min_count``: the
    smallest zero-based count the code runs at (an every(1, start) known to hold is True)."""
    if kind == "first_iter":
        return peeled if peeled is not None else value == loop_start
    if kind == "last_iter":
        return is_last_value(value, loop_end, step)
    if peeled:  # the peeled iteration is count 0
        return start == 0
    if period == 1:
        return True if min_count >= start else reached(value, loop_start, step, start)
    return every_fires(count_of(value, loop_start, step), period, start)


def guard_fires(kind: str, count: int, trip: int, period: int = 1, start: int = 0) -> bool:
    """Whether an iteration guard runs its block at zero-based ``count`` of a ``trip``-iteration
    loop (Python ints: the static checks and the tests' interpreters)."""
    if kind == "first_iter":
        return count == 0
    if kind == "last_iter":
        return count == trip - 1
    if kind == "every":
        return bool(every_fires(count, max(1, period), start))
    raise ValueError(f"not an iteration guard: {kind!r}")


ITERATION_GUARDS = ("first_iter", "last_iter", "every")
