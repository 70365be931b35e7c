"""Host side of warpsched's FlashAttention backward (``warpsched.kernels.attention.backward``): argument
checks, the compile cache (one kernel per dtype / head dim / causal / options; shapes are dynamic),
the delta pre-pass and the dQ conversion around the kernel, and the CPU compile used by the tests."""
from __future__ import annotations


import cutlass
import cutlass.cute as cute

from .. import _host
from .forward import AttentionConfigError
from .backward import (BLOCK_M, BWD_HEAD_DIMS, FlashAttentionBackward, FlashAttentionBackwardDeterministic,
                       FlashAttentionBackwardFinish)
from .backward_math import LOG2E
from .backward_post import DQConvert, DQConvertVarlen, flat_to_rows
from .backward_prep import DeltaPrep, StatsPrep, StatsPrepCounts, VarlenStatsPrep
from .host import _tma_aligned, _tma_ready, check_args as _check_qkv, softmax_scale

_CACHE = {}
VERDICT_OF = {}  # compile key -> the exhaustive checker's verdict on the program the trace checked


def check_args(q, k, v, out, dout, lse):
    """The forward's checks on q, k, v, then out / dout (q's shape and dtype) and lse ((B, H, S_q) fp32)."""
    _check_qkv(q, k, v)
    like_q = " (of q's shape and dtype)"
    refusal = _host.non_tensor({"out": out, "dout": dout, "lse": lse}, hints={
        "out": like_q, "dout": like_q, "lse": " (the forward's log-sum-exp, ops.attention(..., return_lse=True))"})
    if refusal:
        raise AttentionConfigError(refusal)
    B, H, Sq, D = q.shape
    if D not in BWD_HEAD_DIMS:
        raise AttentionConfigError(f"head dim {D}: the backward supports head dims {BWD_HEAD_DIMS}; use "
                                   "torch.nn.functional.scaled_dot_product_attention's backward for others")
    for name, t in (("out", out), ("dout", dout)):
        if tuple(t.shape) != tuple(q.shape) or t.dtype != q.dtype:
            raise AttentionConfigError(f"{name} {tuple(t.shape)} {t.dtype}: expected q's shape {tuple(q.shape)} "
                                       f"and dtype {q.dtype}")
    if tuple(lse.shape) != (B, H, Sq) or str(lse.dtype) != "torch.float32":
        raise AttentionConfigError(f"lse {tuple(lse.shape)} {lse.dtype}: expected ({B}, {H}, {Sq}) float32, the "
                                   "forward's log-sum-exp (ops.attention(..., return_lse=True))")


def fake_operands(dtype, head_dim, deterministic=False, tma_stats=False, dq_finish=False):
    """Fake q, k, v, dout (B, H, S, D), lse and delta (B, H, S_q) fp32 (``tma_stats``: (B, H, S_pad), strides
    16-byte multiples), dq_accum (B, H, S_pad, D) fp32, dk, dv: sizes but D symbolic, 16-byte aligned
    strides; ``deterministic``: and the Int32 turn words; ``dq_finish``: the Int32 count words and dQ."""
    from cutlass.cute.runtime import make_fake_tensor

    B, H, Hk, Sq, Sk, Sp = (cute.sym_int32() for _ in range(6))

    def bhsd(heads, seq, dt=dtype):
        return _host.fake_bhsd(dt, B, heads, seq, head_dim)

    def rows():
        return _host.fake_rows(B, H, Sp, stride_divisibility=4) if tma_stats else _host.fake_rows(B, H, Sq)
    out = (bhsd(H, Sq), bhsd(Hk, Sk), bhsd(Hk, Sk), bhsd(H, Sq), rows(), rows(), bhsd(H, Sp, cutlass.Float32),
           bhsd(Hk, Sk), bhsd(Hk, Sk))
    if deterministic or dq_finish:
        out += (make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=4),)
    if dq_finish:
        out += (bhsd(H, Sq),)
    return out


