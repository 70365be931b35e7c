"""A task's WGMMA read windows, grouped as the hardware commits them (``wgmma.commit_group`` /
``wait_group``): each WGMMA work is one commit group, and works marked ``WorkAttr.WGMMA_OPERAND`` declare
reads that join the task's next group. A window is ``(region, write, tag)`` in the executor's ASYNC
tuple, in issue order (``symmetry`` keeps these in order when it sorts the other windows)."""
from __future__ import annotations


# "wg": a WGMMA work's read, which closes its group; "wgj": a declared read that joined the group after it;
# "wgo": a declared read whose group is not issued yet (it joins the task's next WGMMA work)
WG_TAGS = ("wg", "wgj", "wgo")


def issue_group(asyncw, region):
    """A WGMMA work: one commit group of its own read and the operands declared since the last one
    (``wgo`` -> ``wgj``), kept together at the end so a retire finds the group's windows side by side."""
    declared = tuple((r, w, "wgj") for (r, w, t) in asyncw if t == "wgo")
    return tuple(x for x in asyncw if x[2] != "wgo") + declared + ((region, False, "wg"),)


def retire_groups(asyncw, pending):
    """``wgmma.wait_group(pending)``: the newest ``pending`` groups (a ``wg`` window and the ``wgj`` ones just
    before it) stay in flight, and declarations of a group not yet issued (``wgo``); older groups end."""
    keep, groups, current = [], 0, False
    for x in reversed(asyncw):
        if x[2] == "wg":
            groups += 1
            current = groups <= pending
        if current or x[2] not in ("wg", "wgj"):
            keep.append(x)
    return tuple(reversed(keep))
