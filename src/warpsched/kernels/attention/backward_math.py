"""Register-level math of warpsched's FlashAttention backward (``warpsched.kernels.attention.backward``):
P and dS recomputed from S, dP, the log-sum-exp and delta = rowsum(dO * O); dS into SMEM for the
dQ GEMM; dQ added into the fp32 accumulation buffer; dK and dV out of the registers.

The accumulators here are transposed (rows are keys, columns are queries: S^T = K Q^T), so the
per-query values (LSE, delta) are per column, and P^T / dS^T are the A operands of dV += P^T dO
and dK += dS^T Q straight from the registers (``attention.register_math.make_p`` / ``store_p``).
"""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

from . import masks as amasks
from . import poly_exp2
from . import register_math as amath

LOG2E = math.log2(math.e)
HALF = 64  # keys per consumer warp group (one WGMMA M); a CTA's K/V block is 2 * HALF keys
FLAT_THREADS = 128  # flat_dq: a warp group's threads, each one 16-byte chunk per 8 dQ columns


@cute.jit
def grads_of_scores(acc_s, acc_dp, p, ds, s_ds, g, v, n0, m0, head, batch, *, ctx):
    """From S^T and dP^T (keys ``n0 + row``, queries ``m0 + column``), in this order after both GEMMs
    retired: the queries' LSE and delta (``query_stats``), P^T (``probs``), dS^T (``dscores``)."""
    lse2, delta = make_stats(acc_s, v)
    bounds = g.seq_bounds(v.unit)  # read once: (first query row, query rows, first key, keys)
    query_stats(lse2, delta, g, v, m0, head, batch, bounds)
    probs(acc_s, lse2, g, v, n0, m0, head, batch, bounds[3])
    dscores(acc_s, acc_dp, p, ds, lse2, delta, s_ds, g, v, ctx=ctx)


def make_stats(acc_s, v):
    """Registers for the LSE (times log2 e) and delta of the queries this thread's columns hold."""
    cols = cute.size(amath.rows_view(v.sdp_mma, acc_s), mode=[1])
    return (cute.make_rmem_tensor(cute.make_layout(cols), cutlass.Float32),
            cute.make_rmem_tensor(cute.make_layout(cols), cutlass.Float32))


@cute.jit
def _columns(g, v):
    tidx, _, _ = cute.arch.thread_idx()
    thr = v.sdp_mma.get_slice(tidx % 128)
    return amath.rows_view(v.sdp_mma, thr.partition_C(cute.make_identity_tensor((HALF, g.sdp_cols))))


@cute.jit
def query_stats(lse2, delta, g, v, m0, head, batch, bounds):
    """LSE * log2 e and delta = rowsum(dO * O) of the queries ``m0 + column`` from global memory (plain
    loads: issued under the S / dP GEMMs when ``overlap_scores``). Queries past S_q get LSE +inf (P = 0)
    and delta 0. ``bounds``: ``g.seq_bounds(unit)``."""
    coords = _columns(g, v)
    if cutlass.const_expr(g.varlen):  # the unit's sequence's rows of the packed LSE and delta
        q_start, seqlen_q = bounds[0], bounds[1]
        m_lse = cute.domain_offset((q_start,), v.mLSE[(0, head, None)])
        m_delta = cute.domain_offset((q_start,), v.mDelta[(0, head, None)])
    else:
        m_lse, m_delta, seqlen_q = v.mLSE[(batch, head, None)], v.mDelta[(batch, head, None)], g.seqlen_q
    for j in cutlass.range_constexpr(cute.size(lse2)):
        m = m0 + coords[0, j][1]
        lse2[j] = cutlass.Float32.inf
        delta[j] = 0.0
        if m < seqlen_q:
            lse2[j] = m_lse[m] * LOG2E
            delta[j] = m_delta[m]


