"""The implementation of ``warpsched.ops.gemm``: out = a @ b (times scale_a * scale_b for fp8)
for torch tensors, on the persistent warp-specialized Hopper GEMM (``gemm_host``, ``gemm_kernel``,
``gemm_program``, ``gemm_resources`` next to this module), autotuned.

Layouts follow ``torch._scaled_mm`` (what WGMMA's fp8 needs, and what a linear layer has):
a is (M, K) row-major, b is (K, N) column-major, i.e. ``b.t()`` is a row-major (N, K) tensor
such as an ``nn.Linear`` weight (``gemm(x, w.t())``). torch, cutlass and the kernel modules
are imported by the first call; ``import warpsched.ops`` stays pure Python."""
from __future__ import annotations

import statistics
from typing import Dict, Optional, Union

from . import gemm_autotune as _tune

HALF = ("bfloat16", "float16")
FP8 = ("float8_e4m3fn", "float8_e5m2")


class GemmArgumentError(ValueError):
    """A tensor warpsched.ops.gemm cannot take (shape, dtype, device or layout), with the fix."""


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check(a, b, out=None, out_dtype=None):
    """Validate the operands (no torch import: anything with torch's tensor attributes works).
    Returns (M, N, K, out dtype name)."""
    if b.dim() == 3:
        raise GemmArgumentError(f"b {tuple(b.shape)} is batched: gemm takes a (..., K) and a 2-D b (K, N); for "
                                "a batched product use torch.bmm, or call gemm once per batch")
    for nm, t in (("a", a), ("b", b)):
        if t.dim() != 2:
            raise GemmArgumentError(f"{nm} has {t.dim()} dimensions; gemm takes 2-D a (M, K) and b (K, N) "
                                    "(gemm itself views an a of (..., K) as its rows)")
        if not t.is_cuda:
            raise GemmArgumentError(f"{nm} is on {t.device}; move it to the GPU (.cuda())")
    a_t, b_t = _name(a.dtype), _name(b.dtype)
    fp8 = a_t in FP8
    if a_t not in HALF + FP8:
        raise GemmArgumentError(f"a is {a.dtype}; supported: torch.bfloat16, torch.float16, torch.float8_e4m3fn, "
                                "torch.float8_e5m2 (convert with a.to(torch.bfloat16))")
    if (fp8 and b_t not in FP8) or (not fp8 and b_t != a_t):
        raise GemmArgumentError(f"a is {a.dtype} but b is {b.dtype}: b must be {a.dtype}" +
                                (" or another fp8 type" if fp8 else ""))
    (M, K), (K2, N) = a.shape, b.shape
    if K2 != K:
        raise GemmArgumentError(f"a {tuple(a.shape)} @ b {tuple(b.shape)}: a's K ({K}) differs from b's ({K2}); "
                                "b is (K, N) as in torch.mm (pass w.t() for an (N, K) weight w)")
    # 16-bit a may also be column-major (M contiguous) and b row-major (N contiguous): a transposed
    # operand, as a backward pass has (dX = dY W, dW = dY^T X); fp8 is K-major only
    a_mn = not fp8 and M > 1 and a.stride(0) == 1 and a.stride(1) != 1
    b_mn = not fp8 and N > 1 and b.stride(1) == 1 and b.stride(0) != 1
    if a.stride(1) != 1 and M > 1 and not a_mn:
        raise GemmArgumentError(f"a {tuple(a.shape)} has strides {a.stride()}: a must be row-major (K contiguous)"
                                + (" or, 16-bit, column-major" if not fp8 else " (fp8 is K-major only)")
                                + "; pass a.contiguous()")
    if b.stride(0) != 1 and N > 1 and not b_mn:
        raise GemmArgumentError(f"b {tuple(b.shape)} has strides {b.stride()}: b must be column-major (K contiguous, "
                                "as torch._scaled_mm wants" + ("; fp8 is K-major only" if fp8 else
                                                                ", or, 16-bit, row-major") +
                                "): pass w.t() of a row-major (N, K) weight w, or b.t().contiguous().t()")
    item = 1 if fp8 else 2
    for nm, t, lead in (("a", a, a.stride(1) if a_mn else a.stride(0)), ("b", b, b.stride(0) if b_mn else b.stride(1))):
        if (lead * item) % 16 or t.data_ptr() % 16:
            raise GemmArgumentError(f"{nm}: TMA needs a 16-byte aligned base and K stride ({lead} elements); K must be "
                                    f"a multiple of {16 // item} for {_name(t.dtype)}")
    o_t = _name(out.dtype) if out is not None else _name(out_dtype) if out_dtype is not None else (
        "bfloat16" if fp8 else a_t)
    if out is not None and out_dtype is not None and _name(out_dtype) != o_t:
        raise GemmArgumentError(f"out is {out.dtype} but out_dtype={out_dtype}; give one of them")
    if o_t not in HALF or (not fp8 and o_t != a_t):
        raise GemmArgumentError(f"output dtype {o_t}: " + ("fp8 inputs write torch.bfloat16 or torch.float16" if fp8
                                else f"{a_t} inputs write {a_t}"))
    if out is not None:
        if tuple(out.shape) != (M, N):
            raise GemmArgumentError(f"out is {tuple(out.shape)}; expected (M, N) = ({M}, {N})")
        if not out.is_cuda or out.stride(1) != 1 and N > 1 or (out.stride(0) * 2) % 16 or out.data_ptr() % 16:
            raise GemmArgumentError(f"out {tuple(out.shape)} strides {out.stride()}: out must be a row-major CUDA "
                                    "tensor with a 16-byte aligned base and rows (N a multiple of 8)")
    elif N % 8:
        raise GemmArgumentError(f"N = {N}: the output rows must be 16-byte aligned for the TMA store (N a multiple "
                                "of 8); pad b with zero columns")
    return M, N, K, o_t


