"""The compile-time layouts and MMAs of warpsched's FlashAttention backward (``warpsched.kernels.attention.backward``):
each SMEM buffer's layout (and, for a buffer a GEMM also reads transposed, the same bytes as the other operand kind),
the three tiled MMAs, the shapes of a warp group's dQ tile, and the check that the SMEM fits. A mixin of
``FlashAttentionBackward``, which sets the fields these read (dtype, head dim, block_m, the stages and the dQ
split)."""
from __future__ import annotations

import copy

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum

from warpsched import SmemAllocator
from warpsched.model.memory import BARRIER_BYTES_PER_STAGE

from .backward_math import HALF
from .forward import AttentionConfigError

FLAT_ROW = 256  # flat_dq: values per row of the dQ reduce-add's TMA box (a box dimension holds at most 256)


class BackwardLayouts:
    """Layouts and MMAs, from the configuration ``FlashAttentionBackward.__init__`` sets."""

    def _mmas(self):
        k_major, mn_major = LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), LayoutEnum.COL_MAJOR.sm90_mma_major_mode()

        def mma(a_major, b_major, tile, a_source=warpgroup.OperandSource.SMEM):
            return sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, a_major, b_major, cutlass.Float32,
                                                     (1, 1, 1), tile, a_source)
        sdp = mma(k_major, k_major, (HALF, self.sdp_cols))  # S^T, dP^T: (keys, queries), contraction over D
        # dV, dK: over queries, A (P^T, dS^T) from registers; split_queries: from the SMEM tiles (keys contiguous)
        dkv = mma(mn_major, mn_major, (HALF, self.d_cols)) if self.split_queries else self._dkv_regs_mma()
        # dQ: (queries, D or its half), over keys; one 64-row WGMMA M, repeated over a 128-row Q block;
        # dq_swap: dQ^T (D half, queries), A = K^T (D contiguous: MN-major), B = dS (keys contiguous: K-major)
        dq = (mma(mn_major, k_major, self.dq_acc_tile) if self.dq_swap
              else mma(k_major, mn_major, (HALF, self.dq_part_cols)))
        return sdp, dkv, dq

    def _dkv_regs_mma(self):
        """The dV / dK MMA with A (P^T, dS^T) from registers: the kernel's, or with ``split_queries`` and
        ``own_regs`` the one for the warp group's own queries."""
        k_major, mn_major = LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), LayoutEnum.COL_MAJOR.sm90_mma_major_mode()
        return sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, k_major, mn_major, cutlass.Float32, (1, 1, 1),
                                                 (HALF, self.d_cols), warpgroup.OperandSource.RMEM)

    @property
    def dq_acc_tile(self):
        """(rows, columns) of a warp group's dQ accumulator: (queries, D part), or with ``dq_swap`` (D half,
        queries)."""
        return (HALF, self.block_m) if self.dq_swap else (self.dq_rows, self.dq_part_cols)

    def _layouts(self):
        """Each SMEM buffer and, for the ones a GEMM also reads transposed, the same bytes as the other
        operand kind: a K-major (rows, D) tile and an MN-major (D, rows) one have one physical layout."""
        d, dt, R, C = self.head_dim, self.dtype, LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR
        st = self.qdo_stages
        halves = self.key_halves
        # d_split: (D half, queries, 2 * stage + D half), the dV / dK GEMMs' B operand of warp group w
        rows_t = (sm90_utils.make_smem_layout_b(C, (HALF, d // 2, self.block_m), dt, 2 * st) if self.d_split
                  else sm90_utils.make_smem_layout_b(C, (HALF, d, self.block_m), dt, st))  # (D, queries, stage)
        return {
            "sK": sm90_utils.make_smem_layout_a(R, (HALF, self.block_m, d), dt, halves),  # (keys, D, key half)
            "sV": sm90_utils.make_smem_layout_a(R, (HALF, self.block_m, d), dt, halves),
            # (D, keys, key half); shared_ds: (D half, keys, 2 * key half + D half); d_split: (64 columns, keys,
            # D quarter), the dQ parts' B operands (dq_kt_view): the same bytes (64-column swizzle atoms, keys
            # before columns in both)
            "sKt": (sm90_utils.make_smem_layout_b(C, (self.block_m, HALF, HALF), dt, 4)
                    if (self.shared_ds and not self.ds_rows) or self.d_split
                    else sm90_utils.make_smem_layout_b(C, (self.block_m, self.dq_cols, HALF), dt, 2)),
            "sQ": sm90_utils.make_smem_layout_b(R, (HALF, self.block_m, d), dt, st),  # (queries, D, stage)
            "sdO": sm90_utils.make_smem_layout_b(R, (HALF, self.block_m, d), dt, st),
            "sQt": rows_t,
            "sdOt": rows_t,
            # (queries, keys); ds_rows: (64 queries, keys, row half), the same bytes as the 128-row tile
            "sdS": (sm90_utils.make_smem_layout_a(R, (HALF, d, HALF), dt, 2 * self.ds_stages) if self.ds_rows
                    else sm90_utils.make_smem_layout_a(R, (self.block_m, d, HALF), dt, self.ds_stages)),
            # (keys, queries, dS stage); split_queries: a warp group's 32 queries (its sdS / sP tile), also as
            # the dV / dK GEMMs' A operand (sPA: keys contiguous, MN-major), the same bytes
            "sdSt": sm90_utils.make_smem_layout_b(C, (self.sdp_cols, HALF, self.sdp_cols), dt, self.ds_stages),
            "sPA": (sm90_utils.make_smem_layout_a(C, (HALF, self.d_cols, self.sdp_cols), dt, self.ds_stages)
                    if self.split_queries else None),
            # dq_swap: the swapped dQ GEMM's operands, the same bytes as sKt's (D half, keys, 2 * key half + D
            # half) blocks and sdS's (queries, keys) tile (tests/test_attention_bwd_m80.py compares the offsets)
            "sKtA": sm90_utils.make_smem_layout_a(C, (HALF, self.block_m, HALF), dt, 4),
            "sdSB": sm90_utils.make_smem_layout_b(R, (HALF, self.block_m, HALF), dt, 1),
            "sdKV": sm90_utils.make_smem_layout_a(R, (HALF, self.block_m, d), dt, 2 * self.ds_stages),
            "sdQ": (cute.make_layout((FLAT_ROW, self.dq_box_floats // FLAT_ROW, self.dq_stages * self.flat_boxes))
                    if self.flat_dq
                    else sm90_utils.make_smem_layout_a(R, (self.dq_rows, self.dq_cols, self.dq_cols), cutlass.Float32,
                                                       self.dq_stages)),
        }

    @property
    def flat_tile(self):
        """``flat_dq``: (dq_cols, parts, transposed rows) of a flat dQ tile, what the post-pass (``backward_post``)
        undoes; the third is 0, or with ``dq_swap`` the Q block's rows (the tile is dQ^T)."""
        return self.dq_cols, self.dq_parts, self.block_m if self.dq_swap else 0

    @property
    def dq_tile_floats(self):
        """fp32 values in one warp group's dQ tile."""
        return self.dq_rows * self.dq_cols

    @property
    def dq_box_floats(self):
        """``flat_dq``: fp32 values in one TMA box of the reduce-add (``flat_boxes`` boxes a tile)."""
        return self.dq_tile_floats // self.flat_boxes

    def _check_smem_fit(self):
        """Refuse, naming the knobs, a configuration whose SMEM (the regions ``build`` allocates, laid out by a
        scratch ``SmemAllocator`` on copies, and the pipelines' mbarriers) exceeds sm_90's, here rather than as
        the traced program's [smem capacity] finding."""
        stats = [self.alloc_lse, self.alloc_delta] if self.tma_stats else []
        scratch = SmemAllocator()
        for a in [self.alloc_k, self.alloc_v, self.alloc_q, self.alloc_do, *stats, *self.alloc_ds, *self.alloc_p,
                  *self.alloc_dq]:
            scratch.add(copy.copy(a))  # copies: compute_layout assigns offsets, the kernel's are build's to set
        # mbarrier stages: Q / dO, K / V, each warp group's dQ ring and with shared_ds / split_queries its SmemDS
        stages = self.qdo_stages + 1 + 2 * self.dq_stages + (2 * self.ds_stages if self.exchange else 0)
        need = scratch.compute_layout() + BARRIER_BYTES_PER_STAGE * stages
        capacity = cutlass.memory.get_smem_capacity_in_bytes("sm_90")
        if need > capacity:
            raise AttentionConfigError(
                f"head_dim={self.head_dim}, block_m={self.block_m}, qdo_stages={self.qdo_stages}, "
                f"dq_stages={self.dq_stages}: SMEM needs about {need} bytes, more than sm_90's {capacity} (Q and dO "
                f"{self.alloc_q.size_bytes} bytes each); lower qdo_stages or dq_stages"
                + (", or use block_m=64" if self.block_m != 64 else ""))