def _kernel(kern_key):
    dtype, head_dim, causal, options = kern_key
    options = dict(options)
    if options.pop("deterministic", False):
        return FlashAttentionBackwardDeterministic(dtype=dtype, head_dim=head_dim, causal=causal, **options)
    if options.get("dq_finish", False):
        return FlashAttentionBackwardFinish(dtype=dtype, head_dim=head_dim, causal=causal, **options)
    return FlashAttentionBackward(dtype=dtype, head_dim=head_dim, causal=causal, **options)


def compiled(kern_key, args):
    if kern_key not in _CACHE:
        kern = _kernel(kern_key)
        _CACHE[kern_key] = cute.compile(kern, *args, options=_host.launch_options())
        _host.record_verdict(VERDICT_OF, kern_key, kern)
    return _CACHE[kern_key]


def fake_prep_operands(dtype, head_dim):
    """Fake O, dO (B, H, S, D) and delta (B, H, S) fp32 for the pre-pass."""
    B, H, S = (cute.sym_int32() for _ in range(3))
    return (_host.fake_bhsd(dtype, B, H, S, head_dim), _host.fake_bhsd(dtype, B, H, S, head_dim),
            _host.fake_rows(B, H, S, assumed_align=None))


def compiled_prep(dtype, head_dim, arch=None, padded=False, counts=None):
    """The delta pre-pass for TVM-FFI calls ``f(out, dout, delta)`` (``arch``: a CPU compile for that arch);
    ``padded``: ``StatsPrep``, ``f(out, dout, lse, delta, lse_padded, dq_accum)`` with (B, H, S_pad) outputs,
    dq_accum (B, H, S_pad, D) fp32 zeroed; ``counts`` (a Q block's rows): ``StatsPrepCounts``, and the in-kernel dQ
    finish's Int32 words (one per (batch, head, Q block)) zeroed, ``f(..., dq_accum, counts)``."""
    key = ("prep", dtype, head_dim, arch, padded, counts)
    if key not in _CACHE:
        options, stream = _host.fake_target(arch)
        if padded:
            B, H, S, Sp = (cute.sym_int32() for _ in range(4))
            fakes = (_host.fake_bhsd(dtype, B, H, S, head_dim), _host.fake_bhsd(dtype, B, H, S, head_dim),
                     _host.fake_rows(B, H, S, assumed_align=None), _host.fake_rows(B, H, Sp, stride_divisibility=4),
                     _host.fake_rows(B, H, Sp, stride_divisibility=4),
                     _host.fake_bhsd(cutlass.Float32, B, H, Sp, head_dim))
            if counts:
                from cutlass.cute.runtime import make_fake_tensor

                fakes += (make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=4),)
                _CACHE[key] = cute.compile(StatsPrepCounts(dtype, head_dim, counts), *fakes, stream, options=options)
            else:
                _CACHE[key] = cute.compile(StatsPrep(dtype, head_dim), *fakes, stream, options=options)
        else:
            _CACHE[key] = cute.compile(DeltaPrep(dtype, head_dim), *fake_prep_operands(dtype, head_dim), stream,
                                       options=options)
    return _CACHE[key]


def compiled_varlen_prep(dtype, head_dim, arch=None, block_m=BLOCK_M, zero_dq=False):
    """``backward_prep.VarlenStatsPrep`` for TVM-FFI calls ``f(out, dout, lse, cu_seqlens_q, delta, lse_padded,
    dq_accum, max_seqlen_q)`` on (1, H, T) views and (1, H, T_pad) outputs, padded per ``block_m`` rows, with
    ``zero_dq`` the flat (1, H, T_pad, D) dQ accumulator zeroed there (``arch``: a CPU compile for that arch)."""
    from cutlass.cute.runtime import make_fake_tensor

    key = ("varlen_prep", dtype, head_dim, arch, block_m, zero_dq)
    if key not in _CACHE:
        options, stream = _host.fake_target(arch)
        H, T, Tp, B1 = (cute.sym_int32() for _ in range(4))
        fakes = (_host.fake_bhsd(dtype, 1, H, T, head_dim), _host.fake_bhsd(dtype, 1, H, T, head_dim),
                 _host.fake_rows(1, H, T, assumed_align=4),
                 make_fake_tensor(cutlass.Int32, (B1,), (1,), assumed_align=4),
                 _host.fake_rows(1, H, Tp, stride_divisibility=4), _host.fake_rows(1, H, Tp, stride_divisibility=4),
                 _host.fake_bhsd(cutlass.Float32, 1, H, cute.sym_int32(), head_dim), cutlass.Int32(1))
        _CACHE[key] = cute.compile(VarlenStatsPrep(dtype, head_dim, block_m, zero_dq), *fakes, stream,
                                   options=options)
    return _CACHE[key]


