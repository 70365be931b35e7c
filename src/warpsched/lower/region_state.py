"""State that work bodies keep in their resources' attributes, across the runtime regions the lowering opens.

A work body may keep per-tile state on its resource (``self.scale_d = cutlass.Boolean(False)`` in a tile's
setup work, ``self.scale_d = True`` after the first MMA of a K loop). The lowering's loops and ifs are
``scf`` regions traced once, so without help such state would not reach the next iteration: the traced
body would read the loop's entry value in every iteration (an accumulator cleared at every K step), and a
DSL value created inside a region would escape it (an MLIR dominance error far from its cause).

While ``carrying(resources)`` is active, every region ``lower.dsl`` opens:

- carries each attribute holding a CuTe DSL value (a ``cutlass.Numeric`` scalar, a tensor, a pointer, ...)
  through the region as ``scf`` values: the body sees the carried value, what the body leaves there is
  yielded (a Python scalar converted to the scalar attribute's type), and the attribute holds the region's
  result afterwards. This is the semantics CuTe DSL gives an object carried through a runtime ``for`` /
  ``if`` (a view a work advances each step reaches the next step; a work's own ``if`` that re-yields the
  resource's fields yields them unchanged), and NVIDIA's TS tutorials rely on it. A value whose MLIR type
  changes inside the region (a view that loses its alignment) is refused: no ``scf`` value can carry it;
- takes a plain Python scalar in a field the resource's dataclass declares as a CuTe DSL scalar type
  (``scale_d: cutlass.Boolean = field(init=False, default=None)`` set to ``False`` per tile, the TS
  documentation's own per-tile state) as that type at the region's entry, and carries it: the
  declaration says what the value is, and without it the K loop would read ``False`` at every step (NVIDIA's
  TS 4.8.1 compiles exactly that: the loop body traced once with ``False``). The declaration holds in every
  region, one that only reads the field included, as for a ``@cute.jit`` argument annotated with a DSL type:
  keep compile-time configuration (a tile size) in a field annotated ``int`` or ``cutlass.Constexpr``;
- refuses any other plain Python scalar (bool / int / float) that a loop body or a runtime ``if`` changes,
  to another Python value or to a runtime one (``self.count = self.count + stage_info.loop_offset``): a body
  traced once cannot give later iterations (or the untaken branch, or the code after the region) the new
  value, and running on with the entry value would compute something other than the program says;
- drops DSL values the region bound to attributes that held no DSL value at its entry: they are defined
  inside the region and invalid outside it.

A user's dataclass a resource field holds (``self.totals = Totals(count=cutlass.Int32(0))``) is treated like
the resource, three levels deep, as CuTe DSL flattens a dataclass it carries.

Not seen: an attribute that holds ``None`` at a loop's entry and a DSL value after a body sets it (per-tile
state set in each tile before use, the common case, is right): it goes back to ``None`` after the region,
and a later iteration that tests ``is None`` before setting it sees ``None``. Declare such state with its
DSL type and a value, or hold it as a DSL value from the start.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import typing
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import cutlass
from cutlass._mlir import ir

from . import LoweringError

_HOLDERS: List[Tuple[Any, ...]] = []  # stack: the objects whose attributes regions carry
# (id(holder), attribute) -> (task, schedule step) of the work call that last set it: what a refusal names
_WRITERS: Dict[Tuple[int, str], Tuple[Any, Any]] = {}


@contextlib.contextmanager
def carrying(holders: Iterable[Any]):
    """Regions opened inside the block carry the DSL values held in these objects' attributes (and in the user's
    dataclasses those hold)."""
    _HOLDERS.append(tuple(h for h in holders if isinstance(getattr(h, "__dict__", None), dict)))
    _WRITERS.clear()
    try:
        yield
    finally:
        _HOLDERS.pop()
        _WRITERS.clear()


@contextlib.contextmanager
def writing(resource: Any, task: Any, step: Any):
    """Around a work call: remember the schedule call that last set each attribute of its resource."""
    before = dict(vars(resource)) if isinstance(getattr(resource, "__dict__", None), dict) else None
    try:
        yield
    finally:
        if before is not None:
            for n, v in vars(resource).items():
                if n not in before or before[n] is not v:
                    _WRITERS[(id(resource), n)] = (task, step)


def _is_dsl_value(v: Any) -> bool:
    return hasattr(type(v), "__extract_mlir_values__")


def _is_python_scalar(v: Any) -> bool:
    return type(v) in (bool, int, float)


_DECLARED: Dict[type, Dict[str, type]] = {}  # per resource class: field name -> declared DSL scalar type


def _declared_dsl_types(cls: type) -> Dict[str, type]:
    """The dataclass fields of ``cls`` annotated with a CuTe DSL scalar type (``cutlass.Boolean``, ...)."""
    if cls not in _DECLARED:
        found: Dict[str, type] = {}
        if dataclasses.is_dataclass(cls):
            try:  # string annotations (``from __future__ import annotations``) resolved in their module
                hints = typing.get_type_hints(cls)
            except Exception:  # noqa: BLE001 - an unresolvable annotation declares nothing we can use
                hints = {}
            for f in dataclasses.fields(cls):
                ann = hints.get(f.name, f.type)
                if isinstance(ann, str):
                    ann = _resolve(cls, ann)
                if isinstance(ann, type) and issubclass(ann, cutlass.Numeric):
                    found[f.name] = ann
        _DECLARED[cls] = found
    return _DECLARED[cls]


def _resolve(cls: type, text: str) -> Optional[type]:
    """A string annotation, in its class's module (``cutlass`` known even where the module imports it locally)."""
    module = sys.modules.get(cls.__module__)
    names = {"cutlass": cutlass, **(vars(module) if module else {})}
    try:
        return eval(text, names, {})  # noqa: S307 - the class's own annotation
    except Exception:  # noqa: BLE001
        return None


