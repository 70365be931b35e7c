"""Host side of the attention forward over packed variable-length sequences
(``warpsched.ops.attention_varlen``, as ``flash_attn_varlen_func``): q (total_q, H, D), k and v (total_k,
H_kv, D), ``cu_seqlens_q`` / ``cu_seqlens_k`` the int32 offsets of the B sequences (B + 1 of them, from 0
to the total); the kernel (``forward.FlashAttentionVarlen``) reads every sequence's rows in place. One
compile per dtype / head dim / causal / masks; a kept plan per (shapes, strides, options) skips the
checks on later calls, as ``attention.host.attention``'s. The backward
(``attention_varlen_backward``, ``backward.FlashAttentionBackwardVarlen``) takes the same layout."""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute

from .. import _host
from .backward import BWD_HEAD_DIMS, FlashAttentionBackwardVarlen, FlashAttentionBackwardVarlenLive
from .backward_units import BLOCK_M as BWD_BLOCK_M, HALF, padded_first_block, padded_stats_rows
from . import live_units
from .forward import HEAD_DIMS, FlashAttentionVarlen, FlashAttentionVarlenLive
from .host import _tma_ready, softmax_scale, tuned_options
from .masks import AttentionConfigError, with_masks
from .register_math import WG_ROWS

_CACHE = {}
_PLANS = {}
VERDICT_OF = {}


# non-causal head dim 64 over sequences shorter than this: two consumer warp groups (128-row Q blocks), not the
# dense kernel's three (192 rows), which leave more of a short sequence's last block empty (docs/attention.md,
# "Variable-length batches")
SHORT_HD64_FULL = 1024

# the packed forward's unit order: a CTA claims its next live unit from the table's counter word (a two-stage
# WorkQueue the load warp fetches), or (STATIC_UNITS) takes every ctas-th unit of the table
DYNAMIC_UNITS = {"dynamic_units": 2, "load_fetches_units": True}
STATIC_UNITS = {"dynamic_units": False, "load_fetches_units": False}


def varlen_options(head_dim, causal, max_seqlen_q=None, group=1):
    """The packed forward's default options: ``queued_varlen_options``, the live units handed out as CTAs free
    up. On the GPU (H100) it took 0.925-0.987x the time of the units dealt in fixed turns
    (``static_varlen_options``) on five ragged batches, passed memcheck, racecheck and synccheck, and its O was
    bit for bit the static order's over 120 random batches (docs/attention.md, "Variable-length batches")."""
    return queued_varlen_options(head_dim, causal, max_seqlen_q, group)


def queued_varlen_options(head_dim, causal, max_seqlen_q=None, group=1):
    """``static_varlen_options`` with the live units handed out as CTAs free up (``DYNAMIC_UNITS``): the load
    warp claims a CTA's next unit from a two-stage queue on the table's counter word once a unit's loads are
    issued. The queue hands units out in table order, so causal units are not paired. With two warp groups the
    load warp group gets 32 registers (the warp groups 232): at 24 the fetch spilled, and ptxas then kept the
    warp groups' WGMMA descriptors in per-thread registers (48 ``R2UR`` a K/V tile at head dim 128 causal;
    ``tools/sass_loops.py``)."""
    options = dict(static_varlen_options(head_dim, causal, max_seqlen_q, group), causal_pairs=False, **DYNAMIC_UNITS)
    if options.get("wgs", 2) == 2:
        options.update(producer_regs=32, consumer_regs=232)
    return options


