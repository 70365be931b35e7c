"""Batched GEMM for ``warpsched.ops.gemm``: out[l] = epilogue(a[l] @ b[l]) for a (L, M, K) and b
(L, K, N), in one launch of the persistent GEMM with CuTe's L mode (``PersistentGemm(batched=True)``:
A (M, K, L), B (N, K, L), C (M, N, L), which are views of the torch tensors: nothing is copied).

The kernel numbers the work tiles of the L products as one M range (L x tiles_m tiles), so the tile
scheduler and the checked program are the 2-D kernel's; a tile never spans two products. Every
product is K-major (a[l] row-major, b[l] column-major: ``w.transpose(1, 2)`` of (L, N, K) weights),
and runs whole tiles: no split-K, stream-K or cluster (a batched shape has L times the tiles)."""
from __future__ import annotations

from typing import Dict

from . import autotune as _tune
from .config import cluster_of
from .ops import FP8, GemmArgumentError, _epilogue, _epilogue_config, _kind, _name, _scales, _time_ms, check

_PLANS: Dict[tuple, tuple] = {}


class _Product:
    """One product of a batched operand, as the 2-D checks read it (shape, strides, dtype, base)."""

    def __init__(self, t):
        self.t = t
        self.shape, self.dtype, self.is_cuda, self.device = tuple(t.shape[1:]), t.dtype, t.is_cuda, t.device

    def dim(self):
        return 2

    def stride(self, i=None):
        s = tuple(self.t.stride()[1:])
        return s if i is None else s[i]

    def element_size(self):
        return self.t.element_size()

    def data_ptr(self):
        return self.t.data_ptr()


def check_batched(a, b, out=None, out_dtype=None, swiglu=False):
    """Validate a batched product; returns (L, M, N, K, out dtype name) (N: the output's width)."""
    L, M, K = a.shape
    if b.shape[0] != L:
        raise GemmArgumentError(f"a {tuple(a.shape)} and b {tuple(b.shape)}: batched operands need one batch size L "
                                "(a: (L, M, K), b: (L, K, N))")
    M_, N, K_, o_t = check(_Product(a), _Product(b), None if out is None else _Product(out), out_dtype, swiglu)
    fp8 = _name(a.dtype) in FP8
    item = 1 if fp8 else 2
    if a.stride(2) != 1 and K > 1 or b.stride(1) != 1 and K > 1:
        raise GemmArgumentError(f"a strides {tuple(a.stride())}, b strides {tuple(b.stride())}: a batched GEMM reads "
                                "K-major products (a[l] row-major, b[l] column-major: b = w.transpose(1, 2) of "
                                "(L, N, K) weights w); pass a.contiguous() / "
                                "b.transpose(1, 2).contiguous().transpose(1, 2)")
    for nm, t in (("a", a), ("b", b)) + ((("out", out),) if out is not None else ()):
        if (t.stride(0) * (2 if nm == "out" else item)) % 16:
            raise GemmArgumentError(f"{nm} {tuple(t.shape)} strides {tuple(t.stride())}: each product's base must "
                                    "be 16-byte aligned (TMA); pass a contiguous tensor with its rows a multiple of "
                                    "16 bytes")
    if out is not None and tuple(out.shape) != (L, M, N):
        raise GemmArgumentError(f"out is {tuple(out.shape)}; expected (L, M, N) = ({L}, {M}, {N})")
    return L, M, N, K, o_t


def _candidates(M, N, K, fp8):
    """The 2-D candidates that run whole tiles (a batched GEMM has no K split nor cluster)."""
    out = []
    for c in _tune.candidates(M, N, K, fp8):
        c = {k: v for k, v in c.items() if k not in ("split_k", "split_reduce")}
        if tuple(c.get("cluster_mn", (1, 1))) == (1, 1) and c not in out:
            out.append(c)
    return out


def _options(cfg, epi_opts, device_scale):
    """The kernel options of a batched launch: a whole-tile configuration, L mode, the epilogue."""
    cfg = {k: v for k, v in cfg.items() if k not in ("split_k", "split_reduce")}
    if epi_opts.get("activation") == "swiglu":
        cfg = {k: v for k, v in _epilogue_config(cfg).items() if k != "split_k"}
    return {"schedule": "cooperative", **cfg, "batched": True, **epi_opts,
            **({"device_scale": True} if device_scale else {})}


