"""The dQ writer warp's side of the in-kernel dQ finish (``dq_finish.finish_step_calls``, which
``backward_resources.SmemDQ.finish`` runs on the kernel's values): the wait for a step's adds, the count on the Q
block's word, the branch of the key block that counts last, and there the conversion of the Q block's two flat
fp32 tiles into dQ's rows.

The writer warp runs with the producer warp group's 24 registers, too few to keep a tile's loads in flight, so
each tile comes through the warp group's dQ stage the writer still holds (its reduce-add has read it): 32
``cp.async`` of 16 bytes per lane (no register waits on them), then each lane reads back the chunks it copied,
scales them and stores bf16 / fp16 pairs to dQ (rows past S_q skipped). A lane reads only what it copied, so
the copy's wait is the lane's own; the next tile's copies issue after the stores that used this one's values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute

from ...lower.gmem_flags import bind
from ..gemm.fixup import runtime_branch
from . import dq_finish, dq_order
from .backward_post import ROWS, flat_tiles


@cute.jit
def wait_adds(every):
    """Before the counts: the previous step's two reduce-adds complete (the issuing lane's bulk groups but the
    latest two, this step's), or with ``every`` (the last step) all of them; then fenced from the async proxy."""
    if every:
        cute.arch.cp_async_bulk_wait_group(0)
    else:
        cute.arch.cp_async_bulk_wait_group(2)
    cute.arch.fence_proxy("async.global")


@dataclass(frozen=True, eq=False)
class DQFinishIO:
    """``finish_calls``'s flag, accumulator and output for one step of the writer warp. Frozen, so the DSL does
    not carry it through a runtime if (as StageInfo)."""

    g: Any
    v: Any
    s_dq: Any  # the flat dQ stage buffer the writer holds: (FLAT_ROW, values / FLAT_ROW, stages x boxes)
    stage: Any

    @cute.jit
    def add(self, slot, value, acquire: cutlass.Constexpr = True):
        """Lane 0's count after the warp has seen both adds complete; -1 in the other lanes (never a ticket)."""
        cute.arch.sync_warp()
        seen = cutlass.Int32(-1)
        if cute.arch.lane_idx() == 0:
            seen = bind(dq_finish.DQ_COUNTS, self.v.mSem).add(slot, value, acquire=acquire)
        return seen

    def when(self, seen, old, body):
        """``body`` in every lane when lane 0's add returned ``old``."""
        last = cute.arch.shuffle_sync(seen, 0) == old

        def finish():
            cute.arch.fence_acq_rel_gpu()  # every lane's reads after lane 0's acquire
            cute.arch.fence_proxy("async.global")  # the other CTAs' adds were TMA (async proxy) writes
            body()
        runtime_branch(last, finish)

    @cute.jit
    def read(self, slot):
        """dQ's rows of Q block ``slot`` ((batch x H + head) x Q blocks + Q block, ``dq_order.dq_turn``'s word) =
        scale x its two finished tiles (one per warp group's dQ part)."""
        g, v = self.g, self.v
        batch, head, m_block = dq_order.slot_coords(g, slot)
        chunks = g.dq_cols // 8
        lane = cute.arch.lane_idx()
        r, c = lane // 4, lane % 4
        acc = flat_tiles(v.mdQsum, chunks, g.dq_tile_floats)  # the fp32 buffer itself (mdQacc is the TMA's view)
        staged = flat_tiles(self.s_dq, chunks, g.dq_tile_floats)
        to_smem = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), cutlass.Float32, num_bits_per_copy=128)
        rows_out = v.mdQ[(batch, head, None, None)]
        seqlen = cute.size(v.mdQ, mode=[2])
        for part in cutlass.range_constexpr(2):
            row_block, col_block = g.dq_block(m_block, part)
            tile = g.flat_tile_index(batch, head, row_block, col_block)
            for k in cutlass.range_constexpr(4):
                for j in cutlass.range_constexpr(chunks):
                    t = 32 * k + lane  # the WGMMA thread whose chunks these are (rows 16 k + r, 16 k + 8 + r)
                    cute.copy(to_smem, acc[(None, t, j, tile)], staged[(None, t, j, self.stage)])
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)
            for k in cutlass.range_constexpr(4):
                for j in cutlass.range_constexpr(chunks):
                    vals = cute.make_rmem_tensor(cute.make_layout(4), cutlass.Float32)
                    cute.autovec_copy(staged[(None, 32 * k + lane, j, self.stage)], vals)
                    for h in cutlass.range_constexpr(2):
                        row = row_block * ROWS + 16 * k + 8 * h + r
                        pair = cute.make_rmem_tensor(cute.make_layout(2), g.dtype)
                        pair[0] = (vals[2 * h] * v.scale).to(g.dtype)
                        pair[1] = (vals[2 * h + 1] * v.scale).to(g.dtype)
                        col = col_block * g.dq_cols + 8 * j + 2 * c
                        if row < seqlen:
                            cute.autovec_copy(pair, cute.flat_divide(rows_out[(row, None)], (2,))[(None, col // 2)])

    def write(self, slot):
        """Nothing more: ``read`` stored dQ's rows as it read the tiles (the model's ``write`` of dQ)."""
