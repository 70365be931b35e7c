"""The implementation of ``warpsched.ops.gemm``: out = a @ b (times scale_a * scale_b for fp8)
for torch tensors, on the persistent warp-specialized Hopper GEMM (``gemm.host``, ``gemm.kernel``,
``gemm.program``, ``gemm.resources`` next to this module), autotuned.

Layouts follow ``torch._scaled_mm`` (what WGMMA's fp8 needs, and what a linear layer has):
a is (M, K) row-major, b is (K, N) column-major, i.e. ``b.t()`` is a row-major (N, K) tensor
such as an ``nn.Linear`` weight (``gemm(x, w.t())``). torch, cutlass and the kernel modules
are imported by the first call; ``import warpsched.ops`` stays pure Python."""
from __future__ import annotations

import statistics
from typing import Dict, Optional, Union

from . import autotune as _tune

HALF = ("bfloat16", "float16")
FP8 = ("float8_e4m3fn", "float8_e5m2")


class GemmArgumentError(ValueError):
    """A tensor warpsched.ops.gemm cannot take (shape, dtype, device or layout), with the fix."""


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check(a, b, out=None, out_dtype=None, swiglu=False):
    """Validate the operands (no torch import: anything with torch's tensor attributes works).
    Returns (M, N, K, out dtype name); N is the output's width (b's half with ``swiglu``)."""
    if b.dim() == 3:
        raise GemmArgumentError(f"b {tuple(b.shape)} is batched: a batched b (L, K, N) takes a batched a (L, M, K) "
                                f"(got a {tuple(a.shape)}); for one a against L weights, loop over them")
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
    # what every compiled kernel declares (gemm.launch.fake_operands: TMA moves 16-byte rows): K a
    # multiple of 8 elements (16 for a mixed fp8 pair) and N of 8; M is free. Checked here, before
    # the tuner, so a shape no kernel takes is named instead of failing every candidate alike
    k_align = 16 if fp8 and b_t != a_t else 8
    if K % k_align:
        raise GemmArgumentError(f"K = {K} (the contraction: a's columns, b's rows; a {tuple(a.shape)} @ b "
                                f"{tuple(b.shape)}) is not a multiple of {k_align}: the kernel reads K in 16-byte TMA "
                                f"rows ({a_t}" + (f" x {b_t}" if b_t != a_t else "") + f"); pad K to a multiple of "
                                f"{k_align} ({K + -K % k_align}) with zeros: zero columns of a and zero rows of b add "
                                "nothing to the product")
    if N % 8 and not swiglu:
        raise GemmArgumentError(f"N = {N} (b's columns, the output's) is not a multiple of 8: the TMA store writes "
                                "16-byte rows (N a multiple of 8); pad b with zero columns to "
                                f"{N + -N % 8} and use the output's first {N} columns")
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
    for nm, t, mn, lead in (("a", a, a_mn, a.stride(1) if a_mn else a.stride(0)),
                            ("b", b, b_mn, b.stride(0) if b_mn else b.stride(1))):
        if (lead * item) % 16:
            # a K-major operand's rows are K long; an M- / N-major one's K slices are M / N long
            ext = ("M", M) if nm == "a" and mn else ("N", N) if mn else ("K", K)
            kind = f"{'column' if nm == 'a' else 'row'}-major" if mn else ("row-major" if nm == "a" else "column-major")
            raise GemmArgumentError(f"{nm} {tuple(t.shape)} strides {tuple(t.stride())}: TMA needs 16-byte aligned "
                                    f"rows, but {nm}'s stride of {lead} elements ({ext[0]} = {ext[1]} for a contiguous "
                                    f"{kind} {nm}) is not a multiple of {16 // item} for {_name(t.dtype)}; pad "
                                    f"{ext[0]} to a multiple of {16 // item} with zeros, or pass a copy whose rows "
                                    "are padded to one")
        if t.data_ptr() % 16:
            raise GemmArgumentError(f"{nm}: its base address ({t.data_ptr():#x}) is not 16-byte aligned, as TMA needs "
                                    f"(a view starting inside a row?); pass {nm}.clone() (torch allocations are "
                                    "aligned)")
    if swiglu:
        if N % 16:
            raise GemmArgumentError(f"activation='swiglu': b has N = {N} columns, [gate | up] interleaved in blocks of "
                                    "8 (interleave_gate_up), so N must be a multiple of 16")
        N //= 2
    o_t = _name(out.dtype) if out is not None else _name(out_dtype) if out_dtype is not None else (
        "bfloat16" if fp8 else a_t)
    if out is not None and out_dtype is not None and _name(out_dtype) != o_t:
        raise GemmArgumentError(f"out is {out.dtype} but out_dtype={out_dtype}; give one of them")
    if o_t not in HALF or (not fp8 and o_t != a_t):
        raise GemmArgumentError(f"output dtype {o_t}: " + ("fp8 inputs write torch.bfloat16 or torch.float16" if fp8
                                else f"{a_t} inputs write {a_t}"))
    if out is not None:
        if tuple(out.shape) != (M, N):
            raise GemmArgumentError(f"out is {tuple(out.shape)}; expected (M, N) = ({M}, {N})"
                                    + (" (swiglu: half of b's columns)" if swiglu else ""))
        if not out.is_cuda or out.stride(1) != 1 and N > 1 or (out.stride(0) * 2) % 16 or out.data_ptr() % 16:
            raise GemmArgumentError(f"out {tuple(out.shape)} strides {out.stride()}: out must be a row-major CUDA "
                                    "tensor with a 16-byte aligned base and rows (N a multiple of 8)")
    return M, N, K, o_t


