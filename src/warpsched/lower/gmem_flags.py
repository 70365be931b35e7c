"""GMEM flags inside a kernel: the PTX for the verbs model/gmem_flags.GmemFlag declares.

``bind(flag, tensor)`` pairs a GmemFlag with its Int32 GMEM tensor (one word per slot, zero at
launch); the bound flag's methods are called by ONE thread of the CTA, inside a traced kernel:

    signal(slot, value)      fence.acq_rel.gpu; st.release.gpu.b32      (after a CTA barrier that
                                                                         follows the tile's writes)
    wait(slot, value)        ld.acquire.gpu.b32 in a loop until == value; then fence.acq_rel.gpu
    wait_at_least(slot, v)   ... until >= value
    add(slot, value) -> old  fence.acq_rel.gpu; atom.acq_rel.gpu.add.u32 (returns the old value);
                             acquire=False: atom.release (a share that only counts itself)
    reset(slot)              st.relaxed.gpu.b32 0 (the last user, for the next launch)

The other threads of the CTA read a handed-over tile after a CTA barrier that follows the wait:
bar.sync orders them after the waiting thread's acquire (the GEMM's serial_fixup does the same).
``fence=False`` leaves the fence out of signal / wait for a caller that fences itself (every
thread of the CTA before the barrier that precedes a signal, after the one that follows a wait).
``spin_limit`` > 0 bounds the wait: past that many polls it gives up and returns False (the
caller poisons its tile rather than hang); 0 waits forever and returns True.
The grid checker (verify/checker/grid.py) proves the protocol these calls implement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute

from ..model.gmem_flags import GmemFlag


@dataclass(frozen=True, eq=False)
class BoundFlag:
    """A GmemFlag bound to its GMEM words (``tensor``: Int32, one per slot). Frozen, so the DSL does
    not carry it through a runtime ``if`` that calls it (as StageInfo)."""

    flag: GmemFlag
    tensor: Any

    def _ptr(self, slot):
        return self.tensor.iterator + slot

    @cute.jit
    def signal(self, slot, value, fence: cutlass.Constexpr = True):
        if cutlass.const_expr(fence):
            cute.arch.fence_acq_rel_gpu()
        cute.arch.store(self._ptr(slot), cutlass.Int32(value), sem="release", scope="gpu")

    @cute.jit
    def add(self, slot, value, acquire: cutlass.Constexpr = True, fence: cutlass.Constexpr = True):
        if cutlass.const_expr(fence):
            cute.arch.fence_acq_rel_gpu()
        sem = "acq_rel" if acquire else "release"
        return cute.arch.atomic_add(self._ptr(slot), cutlass.Int32(value), sem=sem, scope="gpu")

    @cute.jit
    def reset(self, slot):
        cute.arch.store(self._ptr(slot), cutlass.Int32(0), sem="relaxed", scope="gpu")

    def wait(self, slot, value, spin_limit: int = 0, fence: bool = True):
        return self._spin(slot, value, False, spin_limit, fence)

    def wait_at_least(self, slot, value, spin_limit: int = 0, fence: bool = True):
        return self._spin(slot, value, True, spin_limit, fence)

    @cute.jit
    def _spin(self, slot, value, at_least: cutlass.Constexpr, spin_limit: cutlass.Constexpr,
              fence: cutlass.Constexpr):
        """Poll with acquire loads until the word equals ``value`` (``at_least``: reaches it); past
        ``spin_limit`` polls (> 0) give up and return False."""
        ptr = self._ptr(slot)
        target = cutlass.Int32(value)
        seen = cute.arch.load(ptr, cutlass.Int32, sem="acquire", scope="gpu")
        spins = cutlass.Int32(0)
        reached = cutlass.Boolean(True)
        while (seen < target) if cutlass.const_expr(at_least) else (seen != target):
            seen = cute.arch.load(ptr, cutlass.Int32, sem="acquire", scope="gpu")
            if cutlass.const_expr(spin_limit > 0):
                spins = spins + 1
                if spins >= spin_limit:
                    reached = cutlass.Boolean(False)
                    seen = target
        if cutlass.const_expr(fence):
            cute.arch.fence_acq_rel_gpu()
        return reached

def bind(flag: GmemFlag, tensor) -> BoundFlag:
    """The kernel-side GmemFlag: its verbs on ``tensor``'s Int32 words."""
    return BoundFlag(flag, tensor)