def _time_ms(launch, reps=20, rounds=5) -> float:
    """Median device milliseconds per launch over replays of a CUDA graph of ``reps`` launches
    (the host's launch cost is left out, as in benchmarks/gemm_sweep.py: at a few microseconds a
    kernel, plain launches would time Python); plain event timing where capture is refused.
    ``launch`` must issue on the current stream each call (it is called inside the capture)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch()  # compiles on first use; warms up off the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                launch()
        replay, per = graph.replay, reps
    except Exception:  # noqa: BLE001 - capture refused: time plain launches
        torch.cuda.synchronize()
        replay, per = launch, 1
    replay()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per)
    return statistics.median(times)


_PLANS: Dict[tuple, tuple] = {}  # everything a call's checks and choices depend on -> (plan, M, N, out dtype)
_ONES: Dict[object, object] = {}  # device -> a one-element fp32 1.0 (the missing side of a device scale)


def _scales(a, scale_a, scale_b):
    """(alpha, device scale tensors): float scales multiply into alpha; if either scale is a tensor
    both go to the kernel as one-element fp32 tensors (a float or None side as 1.0 on the device),
    read there: no host sync, and a CUDA graph replays the values they hold."""
    tensors = [s for s in (scale_a, scale_b) if hasattr(s, "data_ptr")]
    alpha = 1.0
    for s in (scale_a, scale_b):
        if s is not None and not hasattr(s, "data_ptr"):
            alpha *= float(s)
    if not tensors:
        return alpha, ()
    one = _ONES.get(a.device)
    if one is None:
        import torch

        one = _ONES[a.device] = torch.ones(1, device=a.device, dtype=torch.float32)
    return alpha, tuple((s.reshape(1) if s.dtype == one.dtype else s.float().reshape(1))
                        if hasattr(s, "data_ptr") else one for s in (scale_a, scale_b))


def _rows(t, name):
    """``t`` (..., C) as a (rows, C) view; a layout that needs a copy is refused (a model's large
    activations are never copied behind its back)."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        raise GemmArgumentError(f"{name} {tuple(t.shape)} with strides {tuple(t.stride())} cannot be viewed as "
                                f"(rows, {t.shape[-1]}) without a copy; pass {name}.contiguous()") from None


def _leading_dims(a, b, out, **kw):
    lead = tuple(a.shape[:-1])
    if out is not None and tuple(out.shape[:-1]) != lead:
        raise GemmArgumentError(f"out {tuple(out.shape)}: expected {lead + (b.shape[-1],)} for a {tuple(a.shape)} "
                                f"@ b {tuple(b.shape)}")
    res = gemm(_rows(a, "a"), b, None if out is None else _rows(out, "out"), **kw)
    return res.view(*lead, res.shape[-1]) if out is None else out


def _config_key(config):
    """A configuration dict as a plan-cache key (lists as tuples); unknown keys fail in normalize."""
    try:
        return tuple(sorted(_tune.normalize(config).items()))
    except (ValueError, AttributeError, TypeError):
        return ("unhashable", id(config))


def _kind(s):
    return None if s is None else ("tensor" if hasattr(s, "data_ptr") else "float")