def compiled_post(dtype, head_dim, dq_cols, parts, rows=0, arch=None):
    """``backward_post.DQConvert`` for TVM-FFI calls ``f(dq_accum, dq, scale)`` (``arch``: a CPU compile;
    ``rows`` > 0: transposed tiles of that many query rows)."""
    key = ("post", dtype, head_dim, dq_cols, parts, rows, arch)
    if key not in _CACHE:
        options, stream = _host.fake_target(arch)
        B, H, S, Sp = (cute.sym_int32() for _ in range(4))
        fakes = (_host.fake_bhsd(cutlass.Float32, B, H, Sp, head_dim), _host.fake_bhsd(dtype, B, H, S, head_dim))
        _CACHE[key] = cute.compile(DQConvert(dtype, head_dim, dq_cols, parts, rows), *fakes, cutlass.Float32(1.0),
                                   stream, options=options)
    return _CACHE[key]


def compiled_varlen_post(dtype, head_dim, dq_cols, parts, rows=0, arch=None, pad=BLOCK_M):
    """``backward_post.DQConvertVarlen`` for TVM-FFI calls ``f(dq_accum, dq, cu_seqlens_q, max_seqlen_q, scale)``
    on a (1, H, T_pad, D) flat accumulator (sequences padded per ``pad`` rows, the kernel's ``block_m``) and a
    (1, H, T, D) view of dQ (``arch``: a CPU compile; ``rows``: 0, the packed kernel's tiles are never
    transposed)."""
    from cutlass.cute.runtime import make_fake_tensor

    assert rows == 0, "the packed backward refuses block_m=80 (FlashAttentionBackward)"

    key = ("varlen_post", dtype, head_dim, dq_cols, parts, arch, pad)
    if key not in _CACHE:
        options, stream = _host.fake_target(arch)
        H, T, Tp, B1 = (cute.sym_int32() for _ in range(4))
        fakes = (_host.fake_bhsd(cutlass.Float32, 1, H, Tp, head_dim), _host.fake_bhsd(dtype, 1, H, T, head_dim),
                 make_fake_tensor(cutlass.Int32, (B1,), (1,), assumed_align=4), cutlass.Int32(1))
        _CACHE[key] = cute.compile(DQConvertVarlen(dtype, head_dim, dq_cols, parts, pad), *fakes, cutlass.Float32(1.0),
                                   stream, options=options)
    return _CACHE[key]


def flat_dq_tile(kern_key):
    """(dq_cols, parts, transposed rows) of the kernel's flat dQaccum tiles (``flat_dq``), or None (rows and columns); the
    tile depends on the options alone, so the packed kernel's key (``varlen``) answers the same way."""
    key = ("flat", kern_key)
    if key not in _CACHE:
        kern = _kernel(kern_key)
        _CACHE[key] = kern.flat_tile if kern.flat_dq else None
    return _CACHE[key]


def compiled_ffi(kern_key):
    """The kernel for TVM-FFI calls: compiled once with fake operands; called with torch tensors."""
    key = kern_key + ("tvm-ffi",)
    if key not in _CACHE:
        kern = _kernel(kern_key)
        _CACHE[key] = cute.compile(kern, *fake_operands(kern_key[0], kern_key[1], kern.deterministic, kern.tma_stats,
                                                        kern.dq_finish),
                                   cutlass.Float32(0.125), _host.fake_env_stream(), options=_host.ffi_options())
        _host.record_verdict(VERDICT_OF, kern_key, kern)
    return _CACHE[key]


