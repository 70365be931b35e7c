"""Register-level math of the FlashAttention forward (examples/hopper/attention.py): accumulator
views by row and column, the causal / tail mask, one online-softmax step, the final
normalization with the log-sum-exp, and the fp32 S -> 16-bit P conversion into a WGMMA A operand.

The layout helpers (``layout_separate``, ``layout_acc_mn``, ``reduction_target_n``,
``c_layout_as_a_layout``) and the shape of the softmax step follow the Hopper FMHA example of the
CUTLASS repository (examples/python/CuTeDSL/cute/hopper/kernel/attention/fmha.py, BSD-3-Clause,
Copyright (c) NVIDIA CORPORATION & AFFILIATES); the pipelines and warp roles around them are
warpsched's (examples/hopper/attention.py), not that example's.
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from . import poly_exp2

WG_ROWS = 64  # Q rows per consumer warp group: its S tile's rows (one WGMMA M)
LN2 = math.log(2.0)


def layout_separate(thr, src, ref):
    """Split the modes of ``src`` by whether their stride in ``ref`` is below ``thr``."""
    lt = cute.make_layout(())
    ge = cute.make_layout(())
    for k, v in enumerate(ref):
        if cutlass.const_expr(v < thr):
            lt = cute.append(lt, src[k])
        else:
            ge = cute.append(ge, src[k])
    if cutlass.const_expr(cute.rank(lt) == 1):
        return cute.append(lt, ge)
    return cute.append(cute.append(cute.make_layout(()), lt), ge)


def layout_acc_mn(tiled_mma, acc_layout):
    """The accumulator fragment's layout viewed as (rows of this thread, columns of this thread)."""
    separated = layout_separate(tiled_mma.shape_mnk[0], acc_layout[0], tiled_mma.tv_layout_C.stride[1])
    v_m, v_n = separated[0], separated[1]
    if cutlass.const_expr(cute.rank(v_m) == 1):
        v_m1 = cute.append(v_m, acc_layout[1])
    else:
        v_m1 = cute.append(cute.append(cute.make_layout(()), v_m), acc_layout[1])
    if cutlass.const_expr(cute.rank(v_n) == 1):
        v_n1 = cute.append(v_n, acc_layout[2])
    else:
        v_n1 = cute.append(cute.append(cute.make_layout(()), v_n), acc_layout[2])
    if cutlass.const_expr(cute.rank(v_m1) == 1):
        return cute.append(v_m1, v_n1)
    return cute.append(cute.append(cute.make_layout(()), v_m1), v_n1)


def reduction_target_n(tiled_mma):
    """The lanes that share one accumulator row (the shuffle widths of a row reduction)."""
    separated = layout_separate(tiled_mma.shape_mnk[0], cute.make_layout(tiled_mma.tv_layout_C.shape[0]),
                                tiled_mma.tv_layout_C.stride[0])
    return separated[1]