def gemm_batched(a, b, out=None, *, bias=None, activation=None, residual=None, alpha=None, scale_a=None,
                 scale_b=None, out_dtype=None, config="auto", cache=None, deterministic=True):
    """out[l] = act(alpha * (a[l] @ b[l]) + bias) + residual[l] for a (L, M, K), b (L, K, N), out and
    residual (L, M, N), bias (N,) shared by the products. See ``gemm.ops.gemm``."""
    fast = cache is None
    pkey = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.get_device(),
            None if out is None else (out.shape, out.stride(), out.dtype), out_dtype,
            config if isinstance(config, str) else repr(sorted(config.items())), _kind(scale_a), _kind(scale_b),
            activation, None if bias is None else (bias.shape, bias.dtype),
            None if residual is None else (residual.shape, residual.stride(), residual.dtype),
            alpha is not None and alpha != 1.0)
    hit = _PLANS.get(pkey) if fast else None
    aliased = residual is not None and out is not None and residual.data_ptr() == out.data_ptr()
    if hit is None or aliased:
        L, M, N, K, o_t = check_batched(a, b, out, out_dtype, activation == "swiglu")
        fp8 = _name(a.dtype) in FP8
        if not fp8 and (scale_a is not None or scale_b is not None):
            raise GemmArgumentError("scale_a / scale_b: per-tensor scales are for fp8 inputs only (alpha scales a "
                                    "16-bit product)")
        if residual is not None and tuple(residual.shape) != (L, M, N):
            raise GemmArgumentError(f"residual {tuple(residual.shape)}: expected the output's shape ({L}, {M}, {N})")
        epi_opts = _epilogue(_Product(b), M, N, o_t, bias, activation,
                             None if residual is None else _Product(residual), alpha,
                             None if out is None else _Product(out), fp8)
        # a cluster that is no cluster is named first (cluster_of: the GemmConfigError listing them)
        if isinstance(config, dict) and (cluster_of(config.get("cluster_mn", (1, 1))) != (1, 1)
                                         or config.get("split_k", 1) not in (1, "auto")):
            raise GemmArgumentError(f"config {config}: a batched GEMM runs whole tiles of each product; drop split_k "
                                    "and cluster_mn (or call gemm once per product)")
    import torch

    from .launch import GemmPlan

    if hit is None or aliased:
        if out is None:
            out = torch.empty(L, M, N, device=a.device, dtype=getattr(torch, o_t))
        if min(L, M, N, K) == 0:
            if K == 0 and L and M and N:
                from .ops import epilogue_reference

                zeros = torch.zeros(L, M, b.shape[2], device=a.device, dtype=torch.float32)
                out.copy_(epilogue_reference(zeros, bias, activation, residual, float(alpha or 1.0)))
            return out
        hit = None
    elif out is None:
        out = torch.empty(hit[1], device=a.device, dtype=hit[2])
    alpha_f, scales = _scales(a, scale_a, scale_b) if (scale_a is not None or scale_b is not None) else (1.0, ())
    if alpha is not None:
        alpha_f *= float(alpha)
    a3, b3, c3 = a.permute(1, 2, 0), b.permute(2, 1, 0), out.permute(1, 2, 0)  # (M, K, L), (N, K, L), (M, N, L)
    r3 = None if residual is None else residual.permute(1, 2, 0)
    if hit is not None:
        hit[0].launch(a3, b3, c3, alpha_f, scales, bias, r3)
        return out
    if config == "default":
        cfg = {}
    elif isinstance(config, dict):
        cfg = _tune.normalize(config)
    elif config == "auto":
        # the plain batched GEMM's timings: the epilogue adds the same work to every tile
        key = _tune.cache_key(M, b.shape[2], K, a.dtype, b.dtype, out.dtype, torch.cuda.get_device_name(a.device),
                              deterministic, f"L{L}")
        scratch = torch.empty(L, M, b.shape[2], device=a.device, dtype=out.dtype).permute(1, 2, 0)

        def bench(c):
            p = GemmPlan(a.dtype, out.dtype, _options(c, {}, bool(scales)), 1)
            return _time_ms(lambda: p.launch(a3, b3, scratch, alpha_f if fp8 else 1.0, scales))

        cfg, _ = _tune.autotune(key, _candidates(M, b.shape[2], K, fp8), bench, cache or _tune.TuneCache())
    else:
        raise GemmArgumentError(f"config={config!r}: expected 'auto', 'default' or a configuration dict")
    plan = GemmPlan(a.dtype, out.dtype, _options(cfg, epi_opts, bool(scales)), 1)
    plan.launch(a3, b3, c3, alpha_f, scales, bias, r3)
    if fast:
        _PLANS[pkey] = (plan, (L, M, N), out.dtype)
    return out