def _promote_declared(holder: Any) -> None:
    """Python scalars in fields declared as a DSL scalar type become that type (see the module's docstring)."""
    for name, dsl_type in _declared_dsl_types(type(holder)).items():
        v = vars(holder).get(name)
        if _is_python_scalar(v):
            try:
                setattr(holder, name, dsl_type(v))
            except Exception:  # noqa: BLE001 - left as is: the body check names it if a region changes it
                pass


class RegionState:
    """The holders' attributes at a region's entry: what to carry, and what to check at its end."""

    def __init__(self, kind: str):
        self.kind = kind  # "loop" or "if": what the refusal names
        found = _with_nested(_HOLDERS[-1] if _HOLDERS else ())
        self.holders = tuple(obj for obj, _, _ in found)
        self.labels = {id(obj): (label, resource) for obj, label, resource in found}
        for h in self.holders:
            _promote_declared(h)
        self.entry: Dict[int, Dict[str, Any]] = {id(h): dict(vars(h)) for h in self.holders}
        self.places: List[Tuple[Any, str]] = [(h, n) for h in self.holders for n, v in vars(h).items()
                                              if _is_dsl_value(v) and not isinstance(v, type)]
        self.carried = {(id(h), n) for h, n in self.places}

    def bind(self, carried: Sequence[Any]) -> None:
        """Inside the region: the attributes hold the region's carried values."""
        for (h, n), v in zip(self.places, carried):
            setattr(h, n, v)

    def yielded(self) -> List[Any]:
        """At the end of a region's body: the carried attributes' values, as their entry types."""
        out = []
        for (h, n), before in zip(self.places, self.entry_values()):
            v = getattr(h, n, None)
            if not isinstance(before, cutlass.Numeric):
                if _ir_types(v) != _ir_types(before):
                    raise self._refusal(h, n, f"is {_describe(before)} at the region's entry and {_describe(v)} "
                                         "at its end; a value carried through a runtime loop or if keeps "
                                         "its type", _VIEW_FIX)
                out.append(v)
                continue
            if not isinstance(v, cutlass.Numeric) or type(v) is not type(before):
                try:
                    v = type(before)(v)
                except Exception as e:  # noqa: BLE001 - named below
                    raise self._refusal(h, n, f"holds {type(before).__name__} at the region's entry and "
                                         f"{type(v).__name__} at its end ({e})",
                                   "keep one CuTe DSL type for the attribute") from e
            out.append(v)
        return out

    def entry_values(self) -> List[Any]:
        return [self.entry[id(h)][n] for h, n in self.places]

    def _refusal(self, holder: Any, attr: str, what: str, fix: str) -> LoweringError:
        label, resource = self.labels.get(id(holder), (repr(type(holder).__name__), holder))
        where = f"resource {label}" if "." not in label else f"{label} (a dataclass in resource {label.split('.')[0]})"
        task, step = _WRITERS.get((id(holder), attr), (None, None))
        if step is not None:
            what += f" (last set by {getattr(resource, 'name', label)}.{step.method}())"
        return LoweringError(f"attribute {attr!r} of {where} {what}", resource=resource, fix=fix, task=task,
                             location=getattr(step, "location", None))

    def check_body(self) -> None:
        """At the end of a body: refuse Python scalars the body changed (see the module's docstring)."""
        for h in self.holders:
            before = self.entry[id(h)]
            for n, v in vars(h).items():
                if (id(h), n) in self.carried or n not in before:
                    continue
                old = before[n]
                if not _is_python_scalar(old):
                    continue
                where = "a loop body, which is traced once" if self.kind == "loop" else \
                    "a runtime if, whose untaken branch would keep the old value"
                if isinstance(v, cutlass.Numeric) and not _is_constant(v, old):  # a runtime value, where the
                    # entry held a constant (a work's own runtime if re-yields unchanged fields as constants)
                    raise self._refusal(h, n, f"changes from the Python {old!r} to a runtime {type(v).__name__} inside "
                                         f"{where}; only a DSL value at the region's entry can be carried",
                                   f"declare the field with its DSL type ({n}: cutlass.{_dsl_name(old)} = ...) "
                                   f"or hold it as a CuTe DSL value from the start (cutlass.{_dsl_name(old)}({old!r}))")
                if _is_python_scalar(v) and v != old:
                    raise self._refusal(h, n, f"changes from {old!r} to {v!r} inside {where}",
                                   f"declare the field with its DSL type ({n}: cutlass.{_dsl_name(old)} = ...) "
                                   f"or hold it as a CuTe DSL value (cutlass.{_dsl_name(old)}({old!r})) so the "
                                   "region carries it, or derive it from stage_info.loop_offset")

    def finish(self, results: Sequence[Any]) -> None:
        """After the region: carried attributes hold its results; other DSL values it rebound are put back."""
        self.restore_uncarried()
        for (h, n), v in zip(self.places, results):
            setattr(h, n, v)

    def restore_uncarried(self) -> None:
        """Put back attributes the region gave a DSL value that none carried (it is defined inside the region)."""
        for h in self.holders:
            before = self.entry[id(h)]
            d = vars(h)
            for n in list(d):
                if (id(h), n) in self.carried:
                    continue
                v = d[n]
                if n in before and v is before[n]:
                    continue
                if _is_dsl_value(v):  # defined inside the region: its entry value is the one valid here
                    if n in before:
                        d[n] = before[n]
                    else:
                        del d[n]