# head dim 256 with the warp groups splitting D alone (FlashAttentionBackward.d_split), the LSE / delta by TMA: the
# base the query split adds to (and the bench's "dsplit" side)
D_SPLIT_OPTIONS = {"tma_stats": True}


def default_options(head_dim, varlen=False, full=False, deterministic=False):
    """The kernel options a call without any uses: ``shared_ds`` (head dim 128: dQ split by columns; head dim
    64: with 128-row Q blocks, ``block_m=128``, split by rows), ``tma_stats`` (LSE / delta by TMA with Q / dO),
    ``tma_store_dkv`` (dK / dV by TMA), ``dq_stages=2`` (two dQ tiles per warp group on their way to the
    writer warp), ``flat_dq`` (dQ tiles in register order, ``backward_post``) and at head dim 128
    ``overlap_dq`` with ``early_stats``; the packed (``varlen``) kernel takes the same, with ``unit_in_regs``
    (the CTA's unit and sequence bounds read once a tile), ``zero_in_prep`` (the pre-pass zeroes the flat dQ
    accumulator: no fill kernel) and ``live_units`` (a CTA per key block that holds keys, from a table built on
    the device, longest sequences first); head dim 256 splits D between the warp groups and takes ``tma_stats``,
    and splits the step's queries between them for S / dP (``split_queries`` with ``own_first``), dense or
    packed, with or without a window, mask_mod, softcap or the deterministic order. What each is worth:
    docs/attention.md ("Backward", "Variable-length batches"). ``full``: the call is dense, not causal, and
    has no window, mask_mod, softcap or deterministic order; at head dim 64 such a call also takes ``dq_defer``
    (each step's dQ GEMM issued at the next step). ``grid3d`` (the CTA's unit read from a (key blocks, K/V heads,
    batches) grid) at head dim 64, and at head dim 128 with ``full``; not with ``varlen`` or ``deterministic``,
    whose units are counted by a linear index. Head dim 128 takes ``mask_first`` (P's mask on the exponent,
    before the exp2, so the MUFU instructions interleave with dS's math), but not with ``deterministic``."""
    if head_dim == 256:  # the query split: the kernel 1.03-1.08x the D split alone on the H200
        return dict(D_SPLIT_OPTIONS, split_queries=True, own_first=True)
    # head dim 64: 128-row Q blocks, dQ shared by rows (1.06-1.07x the 64-row kernel on the H200); flat_dq:
    # the call 1.05-1.09x at head dim 64, 0.99-1.05x at head dim 128 (at head dim 256 0.95x: not taken there);
    # head dim 128: overlap_dq (dQ staged under the dK GEMM) with early_stats (LSE / delta read before the S / dP
    # GEMMs), the kernel 1.04-1.10x (at head dim 64 overlap_dq measured 0.98x)
    if head_dim == 128:
        options = {"shared_ds": True, "overlap_dq": True, "early_stats": True}
        if not deterministic:  # mask_first: the kernel 0.988-0.989x the time at locked clocks (1.05-1.06x slower at
            # head dim 64); the deterministic kernel keeps the order its checks ran with
            options["mask_first"] = True
    else:
        options = {"shared_ds": True, "block_m": 128}
    options = dict(options, tma_stats=True, tma_store_dkv=True, dq_stages=2, flat_dq=True)
    if full and head_dim == 64 and not varlen:  # the kernel 0.968-0.973x the time at locked clocks on the long
        # non-causal rows, 0.992x on 16x16x1024; causal rows 1.02x slower, so not taken there
        options["dq_defer"] = True
    if not varlen and not deterministic and (head_dim == 64 or full):  # grid3d: the kernel 0.967-0.985x the time
        # at locked clocks at head dim 64, 0.977-0.989x on non-causal head dim 128 (causal 1.02x slower: not taken)
        options["grid3d"] = True
    if varlen:  # the packed call 0.72-1.04x the time of the packed options before
        # (64-row Q blocks, dK / dV from registers; hd64 causal 0.72x; docs/attention.md); live_units: only the
        # key blocks that hold keys, longest sequences first (0.985-1.0x in device time, 1.04-1.08x eager)
        options.update(unit_in_regs=True, zero_in_prep=True, live_units=True)
    return options