def static_varlen_options(head_dim, causal, max_seqlen_q=None, group=1):
    """The packed forward's options with the live units dealt in fixed turns (unit t to CTA t mod ctas), the
    base the other unit orders (``lpt_units``, every block with ``live_units=False``) start from: rows stored
    from registers (a 64-row TMA store would write into the next sequence), the units only the Q blocks that
    hold rows (``live_units``: ``live_units.LiveUnitTable`` lists them on the device before each launch), each
    task's unit read once a tile (``unit_in_regs``: 0.94-0.98x the time without), causal units in zigzag pairs
    without GQA (the tuned ``causal_pairs``, ``units._paired_live_coords``; with ``group`` > 1 query heads per
    K/V head the table's own order measured 0.95-0.99x their time); non-causal head dim 64 with
    ``max_seqlen_q`` < ``SHORT_HD64_FULL``: 128-row Q blocks."""
    options = dict(tuned_options(head_dim, causal), tma_store_o=False, o_buffer=False, live_units=True,
                   unit_in_regs=True, **STATIC_UNITS)
    if causal and group > 1:
        options["causal_pairs"] = False
    if head_dim == 64 and not causal and max_seqlen_q is not None and max_seqlen_q < SHORT_HD64_FULL:
        options["wgs"] = 2
    return options


def block_rows(options):
    """The Q rows of one forward unit for these kernel options (64 per consumer warp group)."""
    return WG_ROWS * options.get("wgs", 2)


def check_args(q, k, v, cu_seqlens_q, cu_seqlens_k):
    """Shapes, dtypes and devices; every message names the fix (duck-typed: runs without a GPU)."""
    named = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k}
    refusal = _host.non_tensor(named, ("shape", "dtype", "is_cuda"))
    if refusal:
        raise AttentionConfigError(refusal)
    for name, t in named.items():
        if not t.is_cuda:
            raise AttentionConfigError(f"{name} is on {t.device}; move it to the GPU")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if len(t.shape) != 3:
            raise AttentionConfigError(f"{name} has shape {tuple(t.shape)}; expected (total_tokens, heads, head_dim), "
                                       "the layout of flash_attn_varlen_func (sequences packed along the first dim)")
        if str(t.dtype) not in ("torch.bfloat16", "torch.float16"):
            raise AttentionConfigError(f"{name} is {t.dtype}; supported: torch.bfloat16, torch.float16")
    if not (q.dtype == k.dtype == v.dtype):
        raise AttentionConfigError(f"q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype}); use one dtype")
    if tuple(v.shape) != tuple(k.shape):
        raise AttentionConfigError(f"v has shape {tuple(v.shape)} but k {tuple(k.shape)}; they must match")
    (_, H, D), (_, Hk, Dk) = q.shape, k.shape
    if Dk != D or D not in HEAD_DIMS:
        raise AttentionConfigError(f"head dims q {D}, k {Dk}: they must match and be one of {HEAD_DIMS}")
    if Hk < 1 or H % Hk:
        raise AttentionConfigError(f"{H} query heads over {Hk} key/value heads: the query heads must be a "
                                   "multiple of the key/value heads (grouped-query attention)")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if len(t.shape) != 1 or str(t.dtype) != "torch.int32" or t.shape[0] < 2:
            raise AttentionConfigError(f"{name} is {tuple(t.shape)} {t.dtype}: expected a 1-D torch.int32 tensor of "
                                       "B + 1 offsets (0, len_0, len_0 + len_1, ..., total)")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise AttentionConfigError(f"cu_seqlens_q has {cu_seqlens_q.shape[0]} offsets and cu_seqlens_k "
                                   f"{cu_seqlens_k.shape[0]}: both hold B + 1 (one sequence of keys per sequence "
                                   "of queries)")


def _packed(t):
    """(total, heads, D) -> the kernel's (1, heads, total, D) view (``host._tma_ready``: a copy only when
    TMA cannot read the rows as they are)."""
    return _tma_ready(t.permute(1, 0, 2).unsqueeze(0))


def forward_kernel(head_dim, causal, dtype=cutlass.BFloat16, **options):
    """The forward for packed sequences: ``FlashAttentionVarlenLive`` with ``live_units``, else
    ``FlashAttentionVarlen``."""
    live = options.pop("live_units", False)
    cls = FlashAttentionVarlenLive if live else FlashAttentionVarlen
    return cls(dtype=dtype, head_dim=head_dim, causal=causal, **options)


