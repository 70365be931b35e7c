"""Named barriers in a kernel's PTX: every ``bar.sync`` / ``bar.arrive`` / ``barrier.sync`` with an id other than
0 (the CTA barrier) must be a task's own (``lower.pipelines.task_barrier_id``: 15 - the task's index, over its
warps), which work bodies reach through ``KernelContext.sync_task()``. A hand-picked id can be shared with
another task's, which the checker never sees."""
from __future__ import annotations

import re

BARRIER = re.compile(r"\b(?:bar|barrier)\.(?:sync|arrive)(?:\.aligned)?\s+(\d+)\s*,\s*(\d+)\s*;")


def foreign_barriers(ptx, tasks):
    """The (id, thread count) pairs of ``ptx``'s named barriers that are no task's own."""
    own = {(15 - i, t.num_warps * 32) for i, t in enumerate(tasks)}
    used = {(int(i), int(n)) for i, n in BARRIER.findall(ptx)}
    return sorted(u for u in used if u[0] != 0 and u not in own)


def named_barriers(ptx):
    return sorted({(int(i), int(n)) for i, n in BARRIER.findall(ptx)})