@cute.jit
def stats_from_smem(lse2, delta, g, v, s_lse, s_delta):
    """``query_stats`` from the Q / dO stage's copies (``tma_stats``: loaded by TMA with Q and dO from
    buffers the pre-pass padded with LSE +inf and delta 0, so no row test; its LSE already times log2 e,
    ``backward_prep.StatsPrep``); either may be None (``split_stats``: each read just before its use)."""
    coords = _columns(g, v)
    for j in cutlass.range_constexpr(cute.size(lse2 if lse2 is not None else delta)):
        if cutlass.const_expr(lse2 is not None):
            lse2[j] = s_lse[coords[0, j][1]]
        if cutlass.const_expr(delta is not None):
            delta[j] = s_delta[coords[0, j][1]]


@cute.jit
def probs(acc_s, lse2, g, v, n0, m0, head, batch, seqlen_k):
    """P^T = exp2(S^T * scale * log2 e - LSE * log2 e) in place of S^T (the forward's softcap first), zero
    where masked (key past S_k, or outside the query's window / causal range, or the user's mask_mod); with
    ``g.poly_exp2`` = k every k-th value by ``poly_exp2.exp2_poly`` (the FMA pipe), the rest by MUFU; with
    ``g.poly_interleave`` each polynomial depends on the MUFU value before it, so ptxas spreads the polynomials
    among the MUFU instructions instead of placing them all ahead of the MUFU run.
    ``g.mask_first``: the mask sets the exponent to -inf before the exp2 (2^-inf = +0 whatever the LSE), so its
    branch comes before the exp2 run, which then shares one basic block with ``dscores``' math and ptxas spreads
    the MUFU instructions among it; otherwise P is zeroed after the exp2 and the MUFU run stands alone."""
    coords = _columns(g, v)
    s_mn = amath.rows_view(v.sdp_mma, acc_s)
    cols = cute.size(s_mn, mode=[1])
    scale_log2 = v.scale_log2
    if cutlass.const_expr(g.softcap is not None):  # the forward's capped scores (masks.softcap_tile)
        amasks.softcap_tile(acc_s, v.scale, g.softcap)
    for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        for j in cutlass.range_constexpr(cols):
            s_mn[i, j] = s_mn[i, j] * scale_log2 - lse2[j]  # the exponent
    if cutlass.const_expr(g.mask_first):
        _mask(s_mn, coords, cols, g, n0, m0, head, batch, seqlen_k)
    for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        for j in cutlass.range_constexpr(cols):
            if cutlass.const_expr(poly_exp2.polynomial_column(i * cols + j, g.poly_exp2)):
                prev = None  # poly_interleave: the value before it (a MUFU one), which it is made to wait for
                if cutlass.const_expr(g.poly_interleave):
                    prev = s_mn[i, j - 1] if j > 0 else s_mn[i - 1, cols - 1]
                s_mn[i, j] = poly_exp2.exp2_poly(s_mn[i, j], poly_exp2.degree_for(g.dtype), prev)
            else:
                s_mn[i, j] = cute.math.exp2(s_mn[i, j], fastmath=True)
    if cutlass.const_expr(not g.mask_first):
        _mask(s_mn, coords, cols, g, n0, m0, head, batch, seqlen_k)


@cute.jit
def _mask(s_mn, coords, cols: cutlass.Constexpr, g, n0, m0, head, batch, seqlen_k):
    """``mask_keys`` and the user's mask_mod (as the forward applied it): with ``g.mask_first`` the exponent
    masked to -inf, else P to 0."""
    fill = 0.0
    if cutlass.const_expr(g.mask_first):
        fill = -math.inf
    mask_keys(s_mn, coords, cols, g, n0, m0, seqlen_k, fill)
    if cutlass.const_expr(g.mask_mod is not None):
        for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            for j in cutlass.range_constexpr(cols):
                if not g.mask_mod(batch, head, m0 + coords[i, j][1], n0 + coords[i, j][0]):
                    s_mn[i, j] = fill


