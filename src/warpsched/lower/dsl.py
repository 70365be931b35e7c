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


def dyn_for(env: Dict[Any, Any], keys: Sequence[Any], start, stop, step, body: Callable[[Any, Dict], None],
            *, unroll: int = 1) -> None:
    """``for i in range(start, stop, step)`` as an ``scf.for``; ``body(i, env)`` rebinds ``keys``."""
    keys = list(keys)
    state = RegionState("loop")
    vals = [env[k] for k in keys] + state.values()

    def loop_body(i, *carried):
        inner = dict(env)
        inner.update(zip(keys, carried))
        state.bind(carried[len(keys):])
        body(i, inner)
        state.check_body()
        return [inner[k] for k in keys] + state.yielded()

    kw = dict(write_args=vals, full_write_args_count=len(vals), write_args_names=[f"c{j}" for j in range(len(vals))])
    if unroll is None:
        kw["unroll"] = -1
    elif unroll > 1:
        kw["unroll"] = unroll
    else:
        kw["unroll"] = 1
    out = _as_list(_ah.loop_selector(start, stop, step, **kw)(loop_body), len(vals))
    env.update(zip(keys, out))
    state.finish(out[len(keys):])


def dyn_if(env: Dict[Any, Any], keys: Sequence[Any], pred, then: Callable[[Dict], None],
           otherwise: Callable[[Dict], None] = None) -> None:
    """``if pred: then(env) else: otherwise(env)`` as an ``scf.if``; the branches rebind ``keys``."""
    keys = list(keys)
    if isinstance(pred, bool):  # compile-time condition: plain Python
        if pred:
            then(env)
        elif otherwise is not None:
            otherwise(env)
        return
    state = RegionState("if")
    vals = [env[k] for k in keys] + state.values()

    def branch(fn):
        def block(*carried):
            inner = dict(env)
            inner.update(zip(keys, carried))
            state.bind(carried[len(keys):])
            if fn is not None:
                fn(inner)
            state.check_body()
            out = [inner[k] for k in keys] + state.yielded()
            state.restore_uncarried()  # the other branch starts from the entry values
            return out
        return block

    out = _as_list(_ah.if_executor(pred=pred, then_block=branch(then), else_block=branch(otherwise),
                                   write_args=vals, full_write_args_count=len(vals),
                                   write_args_names=[f"c{j}" for j in range(len(vals))]), len(vals))
    env.update(zip(keys, out))
    state.finish(out[len(keys):])


def dyn_while(env: Dict[Any, Any], keys: Sequence[Any], cond: Callable[[Dict], Any],
              body: Callable[[Dict], None]) -> None:
    """``while cond(env): body(env)`` as an ``scf.while``; ``body`` rebinds ``keys``."""
    keys = list(keys)
    state = RegionState("loop")
    vals = [env[k] for k in keys] + state.values()

    def bind(carried):
        inner = dict(env)
        inner.update(zip(keys, carried))
        state.bind(carried[len(keys):])
        return inner

    def before(*carried):
        return [cond(bind(carried)), list(carried)]

    def after(*carried):
        inner = bind(carried)
        body(inner)
        state.check_body()
        return [inner[k] for k in keys] + state.yielded()

    out = _as_list(_ah.while_executor(write_args=vals, full_write_args_count=len(vals), while_before_block=before,
                                      while_after_block=after,
                                      write_args_names=[f"c{j}" for j in range(len(vals))]), len(vals))
    env.update(zip(keys, out))
    state.finish(out[len(keys):])
