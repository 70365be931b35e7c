"""Trace-time WGMMA accounting: a work that leaves a wgmma commit group in flight must say so.

``WorkAttr.WGMMA`` tells the checker that a work's reads of its stage (and of the stages its
``WGMMA_OPERAND`` declarations name) go on after the work returns, until a ``wgmma.wait_group`` retires
the group. A work that issues and commits wgmma but is not marked so is modelled as reading only while
it runs, so a release before the retire, which races with the asynchronous reads on the GPU, would be
proven SAFE. While a kernel is traced, ``warpgroup.commit_group`` / ``wait_group`` are watched, and a
work that returns with a group committed and not waited to 0 inside it must carry ``WorkAttr.WGMMA``; a
``WGMMA_WAIT`` work must wait for no more pending groups than the checker counted (the call's ``pending=``)."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, List, Tuple

from ..errors import Finding
from ..model.enums import WorkAttr
from ..model.resources import work_spec_of
from . import reject_traced, resource_name

CHECK = "WGMMA groups"


_LOCAL = threading.local()  # the events list of the kernel this thread is tracing, if any
_INSTALLED = []


def _install():
    """Wrap ``warpgroup.commit_group`` / ``wait_group`` once: the wrappers record into this thread's current
    events list (none outside ``watching``) and call the originals unchanged. Installed once and never
    restored, so kernels traced at once in several threads each see their own calls."""
    if _INSTALLED:
        return
    from cutlass.cute.nvgpu import warpgroup

    commit, wait = warpgroup.commit_group, warpgroup.wait_group

    def commit_group(*args, **kwargs):
        events = getattr(_LOCAL, "events", None)
        if events is not None:
            events.append(("commit", None))
        return commit(*args, **kwargs)

    def wait_group(group, *args, **kwargs):
        events = getattr(_LOCAL, "events", None)
        if events is not None:
            events.append(("wait", group))
        return wait(group, *args, **kwargs)

    warpgroup.commit_group, warpgroup.wait_group = commit_group, wait_group
    _INSTALLED.append((commit, wait))


@contextlib.contextmanager
def watching(events: List[Tuple[str, Any]]):
    """Record ("commit", None) / ("wait", pending) into ``events`` for every wgmma commit / wait this thread
    traces inside the block (the calls themselves run unchanged)."""
    _install()
    outer = getattr(_LOCAL, "events", None)
    _LOCAL.events = events
    try:
        yield
    finally:
        _LOCAL.events = outer


def in_flight(events: List[Tuple[str, Any]]) -> bool:
    """Whether a commit among ``events`` is not followed by a wait for 0 pending groups."""
    last = max((i for i, (kind, _) in enumerate(events) if kind == "commit"), default=None)
    if last is None:
        return False
    return not any(kind == "wait" and isinstance(n, int) and n == 0 for kind, n in events[last + 1:])


def check_work(task, resource, step, events, skip_validation=False) -> None:
    """``step``'s work emitted ``events``: a group left in flight needs ``WorkAttr.WGMMA``, and a
    ``WGMMA_WAIT`` work must wait for at most the ``pending`` groups the checker counted (the schedule call's
    ``pending=``, 0 when it passes none)."""
    spec = work_spec_of(getattr(type(resource), step.method, None))
    if spec is None:
        return
    name = resource_name(resource)
    if spec.attrs & WorkAttr.WGMMA_WAIT:
        finding = _short_wait(task, name, step, events)
    elif not spec.attrs & WorkAttr.WGMMA and in_flight(events):
        finding = _unmarked(task, name, type(resource).__name__, spec.role, step)
    else:
        return
    if finding is not None:
        reject_traced(finding, skip_validation)


def _short_wait(task, name, step, events):
    want = getattr(step, "const_args", {}).get("pending", 0)  # what the checker counts (verify/checker/model.py)
    waits = [n for kind, n in events if kind == "wait"]
    if any(isinstance(n, int) and isinstance(want, int) and n <= want for n in waits):
        return None
    got = ", ".join(f"wait_group({n})" for n in waits) or "no wait_group"
    return Finding(
        check=CHECK, task=task.name, resource=name, location=step.location,
        message=(f"{name}.{step.method}() is a WGMMA_WAIT work the checker counts as retiring all but {want} "
                 f"pending group(s), and its body traced {got}"),
        expected=f"a warpgroup.wait_group(n) with n <= {want} (the schedule call's pending=, default 0)",
        fix=(f"wait for the pending= the schedule passes (e.g. retire = wgmma_wait), or pass "
             f"{step.method}(pending=N) with the N the body waits for"))


def _unmarked(task, name, cls, role, step):
    return Finding(
        check=CHECK, task=task.name, resource=name, location=step.location,
        message=(f"{name}.{step.method}() commits a wgmma group and returns with it in flight, but is not marked "
                 "WorkAttr.WGMMA: the checker takes its reads of the stage to end when it returns, while the "
                 "hardware reads until a wgmma.wait_group retires the group"),
        expected=(f"work_attrs=WorkAttr.WGMMA on {cls}.{step.method} (its reads then last until the retire), or a "
                  "wait_group(0) in the work before it returns"),
        fix=(f"mark it @{role}_work(work_attrs=WorkAttr.WGMMA) and retire the group (retire = wgmma_wait) before "
             "the stage's release"))


__all__ = ["watching", "in_flight", "check_work"]