@cute.jit
def dscores(acc_s, acc_dp, p, ds, lse2, delta, s_ds, g, v, *, ctx):
    """dS^T = P^T (dP^T - delta) in place of dP^T (times the softcap's derivative); P^T and dS^T rounded to
    16 bits into the A-operand registers ``p`` / ``ds``, and dS^T into this warp group's SMEM tile ``s_ds``
    (when given: viewed (key, query), fenced for the async proxy and synchronized over the warp group, so
    the dQ GEMM issued next reads every thread's part)."""
    s_mn = amath.rows_view(v.sdp_mma, acc_s)
    dp_mn = amath.rows_view(v.sdp_mma, acc_dp)
    cols = cute.size(s_mn, mode=[1])
    for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        for j in cutlass.range_constexpr(cols):
            dp_mn[i, j] = s_mn[i, j] * (dp_mn[i, j] - delta[j])
    if cutlass.const_expr(g.softcap is not None):
        softcap_grad(s_mn, dp_mn, lse2, cols, g.softcap)
    amath.store_p(acc_s, p, g.dtype)
    amath.store_p(acc_dp, ds, g.dtype)
    if cutlass.const_expr(s_ds is not None):
        write_ds(ds, acc_dp, v, s_ds, ctx=ctx)


@cute.jit
def softcap_grad(s_mn, dp_mn, lse2, cols: cutlass.Constexpr, softcap: cutlass.Constexpr):
    """dS *= 1 - t^2, the derivative of the cap y = softcap * tanh(x / softcap), with t = y / softcap read
    back from P (log2 P = y log2 e - LSE log2 e): no register tile kept for it. Where P is 0 (masked, or a
    query past S_q, whose LSE is +inf) dS is 0 whatever the factor, so t is clamped to [-1, 1], the range
    of tanh, which keeps the factor finite (0 * inf would be NaN)."""
    inv = 1.0 / (softcap * LOG2E)
    for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
        for j in cutlass.range_constexpr(cols):
            t = (cute.math.log2(cute.arch.fmax(s_mn[i, j], 1.1754944e-38), fastmath=True) + lse2[j]) * inv
            t = cute.arch.fmax(cute.arch.fmin(t, 1.0), -1.0)
            dp_mn[i, j] = dp_mn[i, j] * (1.0 - t * t)


@cute.jit
def mask_keys(s_mn, coords, cols: cutlass.Constexpr, g, n0, m0, seqlen_k, fill: cutlass.Constexpr):
    """P^T (or with ``fill`` -inf its exponent) = ``fill`` where key ``n0 + row`` is past ``seqlen_k`` or outside
    query ``m0 + column``'s keys [m - left, m + right] (a None side unbounded; causal: right = 0); only a block the
    keys' end or a bound crosses is masked."""
    right = g.window_right
    if cutlass.const_expr(g.causal and g.window_right is None):
        right = 0
    mask_limit = seqlen_k  # keys [n0, mask_limit) are visible to the block's first query
    if cutlass.const_expr(right is not None):
        mask_limit = cutlass.min(seqlen_k, m0 + (1 + right))
    need = n0 + HALF > mask_limit
    if cutlass.const_expr(g.window_left is not None):
        need = need | (n0 < m0 + g.sdp_cols - 1 - g.window_left)  # keys before the last query's first key
    if need:
        for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            for j in cutlass.range_constexpr(cols):
                limit = seqlen_k  # this query sees keys [first, limit)
                if cutlass.const_expr(right is not None):
                    limit = cutlass.min(seqlen_k, m0 + coords[i, j][1] + (1 + right))
                if n0 + coords[i, j][0] >= limit:
                    s_mn[i, j] = fill
                if cutlass.const_expr(g.window_left is not None):
                    if n0 + coords[i, j][0] < m0 + coords[i, j][1] - g.window_left:
                        s_mn[i, j] = fill