def gemm(a, b, out=None, *, scale_a=None, scale_b=None, out_dtype=None,
         config: Union[str, Dict] = "auto", cache: Optional[_tune.TuneCache] = None, deterministic: bool = True):
    """out = a @ b for bf16 / fp16 (out the same dtype), or (a @ b) * scale_a * scale_b for fp8
    a (e4m3 / e5m2) and b (e4m3 / e5m2) with fp32 accumulation and a bf16 (default) or fp16 out.

    ``a``: (M, K) row-major; ``b``: (K, N) column-major (``w.t()`` of an (N, K) weight);
    ``out``: an (M, N) row-major tensor to write, else a new one. ``scale_a`` / ``scale_b``:
    per-tensor scales: floats, or one-element tensors that the kernel reads on the device (no host
    sync; CUDA-graph safe). ``config``: "auto" (the tuned choice for this shape, dtypes and device,
    cached on disk: see warpsched.kernels.gemm_autotune), "default" (cooperative 128x256, split-K
    when few tiles) or a configuration dict (schedule, tile_mn, raster, group, cluster_mn, split_k,
    split_reduce, block_k, ab_stages). ``deterministic``: "auto" only picks kernels whose result is
    the same bits on every call; False also tries the atomic split-K for small M (fp32 atomic adds
    in arrival order). Returns ``out``.

    The first call for a (shapes, strides, dtypes, device, config, scale kinds) key checks the
    operands, looks up (or tunes) the configuration and compiles; the launch plan is then kept in
    memory, and later calls with that key only launch (through TVM FFI where it is installed)."""
    if a.dim() > 2 and b.dim() == 2:  # (..., K) activations: the rows of a view, no copy
        return _leading_dims(a, b, out, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, config=config,
                             cache=cache, deterministic=deterministic)
    fast = cache is None
    if fast:
        ckey = config if isinstance(config, str) else _config_key(config)
        pkey = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.get_device(),
                None if out is None else (out.shape, out.stride(), out.dtype), out_dtype, ckey, deterministic,
                _kind(scale_a), _kind(scale_b))
        hit = _PLANS.get(pkey)
        if hit is not None:
            plan, shape, o_dtype, device = hit
            if not plan.ffi:  # the JIT executor checks nothing itself (TVM FFI checks alignment in C)
                check(a, b, out, out_dtype)
            alpha, scales = (1.0, ()) if scale_a is None and scale_b is None else _scales(a, scale_a, scale_b)
            if out is None:
                import torch

                out = torch.empty(shape, device=device, dtype=o_dtype)
            try:
                plan.launch(a, b.t(), out, alpha, scales)
            except Exception:
                check(a, b, out, out_dtype)  # a misaligned base, say: the error that names the fix
                raise
            return out
    M, N, K, o_t = check(a, b, out, out_dtype)
    fp8 = _name(a.dtype) in FP8
    if not fp8 and (scale_a is not None or scale_b is not None):
        raise GemmArgumentError("scale_a / scale_b: per-tensor scales are for fp8 inputs only")
    import torch

    if out is None:
        out = torch.empty(M, N, device=a.device, dtype=getattr(torch, o_t))
    if min(M, N, K) == 0:
        if K == 0:
            out.zero_()
        return out
    from . import gemm_host as gp  # imports cutlass

    bt = b.t()  # (N, K) row-major: the kernel computes a @ bt.T
    alpha, scales = _scales(a, scale_a, scale_b)
    if config == "default":
        cfg = {}
    elif isinstance(config, dict):
        cfg = _tune.normalize(config)
    elif config == "auto":
        majors = ",".join(m for m, on in (("a-m", a.stride(1) != 1 and M > 1), ("b-n", b.stride(0) != 1 and N > 1))
                          if on)
        key = _tune.cache_key(M, N, K, a.dtype, b.dtype, out.dtype, torch.cuda.get_device_name(a.device),
                              deterministic, majors)
        cands = _tune.candidates(M, N, K, fp8, deterministic)
        cfg, _ = _tune.autotune(key, cands, lambda c: _time_ms(
            lambda: gp.gemm(a, bt, out, alpha=alpha, scales=scales or None, **c)), cache or _tune.TuneCache())
    else:
        raise GemmArgumentError(f"config={config!r}: expected 'auto', 'default' or a configuration dict")
    plan = gp.plan(a, bt, out, device_scale=bool(scales), **cfg)
    plan.launch(a, bt, out, alpha, scales)
    if fast:
        _PLANS[pkey] = (plan, (M, N), out.dtype, a.device)
    return out