def _time_ms(launch, reps=20, rounds=5) -> float:
    """Median device milliseconds per launch over replays of a CUDA graph of ``reps`` launches
    (the host's launch cost is left out, as in bench/gemm_sweep.py: at a few microseconds a
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


class _Swapped:
    """A swap-AB launch plan (``config={"swap_ab": True, ...}``): out^T = W x^T, so the weight's rows fill
    WGMMA's M (64 / 128 rows a tile) and the few tokens its N, and the kernel writes out^T column-major,
    which is out row-major. Called as the plain plan is (``launch(a, bt, out, ...)``)."""

    def __init__(self, inner):
        self.inner, self.ffi = inner, inner.ffi

    def launch(self, a, bt, out, alpha=1.0, scales=(), bias=None, residual=None):
        self.inner.launch(bt, a, out.t(), alpha, scales)


def _host_options(cfg):
    """(swapped, the GEMM host's options) of a configuration: ``swap_ab`` is ops.gemm's own option, not
    a kernel's; a swapped GEMM runs whole tiles unless the configuration names a split."""
    opts = {k: v for k, v in cfg.items() if k != "swap_ab"}
    if cfg.get("swap_ab"):
        return True, dict(opts, split_k=opts.get("split_k", 1))
    return False, opts


def _try_config(gp, a, bt, out, alpha, scales, cfg):
    """One launch of configuration ``cfg`` for the autotuner's timing (a swap-AB one with its operands
    swapped, as ``_swapped_plan`` launches it)."""
    swapped, opts = _host_options(cfg)
    if swapped:
        return gp.gemm(bt, a, out.t(), alpha=alpha, scales=scales, **opts)
    return gp.gemm(a, bt, out, alpha=alpha, scales=scales, **opts)


def _extra_launches(gp, a, bt, out, scales, cfg):
    """The launches configuration ``cfg`` adds to the GEMM's own for this call: 2 for a K split reduced by torch
    (its sum and the copy into ``out``), else 0 (``autotune.EXTRA_LAUNCH_MS`` weighs them)."""
    swapped, opts = _host_options(cfg)
    if swapped:  # a swapped split reduces in the kernel
        return 0
    return 2 if gp.plan(a, bt, out, device_scale=bool(scales), **opts).target == "host" else 0


def _swapped_plan(gp, a, bt, out, scales, opts, epi_opts):
    """The swap-AB plan for the host options ``opts`` (``_host_options``)."""
    if epi_opts:
        raise GemmArgumentError("config swap_ab=True with a fused epilogue (bias, activation, residual, alpha): "
                                "the swapped kernel writes plain tiles; drop swap_ab or the epilogue")
    if out.stride(1) != 1:
        raise GemmArgumentError(f"config swap_ab=True with out strides {tuple(out.stride())}: the swapped kernel "
                                "writes out row-major; pass a contiguous out")
    return _Swapped(gp.plan(bt, a, out.t(), device_scale=bool(scales), **opts))


def _torch():
    """torch, imported at the first call (this module loads without it: the CPU checks)."""
    import torch

    return torch


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


def _leading_dims(a, b, out, residual=None, **kw):
    lead = tuple(a.shape[:-1])
    n_out = b.shape[-1] // (2 if kw.get("activation") == "swiglu" else 1)
    if out is not None and tuple(out.shape[:-1]) != lead:
        raise GemmArgumentError(f"out {tuple(out.shape)}: expected {lead + (n_out,)} for a {tuple(a.shape)} "
                                f"@ b {tuple(b.shape)}")
    if residual is not None and tuple(residual.shape[:-1]) != lead:
        raise GemmArgumentError(f"residual {tuple(residual.shape)}: expected the output's shape {lead + (n_out,)}")
    res = gemm(_rows(a, "a"), b, None if out is None else _rows(out, "out"),
               residual=None if residual is None else _rows(residual, "residual"), **kw)
    return res.view(*lead, res.shape[-1]) if out is None else out


def _config_key(config):
    """A configuration dict as a plan-cache key (lists as tuples); unknown keys fail in normalize."""
    try:
        return tuple(sorted(_tune.normalize(config).items()))
    except (ValueError, AttributeError, TypeError):
        return ("unhashable", id(config))


def _kind(s):
    return None if s is None else ("tensor" if hasattr(s, "data_ptr") else "float")


# ------------------------------------------------------------------------- fused epilogue
ACTIVATIONS = (None, "relu", "relu2", "gelu", "gelu_tanh", "silu", "swiglu")


def _epilogue(b, M, N, o_t, bias, activation, residual, alpha, out, fp8):
    """Validate the fused epilogue's arguments (M, N: the output's shape); returns the kernel's
    epilogue options (gemm.epilogue: bias kind, activation, residual, scale_out)."""
    if activation == "swiglu_keep":
        raise GemmArgumentError("activation='swiglu_keep' writes two tensors (z and h): call "
                                "warpsched.kernels.gemm.swiglu.swiglu_keep(x, weight, bias), which returns both")
    if not (activation in ACTIVATIONS or callable(activation)):
        raise GemmArgumentError(f"activation={activation!r}: expected one of {list(ACTIVATIONS)} ('gelu' is the "
                                "exact erf form, 'gelu_tanh' torch's approximate='tanh', 'relu2' relu squared) or "
                                "a function of one fp32 value, traced into the kernel (gemm.epilogue)")
    opts = {} if activation is None else {"activation": activation}
    if bias is not None:
        nb = b.shape[1]
        if bias.dim() != 1 or bias.shape[0] != nb:
            raise GemmArgumentError(f"bias {tuple(bias.shape)}: expected ({nb},), one value per column of b"
                                    + (" (swiglu: gate and up, interleaved as b is: interleave_gate_up)"
                                       if activation == "swiglu" else ""))
        if _name(bias.dtype) not in (o_t, "float32"):
            raise GemmArgumentError(f"bias is {bias.dtype}: it must be the output's dtype or torch.float32; pass "
                                    f"bias.to(torch.{o_t})")
        if not bias.is_cuda or (bias.stride(0) != 1 and nb > 1):
            raise GemmArgumentError(f"bias on {bias.device} with strides {tuple(bias.stride())}: a contiguous CUDA "
                                    "tensor is read; pass bias.cuda().contiguous()")
        opts["bias"] = "f32" if _name(bias.dtype) == "float32" else "c"
    if residual is not None:
        if tuple(residual.shape) != (M, N):
            raise GemmArgumentError(f"residual {tuple(residual.shape)}: expected the output's shape ({M}, {N})")
        if _name(residual.dtype) != o_t:
            raise GemmArgumentError(f"residual is {residual.dtype}: it must be the output's dtype; pass "
                                    f"residual.to(torch.{o_t})")
        if not residual.is_cuda or (residual.stride(1) != 1 and N > 1):
            raise GemmArgumentError(f"residual on {residual.device} with strides {tuple(residual.stride())}: a "
                                    "row-major CUDA tensor is read; pass residual.cuda().contiguous()")
        if out is not None and residual.data_ptr() == out.data_ptr():
            raise GemmArgumentError("residual is out's memory: a ping-pong GEMM may store a tile twice and would "
                                    "read the residual after its first store; pass out=None (a new tensor) or "
                                    "another out, and residual=out's old value")
        opts["residual"] = True
    if alpha is not None and float(alpha) != 1.0 and not fp8:
        opts["scale_out"] = True  # fp8 kernels always multiply by their alpha
    return opts


def _epilogue_config(cfg):
    """A tuned / given configuration that SwiGLU's output tile (bN / 2 columns) can store: epi_n
    must divide it (16 for 128x176's 88 columns does not: the default tile then)."""
    from .config import tile_of

    bN = tile_of(cfg.get("tile_mn"), cfg.get("schedule", "cooperative"))[1]
    if (bN // 2) % cfg.get("epi_n", 32) == 0:
        return cfg
    if (bN // 2) % 16 == 0:
        return dict(cfg, epi_n=16)
    return {"split_k": cfg.get("split_k", "auto")}


def epilogue_reference(acc, bias=None, activation=None, residual=None, alpha=1.0):
    """The fused epilogue in torch, in the kernel's order: act(alpha * acc + bias) + residual, in
    fp32 (fp64 for an fp64 ``acc``); SwiGLU takes acc's interleaved [gate | up] columns. For the
    K = 0 case and for checks."""
    import torch

    x = (acc if acc.dtype == torch.float64 else acc.float()) * alpha
    if bias is not None:
        x = x + bias.to(x.dtype)
    if activation == "swiglu":
        x = swiglu_interleaved(x)
    elif callable(activation):  # the caller's function, on a torch tensor (arithmetic works on both)
        x = activation(x)
    elif activation is not None:
        x = {"relu": torch.relu, "relu2": lambda t: torch.relu(t).square(),
             "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
             "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[activation](x)
    if residual is not None:
        x = x + residual.to(x.dtype)
    return x


def interleave_gate_up(w_gate, w_up, bias_gate=None, bias_up=None):
    """SwiGLU's B for ``gemm(x, w.t(), activation="swiglu")``: the (I, K) gate and up weights as one
    (2 I, K) weight, 8 gate rows then the same 8 up rows, and so on (so each WGMMA thread holds a
    gate column and its up column); with biases, the (2 I,) bias interleaved the same way. I must be a
    multiple of 8. Returns (w, bias or None). One copy, made once (when the weights are loaded)."""
    I, K = w_gate.shape
    if tuple(w_up.shape) != (I, K) or I % 8:
        raise GemmArgumentError(f"w_gate {tuple(w_gate.shape)}, w_up {tuple(w_up.shape)}: expected two (I, K) weights "
                                "with I a multiple of 8")
    import torch

    w = torch.stack([w_gate.reshape(I // 8, 8, K), w_up.reshape(I // 8, 8, K)], dim=1).reshape(2 * I, K)
    bias = None
    if bias_gate is not None or bias_up is not None:
        zero = (bias_gate if bias_gate is not None else bias_up).new_zeros(I)
        bg, bu = (t if t is not None else zero for t in (bias_gate, bias_up))
        bias = torch.stack([bg.reshape(I // 8, 8), bu.reshape(I // 8, 8)], dim=1).reshape(2 * I)
    return w.contiguous(), bias


def swiglu_interleaved(z):
    """silu(gate) * up of a (..., 2 I) product whose features are gate and up interleaved as
    ``interleave_gate_up`` lays them out: (..., I), in torch (the epilogue's reference and its unfused form)."""
    import torch

    blocks = z.unflatten(-1, (z.shape[-1] // 16, 2, 8))
    return (torch.nn.functional.silu(blocks[..., 0, :]) * blocks[..., 1, :]).flatten(-2)


# ------------------------------------------------------------------------------- gemm
def gemm(a, b, out=None, *, bias=None, activation=None, residual=None, alpha=None, scale_a=None, scale_b=None,
         out_dtype=None, config: Union[str, Dict] = "auto", cache: Optional[_tune.TuneCache] = None,
         deterministic: bool = True):
    """out = act(alpha * (a @ b) + bias) + residual: bf16 / fp16 (out the same dtype), or fp8 a
    (e4m3 / e5m2) and b (e4m3 / e5m2), alpha times scale_a * scale_b, fp32 accumulation and a bf16
    (default) or fp16 out.

    ``a``: (M, K) row-major (16-bit: or column-major), or (..., K) viewed as its rows, or (L, M, K)
    with a batched ``b``; ``b``: (K, N) column-major (``w.t()`` of an (N, K) weight; 16-bit: or
    row-major), or (L, K, N) (batched: ``gemm.batched``); ``out``: an (M, N) row-major tensor to
    write, else a new one. K and N must be multiples of 8 (K of 16 for a mixed fp8 pair; M is free):
    ``check`` refuses other shapes before any tuning, naming the padding. ``scale_a`` / ``scale_b``: per-tensor fp8 scales: floats, or one-element
    tensors the kernel reads on the device (no host sync; CUDA-graph safe). Fused epilogue
    (gemm.epilogue, in the kernel, before the TMA store): ``alpha`` (a float), ``bias`` (N,) in the
    output dtype or fp32, ``activation`` ("relu", "relu2", "gelu" (erf), "gelu_tanh", "silu", or
    "swiglu": b holds gate and up interleaved, ``interleave_gate_up``, and out has N / 2 columns; or a
    function of one fp32 value, traced into the kernel: gemm.epilogue),
    ``residual`` (the output's shape and dtype). ``config``: "auto" (the tuned choice for this shape,
    dtypes and device, cached on disk: see warpsched.kernels.gemm.autotune; an epilogue reuses the
    plain GEMM's choice), "default" (cooperative 128x256, split-K when few tiles) or a configuration
    dict (schedule, tile_mn, raster, group, cluster_mn, split_k, split_reduce, block_k, ab_stages;
    swap_ab=True: out^T = W x^T with the tokens on the tile's N, plain 16-bit GEMM only, K split only in
    the kernel (split_reduce "parallel", "serial" or "atomic"); "auto" tries whole-tile ones for M <= 64).
    With an epilogue, split-K reduces in the kernel ("parallel" unless given). ``deterministic``:
    "auto" only picks kernels whose result is the same bits on every call; False also tries the
    atomic split-K for small M. Returns ``out``.

    The first call for a (shapes, strides, dtypes, device, config, scale and epilogue kinds) key
    checks the operands, looks up (or tunes) the configuration and compiles; the launch plan is then
    kept in memory, and later calls with that key only launch (through TVM FFI where installed)."""
    if not (hasattr(a, "dim") and hasattr(b, "dim") and (out is None or hasattr(out, "stride"))
            and (bias is None or hasattr(bias, "stride")) and (residual is None or hasattr(residual, "stride"))):
        _require_tensors(a=a, b=b, out=out, bias=bias, residual=residual)
    a_dim = a.dim()
    if a_dim > 2:
        if b.dim() == 3 and a_dim == 3:
            raise GemmArgumentError(f"a {tuple(a.shape)} and b {tuple(b.shape)} are batched: call warpsched.ops.gemm "
                                    "(or warpsched.kernels.gemm.batched.gemm_batched), which runs them in one launch")
        if b.dim() == 2:  # (..., K) activations: the rows of a view, no copy
            if out is not None or residual is not None:  # their shapes checked against a's leading dims
                return _leading_dims(a, b, out, residual=residual, bias=bias, activation=activation, alpha=alpha,
                                     scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, config=config,
                                     cache=cache, deterministic=deterministic)
            lead = a.shape[:-1]
            res = _gemm_2d(_rows(a, "a"), b, None, bias, activation, None, alpha, scale_a, scale_b, out_dtype, config,
                           cache, deterministic)
            return res.view(*lead, res.shape[-1])
    return _gemm_2d(a, b, out, bias, activation, residual, alpha, scale_a, scale_b, out_dtype, config, cache,
                    deterministic)


def _require_tensors(**named):
    """Refuse an operand that is not a tensor (``None`` allowed for a bias, an out and a residual), naming it."""
    from .. import _host  # stdlib only

    refusal = _host.non_tensor(named, ("shape", "stride"), optional=("bias", "out", "residual"),
                               hints={"out": " or None", "bias": " or None", "residual": " or None"})
    if refusal:
        raise GemmArgumentError(refusal)


def _plan_key(a, b, out, bias, activation, residual, alpha, scale_a, scale_b, out_dtype, config, deterministic):
    """Everything a 2-D call's checks and choices depend on: the key of its launch plan in ``_PLANS``."""
    epi = (activation, None if bias is None else (bias.shape, bias.dtype),
           None if residual is None else (residual.shape, residual.dtype), alpha is not None and alpha != 1.0)
    ckey = config if isinstance(config, str) else _config_key(config)
    return (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.get_device(),
            None if out is None else (out.shape, out.stride(), out.dtype), out_dtype, ckey, deterministic,
            _kind(scale_a), _kind(scale_b), epi)


_LINEAR: Dict[tuple, tuple] = {}  # linear()'s calls -> (the launch of the plan gemm() keeps for them, N, out dtype,
#                                    device, torch.empty)


def linear(x, weight, bias=None, activation=None):
    """act(x @ weight.T + bias) for x (..., K) and weight (N, K): ``gemm(x, weight.t(), bias=bias,
    activation=activation)`` (config "auto"), the same kernel and bits, on a shorter host path for a model's
    every call. The first call with a key goes through ``gemm``; later ones launch the plan it kept directly
    (one view of x in and of the output out, no transposes, none of gemm's argument handling). ``weight`` may
    be any operand ``gemm`` takes as ``weight.t()``, e.g. a transposed view (a backward pass's dX = dY W is
    ``linear(dy, w.t())``)."""
    try:
        key = (x.shape, x.stride(), weight.shape, weight.stride(), x.dtype, weight.dtype, x.get_device(),
               None if bias is None else (bias.shape, bias.dtype), activation)
    except AttributeError:
        _require_tensors(x=x, weight=weight, bias=bias)
        raise
    hit = _LINEAR.get(key)
    if hit is None:
        y = gemm(x, weight.t(), bias=bias, activation=activation)
        x2 = x if x.dim() == 2 else x.view(-1, x.shape[-1])  # gemm viewed it so: no copy was made
        plan = _PLANS.get(_plan_key(x2, weight.t(), out=None, bias=bias, activation=activation, residual=None,
                                    alpha=None, scale_a=None, scale_b=None, out_dtype=None, config="auto",
                                    deterministic=True))  # the key gemm's defaults gave this call
        if plan is not None and plan[0].ffi:  # TVM FFI checks the operands in C on every launch
            _LINEAR[key] = (plan[0].launch, y.shape[-1], y.dtype, x.device, _torch().empty)
        return y
    launch, n, o_dtype, device, empty = hit
    flat = x.dim() == 2
    x2 = x if flat else x.view(-1, x.shape[-1])
    out = empty((x2.shape[0], n), device=device, dtype=o_dtype)
    try:
        launch(x2, weight, out, 1.0, (), bias, None)
    except Exception:  # noqa: BLE001 - a misaligned base, say: gemm's path names the fix (or runs it)
        return gemm(x, weight.t(), bias=bias, activation=activation)
    return out if flat else out.view(*x.shape[:-1], n)


def linear_plan(x, weight, bias=None, activation=None):
    """The ``GemmPlan`` that ``linear(x, weight, bias, activation)`` launches (after its first call), or None."""
    x2 = x if x.dim() == 2 else x.view(-1, x.shape[-1])
    hit = _PLANS.get(_plan_key(x2, weight.t(), out=None, bias=bias, activation=activation, residual=None, alpha=None,
                               scale_a=None, scale_b=None, out_dtype=None, config="auto", deterministic=True))
    return None if hit is None else hit[0]


def _gemm_2d(a, b, out, bias, activation, residual, alpha, scale_a, scale_b, out_dtype, config, cache, deterministic):
    """``gemm`` of a 2-D ``a`` (positional arguments: the launch path of every call)."""
    fast = cache is None
    if fast:
        pkey = _plan_key(a, b, out, bias, activation, residual, alpha, scale_a, scale_b, out_dtype, config,
                         deterministic)
        hit = _PLANS.get(pkey)
        aliased = residual is not None and out is not None and residual.data_ptr() == out.data_ptr()
        if hit is not None and not aliased:
            plan, shape, o_dtype, device = hit
            if not plan.ffi:  # the JIT executor checks nothing itself (TVM FFI checks alignment in C)
                check(a, b, out, out_dtype, activation == "swiglu")
            alpha_f, scales = (1.0, ()) if scale_a is None and scale_b is None else _scales(a, scale_a, scale_b)
            if alpha is not None:
                alpha_f *= float(alpha)
            if out is None:
                out = _torch().empty(shape, device=device, dtype=o_dtype)
            try:
                plan.launch(a, b.t(), out, alpha_f, scales, bias, residual)
            except Exception:
                check(a, b, out, out_dtype, activation == "swiglu")  # a misaligned base: the error naming the fix
                raise
            return out
    M, N, K, o_t = check(a, b, out, out_dtype, activation == "swiglu")
    fp8 = _name(a.dtype) in FP8
    if not fp8 and (scale_a is not None or scale_b is not None):
        raise GemmArgumentError("scale_a / scale_b: per-tensor scales are for fp8 inputs only (alpha scales a "
                                "16-bit product)")
    epi_opts = _epilogue(b, M, N, o_t, bias, activation, residual, alpha, out, fp8)
    import torch

    if out is None:
        out = torch.empty(M, N, device=a.device, dtype=getattr(torch, o_t))
    if min(M, N, K) == 0:
        if K == 0:
            out.zero_()
            if epi_opts and M and N:  # a product of zeros: the epilogue alone, in torch
                out.copy_(epilogue_reference(out.float().repeat(1, 2) if activation == "swiglu" else out.float(),
                                             bias, activation, residual, float(alpha or 1.0)))
        return out
    from . import host as gp  # imports cutlass
    from .. import _host

    bt = b.t()  # (N, K) row-major: the kernel computes a @ bt.T
    alpha_f, scales = _scales(a, scale_a, scale_b)
    if alpha is not None:
        alpha_f *= float(alpha)
    if config == "default":
        cfg = {}
    elif isinstance(config, dict):
        cfg = _tune.normalize(config)
    elif config == "auto":
        majors = ",".join(m for m, on in (("a-m", a.stride(1) != 1 and M > 1), ("b-n", b.stride(0) != 1 and N > 1))
                          if on)
        # the plain GEMM's winner (its key and timings): the epilogue adds the same work to every tile
        plain = out if not epi_opts else torch.empty(M, b.shape[1], device=a.device, dtype=out.dtype)
        # swap-AB candidates where a swapped kernel can run the call, under their own cache key (an
        # epilogue's lookup of the same shape must not get a swapped winner)
        cands = _tune.candidates(M, b.shape[1], K, fp8, deterministic,
                                 swap=not (fp8 or majors or epi_opts) and out.stride(1) == 1, sms=_host.num_sms(),
                                 cluster_ctas=gp.max_ctas)
        key = _tune.cache_key(M, b.shape[1], K, a.dtype, b.dtype, out.dtype, torch.cuda.get_device_name(a.device),
                              deterministic, majors, swap=any(c.get("swap_ab") for c in cands))
        cfg, _ = _tune.autotune(key, cands, lambda c: _time_ms(
            lambda: _try_config(gp, a, bt, plain, alpha_f if fp8 else 1.0, scales or None, c))
            + _tune.EXTRA_LAUNCH_MS * _extra_launches(gp, a, bt, plain, scales, c), cache or _tune.TuneCache())
    else:
        raise GemmArgumentError(f"config={config!r}: expected 'auto', 'default' or a configuration dict")
    if activation == "swiglu":
        cfg = _epilogue_config(cfg)
    swapped, opts = _host_options(cfg)
    if swapped:
        plan = _swapped_plan(gp, a, bt, out, scales, opts, epi_opts)
    else:
        plan = gp.plan(a, bt, out, device_scale=bool(scales), **opts, **epi_opts)
    plan.launch(a, bt, out, alpha_f, scales, bias, residual)
    if fast:
        _PLANS[pkey] = (plan, (M, N), out.dtype, a.device)
    return out
