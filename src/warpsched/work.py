"""Work methods a kernel needs as they are, to be assigned in a resource class.

``wgmma_wait``: assigned as ``retire = wgmma_wait`` in the resource whose stages a WGMMA work
reads, ``smem.retire(pending=1)`` in a schedule emits ``wgmma.wait_group 1`` and tells the
checker that all but the newest ``pending`` WGMMA groups of the task stopped reading SMEM (so a
stage may be released after it). Importing this module does not import CuTe DSL.
"""
from __future__ import annotations

from .model.enums import WorkAttr
from .model.resources import StageInfo, consumer_work


@consumer_work(work_attrs=WorkAttr.WGMMA_WAIT | WorkAttr.AUXILIARY)
def wgmma_wait(self, stage_info: StageInfo, *, pending: int = 0):
    """Consumer work ``wgmma.wait_group(pending)``: every WGMMA group of this warp group but the
    newest ``pending`` has retired (stopped reading SMEM). Assign it in a resource class
    (``retire = wgmma_wait``) and call it in a schedule (``smem.retire(pending=1)``); ``pending``
    must be a compile-time int. It reads no stage (``WorkAttr.AUXILIARY``): call it where the
    stage it retires is still held, before that stage's release."""
    import cutlass.cute as cute

    cute.nvgpu.warpgroup.wait_group(pending)


__all__ = ["wgmma_wait"]