def _kernel(key):
    dtype, head_dim, causal, options = key
    return forward_kernel(head_dim, causal, dtype, **{"max_ctas": _host.num_sms(), **dict(options)})


def fake_operands(dtype, head_dim, live=False):
    """Fake packed q, k, v, out (1, H, total, D), lse (1, H, total_q), the two int32 offset tensors (``live``: and
    the live-unit table) and ``max_seqlen_q``: every size but D symbolic."""
    from cutlass.cute.runtime import make_fake_tensor

    H, Hk, Tq, Tk, B1 = (cute.sym_int32() for _ in range(5))
    q, k, v, out = (_host.fake_bhsd(dtype, 1, h, s, head_dim) for h, s in ((H, Tq), (Hk, Tk), (Hk, Tk), (H, Tq)))
    cu_q, cu_k = (make_fake_tensor(cutlass.Int32, (B1,), (1,), assumed_align=4) for _ in range(2))
    table = (make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=8),) if live else ()
    return (q, k, v, out, _host.fake_rows(1, H, Tq, assumed_align=4), cu_q, cu_k, *table, cutlass.Int32(1))


def compile_for_cpu(arch="sm_90a", dtype=cutlass.BFloat16, head_dim=128, causal=False, **options):
    """Compile the varlen kernel for ``arch`` with fake operands (the CPU tests read its PTX)."""
    from cutlass.cute.runtime import make_fake_stream

    live = options.get("live_units", False)
    kern = forward_kernel(head_dim, causal, dtype, **options)
    return cute.compile(kern, *fake_operands(dtype, head_dim, live), cutlass.Float32(0.125), make_fake_stream(),
                        options=_host.ptx_options(arch))