_VIEW_FIX = ("compute the value from stage_info inside the work that uses it (e.g. "
            "cute.domain_offset((stage_info.loop_offset,), self.base) rather than advancing self.view each "
            "step), or keep what changes as a CuTe DSL scalar (an Int32 offset)")


def _ir_types(v: Any) -> Optional[List[str]]:
    """The MLIR types a DSL value carries through a region (None: not a DSL value)."""
    if not _is_dsl_value(v):
        return None
    return [str(x.type) for x in v.__extract_mlir_values__()]


def _describe(v: Any) -> str:
    types = _ir_types(v)
    if types is None:
        return f"a {type(v).__name__} ({v!r})" if _is_python_scalar(v) or v is None else f"a {type(v).__name__}"
    return f"a {type(v).__name__} of type {', '.join(types)}"


def _is_constant(v: Any, old: Any) -> bool:
    """Whether DSL scalar ``v`` is the constant ``old``: an ``arith.constant``, or an ``scf.if`` result that
    every branch yields as that constant (CuTe DSL's own ``if`` re-yields an object's unchanged fields)."""
    try:
        return _constant_of(v.ir_value(), depth=0) == old
    except Exception:  # noqa: BLE001 - an IR shape not read here is not a known constant
        return False


_NOT_CONSTANT = object()


def _constant_of(value: Any, depth: int) -> Any:
    op = value.owner
    op = getattr(op, "operation", op)
    if depth > 16:
        return _NOT_CONSTANT
    if op.name == "arith.constant":
        attr = op.attributes["value"]
        got = attr.value
        return bool(got) if str(value.type) == "i1" else got
    if op.name == "scf.if":
        index = ir.OpResult(value).result_number
        seen = [_constant_of(list(region.blocks[0].operations)[-1].operands[index], depth + 1)
                for region in op.regions if len(region.blocks)]
        if seen and all(x is not _NOT_CONSTANT and x == seen[0] for x in seen):
            return seen[0]
    return _NOT_CONSTANT


def _dsl_name(v: Any) -> str:
    return {bool: "Boolean", int: "Int32", float: "Float32"}[type(v)]


_NESTING = 3  # dataclass levels below a resource whose fields are carried


def _with_nested(resources: Sequence[Any]) -> List[Tuple[Any, str, Any]]:
    """(object, label, resource): the resources, and the user's dataclass instances their fields hold (as CuTe
    DSL flattens a dataclass it carries), ``_NESTING`` levels deep."""
    out: List[Tuple[Any, str, Any]] = []
    seen = set()

    def visit(obj, label, resource, depth):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        out.append((obj, label, resource))
        if depth == _NESTING:
            return
        for n, v in list(vars(obj).items()):
            if _is_user_dataclass(v):
                visit(v, f"{label}.{n}", resource, depth + 1)

    for r in resources:
        visit(r, repr(getattr(r, "name", type(r).__name__)), r, 0)
    return out


def _is_user_dataclass(v: Any) -> bool:
    """A dataclass instance of the user's (not warpsched's or CuTe DSL's, not a DSL value) with attributes."""
    module = type(v).__module__ or ""
    return (dataclasses.is_dataclass(v) and not isinstance(v, type) and not _is_dsl_value(v)
            and isinstance(getattr(v, "__dict__", None), dict)
            and not module.startswith(("warpsched.", "cutlass.", "cutlass_dsl")))