def c_layout_as_a_layout(c, a):
    """An accumulator (C) fragment layout re-read as the A-operand fragment of the next MMA."""
    return cute.make_layout((a, c.shape[1], (c.shape[2], cute.size(c, mode=[0]) // cute.size(a))),
                            stride=(c.stride[0], c.stride[1], (c.stride[2], cute.size(a, mode=[2]) * c.stride[0][2])))


def rows_view(tiled_mma, t):
    return cute.make_tensor(t.iterator, layout_acc_mn(tiled_mma, t.layout))


@cute.jit
def apply_mask(acc_s, coords, coords0, row0, col0, seqlen_k: cutlass.Int32, left: cutlass.Constexpr,
               right: cutlass.Constexpr):
    """-inf where the key is past the sequence end or outside query r's keys [r - left, r + right] (a
    None side is unbounded; causal, top-left aligned as torch SDPA's is_causal, is right = 0).
    ``coords``: the (row, column) of each accumulator element in the tile for this thread, ``coords0``
    the same for thread 0 (static: a thread's coordinates are thread 0's plus its first element's;
    tests/test_attention_mask.py); ``row0`` / ``col0``: the tile's first query row and key. With a
    bound, each row's visible keys, relative to this thread's first column, are computed once per row,
    so an element costs a compare with an immediate and a select (the hd64 causal loop's masked branch:
    257 -> 132 SASS instructions, +9 % on 16x16x1024 d64 causal on the H200). Without one, only the last
    tile's tail is masked by column: that form stays, since the row-limit one made the 160-register
    ``wgs=3`` kernel spill (docs/attention.md)."""
    if cutlass.const_expr(left is None and right is None):
        for i in cutlass.range_constexpr(cute.size(acc_s)):
            if col0 + coords[i][1] >= seqlen_k:
                acc_s[i] = -cutlass.Float32.inf
    else:
        r_base, c_base = coords[0]
        last_key = seqlen_k - 1 - col0 - c_base  # keys past it are beyond the sequence
        diag = row0 + r_base - col0 - c_base  # row r's own key, relative to this thread's first column
        for i in cutlass.range_constexpr(cute.size(acc_s)):
            dr, dc = coords0[i]
            hi = last_key
            if cutlass.const_expr(right is not None):
                hi = cutlass.min(last_key, diag + dr + right)
            if dc > hi:
                acc_s[i] = -cutlass.Float32.inf
            if cutlass.const_expr(left is not None):
                if dc < diag + dr - left:
                    acc_s[i] = -cutlass.Float32.inf


@cute.jit
def mask_tile(acc_s, qk_mma, row0, col0, seqlen_k: cutlass.Int32, block_n: cutlass.Constexpr,
              causal: cutlass.Constexpr, window_left: cutlass.Constexpr = None, window_right: cutlass.Constexpr = None):
    """Mask the S tile whose first query row is ``row0`` and first key ``col0``, if it needs it: only the
    tile at the end of the keys, the tiles reaching past ``row0`` + the right bound (causal: right = 0),
    and the tiles that start before the last row's first key (``window_left``)."""
    right = window_right
    if cutlass.const_expr(causal and window_right is None):
        right = 0
    limit = seqlen_k  # keys [first, limit) are visible to every row of the tile
    if cutlass.const_expr(right is not None):
        limit = cutlass.min(seqlen_k, row0 + (1 + right))
    need = col0 + block_n > limit
    if cutlass.const_expr(window_left is not None):
        need = need | (col0 < row0 + (WG_ROWS - 1) - window_left)  # first: the last row's first key
    if need:
        tidx, _, _ = cute.arch.thread_idx()
        apply_mask(acc_s, s_tile_coords(qk_mma, block_n, tidx % 128), s_tile_coords(qk_mma, block_n, 0), row0, col0,
                   seqlen_k, window_left, right)


def s_tile_coords(qk_mma, block_n, thread):
    """The (row, column) in the S tile of each accumulator element ``thread`` (of its warp group) holds."""
    identity = cute.make_identity_tensor((cute.size(qk_mma.shape_mnk, mode=[0]), block_n))
    return qk_mma.get_slice(thread).partition_C(identity)


@dsl_user_op
def exp2_pinned(x, *, loc=None, ip=None):
    """exp2 (``ex2.approx.ftz.f32``, as ``cute.math.exp2(fastmath=True)``) as an inline-PTX statement
    with side effects, so the compiler cannot recompute it: at 160 registers a thread (``wgs=3``) the
    MLIR-to-PTX compiler otherwise evaluates every P = exp2(...) twice, once for the row sum and again
    after the P V GEMM's wait (576 MUFU.EX2 in the SASS instead of 396)."""
    return cutlass.Float32(llvm.inline_asm(T.f32(), [cutlass.Float32(x).ir_value(loc=loc, ip=ip)],
                                           "ex2.approx.ftz.f32 $0, $1;", "=f,f", has_side_effects=True,
                                           is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
                                           loc=loc, ip=ip))


def row_max_of(s_mn, i, prev, chains):
    """max(prev, row i of ``s_mn``) in ``chains`` independent running maxima over the row's columns, then
    combined pairwise: a dependent chain of n / chains + log2(chains) FMNMX instead of n (traced Python)."""
    n = cute.size(s_mn, mode=[1])
    if chains <= 1 or n < 2 * chains:
        cur = prev
        for j in range(n):
            cur = cute.arch.fmax(cur, s_mn[i, j])
        return cur
    part = [s_mn[i, k] for k in range(chains)]
    for j in range(chains, n):
        part[j % chains] = cute.arch.fmax(part[j % chains], s_mn[i, j])
    part[0] = cute.arch.fmax(part[0], prev)
    while len(part) > 1:
        part = [cute.arch.fmax(part[k], part[k + 1]) if k + 1 < len(part) else part[k]
                for k in range(0, len(part), 2)]
    return part[0]


@cute.jit
def softmax_step(acc_s, row_max, row_sum, corr, qk_mma, scale_log2: cutlass.Float32,
                 pinned_exp2: cutlass.Constexpr = False, max_chains: cutlass.Constexpr = 1,
                 poly_every: cutlass.Constexpr = 0, poly_degree: cutlass.Constexpr = 3):
    """One step of the online softmax on a masked S tile, O untouched: the new running max per
    row, P = exp2(S * scale_log2 - max * scale_log2) in place of S, ``corr`` = exp2((old max -
    new max) * scale_log2) (0 while nothing was seen) and the running sum rescaled by it plus
    this tile's P. A row whose max is still -inf (all keys masked so far) keeps P = 0.
    ``pinned_exp2``: P's exp2 through ``exp2_pinned`` (computed once; same instruction). ``max_chains``: the
    row max in that many independent chains (``row_max_of``). ``poly_every`` = k: every k-th of a row's P by
    ``poly_exp2.exp2_poly`` at ``poly_degree`` (the FMA pipe), the rest by MUFU."""
    s_mn = rows_view(qk_mma, acc_s)
    red = reduction_target_n(qk_mma)
    for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        prev = row_max[i]
        cur = row_max_of(s_mn, i, prev, max_chains)
        for r in cutlass.range_constexpr(cute.rank(red)):
            cur = cute.arch.warp_reduction_max(cur, threads_in_group=red.shape[r])
        row_max[i] = cur
        safe = cur
        if cur == -cutlass.Float32.inf:
            safe = 0.0
        max_scaled = safe * scale_log2
        for j in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
            if cutlass.const_expr(poly_exp2.polynomial_column(i * cute.size(s_mn, mode=[1]) + j, poly_every)):
                s_mn[i, j] = poly_exp2.exp2_poly(s_mn[i, j] * scale_log2 - max_scaled, poly_degree)
            elif cutlass.const_expr(pinned_exp2):
                s_mn[i, j] = exp2_pinned(s_mn[i, j] * scale_log2 - max_scaled)
            else:
                s_mn[i, j] = cute.math.exp2(s_mn[i, j] * scale_log2 - max_scaled, fastmath=True)
        corr[i] = cute.math.exp2(prev * scale_log2 - max_scaled, fastmath=True)  # prev = -inf: 0
        row_sum[i] = row_sum[i] * corr[i] + s_mn[i, None].load().reduce(cute.ReductionOp.ADD,
                                                                        cutlass.Float32.zero, 0)


@cute.jit
def rescale_o(acc_o, corr, pv_mma):
    """O *= corr per row (the change of the running max since O was last rescaled)."""
    o_mn = rows_view(pv_mma, acc_o)
    for i in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
        for j in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
            o_mn[i, j] = o_mn[i, j] * corr[i]


@cute.jit
def row_inverse_and_lse(row_sum, row_max, red, scale: cutlass.Float32):
    """One row's 1 / sum (the sum over the row's lanes) and its LSE, max * scale + ln(sum); a row
    with no key (sum 0 or NaN) gets 1 (its O stays 0) and +inf."""
    total = row_sum
    for r in cutlass.range_constexpr(cute.rank(red)):
        total = cute.arch.warp_reduction_sum(total, threads_in_group=red.shape[r])
    inv = cute.arch.rcp_approx(total)
    lse = row_max * scale + cute.math.log2(total, fastmath=True) * LN2
    if total == 0.0 or total != total:
        inv = 1.0
        lse = cutlass.Float32.inf
    return inv, lse


@cute.jit
def finalize(acc_o, row_max, row_sum, lse, pv_mma, scale: cutlass.Float32):
    """O /= row sum; the rows' LSE into ``lse`` (``row_inverse_and_lse``)."""
    o_mn = rows_view(pv_mma, acc_o)
    red = reduction_target_n(pv_mma)
    for i in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
        inv, lse[i] = row_inverse_and_lse(row_sum[i], row_max[i], red, scale)
        for j in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
            o_mn[i, j] = o_mn[i, j] * inv


@cute.jit
def finish_stats(row_max, row_sum, o_inv, lse, pv_mma, scale: cutlass.Float32):
    """``unit_overlap``: the unit's 1 / row sum into ``o_inv`` and its LSE (as ``finalize``), then the
    running max and sum reset for the next unit, whose first S tile is computed before this unit's O
    is stored (``rescale_o(acc_o, o_inv, ...)`` normalizes it then)."""
    red = reduction_target_n(pv_mma)
    for i in cutlass.range_constexpr(cute.size(row_sum)):
        o_inv[i], lse[i] = row_inverse_and_lse(row_sum[i], row_max[i], red, scale)
        row_max[i] = -cutlass.Float32.inf
        row_sum[i] = 0.0


def make_p(acc_s, pv_mma, dtype):
    """Registers for P (16-bit) in the layout of the PV WGMMA's A operand."""
    return cute.make_rmem_tensor_like(c_layout_as_a_layout(acc_s.layout, pv_mma.tv_layout_A.shape[1]), dtype)


@cute.jit
def store_p(acc_s, p, dtype):
    """P = S rounded to 16 bits, written into the A-operand registers (for 16-bit types an
    accumulator row pair is an A-fragment row pair: a re-read, no shuffle). Two neighbouring
    accumulator registers become one 32-bit A register through one ``cvt_pair``: a whole-tensor
    ``.to(dtype)`` converts element by element where the fragment's size is not a power of two
    (40 a thread for an 80-key tile), and ptxas then packs the halves with two PRMTs a register."""
    n = cute.size(acc_s)
    if cutlass.const_expr(cute.cosize(acc_s.layout) != n or n % 2 != 0):  # not one dense register run
        cute.make_tensor(p.iterator, acc_s.layout).store(acc_s.load().to(dtype))
    else:  # register j of P takes register j of S, as acc_s.layout maps both
        src = cute.make_tensor(acc_s.iterator, cute.make_layout(n))
        words = cute.recast_tensor(cute.make_tensor(p.iterator, cute.make_layout(n)), cutlass.Int32)
        for k in cutlass.range_constexpr(n // 2):
            words[k] = cvt_pair(src[2 * k], src[2 * k + 1], dtype)


@dsl_user_op
def cvt_pair(lo, hi, dtype, *, loc=None, ip=None):
    """Two fp32 values rounded to nearest into the halves of one 32-bit register (``lo`` in the low
    half, the lower-addressed 16-bit element): ``cvt.rn.bf16x2.f32`` (``f16x2`` for Float16)."""
    kind = "bf16x2" if dtype is cutlass.BFloat16 else "f16x2"
    return cutlass.Int32(llvm.inline_asm(T.i32(), [cutlass.Float32(hi).ir_value(loc=loc, ip=ip),
                                                   cutlass.Float32(lo).ir_value(loc=loc, ip=ip)],
                                         f"cvt.rn.{kind}.f32 $0, $1, $2;", "=r,f,f", has_side_effects=False,
                                         is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))