def _compiled(key, args=None, backward=False):
    """The forward's (or ``backward``'s) kernel for ``key``: through TVM FFI (fake operands, called with
    torch tensors) or, without it, for the JIT executor with ``args``."""
    ffi = args is None
    ck = (("bwd",) if backward else ()) + key + (("tvm-ffi",) if ffi else ())
    if ck not in _CACHE:
        kern = (_backward_kernel if backward else _kernel)(key)
        if ffi:
            fakes = (fake_backward_operands(key[0], key[1], dict(key[3]).get("tma_stats", False),
                                            dict(key[3]).get("live_units", False)) if backward
                     else fake_operands(key[0], key[1], dict(key[3]).get("live_units", False)))
            _CACHE[ck] = cute.compile(kern, *fakes, cutlass.Float32(0.125), _host.fake_env_stream(),
                                      options=_host.ffi_options())
        else:
            _CACHE[ck] = cute.compile(kern, *args, options=_host.launch_options())
        _host.record_verdict(VERDICT_OF, ck[:len(ck) - ffi], kern)
    return _CACHE[ck]


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k=None, causal=False, scale=None,
                     return_lse=False, window_size=None, softcap=None, mask_mod=None, out=None, lse=None, options=None):
    """``warpsched.ops.attention_varlen``: out (total_q, H, D) and with ``return_lse`` the (H, total_q) fp32
    log-sum-exp (flash_attn_varlen_func's layout). ``max_seqlen_q`` must be at least the longest sequence's
    query count (rows past it are not computed, as in flash-attention); ``max_seqlen_k`` is accepted for
    flash_attn's signature and not needed. ``out`` / ``lse``: preallocated results of those shapes.
    ``options``: the kernel's (default ``varlen_options(D, causal, max_seqlen_q, H // H_kv)``)."""
    if not all(hasattr(t, "stride") for t in (q, k, v, cu_seqlens_q)):
        check_args(q, k, v, cu_seqlens_q, cu_seqlens_k)  # names what is not a tensor (the plan key reads strides)
    import torch

    if isinstance(window_size, list):
        window_size = tuple(window_size)
    pkey = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.get_device(),
            cu_seqlens_q.shape, causal, scale, window_size, softcap, mask_mod,
            isinstance(max_seqlen_q, int) and max_seqlen_q < SHORT_HD64_FULL,
            None if options is None else tuple(sorted(options.items())))
    plan = _PLANS.get(pkey)
    if plan is None:
        check_args(q, k, v, cu_seqlens_q, cu_seqlens_k)
        if isinstance(max_seqlen_q, bool) or not isinstance(max_seqlen_q, int) or max_seqlen_q < 0:
            raise AttentionConfigError(f"max_seqlen_q={max_seqlen_q!r}: expected the longest sequence's query count, "
                                       "an int (cu_seqlens_q.diff().max().item() computes it, with a host sync)")
        D = q.shape[2]
        group = q.shape[1] // k.shape[1]  # check_args: a whole number of query heads per K/V head
        chosen = varlen_options(D, causal, max_seqlen_q, group) if options is None else dict(options)
        chosen = with_masks(chosen, window_size, softcap, mask_mod)
        key = (_host.cutlass_dtype(q.dtype), D, bool(causal), tuple(sorted(chosen.items())))
        # live_units: the table kernel's block rows and order (None: sequence order, else the causal flag)
        table = ((block_rows(chosen), bool(causal) if chosen.get("lpt_units", False) else None)
                 if chosen.get("live_units", False) else None)
        plan = (key, softmax_scale(D, scale), table)
    key, scale_v, table = plan
    total_q, H, D = q.shape
    if out is None:
        out = torch.empty(total_q, H, D, device=q.device, dtype=q.dtype)
    elif tuple(out.shape) != (total_q, H, D) or out.dtype != q.dtype or out.stride(2) != 1:
        raise AttentionConfigError(f"out {tuple(out.shape)} {out.dtype}: expected q's shape and dtype, unit D stride")
    if lse is None:
        lse = torch.empty(H, total_q, device=q.device, dtype=torch.float32)
    elif tuple(lse.shape) != (H, total_q) or lse.dtype != torch.float32 or lse.stride(1) != 1:
        raise AttentionConfigError(f"lse {tuple(lse.shape)} {lse.dtype}: expected ({H}, {total_q}) float32")
    if max_seqlen_q == 0 or total_q == 0:  # nothing to compute (a batch of empty query sequences)
        lse.fill_(float("inf"))
        return (out, lse) if return_lse else out
    operands = [_packed(q), _packed(k), _packed(v), out.permute(1, 0, 2).unsqueeze(0), lse.unsqueeze(0)]
    cu = [cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()]
    if table is not None:  # the Q blocks that hold rows, listed on the device
        cu.append(live_units.build_table(cu[0], total_q, *table, int(max_seqlen_q)))
    if _host.ffi_enabled():
        _compiled(key)(*operands, *cu, int(max_seqlen_q), scale_v)
    else:
        args = ([_host.to_cute(t, 3) for t in operands[:4]] + [_host.to_cute(operands[4], 2)]
                + [_host.to_cute(t, 0) for t in cu]
                + [cutlass.Int32(max_seqlen_q), cutlass.Float32(scale_v), _host.current_stream()])
        _compiled(key, args)(*args)
    _PLANS[pkey] = plan
    return (out, lse) if return_lse else out


def _backward_kernel(key):
    dtype, head_dim, causal, options = key
    options = dict(options)
    options.pop("zero_in_prep", None)  # the host's (attention_varlen_backward)
    cls = FlashAttentionBackwardVarlenLive if options.pop("live_units", False) else FlashAttentionBackwardVarlen
    return cls(dtype=dtype, head_dim=head_dim, causal=causal, **options)


@functools.lru_cache(maxsize=None)
def backward_facts(key):
    """(keys per unit, flat dQ tile or None) of the packed backward for ``key``: the unit table's block size and
    the post-pass's tile (``backward_host.flat_dq_tile``'s answer, from the packed kernel, which takes options
    the dense one refuses: ``live_units``, ``unit_in_regs``, ``zero_in_prep``)."""
    kern = _backward_kernel(key)
    return kern.block_n, (kern.flat_tile if kern.flat_dq else None)