@cute.jit
def write_ds(ds, acc_dp, v, s_ds, *, ctx):
    """dS^T (16-bit registers in ``acc_dp``'s layout) into the warp group's SMEM tile, viewed (key, query);
    fenced for the async proxy (the dQ wgmma) and synchronized over the warp group."""
    write_tiles([(ds, s_ds)], acc_dp, v, ctx=ctx)


@cute.jit
def write_tiles(tiles, acc, v, *, ctx):
    """``write_ds`` for each (16-bit registers in ``acc``'s layout, SMEM tile viewed (key, query)) of ``tiles``,
    then one fence and one warp-group barrier for all of them."""
    tidx, _, _ = cute.arch.thread_idx()
    # stmatrix .trans: the tile is stored key-contiguous, across the accumulator's pairs of queries, so
    # element-wise 16-bit stores (and the shifts / permutes that feed them) become 16-byte rows of 8x8 blocks
    for regs, s_tile in tiles:
        atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=True, num_matrices=4),
                                   regs.element_type)
        tiled = cute.make_tiled_copy_C(atom, v.sdp_mma)
        thr = tiled.get_slice(tidx % 128)
        cute.copy(tiled, tiled.retile(cute.make_tensor(regs.iterator, acc.layout)), thr.partition_D(s_tile))
    cute.arch.fence_proxy("async.shared", space="cta")  # the wgmma (async proxy) that reads them
    ctx.sync_task()  # the warp group's named barrier (KernelContext.sync_task)


@cute.jit
def stage_dq(acc_dq, g, v, s_dq, stage, part: cutlass.Constexpr = 0):
    """dQ / scale into the warp group's fp32 dQ tile (the TMA reduce-add's source; ``g.dq_parts`` > 1: into
    its ``g.dq_part_cols`` columns ``part``), fenced so the TMA (async proxy) the dQ writer issues after this
    stage's barrier sees every thread's writes. The host's conversion of dQaccum multiplies by the scale
    (``backward_host.dq_from_accum``): one multiply per element of dQ, not one per step.

    The tile is swizzled (rows, columns), or with ``g.flat_dq`` in register order (``backward_post``): each
    thread's four values of an 8-column chunk are one 16-byte store beside its neighbours' (no bank
    conflict), at a fixed offset from one address."""
    tidx, _, _ = cute.arch.thread_idx()
    if cutlass.const_expr(g.flat_dq):
        chunks = g.dq_acc_tile[1] // 8  # the accumulator's 8-column chunks (dq_swap: of queries)
        values = cute.make_layout((4, FLAT_THREADS, g.dq_parts * chunks), stride=(1, 4, 4 * FLAT_THREADS))
        mine = cute.make_tensor(s_dq[(None, None, stage * g.flat_boxes)].iterator, values)
        dst = cute.flat_divide(mine[(None, tidx % FLAT_THREADS, None)], (4, chunks))[(None, None, 0, part)]
        cute.autovec_copy(cute.make_tensor(acc_dq.iterator, cute.make_layout((4, chunks))), dst)
    else:
        thr = v.dq_mma.get_slice(tidx % 128)
        tile = cute.local_tile(s_dq[(None, None, stage)], (g.dq_rows, g.dq_part_cols), (0, part))
        cute.autovec_copy(acc_dq, thr.partition_C(tile))
    cute.arch.fence_proxy("async.shared", space="cta")


