"""Split-KV for the attention forward (``FlashAttention(split_kv=True)``): when a launch has fewer Q
blocks than the GPU has SMs (decode: a few query rows over a long K/V), each block's K/V tiles are cut
into runs, one work unit each (``units.WorkUnits``), every run writes its rows' O / sum and LSE in
fp32, and ``combine`` merges them in one more launch (``SplitCombine``): LSE = log sum_s exp(LSE_s),
O = sum_s exp(LSE_s - LSE) O_s.

How many runs (``choose_splits``) follows flash-attention's rule: none for 4 K/V tiles or fewer, else
as many as fill the SMs with the launch's Q blocks, at most one per K/V tile and 128 in all."""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

MAX_SPLITS = 128
LOG2E = math.log2(math.e)


def choose_splits(batch, heads, seqlen_q, seqlen_k, block_m, block_n, sms):
    """The K/V runs per Q block ``ops.attention`` takes by itself: 1 (no split) unless the launch's
    Q blocks leave SMs idle and every run gets at least one of more than 4 K/V tiles. The count is
    then trimmed so that no run is empty (``ceil(tiles / ceil(tiles / splits))``)."""
    tiles = -(-seqlen_k // block_n)
    blocks = batch * heads * -(-seqlen_q // block_m)
    if tiles <= 4 or blocks == 0:
        return 1
    return _without_empty_runs(tiles, max(1, min(sms // blocks, MAX_SPLITS, tiles)))


def _without_empty_runs(tiles, splits):
    """``splits`` runs of ``ceil(tiles / splits)`` tiles each, fewer where the last ones would be empty."""
    per = -(-tiles // splits)
    return -(-tiles // per)


def check_splits(num_splits, seqlen_k, block_n):
    """``num_splits`` as a caller passed it: None (choose), or an int in [1, 128]; the message names the fix."""
    from .masks import AttentionConfigError

    if num_splits is None:
        return None
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS:
        raise AttentionConfigError(f"num_splits={num_splits!r}: expected an int from 1 to {MAX_SPLITS} "
                                   "(or None: chosen from the shape)")
    return _without_empty_runs(-(-seqlen_k // block_n), num_splits)  # runs past the last tile would only be masked


def combine(o_part, lse_part, out, lse):
    """Merge the runs' fp32 partials ``o_part`` (splits * B, H, S_q, D) and ``lse_part`` (splits * B, H,
    S_q) into ``out`` (B, H, S_q, D) and ``lse`` (B, H, S_q) with one ``SplitCombine`` launch on torch's
    current stream. A run whose rows saw no key (LSE +inf, the kernel's mark for it) has no weight; a row
    no run saw gets O = 0 and LSE = +inf, as an unsplit launch."""
    from .. import _host

    dtype, head_dim = _host.cutlass_dtype(out.dtype), out.shape[3]
    if _host.ffi_enabled():
        compiled_combine(dtype, head_dim)(o_part, lse_part, out, lse)
    else:
        args = [_host.to_cute(o_part, 3), _host.to_cute(lse_part, 2), _host.to_cute(out, 3), _host.to_cute(lse, 2)]
        compiled_combine(dtype, head_dim, jit_args=args)(*args, _host.current_stream())


_CACHE = {}


def fake_combine_operands(dtype, head_dim):
    """Fake partials (splits * B, H, S_q, D) fp32 and (splits * B, H, S_q), out (B, H, S_q, D), lse (B, H, S_q)."""
    from .. import _host

    B, Bo, H, S = (cute.sym_int32() for _ in range(4))
    return (_host.fake_bhsd(cutlass.Float32, Bo, H, S, head_dim), _host.fake_rows(Bo, H, S, assumed_align=None),
            _host.fake_bhsd(dtype, B, H, S, head_dim), _host.fake_rows(B, H, S, assumed_align=None))


def compiled_combine(dtype, head_dim, arch=None, jit_args=None):
    """``SplitCombine`` compiled once per (dtype, head dim): for TVM-FFI calls ``f(o_part, lse_part, out,
    lse)`` with torch tensors, for the JIT executor (``jit_args``: CuTe tensors), or for ``arch`` on the CPU."""
    from cutlass.cute.runtime import make_fake_stream

    from .. import _host

    key = (dtype, head_dim, arch, jit_args is not None)
    if key not in _CACHE:
        kern = SplitCombine(dtype, head_dim)
        if jit_args is not None:
            _CACHE[key] = cute.compile(kern, *jit_args, _host.current_stream(), options=_host.launch_options())
        elif arch:
            _CACHE[key] = cute.compile(kern, *fake_combine_operands(dtype, head_dim), make_fake_stream(),
                                       options=_host.ptx_options(arch))
        else:
            _CACHE[key] = cute.compile(kern, *fake_combine_operands(dtype, head_dim), _host.fake_env_stream(),
                                       options=_host.ffi_options())
    return _CACHE[key]


class SplitCombine:
    """``combine`` as one kernel (what ``ops.attention`` launches): a CTA per (query row, head, batch), a
    thread per element of the head dim. Each thread reads the runs' LSEs (the same few values in every
    thread of the row, from L1), weighs its column of the runs' O by exp(LSE_s - max) and writes O / sum
    in the output dtype; thread 0 writes the row's LSE. Plain CuTe DSL (no pipelines: not a warpsched
    program); in torch the same merge is about 15 launches and ~150 us of host time per call."""

    def __init__(self, dtype, head_dim):
        self.dtype, self.head_dim = dtype, head_dim

    @cute.jit
    def __call__(self, mOp: cute.Tensor, mLp: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor, stream):
        self.kernel(mOp, mLp, mO, mLSE).launch(
            grid=[cute.size(mO, mode=[2]), cute.size(mO, mode=[1]), cute.size(mO, mode=[0])],
            block=[self.head_dim, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mOp: cute.Tensor, mLp: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor):
        d, _, _ = cute.arch.thread_idx()
        q, h, b = cute.arch.block_idx()
        batches = cute.size(mO, mode=[0])
        runs = cute.size(mOp, mode=[0]) // batches
        inf = cutlass.Float32(float("inf"))
        top = -inf
        for s in cutlass.range(runs):
            lse_s = mLp[(s * batches + b, h, q)]
            if lse_s != inf:  # +inf: the run's keys were all masked for this row
                top = cute.arch.fmax(top, lse_s)
        if top == -inf:  # no run saw a key
            top = cutlass.Float32(0.0)
        total = cutlass.Float32(0.0)
        acc = cutlass.Float32(0.0)
        for s in cutlass.range(runs):
            lse_s = mLp[(s * batches + b, h, q)]
            if lse_s != inf:
                w = cute.math.exp2((lse_s - top) * LOG2E, fastmath=True)
                total += w
                acc += w * mOp[(s * batches + b, h, q, d)]
        res = cutlass.Float32(0.0)
        lse = inf
        if total > cutlass.Float32(0.0):
            res = acc / total
            lse = top + cute.math.log2(total, fastmath=True) / LOG2E
        mO[(b, h, q, d)] = res.to(self.dtype)
        if d == 0:
            mLSE[(b, h, q)] = lse
