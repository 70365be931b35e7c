"""Declared reads, held to while a kernel is traced.

A wgmma reads two shared-memory operands, and a work method belongs to one resource, so the operand of the
other resource is named by a ``WGMMA_OPERAND`` declaration (docs/checker.md, "WGMMA"). The checker trusts
declarations: a GEMM whose body reads a stage that no declaration names is checked without that read. So here
each declaration notes what it names (and its stage) while the kernel is traced, the GEMM takes that note back
and reads exactly that stage, and a GEMM with no note stops the trace: the kernel that runs reads only what the
checker saw it read. One note per GEMM commit group."""
from __future__ import annotations

from ...lower import LoweringError


def reset(g):
    """A fresh table at the start of a kernel's trace, before any work runs (a failed trace leaves nothing
    behind for the next)."""
    g.declared_reads = {}


def note(g, stage_info, what, stage=0):
    """The declaration in ``stage_info``'s task names ``what`` (at ``stage``) for the task's next GEMM group."""
    g.declared_reads[(stage_info.context.task.name, what)] = stage


def take(g, stage_info, what, gemm, resource=None):
    """The stage the declaration of ``what`` named for ``gemm``, taken back; a ``LoweringError`` naming the fix
    when none did. ``resource``: the declared resource's name, whose read is also reported
    (``StageInfo.touches``: the lowering holds it to a declaration in the same commit group)."""
    task = stage_info.context.task
    if resource is not None:
        stage_info.touches(what, resource=resource)
    stage = g.declared_reads.pop((task.name, what), None)
    if stage is None:
        raise LoweringError(f"{gemm} in {task.name} reads {what}, which no gemm_operand() / own_gemm_operand() "
                            "declared for its commit group", task=task,
                            fix=f"declare {what}'s read right before {gemm} (the checker trusts declarations, and "
                                "would not have seen this one)")
    return stage
