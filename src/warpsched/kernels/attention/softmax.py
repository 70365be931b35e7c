"""The online softmax's running state as one object: what a consumer warp group of the FlashAttention
forward carries from one K/V tile to the next, in registers (``register_math`` does the arithmetic).

The schedules pass it whole (one task-local variable, ``SmemK.softmax``), so the program says "the
softmax state flows from here to there" once, and a new use (another epilogue, a mask) reads the fields
it needs instead of adding parameters to every work method."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from . import register_math as amath


class OnlineSoftmax:
    """Per accumulator row of this thread: ``row_max`` (the running max of S, unscaled), ``row_sum`` (the
    running sum of P over this thread's columns) and ``corr`` (O's rescale factor from the last step).
    With ``unit_overlap`` also ``o_inv`` and ``lse``: 1 / sum and the LSE of the unit whose O is stored
    next (the next unit's first S tile resets the running max and sum before that store)."""

    def __init__(self, pv_mma, acc_o, unit_overlap: bool = False):
        rows = cute.size(amath.layout_acc_mn(pv_mma, acc_o.layout), mode=[0])
        self.row_max = cute.make_rmem_tensor(cute.make_layout(rows), cutlass.Float32)
        self.row_sum = cute.make_rmem_tensor(cute.make_layout(rows), cutlass.Float32)
        self.corr = cute.make_rmem_tensor(cute.make_layout(rows), cutlass.Float32)
        self.o_inv = self.lse = None
        if unit_overlap:
            self.o_inv = cute.make_rmem_tensor(cute.make_layout(rows), cutlass.Float32)
            self.lse = cute.make_rmem_tensor(cute.make_layout(rows), cutlass.Float32)

    def reset(self):
        """A new work tile: running max -inf, running sum 0."""
        self.row_max.fill(-cutlass.Float32.inf)
        self.row_sum.fill(0.0)

    def step(self, acc_s, qk_mma, scale_log2, pinned_exp2=False, max_chains=1, poly_every=0, poly_degree=3):
        """One masked S tile: P in place of S, the new max and sum, ``corr`` (``register_math.softmax_step``)."""
        amath.softmax_step(acc_s, self.row_max, self.row_sum, self.corr, qk_mma, scale_log2, pinned_exp2,
                           max_chains, poly_every, poly_degree)

    def rescale(self, acc_o, pv_mma):
        """O *= corr per row."""
        amath.rescale_o(acc_o, self.corr, pv_mma)

    def normalize(self, acc_o, pv_mma, scale):
        """O /= sum; returns the rows' LSE (fresh registers)."""
        lse = cute.make_rmem_tensor_like(self.row_sum, cutlass.Float32)
        amath.finalize(acc_o, self.row_max, self.row_sum, lse, pv_mma, scale)
        return lse

    def finish_unit(self, pv_mma, scale):
        """``unit_overlap``: the unit's 1 / sum and LSE into ``o_inv`` / ``lse``, then max and sum reset."""
        amath.finish_stats(self.row_max, self.row_sum, self.o_inv, self.lse, pv_mma, scale)

    def normalize_finished(self, acc_o, pv_mma):
        """``unit_overlap``: O *= the finished unit's 1 / sum (``finish_unit``)."""
        amath.rescale_o(acc_o, self.o_inv, pv_mma)
