"""Porting surface: the parts of NVIDIA's TS API that exist so a TS program compiles unchanged.

A TS kernel ports by changing its ``from cutlass.experimental.task_scheduling... import``
lines to ``from warpsched import ...``. Most of the TS surface is warpsched's own model; this
package holds what exists only for that promise, so it stays small and in one place:

* keywords warpsched accepts and ignores (``IGNORED``), each with the reason it has no effect,
  and the ones it accepts but refuses with a named error when set (``REFUSED``);
* ``TileSchedulerConfig`` factories fed with CuTe DSL tile-scheduler params (``tile_scheduler``);
* the DSL-side adapters used by the lowering (``compat/dsl.py``; that module imports CuTe DSL,
  this one does not).

Every deliberate difference a porting user meets is listed in ``docs/porting.md``.
"""
from __future__ import annotations

import re
from typing import Any, Dict

from ..errors import Finding, ScheduleError
from ..model.source import PORT_MARKER, caller_location

_REFERENCE_IMPORT = re.compile(r"from\s+cutlass\.experimental\.task_scheduling(?:\.[A-Za-z_]\w*)*\s+import\b")


def port_imports(source: str) -> str:
    """The whole port, as text: every ``from cutlass.experimental.task_scheduling[.module] import``
    becomes ``from warpsched import`` (in place, so line numbers do not move). The first one also
    sets ``__warpsched_port__ = True`` on the same line: in that module a ``domain_loop`` without
    ``unroll=`` takes the reference's default (None, the compiler unrolls), so the port emits the
    code the reference did (model/schedule.py)."""
    first = [True]

    def sub(m):
        if first[0] and _at_module_level(source, m.start()):
            first[0] = False
            return f"{PORT_MARKER} = True; from warpsched import"
        return "from warpsched import"
    return _REFERENCE_IMPORT.sub(sub, source)


def _at_module_level(source: str, pos: int) -> bool:
    """The import starts a line with no indentation (a module-level statement)."""
    return pos == 0 or source[pos - 1] == "\n"


# keyword -> why warpsched has no use for it (accepted, documented, no effect)
IGNORED: Dict[str, Dict[str, str]] = {
    "Task": {
        "debug_print": "per-stage runtime prints of the reference's task runtime; warpsched prints the "
                       "schedule table and checker verdict at TaskManager(...) instead",
        "iket_enable_profiling": "the reference's in-kernel profiling timestamps; not implemented",
        "iket_profiling_stages": "the reference's in-kernel profiling timestamps; not implemented",
        "iket_profiling_resources": "the reference's in-kernel profiling timestamps; not implemented",
    },
    "TaskManager": {
        "iket_enable_profiling": "the reference's in-kernel profiling timestamps; not implemented",
        "iket_profiling_stages": "the reference's in-kernel profiling timestamps; not implemented",
        "iket_profiling_resources": "the reference's in-kernel profiling timestamps; not implemented",
        "dma_consumer_release_labels": "labels that exempt work calls from the reference's DMA-ordering "
                                       "check; warpsched's DMA-ordering check reads the schedule itself",
    },
}

# keyword -> why a non-default value cannot be honoured (accepted when left at its default)
REFUSED: Dict[str, Dict[str, str]] = {
    "Task": {
        "run_only_on_cta_id": "running a task on one CTA of a cluster only changes the barrier protocol "
                              "of every pipeline it touches, which warpsched's checker does not model",
    },
}


def take_extra_keywords(owner: str, kwargs: Dict[str, Any], name: str = "") -> None:
    """Consume the reference-only keywords of ``owner``; anything else is a TypeError (as a Python
    call with a misspelled keyword would be), naming the call site."""
    ignored, refused = IGNORED.get(owner, {}), REFUSED.get(owner, {})
    for key in list(kwargs):
        value = kwargs.pop(key)
        if key in ignored:
            continue
        if key in refused:
            if value is None:
                continue
            raise ScheduleError(Finding(
                check="porting", message=f"{owner}({key}={value!r}) is not supported by warpsched",
                task=name or None, location=caller_location(), expected=f"{key}=None",
                fix=f"drop {key}=; reason: {refused[key]}"))
        known = ", ".join(sorted(set(ignored) | set(refused)))
        raise TypeError(f"{owner}() got an unexpected keyword argument {key!r} (at {caller_location()}; "
                        f"reference-TS keywords accepted here: {known})")


def tile_scheduler_fields(params: Any) -> Dict[str, Any]:
    """``TileSchedulerConfig`` fields from a CuTe DSL ``PersistentTileSchedulerParams`` (or the CLC
    variant): the tile counts and cluster shape are read by attribute, so no DSL import is needed."""
    ntile = getattr(params, "problem_shape_ntile_mnl", None)
    cluster = getattr(params, "cluster_shape_mn", None)
    out: Dict[str, Any] = {"tile_scheduler_params": params}
    if ntile is not None:
        out["num_tiles"] = tuple(ntile) if isinstance(ntile, (tuple, list)) else ntile
    if cluster is not None:
        out["cluster_shape_mn"] = tuple(cluster)[:2]
    return out