def fake_backward_operands(dtype, head_dim, tma_stats=False, live_units=False):
    """Fake packed q, k, v, dout (1, H, total, D), lse and delta (1, H, total_q; ``tma_stats``: (1, H, padded
    rows), strides 16-byte multiples), dq_accum (1, H, padded, D) fp32, dk, dv, the offsets and both longest
    lengths."""
    from cutlass.cute.runtime import make_fake_tensor

    H, Hk, Tq, Tk, Tp, B1, Ts = (cute.sym_int32() for _ in range(7))

    def packed(heads, total, dt=dtype):
        return _host.fake_bhsd(dt, 1, heads, total, head_dim)

    def rows():
        if tma_stats:
            return _host.fake_rows(1, H, Ts, stride_divisibility=4)
        return _host.fake_rows(1, H, Tq, assumed_align=4)

    cu_q, cu_k = (make_fake_tensor(cutlass.Int32, (B1,), (1,), assumed_align=4) for _ in range(2))
    table = (make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=4),) if live_units else ()
    return (packed(H, Tq), packed(Hk, Tk), packed(Hk, Tk), packed(H, Tq), rows(), rows(),
            packed(H, Tp, cutlass.Float32), packed(Hk, Tk), packed(Hk, Tk), cu_q, cu_k, *table, cutlass.Int32(1),
            cutlass.Int32(1))


def compile_backward_for_cpu(arch="sm_90a", dtype=cutlass.BFloat16, head_dim=128, causal=False, **options):
    """Compile the varlen backward for ``arch`` with fake operands (the CPU tests read its PTX)."""
    from cutlass.cute.runtime import make_fake_stream

    kern = _backward_kernel((dtype, head_dim, causal, tuple(sorted(options.items()))))
    return cute.compile(kern, *fake_backward_operands(dtype, head_dim, kern.tma_stats, kern.live_units),
                        cutlass.Float32(0.125), make_fake_stream(), options=_host.ptx_options(arch))


def stats_rows(cu_seqlens_q, total_q, padded, block_m=BWD_BLOCK_M):
    """The row of delta / the LSE the backward reads for each packed query row, (total_q,) int64 on the offsets'
    device (no host sync): the row itself, or with ``padded`` (``tma_stats``) where ``VarlenStatsPrep`` puts it,
    sequence b's rows from block ``backward_units.padded_first_block`` on."""
    import torch

    rows = torch.arange(total_q, device=cu_seqlens_q.device)
    if not padded:
        return rows
    cu = cu_seqlens_q.long()
    seq = torch.searchsorted(cu[1:], rows, right=True)  # the sequence of each row (empty ones hold none)
    start = cu[seq]
    return padded_first_block(start, seq, block_m) * block_m + (rows - start)


def fold_dlse(delta, dlse, cu_seqlens_q, padded, block_m=BWD_BLOCK_M):
    """delta -= dlse, row by row: d LSE_i / d s_ij = P_ij, so the LSE's gradient enters the backward as delta's
    (``backward_host``'s dense path does the same). delta (1, H, rows) in the backward's layout, dlse (H, total_q)."""
    rows = stats_rows(cu_seqlens_q, dlse.shape[1], padded, block_m)
    delta[0].index_add_(1, rows, dlse, alpha=-1.0)


def backward_fill(options):
    """How the packed backward allocates dQ, dK, dV and the dQ accumulator: ``torch.zeros``, or with
    ``zero_in_prep`` ``torch.empty`` (no fill kernels: every row of a sequence is written, dQ's by the
    post-pass, dK / dV's by their key block, zeros where no query sees it; rows outside every sequence are
    not, as in flash_attn's backward; the pre-pass zeroes the flat dQ accumulator's rows of each sequence,
    ``VarlenStatsPrep(zero_dq=True)``, which needs ``tma_stats`` and ``flat_dq``)."""
    import torch

    padded, flat = options.get("tma_stats", False), options.get("flat_dq", False)
    if not options.get("zero_in_prep", False):
        return torch.zeros
    if not (padded and flat):
        raise AttentionConfigError(f"zero_in_prep=True with tma_stats={padded}, flat_dq={flat}: the pre-pass zeroes "
                                   "the flat dQ accumulator it pads (tma_stats=True, flat_dq=True)")
    return torch.empty