@cute.jit
def reduce_dq(g, v, s_dq, m_block, head, batch, col_block, stage, complete: cutlass.Constexpr = False):
    """dQaccum[row block ``m_block`` (of ``g.dq_rows`` rows) of (batch, head)] += the dQ tile (stage ``stage``):
    one TMA reduce-add (the copy elects one lane of the warp, so the whole warp calls it), and every lane waits
    for its own bulk group, so the issuing lane has seen the TMA read the tile before it arrives (the buffer's
    rows are padded to whole Q blocks). ``complete``: waits until the add's writes are done (not only its SMEM
    reads), fenced from the async proxy, so a hand-over after it orders the next add after this one
    (dq_order). ``g.flat_dq``: the tile's values are contiguous in dQaccum (``FlashAttentionBackward._dq_target``)."""
    if cutlass.const_expr(g.flat_dq):
        col_blocks = g.head_dim // g.dq_cols
        if cutlass.const_expr(g.varlen):  # the sequence's tiles from its padded block on (as its LSE / delta)
            row_blocks = cute.size(v.mLSE, mode=[2]) // g.dq_rows
            first = g.padded_block0(v.unit) * (g.block_m // g.dq_rows)  # in dQ tiles' rows
            tile = (head * row_blocks + first + m_block) * col_blocks + col_block
        else:
            tile = g.flat_tile_index(batch, head, m_block, col_block)
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_dq, 0, cute.make_layout(1), cute.group_modes(s_dq, 0, 2),
                                                    cute.group_modes(v.mdQacc, 0, 2))
        for box in cutlass.range_constexpr(g.flat_boxes):  # the tile's boxes, stage by stage in SMEM too
            cute.copy(v.tma_dq, t_s[(None, stage * g.flat_boxes + box)], t_g[(None, tile * g.flat_boxes + box)])
    else:
        if cutlass.const_expr(g.varlen):  # the sequence's rows (a tile's rows past it add zeros: P = 0 there)
            g_dq = cute.flat_divide(g.rows_of(v.mdQacc, v.unit, head, batch),
                                    (g.dq_rows, g.dq_cols))[(None, None, None, col_block)]
        else:
            g_dq = cute.flat_divide(v.mdQacc, (g.dq_rows, g.dq_cols))[(None, None, None, col_block, head, batch)]
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(v.tma_dq, 0, cute.make_layout(1), cute.group_modes(s_dq, 0, 2),
                                                    cute.group_modes(g_dq, 0, 2))
        cute.copy(v.tma_dq, t_s[(None, stage)], t_g[(None, m_block)])
    cute.arch.cp_async_bulk_commit_group()
    if cutlass.const_expr(complete):
        cute.arch.cp_async_bulk_wait_group(0)
        cute.arch.fence_proxy("async.global")
    else:
        cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.jit
def _output(acc, factor, dtype):
    """An fp32 accumulator (times ``factor``, None: 1) rounded to the output dtype in registers."""
    out = cute.make_rmem_tensor_like(acc, dtype)
    if cutlass.const_expr(factor is None):
        out.store(acc.load().to(dtype))
    else:
        out.store((acc.load() * factor).to(dtype))
    return out


@cute.jit
def store_dkv(acc_dk, acc_dv, g, v, n_block, kv_head, batch, *, wg: cutlass.Constexpr):
    """dK * scale and dV of this warp group's 64 keys (``d_split``: its half of D for the CTA's 64 keys) into
    the (S_k, D) outputs (rows past S_k skipped)."""
    tidx, _, _ = cute.arch.thread_idx()
    thr = v.dkv_mma.get_slice(tidx % 128)
    block = n_block * g.key_halves + g.key_half(wg)
    col_block = wg if g.d_split else 0
    coords = amath.rows_view(v.dkv_mma, thr.partition_C(cute.make_identity_tensor((HALF, g.d_cols))))
    seqlen_k, scale = g.seq_bounds(v.unit)[3], v.scale
    for acc, m_out, factor in ((acc_dk, v.mdK, scale), (acc_dv, v.mdV, None)):
        out = _output(acc, factor, g.dtype)
        t_g = amath.rows_view(v.dkv_mma, thr.partition_C(
            cute.local_tile(g.rows_of(m_out, v.unit, kv_head, batch, key=True), (HALF, g.d_cols),
                            (block, col_block))))
        o_mn = amath.rows_view(v.dkv_mma, out)
        for i in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
            if block * HALF + coords[i, 0][0] < seqlen_k:
                for j in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                    t_g[i, j] = o_mn[i, j]