def prepare_backward(q, k, v, out, dout, lse, causal=False, scale=None, dk=None, dv=None, window_size=None,
                     mask_mod=None, softcap=None, deterministic=False, dq_acc=None, **options):
    """Check the inputs, run the delta pre-pass, compile (once per dtype / head dim / causal / options) and
    return ``(launch, dq_accum, dk, dv)``: ``launch()`` runs the kernel alone (what a benchmark times apart
    from the pre-pass); dq_accum (and with ``deterministic`` the turn words) must be zeroed before each
    launch. dq_accum receives dQ / scale (fp32): ``finish_dq`` makes dQ of it. With ``dq_finish=True`` the
    second value is dQ itself, which the kernel writes (``launch`` zeroes the count words before a repeat).
    ``dq_acc`` (with ``dk`` / ``dv``): the buffers of an earlier call to reuse, so that two kernels timed side by
    side write the same memory (fp32, (B, H, S_q rounded up to the Q block, D), contiguous)."""
    return _prepare(q, k, v, out, dout, lse, causal, scale, dk, dv, window_size, mask_mod, softcap, deterministic,
                    dq_acc=dq_acc, **options)[:4]


def _options_and_key(dtype, head_dim, causal, options, window_size, mask_mod, softcap, deterministic):
    """(the kernel's options, its compile key): the caller's options or ``default_options``, with the forward's
    sliding window, mask_mod and softcap and the deterministic flag (the kernel validates them: attention.masks)."""
    if not options:
        plain = window_size is None and mask_mod is None and softcap is None and not deterministic
        options = default_options(head_dim, full=plain and not causal, deterministic=bool(deterministic))
    extra = {"window_size": None if window_size is None else tuple(window_size), "mask_mod": mask_mod,
             "softcap": softcap, "deterministic": True if deterministic else None}
    options = dict(options, **{k: x for k, x in extra.items() if x is not None})
    return options, (_host.cutlass_dtype(dtype), head_dim, bool(causal), tuple(sorted(options.items())))