def backward_options(head_dim, options, max_seqlen_k, window_size=None, softcap=None, mask_mod=None):
    """The packed backward kernel's options: the caller's, or ``backward_host.default_options(D, varlen=True)``,
    with the masks (``with_masks``). The defaults' ``live_units`` table numbers at most
    ``live_units.MAX_KEY_BLOCKS`` key blocks a sequence; past that (millions of keys) the defaults drop it and the
    plain packed kernel runs (the same program), where a caller's own ``live_units`` is refused by name."""
    from .backward_host import default_options

    chosen = with_masks(default_options(head_dim, varlen=True) if options is None else dict(options), window_size,
                        softcap, mask_mod)
    if options is None and -(-max_seqlen_k // HALF) > live_units.MAX_KEY_BLOCKS:
        chosen.pop("live_units", None)
    return chosen


def attention_varlen_backward(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              causal=False, scale=None, window_size=None, softcap=None, mask_mod=None, options=None,
                              dlse=None):
    """``warpsched.ops.attention_varlen_backward``: (dq, dk, dv) in q's / k's (total, heads, D) layout for the
    upstream ``dout``, given the forward's ``out`` and (H, total_q) ``lse``. dQ is accumulated in fp32 (TMA
    reduce-adds; a tile's rows past its sequence add zeros: their P is 0) and converted last. ``options``: the
    kernel's (default ``default_options(D, varlen=True)``; ``tma_stats`` pads LSE / delta per sequence,
    ``backward_prep.VarlenStatsPrep``). ``dlse`` (H, total_q): the LSE's own gradient where a caller used it
    (``fold_dlse``)."""
    import torch

    from .backward_host import checked_dlse, compiled_prep, compiled_varlen_post, compiled_varlen_prep, dq_from_accum

    check_args(q, k, v, cu_seqlens_q, cu_seqlens_k)
    total_q, H, D = q.shape
    if D not in BWD_HEAD_DIMS:
        raise AttentionConfigError(f"head dim {D}: the backward supports head dims {BWD_HEAD_DIMS}")
    for name, t in (("out", out), ("dout", dout)):
        if tuple(t.shape) != tuple(q.shape) or t.dtype != q.dtype:
            raise AttentionConfigError(f"{name} {tuple(t.shape)} {t.dtype}: expected q's shape {tuple(q.shape)} "
                                       f"and dtype {q.dtype}")
    if tuple(lse.shape) != (H, total_q) or str(lse.dtype) != "torch.float32":
        raise AttentionConfigError(f"lse {tuple(lse.shape)} {lse.dtype}: expected ({H}, {total_q}) float32, the "
                                   "forward's (ops.attention_varlen(..., return_lse=True))")
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise AttentionConfigError(f"{name}={n!r}: expected the longest sequence's length, an int")
    options = backward_options(D, options, max_seqlen_k, window_size, softcap, mask_mod)
    padded = options.get("tma_stats", False)
    flat = options.get("flat_dq", False)  # dQ tiles in register order, padded per sequence as LSE / delta
    zero_in_prep = bool(options.get("zero_in_prep", False))
    fill = backward_fill(options)
    dq = fill(q.shape, device=q.device, dtype=q.dtype)
    dk = fill(k.shape, device=k.device, dtype=k.dtype)
    dv = fill(v.shape, device=v.device, dtype=v.dtype)
    if total_q == 0 or k.shape[0] == 0 or max_seqlen_q == 0 or max_seqlen_k == 0:
        return tuple(t.zero_() for t in (dq, dk, dv)) if zero_in_prep else (dq, dk, dv)
    qv, kv, vv, ov, dov = (_packed(t) for t in (q, k, v, out, dout))
    block_m = options.get("block_m", BWD_BLOCK_M)
    # tma_stats: each sequence's rows from a block boundary (VarlenStatsPrep, backward_units.padded_stats_rows)
    rows = padded_stats_rows(total_q, cu_seqlens_q.shape[0] - 1, block_m) if padded else total_q
    delta = torch.empty(1, H, rows, device=q.device, dtype=torch.float32)
    acc_rows = rows if flat else -(-total_q // block_m) * block_m
    dq_acc = fill(1, H, acc_rows, D, device=q.device, dtype=torch.float32)
    dkv, dvv = (t.permute(1, 0, 2).unsqueeze(0) for t in (dk, dv))
    lse_v = lse.contiguous().unsqueeze(0)
    cu = [cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()]
    key = (_host.cutlass_dtype(q.dtype), D, bool(causal), tuple(sorted(options.items())))
    scale = softmax_scale(D, scale)
    if padded and not _host.ffi_enabled():
        raise AttentionConfigError("tma_stats with varlen launches through TVM FFI: pip install apache-tvm-ffi "
                                   "(or pass options without tma_stats)")
    if padded:
        lse_p = torch.empty_like(delta)
        compiled_varlen_prep(_host.cutlass_dtype(q.dtype), D, block_m=block_m, zero_dq=zero_in_prep)(
            ov, dov, lse_v, cu[0], delta, lse_p, dq_acc, int(max_seqlen_q))
        lse_v = lse_p
    elif _host.ffi_enabled():
        compiled_prep(_host.cutlass_dtype(q.dtype), D)(ov, dov, delta)
    else:
        delta.copy_((dov.float() * ov.float()).sum(-1))
    if dlse is not None:
        fold_dlse(delta, checked_dlse(dlse, (H, total_q), q.device), cu[0], padded, block_m)
    if options.get("live_units", False):  # the key blocks that hold keys, longest sequences first (on the device)
        block_n = backward_facts(key)[0]
        if -(-max_seqlen_k // block_n) > live_units.MAX_KEY_BLOCKS:
            raise AttentionConfigError(f"max_seqlen_k={max_seqlen_k}: the unit table numbers at most "
                                       f"{live_units.MAX_KEY_BLOCKS} key blocks a sequence; pass options without "
                                       "live_units for longer sequences")
        cu.append(live_units.build_backward_table(cu[1], k.shape[0], block_n, k.shape[1], int(max_seqlen_k)))
    if _host.ffi_enabled():
        _compiled(key, backward=True)(qv, kv, vv, dov, lse_v, delta, dq_acc, dkv, dvv, *cu, int(max_seqlen_q),
                                int(max_seqlen_k), scale)
    else:
        args = ([_host.to_cute(t, 3) for t in (qv, kv, vv, dov)] + [_host.to_cute(lse_v, 2), _host.to_cute(delta, 2)]
                + [_host.to_cute(t, 3) for t in (dq_acc, dkv, dvv)] + [_host.to_cute(t, 0) for t in cu]
                + [cutlass.Int32(max_seqlen_q), cutlass.Int32(max_seqlen_k), cutlass.Float32(scale),
                   _host.current_stream()])
        _compiled(key, args, backward=True)(*args)
    if flat:  # (flat_dq needs tma_stats, which needs TVM FFI: checked above)
        compiled_varlen_post(_host.cutlass_dtype(q.dtype), D, *backward_facts(key)[1], pad=block_m)(
            dq_acc, dq.permute(1, 0, 2).unsqueeze(0), cu[0], int(max_seqlen_q), scale)
    else:
        dq_from_accum(dq_acc[0, :, :total_q].transpose(0, 1), scale, dq.dtype, out=dq)
    return dq, dk, dv
