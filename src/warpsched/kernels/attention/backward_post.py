"""The backward's post-pass with ``flat_dq``: dQ = scale * dQaccum, rows and columns put back in place.

With ``flat_dq`` the kernel adds each warp group's dQ tile (64 rows x ``dq_cols`` columns, in ``parts``
GEMMs of ``dq_cols / parts`` columns) into dQaccum as it holds it in registers: for each part, for each
8-column chunk ``j``, the 128 threads' 16-byte chunks side by side (``backward_math.stage_dq``). Thread
``t = 32 w + 4 r + c`` holds rows ``16 w + r`` and ``16 w + 8 + r``, columns ``8 j + 2 c`` and ``8 j + 2 c + 1``
of the part (the WGMMA accumulator layout), in the order (row half, column). Tiles follow each other
as (batch, head, row block, column block).

With 80-row Q blocks (``dq_swap``) the kernel computes dQ^T: a tile is the accumulator of (``dq_cols`` columns
of D) x (the block's ``rows`` queries), in the same register order, so its accumulator rows are columns of dQ
and its accumulator columns are query rows (``flat_coords(..., rows)``, ``FLAT_TO_ROWS_T``).

``DQConvert`` (one CTA of 128 threads per tile) reads each thread's chunks back with 16-byte loads into
that same register layout, scales, rounds to the output dtype, writes the tile into swizzled SMEM by
``stmatrix`` and copies it out in 16-byte pieces of rows. ``DQConvertVarlen`` does the same for packed
sequences. ``flat_to_rows`` is the same permutation in torch (the fallback without TVM FFI; the tests
check its view and permutation against ``flat_coords``).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.tensor_utils import LayoutEnum

from .backward_units import padded_first_block

ROWS = 64  # rows of a flat dQ tile (one WGMMA M)
THREADS = 128


def flat_view_dims(parts, part_cols):
    """(part, chunk, warp, row, lane column, row half, column pair): a flat tile's value dims, outer first."""
    return (parts, part_cols // 8, 4, 8, 4, 2, 2)


def flat_coords(index, dq_cols, parts, rows=0):
    """(row, column) in a flat dQ tile of the value at flat ``index`` (what ``flat_to_rows`` permutes);
    ``rows`` > 0: a transposed tile of that many query rows (``dq_swap``)."""
    part_cols = rows or dq_cols // parts
    dims = flat_view_dims(1 if rows else parts, part_cols)
    digits = []
    for size in reversed(dims):
        digits.append(index % size)
        index //= size
    e, h, c, r, w, j, p = digits
    acc_row, acc_col = 16 * w + 8 * h + r, p * part_cols + 8 * j + 2 * c + e
    return (acc_col, acc_row) if rows else (acc_row, acc_col)


# (b, h, row block, col block, part, chunk, warp, row, lane col, half, pair) -> rows (row block, warp, half,
# row), columns (col block, part, chunk, lane col, pair)
FLAT_TO_ROWS = (0, 1, 2, 6, 9, 7, 3, 4, 5, 8, 10)
# transposed tiles: rows (row block, chunk, lane col, pair), columns (col block, part, warp, half, row)
FLAT_TO_ROWS_T = (0, 1, 2, 5, 8, 10, 3, 4, 6, 9, 7)


def flat_view_shape(shape, dq_cols, parts, rows=0):
    """The 11 dims of a flat dQaccum of ``shape`` (B, H, S_pad, D), the order ``FLAT_TO_ROWS`` (``rows`` > 0:
    ``FLAT_TO_ROWS_T``) permutes."""
    B, H, sp, D = shape
    if rows:
        return (B, H, sp // rows, D // dq_cols) + flat_view_dims(1, rows)
    return (B, H, sp // ROWS, D // dq_cols) + flat_view_dims(parts, dq_cols // parts)


def flat_to_rows(acc, dq_cols, parts, rows, scale, dtype, seqlen, out=None):
    """torch: dQ (B, H, seqlen, D) in ``dtype`` = scale * the flat dQaccum ``acc`` (B, H, S_pad, D) of
    ``(dq_cols, parts, rows)`` tiles (``FlashAttentionBackward.flat_tile``)."""
    import torch

    B, H, sp, D = acc.shape
    order = FLAT_TO_ROWS_T if rows else FLAT_TO_ROWS
    src = acc.view(flat_view_shape(acc.shape, dq_cols, parts, rows)).permute(order).reshape(B, H, sp, D)
    if out is None:
        out = torch.empty(B, H, seqlen, D, device=acc.device, dtype=dtype)
    return torch.mul(src[:, :, :seqlen], scale, out=out)


def flat_tiles(t, chunks, tile_floats):
    """A flat dQ buffer or stage (``t``, fp32) as (value of a 16-byte chunk, WGMMA thread, chunk, tile): each tile
    of ``tile_floats`` values holds, chunk by chunk, the 128 threads' 4-value chunks side by side."""
    return cute.make_tensor(t.iterator, cute.make_layout((4, THREADS, chunks, cute.size(t) // tile_floats),
                                                         stride=(1, 4, 4 * THREADS, tile_floats)))


class DQConvert:
    """dQ[b, h, s, :] (``dtype``, (B, H, S, D)) = scale * the flat dQaccum (fp32, (B, H, S_pad, D))."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, dq_cols=64, parts=1, rows=0):
        self.dtype, self.head_dim, self.dq_cols, self.parts = dtype, head_dim, dq_cols, parts
        if rows and parts != 1:
            raise ValueError(f"a transposed flat tile ({rows} rows) has one part, not {parts}")
        self.transposed = bool(rows)
        self.rows = rows or ROWS  # query rows of a tile
        self.part_cols = dq_cols // parts  # columns of D a part (its output tile: rows x part_cols)
        # the accumulator's (rows, columns): (queries, D part), or transposed (D columns, queries)
        self.acc_tile = (ROWS, self.rows) if rows else (ROWS, self.part_cols)
        self.tile = self.rows * dq_cols

    def _mma(self):
        k_major, mn_major = LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), LayoutEnum.COL_MAJOR.sm90_mma_major_mode()
        return sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, k_major, mn_major, cutlass.Float32,
                                                 (1, 1, 1), self.acc_tile)

    @cute.jit
    def __call__(self, mAcc: cute.Tensor, mdQ: cute.Tensor, scale: cutlass.Float32, stream):
        self.kernel(mAcc, mdQ, scale).launch(grid=[cute.size(mAcc) // self.tile, 1, 1], block=[THREADS, 1, 1],
                                             smem=self.smem_bytes, stream=stream)

    @property
    def smem_bytes(self):
        return self.rows * self.part_cols * self.dtype.width // 8 + 1024  # one part's tile, 1024-byte aligned

    @cute.kernel
    def kernel(self, mAcc: cute.Tensor, mdQ: cute.Tensor, scale: cutlass.Float32):
        tile, _, _ = cute.arch.block_idx()
        heads, seqlen = cute.size(mdQ, mode=[1]), cute.size(mdQ, mode=[2])
        col_blocks = self.head_dim // self.dq_cols
        row_blocks = cute.size(mAcc, mode=[2]) // self.rows
        col_block, rest = tile % col_blocks, tile // col_blocks
        row_block, bh = rest % row_blocks, rest // row_blocks
        head, batch = bh % heads, bh // heads
        self.convert(mAcc, tile, mdQ[(batch, head, None, None)], row_block, seqlen, col_block, scale)

    @cute.jit
    def convert(self, mAcc: cute.Tensor, tile, rows_out: cute.Tensor, row_block, seqlen, col_block,
                scale: cutlass.Float32):
        """Flat tile ``tile`` of ``mAcc`` -> row block ``row_block`` (rows below ``seqlen``), column block
        ``col_block`` of the (S, D) ``rows_out``, times ``scale``."""
        tidx, _, _ = cute.arch.thread_idx()
        chunks = self.acc_tile[1] // 8
        flat = flat_tiles(mAcc, self.parts * chunks, self.tile)
        mine = cute.flat_divide(flat[(None, tidx, None, tile)], (4, chunks))
        mma = self._mma()
        thr = mma.get_slice(tidx)
        # registers -> SMEM by stmatrix (16-byte rows of 8x8 blocks, swizzled: no bank conflict), then each
        # thread copies 16-byte pieces of rows to global memory: whole 128-byte row segments per 8 threads.
        # Transposed: stmatrix .trans into the same (rows, columns) bytes viewed (column, row), the
        # accumulator's coordinates (D contiguous, as the untransposed tile)
        R, C = LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        rows_layout = sm90_utils.make_smem_layout_a(R, (self.rows, 16, self.part_cols), self.dtype, 1)
        s_tile = cutlass.utils.SmemAllocator().allocate_tensor(self.dtype, cute.slice_(rows_layout, (None, None, 0)),
                                                                byte_alignment=1024)
        s_acc = s_tile
        if cutlass.const_expr(self.transposed):
            s_acc = cute.make_tensor(s_tile.iterator, cute.slice_(
                sm90_utils.make_smem_layout_a(C, (self.part_cols, 16, self.rows), self.dtype, 1), (None, None, 0)))
        to_smem = cute.make_tiled_copy_C(cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=self.transposed, num_matrices=4), self.dtype), mma)
        to_gmem = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128),
            cute.make_layout((THREADS // 8, 8), stride=(8, 1)), cute.make_layout((1, 8)))
        mover = to_gmem.get_slice(tidx)
        coords = mover.partition_D(cute.make_identity_tensor((self.rows, self.part_cols)))
        src = mover.partition_S(s_tile)
        for part in cutlass.range_constexpr(self.parts):
            acc = cute.make_rmem_tensor(thr.partition_shape_C(self.acc_tile), cutlass.Float32)
            regs = cute.make_tensor(acc.iterator, cute.make_layout((4, chunks)))
            cute.autovec_copy(mine[(None, None, 0, part)], regs)
            out = cute.make_rmem_tensor_like(acc, self.dtype)
            out.store((acc.load() * scale).to(self.dtype))
            if cutlass.const_expr(part > 0):
                cute.arch.barrier()  # every thread has read the previous part out of the tile
            cute.copy(to_smem, to_smem.retile(out), to_smem.get_slice(tidx).partition_D(s_acc))
            cute.arch.barrier()
            rows = cute.make_rmem_tensor_like(src)
            cute.autovec_copy(src, rows)
            dst = mover.partition_D(cute.local_tile(rows_out, (self.rows, self.part_cols),
                                                    (row_block, col_block * self.parts + part)))
            for i in cutlass.range_constexpr(cute.size(rows, mode=[1])):
                if row_block * self.rows + coords[(0, i, 0)][0] < seqlen:  # rows past a ragged S are padding
                    cute.autovec_copy(rows[(None, i, None)], dst[(None, i, None)])


class DQConvertVarlen(DQConvert):
    """``DQConvert`` for packed sequences: the flat dQaccum (1, H, T_pad, D) holds sequence b's tiles from
    padded block ``backward_units.padded_first_block(cu_q[b], b)`` on (the padded LSE / delta's rows), dQ is
    (1, H, T, D) (a view of the (T, H, D) tensor). One CTA per (row block x column block, head, sequence).
    ``pad``: the rows of the padded blocks (the kernel's ``block_m``)."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, dq_cols=64, parts=1, pad=64):
        super().__init__(dtype, head_dim, dq_cols, parts)
        self.pad = pad

    @cute.jit
    def __call__(self, mAcc: cute.Tensor, mdQ: cute.Tensor, mCuQ: cute.Tensor, max_seqlen_q: cutlass.Int32,
                 scale: cutlass.Float32, stream):
        blocks = (max_seqlen_q + ROWS - 1) // ROWS * (self.head_dim // self.dq_cols)
        self.kernel_varlen(mAcc, mdQ, mCuQ, scale).launch(
            grid=[blocks, cute.size(mdQ, mode=[1]), cute.size(mCuQ, mode=[0]) - 1], block=[THREADS, 1, 1],
            smem=self.smem_bytes, stream=stream)

    @cute.kernel
    def kernel_varlen(self, mAcc: cute.Tensor, mdQ: cute.Tensor, mCuQ: cute.Tensor, scale: cutlass.Float32):
        blk, head, b = cute.arch.block_idx()
        col_blocks = self.head_dim // self.dq_cols
        row_block, col_block = blk // col_blocks, blk % col_blocks
        start = mCuQ[b]
        seqlen = mCuQ[b + 1] - start
        if row_block * ROWS < seqlen:
            row = padded_first_block(start, b, self.pad) * (self.pad // ROWS) + row_block
            tile = (head * (cute.size(mAcc, mode=[2]) // ROWS) + row) * col_blocks + col_block
            self.convert(mAcc, tile, cute.domain_offset((start, 0), mdQ[(0, head, None, None)]), row_block, seqlen,
                         col_block, scale)