@cute.jit
def _store_staged(tma, m_t, staged, stage, g, v, n_block, kv_head, batch, *, wg: cutlass.Constexpr):
    """One TMA store of ``staged``'s 64-key tile ``stage`` to this warp group's keys of dK or dV (issued by one
    warp; the caller commits the bulk group and waits for its reads); ``varlen``: from the unit's sequence's
    first key of the packed tensor on."""
    if cutlass.const_expr(g.varlen):
        g_x = cute.flat_divide(g.rows_of(m_t, v.unit, kv_head, batch, key=True), (HALF, g.head_dim))[
            (None, None, None, 0)]
    else:
        g_x = cute.flat_divide(m_t, (HALF, g.head_dim))[(None, None, None, 0, kv_head, batch)]
    src, dst = cute.nvgpu.cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(staged, 0, 2),
                                                cute.group_modes(g_x, 0, 2))
    cute.copy(tma, src[(None, stage)], dst[(None, n_block * 2 + wg)])


@cute.jit
def store_dkv_tma(acc_dk, acc_dv, g, ctx, n_block, kv_head, batch, *, wg: cutlass.Constexpr, ds_stage=0):
    """``tma_store_dkv``: dV and dK * scale, one TMA store each; the TMA clips rows past S_k. Staged one after
    the other in this warp group's half of the V tile (only its own dP GEMMs read it, and they have all
    retired), each store read before the half is written again or released; or with ``dkv_in_ds`` both at
    once in the two 64 x 64 halves of the warp group's dS tile (``SmemDS.store_grads``: its stage ``ds_stage``),
    one wait for both. ``varlen``: a warp group whose 64 keys run past its sequence's (the sequence's last
    block) stores from registers instead (``store_dkv``), since the TMA would write the next sequence's rows;
    the condition is the same for the whole warp group, so its named barriers stay matched."""
    v = ctx.values
    if cutlass.const_expr(g.varlen):
        keys_end = (n_block * g.key_halves + g.key_half(wg)) * HALF + HALF
        if keys_end <= g.seq_bounds(v.unit)[3]:
            _store_dkv_rounds(acc_dk, acc_dv, g, ctx, n_block, kv_head, batch, wg=wg, ds_stage=ds_stage)
        else:
            store_dkv(acc_dk, acc_dv, g, v, n_block, kv_head, batch, wg=wg)
    else:
        _store_dkv_rounds(acc_dk, acc_dv, g, ctx, n_block, kv_head, batch, wg=wg, ds_stage=ds_stage)


@cute.jit
def _store_dkv_rounds(acc_dk, acc_dv, g, ctx, n_block, kv_head, batch, *, wg: cutlass.Constexpr, ds_stage=0):
    """``store_dkv_tma``'s TMA stores, staged in SMEM round by round."""
    v = ctx.values
    tidx, _, _ = cute.arch.thread_idx()
    thr = v.dkv_mma.get_slice(tidx % 128)
    first_warp = cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0
    dv, dk = (acc_dv, v.tma_dv, v.mdVt, None), (acc_dk, v.tma_dk, v.mdKt, v.scale)
    if cutlass.const_expr(g.dkv_in_ds):  # one round: both in the dS stage's (keys, D) tiles 2 s, 2 s + 1
        staged, rounds = getattr(v, f"sdKV{wg}"), (((dv, 2 * ds_stage), (dk, 2 * ds_stage + 1)),)
    else:  # two rounds through the same V half
        staged, rounds = v.sV, (((dv, wg),), ((dk, wg),))
    for parts in rounds:
        for out, i in parts:
            cute.autovec_copy(_output(out[0], out[3], g.dtype), thr.partition_C(staged[(None, None, i)]))
        cute.arch.fence_proxy("async.shared", space="cta")  # the TMA (async proxy) reads these writes
        ctx.sync_task()
        if first_warp:
            for out, i in parts:
                _store_staged(out[1], out[2], staged, i, g, v, n_block, kv_head, batch, wg=wg)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        ctx.sync_task()  # the round's stores have read it
