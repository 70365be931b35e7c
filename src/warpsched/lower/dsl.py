"""Runtime control flow from library code: dynamic ``for`` and ``if`` with explicit carries.

The CuTe DSL preprocessor rewrites loops and ifs only inside ``@cute.jit`` source; the
lowering is ordinary Python run at trace time, so it calls the same runtime helpers the
preprocessor emits (``loop_selector`` / ``if_executor``) and names the carried values
itself. A carried value is any DSL value (Numeric, PipelineState, ...) that the region
rebinds; values only read inside a region are captured by closure. Resource attributes that work
bodies keep state in are carried too (``region_state``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

from cutlass.base_dsl import ast_helpers as _ah

from .region_state import RegionState


def _as_list(out: Any, n: int) -> List[Any]:
    if n == 0:
        return []
    if n == 1:
        return [out[0] if isinstance(out, list) else out]
    return list(out)


class _Carry:
    """A region's carried values: the ``env`` entries it rebinds, then the resources' DSL values
    (``region_state``), in the order the ``scf`` op takes and yields them."""

    def __init__(self, env: Dict[Any, Any], keys: Sequence[Any], kind: str):
        self.env, self.keys, self.state = env, list(keys), RegionState(kind)
        self.values = [env[k] for k in self.keys] + self.state.entry_values()

    def write_args(self) -> Dict[str, Any]:
        return dict(write_args=self.values, full_write_args_count=len(self.values),
                    write_args_names=[f"c{j}" for j in range(len(self.values))])

    def enter(self, carried: Sequence[Any]) -> Dict[Any, Any]:
        """The body's environment, and the resources' attributes, from the region's carried values."""
        inner = dict(self.env)
        inner.update(zip(self.keys, carried))
        self.state.bind(carried[len(self.keys):])
        return inner

    def leave(self, inner: Dict[Any, Any]) -> List[Any]:
        """What the body yields."""
        self.state.check_body()
        return [inner[k] for k in self.keys] + self.state.yielded()

    def finish(self, out: Any) -> None:
        """After the region: ``env`` and the attributes hold its results."""
        out = _as_list(out, len(self.values))
        self.env.update(zip(self.keys, out))
        self.state.finish(out[len(self.keys):])


def dyn_for(env: Dict[Any, Any], keys: Sequence[Any], start, stop, step, body: Callable[[Any, Dict], None],
            *, unroll: int = 1) -> None:
    """``for i in range(start, stop, step)`` as an ``scf.for``; ``body(i, env)`` rebinds ``keys``."""
    c = _Carry(env, keys, "loop")

    def loop_body(i, *carried):
        inner = c.enter(carried)
        body(i, inner)
        return c.leave(inner)

    kw = c.write_args()
    if unroll is None:
        kw["unroll"] = -1
    elif unroll > 1:
        kw["unroll"] = unroll
    else:
        kw["unroll"] = 1
    c.finish(_ah.loop_selector(start, stop, step, **kw)(loop_body))


def dyn_if(env: Dict[Any, Any], keys: Sequence[Any], pred, then: Callable[[Dict], None],
           otherwise: Callable[[Dict], None] = None) -> None:
    """``if pred: then(env) else: otherwise(env)`` as an ``scf.if``; the branches rebind ``keys``."""
    if isinstance(pred, bool):  # compile-time condition: plain Python
        if pred:
            then(env)
        elif otherwise is not None:
            otherwise(env)
        return
    c = _Carry(env, keys, "if")

    def branch(fn):
        def block(*carried):
            inner = c.enter(carried)
            if fn is not None:
                fn(inner)
            out = c.leave(inner)
            c.state.restore_uncarried()  # the other branch starts from the entry values
            return out
        return block

    c.finish(_ah.if_executor(pred=pred, then_block=branch(then), else_block=branch(otherwise), **c.write_args()))


def dyn_while(env: Dict[Any, Any], keys: Sequence[Any], cond: Callable[[Dict], Any],
              body: Callable[[Dict], None]) -> None:
    """``while cond(env): body(env)`` as an ``scf.while``; ``body`` rebinds ``keys``."""
    c = _Carry(env, keys, "loop")

    def before(*carried):
        return [cond(c.enter(carried)), list(carried)]

    def after(*carried):
        inner = c.enter(carried)
        body(inner)
        return c.leave(inner)

    c.finish(_ah.while_executor(while_before_block=before, while_after_block=after, **c.write_args()))