def _prepare(q, k, v, out, dout, lse, causal=False, scale=None, dk=None, dv=None, window_size=None,
             mask_mod=None, softcap=None, deterministic=False, dlse=None, dq_acc=None, **options):
    """``prepare_backward``, and the kernel's flat dQ tile (``flat_dq_tile``) as a fifth value. ``dlse``: the
    upstream gradient of the LSE (``attention_backward``), folded into delta."""
    check_args(q, k, v, out, dout, lse)
    import torch

    B, H, Sq, D = q.shape
    q, k, v, dout = (_tma_ready(t) for t in (q, k, v, dout))
    out = _tma_ready(out)
    options, kern_key = _options_and_key(q.dtype, D, causal, options, window_size, mask_mod, softcap, deterministic)
    lse = lse.contiguous()
    block_m = options.get("block_m", BLOCK_M)  # the kernel's Q block: dQaccum, LSE / delta padded to whole ones
    sp = (Sq + block_m - 1) // block_m * block_m
    finish = bool(options.get("dq_finish"))  # the kernel writes dQ: one Int32 word per Q block, zeroed with dQaccum
    counts = None
    if finish:  # StatsPrepCounts zeroes them with TVM FFI (it needs tma_stats: refused by the kernel without it)
        counts = (torch.empty if _host.ffi_enabled() else torch.zeros)(B * H * (sp // block_m), device=q.device,
                                                                       dtype=torch.int32)
    prep_zeroes = options.get("tma_stats") and _host.ffi_enabled()  # the pre-pass zeroes dQ's accumulator too
    if dq_acc is not None:  # a caller's buffer (prepare_backward)
        if (tuple(dq_acc.shape) != (B, H, sp, D) or dq_acc.dtype != torch.float32 or not dq_acc.is_contiguous()
                or dq_acc.device != q.device):
            raise AttentionConfigError(f"dq_acc {tuple(dq_acc.shape)} {dq_acc.dtype}: expected a contiguous float32 "
                                       f"tensor of shape {(B, H, sp, D)} on {q.device} (S_q rounded up to the "
                                       f"kernel's {block_m}-row Q block), or dq_acc=None")
        if not prep_zeroes:
            dq_acc.zero_()
    elif prep_zeroes:
        dq_acc = torch.empty(B, H, sp, D, device=q.device, dtype=torch.float32)
    else:
        dq_acc = torch.zeros(B, H, sp, D, device=q.device, dtype=torch.float32)
    if options.get("tma_stats"):  # delta and the LSE padded to whole Q blocks (StatsPrep), for the kernel's TMA
        delta = torch.empty(B, H, sp, device=q.device, dtype=torch.float32)
        lse_padded = torch.empty(B, H, sp, device=q.device, dtype=torch.float32)
        if _host.ffi_enabled():
            counted = {"counts": block_m} if finish else {}  # StatsPrepCounts zeroes the finish's words too
            compiled_prep(_host.cutlass_dtype(q.dtype), D, padded=True, **counted)(
                out, dout, lse, delta, lse_padded, dq_acc, *([counts] if finish else []))
        else:
            delta.fill_(0.0)
            lse_padded.fill_(float("inf"))
            delta[:, :, :Sq] = (dout.float() * out.float()).sum(-1)
            lse_padded[:, :, :Sq] = lse * LOG2E  # as StatsPrep: the LSE times log2 e
        lse = lse_padded
    elif _host.ffi_enabled():
        delta = torch.empty(B, H, Sq, device=q.device, dtype=torch.float32)
        compiled_prep(_host.cutlass_dtype(q.dtype), D)(out, dout, delta)
    else:
        delta = (dout.float() * out.float()).sum(-1)
    if dlse is not None:  # d LSE_i / d s_ij = P_ij, so dS = P (dP - delta) + P dLSE = P (dP - (delta - dLSE))
        delta[:, :, :Sq].sub_(checked_dlse(dlse, (B, H, Sq), q.device))
    # contiguous whatever k's strides (a view of a fused QKV projection has strided heads): not empty_like
    dk = torch.empty(k.shape, device=k.device, dtype=k.dtype) if dk is None else dk
    dv = torch.empty(v.shape, device=v.device, dtype=v.dtype) if dv is None else dv
    for name, t in (("dk", dk), ("dv", dv)):
        if tuple(t.shape) != tuple(k.shape) or t.dtype != k.dtype or not t.is_contiguous():
            raise AttentionConfigError(f"{name} {tuple(t.shape)} {t.dtype}: expected a contiguous tensor of k's "
                                       f"shape {tuple(k.shape)} and dtype {k.dtype}")
    scale = softmax_scale(D, scale)
    # deterministic: one Int32 turn word per (batch, query head, Q block), zero at launch (dq_order)
    turns = (torch.zeros(B * H * (sp // block_m), device=q.device, dtype=torch.int32),) if deterministic else ()
    if finish:
        dq = torch.empty(B, H, Sq, D, device=q.device, dtype=q.dtype)
        turns = (counts, dq)
    if _host.ffi_enabled():
        f, args = compiled_ffi(kern_key), (q, k, v, dout, lse, delta, dq_acc, dk, dv, *turns, scale)
    else:
        args = ([_host.to_cute(t, 3) for t in (q, k, v, dout)] + [_host.to_cute(lse, 2), _host.to_cute(delta, 2)]
                + [_host.to_cute(t, 3) for t in (dq_acc, dk, dv)]
                + [_host.to_cute(t, 3 if t.dim() == 4 else 0) for t in turns]
                + [cutlass.Float32(scale), _host.current_stream()])
        f = compiled(kern_key, args)
    flat = flat_dq_tile(kern_key)
    if finish:
        launches = []

        def launch():  # the words count each Q block's key blocks: zeroed again before every later launch
            if launches:
                counts.zero_()
            launches.append(1)
            f(*args)
        return launch, dq, dk, dv, FINISHED
    if turns:
        def launch():  # the words are left at the last key block's turn: zeroed before every launch
            turns[0].zero_()
            f(*args)
        return launch, dq_acc, dk, dv, flat
    return (lambda: f(*args)), dq_acc, dk, dv, flat


def dq_from_accum(dq_acc, scale, dtype, out=None):
    """dQ = scale * dQaccum (the kernel adds dQ / scale: ``backward_math.stage_dq``), rounded to ``dtype`` in
    one elementwise pass (into ``out`` when given)."""
    import torch

    if out is None:
        out = torch.empty(dq_acc.shape, device=dq_acc.device, dtype=dtype)
    return torch.mul(dq_acc, scale, out=out)


def attention_backward(q, k, v, out, dout, lse, causal=False, scale=None, dk=None, dv=None, window_size=None,
                       mask_mod=None, softcap=None, deterministic=False, dlse=None, **options):
    """(dq, dk, dv) of ``out = attention(q, k, v, causal, scale)`` for the upstream gradient ``dout``, given
    the forward's ``lse``. dk / dv have k's shape (summed over each K/V head's query heads: GQA).
    delta = rowsum(dout * out) is computed by the pre-pass first; dQ is accumulated in fp32 and converted last.
    ``dlse`` (B, H, S_q): the upstream gradient of the LSE too, where a caller used it (flash_attn's
    ``return_lse``), subtracted from delta."""
    plain = not options and dk is None and dv is None and mask_mod is None and dlse is None  # a model's call
    pkey = _plan_key(q, k, v, out, dout, lse, causal, scale, window_size, softcap, deterministic) if plain else None
    if pkey is not None:
        try:
            plan = _PLANS.get(pkey)
        except TypeError:  # an unhashable scale or softcap: the full path names it
            pkey = plan = None
        if plan is not None:
            try:
                return plan(q, k, v, out, dout, lse)
            except Exception:  # noqa: BLE001 - a misaligned base, say: the full path copies or names it
                pass
    launch, dq_acc, dk, dv, flat = _prepare(q, k, v, out, dout, lse, causal, scale, dk, dv, window_size, mask_mod,
                                            softcap, deterministic, dlse, **options)
    launch()
    if pkey is not None and _plannable(q, k, v, out, dout, lse):
        _PLANS[pkey] = _plan(q.dtype, q.shape[3], causal, softmax_scale(q.shape[3], scale), window_size, softcap,
                             deterministic)
    return finish_dq(dq_acc, flat, softmax_scale(q.shape[3], scale), q.dtype, q.shape[2]), dk, dv


def checked_dlse(dlse, shape, device):
    """``dlse`` as fp32, or AttentionConfigError naming what it should be: the LSE's gradient, of the LSE's
    ``shape`` ((B, H, S_q); varlen's (H, total_q)) on q's ``device``."""
    if tuple(getattr(dlse, "shape", ())) != tuple(shape) or not dlse.is_floating_point() or dlse.device != device:
        raise AttentionConfigError(f"dlse {tuple(getattr(dlse, 'shape', ()))}: expected the LSE's gradient, a "
                                   f"floating-point {tuple(shape)} tensor on q's device")
    return dlse.float()


_PLANS = {}  # (shapes, strides, dtypes, device, causal, scale, window, softcap, deterministic) -> _plan's run


def _plan_key(q, k, v, out, dout, lse, causal, scale, window_size, softcap, deterministic):
    """The key of a call's plan in ``_PLANS``, or None for arguments that are not tensors or a window that is not a
    sequence (the full path's checks name what is wrong with them)."""
    try:
        return (q.shape, k.shape, q.stride(), k.stride(), v.stride(), out.stride(), dout.stride(), lse.stride(),
                q.dtype, k.dtype, v.dtype, out.dtype, dout.dtype, lse.dtype, q.get_device(), causal, scale,
                None if window_size is None else tuple(window_size), softcap, deterministic)
    except (AttributeError, TypeError):
        return None


def _plannable(q, k, v, out, dout, lse):
    """Whether the full path ran on the inputs as they are through TVM FFI with the LSE / delta pre-pass
    (``tma_stats``, every default kernel): what ``_plan`` repeats."""
    return (_host.ffi_enabled() and all(_tma_aligned(t) for t in (q, k, v, out, dout)) and lse.is_contiguous()
            and default_options(q.shape[3]).get("tma_stats", False))


def _plan(dtype, head_dim, causal, scale, window_size, softcap, deterministic):
    """``run(q, k, v, out, dout, lse) -> (dq, dk, dv)``: what ``attention_backward``'s full path launches for
    a key it checked once (the default options, TVM FFI, ``tma_stats``), without its checks and
    decisions: the outputs allocated, the pre-pass, the kernel and the dQ conversion (the kernels check
    shapes, strides and alignment themselves)."""
    import torch

    options, kern_key = _options_and_key(dtype, head_dim, causal, {}, window_size, None, softcap, deterministic)
    cdtype, block_m = kern_key[0], options.get("block_m", BLOCK_M)
    kernel, prep, flat = compiled_ffi(kern_key), compiled_prep(cdtype, head_dim, padded=True), flat_dq_tile(kern_key)
    post = compiled_post(cdtype, head_dim, *flat) if flat is not None else None
    f32 = torch.float32

    def run(q, k, v, out, dout, lse):
        B, H, Sq, D = q.shape
        sp, dev = (Sq + block_m - 1) // block_m * block_m, q.device
        # one fp32 allocation for dQaccum (zeroed by the pre-pass), delta and the padded LSE, one for dK and dV
        # (an allocation costs a model's step more host time than a view): every part starts 16-byte aligned
        n = B * H * sp
        ws = torch.empty(n * (D + 2), device=dev, dtype=f32)
        dq_acc = ws.narrow(0, 0, n * D).view(B, H, sp, D)
        delta, lse_padded = ws.narrow(0, n * D, 2 * n).view(2, B, H, sp).unbind(0)
        prep(out, dout, lse, delta, lse_padded, dq_acc)
        dk, dv = torch.empty((2, *k.shape), device=dev, dtype=k.dtype).unbind(0)
        turns = (torch.zeros(B * H * (sp // block_m), device=dev, dtype=torch.int32),) if deterministic else ()
        kernel(q, k, v, dout, lse_padded, delta, dq_acc, dk, dv, *turns, scale)
        if post is None:
            return dq_from_accum(dq_acc[:, :, :Sq], scale, q.dtype), dk, dv
        dq = torch.empty(B, H, Sq, D, device=dev, dtype=q.dtype)
        post(dq_acc, dq, scale)
        return dq, dk, dv
    return run


FINISHED = "finished in the kernel"  # _prepare's flat tile for a dq_finish kernel: its second value is dQ


def finish_dq(dq_acc, flat, scale, dtype, seqlen):
    """dQ (B, H, seqlen, D) in ``dtype`` of the kernel's dQaccum: rows and columns (``flat`` None:
    ``dq_from_accum``), or flat tiles of ``flat = (dq_cols, parts, rows)`` (``backward_post``: its kernel with TVM
    FFI, else the same permutation in torch); ``flat`` FINISHED: ``dq_acc`` is dQ already (``dq_finish``)."""
    import torch

    if flat is FINISHED:
        return dq_acc
    if flat is None:
        return dq_from_accum(dq_acc[:, :, :seqlen], scale, dtype)
    B, H, _, D = dq_acc.shape
    if _host.ffi_enabled():
        dq = torch.empty(B, H, seqlen, D, device=dq_acc.device, dtype=dtype)
        compiled_post(_host.cutlass_dtype(dtype), D, *flat)(dq_acc, dq, scale)
        return dq
    return flat_to_rows(dq_acc, *flat, scale, dtype, seqlen)


def compile_for_cpu(arch="sm_90a", dtype=cutlass.BFloat16, head_dim=128, causal=False, **options):
    """Compile for ``arch`` with fake tensors (every size but D symbolic)."""
    from cutlass.cute.runtime import make_fake_stream

    kern = _kernel((dtype, head_dim, causal, tuple(options.items())))
    return cute.compile(kern, *fake_operands(dtype, head_dim, kern.deterministic, kern.tma_stats, kern.dq_finish),
                        cutlass.Float32(0.125),
                        make_fake_stream(), options=_host.ptx_options(arch))
