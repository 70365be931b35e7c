"""Runtime control flow from library code: dynamic ``for`` and ``if`` with explicit carries.

The CuTe DSL preprocessor rewrites loops and ifs only inside ``@cute.jit`` source; the
lowering is ordinary Python run at trace time, so it calls the same runtime helpers the
preprocessor emits (``loop_selector`` / ``if_executor``) and names the carried values
itself. A carried value is any DSL value (Numeric, PipelineState, ...) that the region
rebinds; values only read inside a region are captured by closure.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

from cutlass.base_dsl import ast_helpers as _ah


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
    vals = [env[k] for k in keys]

    def loop_body(i, *carried):
        inner = dict(env)
        inner.update(zip(keys, carried))
        body(i, inner)
        return [inner[k] for k in keys]

    kw = dict(write_args=vals, full_write_args_count=len(vals), write_args_names=[f"c{j}" for j in range(len(keys))])
    if unroll is None:
        kw["unroll"] = -1
    elif unroll > 1:
        kw["unroll"] = unroll
    else:
        kw["unroll"] = 1
    out = _ah.loop_selector(start, stop, step, **kw)(loop_body)
    env.update(zip(keys, _as_list(out, len(keys))))


def dyn_if(env: Dict[Any, Any], keys: Sequence[Any], pred, then: Callable[[Dict], None],
           otherwise: Callable[[Dict], None] = None) -> None:
    """``if pred: then(env) else: otherwise(env)`` as an ``scf.if``; the branches rebind ``keys``."""
    keys = list(keys)
    vals = [env[k] for k in keys]

    def branch(fn):
        def block(*carried):
            inner = dict(env)
            inner.update(zip(keys, carried))
            if fn is not None:
                fn(inner)
            return [inner[k] for k in keys]
        return block

    if isinstance(pred, bool):  # compile-time condition: plain Python
        if pred:
            then(env)
        elif otherwise is not None:
            otherwise(env)
        return
    out = _ah.if_executor(pred=pred, then_block=branch(then), else_block=branch(otherwise), write_args=vals,
                          full_write_args_count=len(vals), write_args_names=[f"c{j}" for j in range(len(keys))])
    env.update(zip(keys, _as_list(out, len(keys))))


def dyn_while(env: Dict[Any, Any], keys: Sequence[Any], cond: Callable[[Dict], Any],
              body: Callable[[Dict], None]) -> None:
    """``while cond(env): body(env)`` as an ``scf.while``; ``body`` rebinds ``keys``."""
    keys = list(keys)
    vals = [env[k] for k in keys]

    def bind(carried):
        inner = dict(env)
        inner.update(zip(keys, carried))
        return inner

    def before(*carried):
        return [cond(bind(carried)), list(carried)]

    def after(*carried):
        inner = bind(carried)
        body(inner)
        return [inner[k] for k in keys]

    out = _ah.while_executor(write_args=vals, full_write_args_count=len(vals), while_before_block=before,
                             while_after_block=after, write_args_names=[f"c{j}" for j in range(len(keys))])
    env.update(zip(keys, _as_list(out, len(keys))))
