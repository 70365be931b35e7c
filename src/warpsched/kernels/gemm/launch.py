"""How the persistent GEMM is compiled and launched: once per configuration, then a ``GemmPlan``
per (shape, configuration) that only launches.

Two calling conventions, one kernel:

- **TVM FFI** (``_host.ffi_enabled()``, the default when ``apache-tvm-ffi`` is installed): the
  kernel is compiled once with fake operands and the caller's current stream; a launch passes the
  torch tensors themselves. Shapes, strides, dtypes and alignment are checked in C by the call.
- **The JIT executor**: compiled with CuTe tensors (``to_cute``) and called with them; every call
  converts its tensors again (what a launch cost before TVM FFI: hundreds of microseconds).
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute

from .. import _host
from .config import GemmConfigError
from .kernel import PersistentGemm

_CACHE = {}
VERDICT_OF = {}  # compile key -> the exhaustive checker's verdict on the program the trace checked
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
cutlass_dtype = _host.cutlass_dtype


def key(ab_dtype, c_dtype, options):
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return (ab_dtype, c_dtype, tuple(sorted(options.items())))


def to_cute(t):
    """A row-major torch tensor as a CuTe tensor with a dynamic row stride (fp8 through a uint8
    view: DLPack has no fp8 type; the element type is set back on the CuTe side)."""
    if str(t.dtype).split(".")[-1] in FP8_DTYPES:
        import torch

        from cutlass.cute.runtime import from_dlpack

        m = from_dlpack(t.view(torch.uint8), assumed_align=16)
        m.element_type = cutlass_dtype(t.dtype)
        return m.mark_layout_dynamic(leading_dim=1)
    return _host.to_cute(t, 1)


def max_ctas(cluster_mn=(1, 1)):
    """The persistent grid bound: every SM, or as many whole clusters as the driver says can be resident at once
    (clusters of 4 on an H200: 30 or 33, depending on the chip's GPCs; docs/gemm.md, "4-CTA clusters")."""
    size = cluster_mn[0] * cluster_mn[1]
    return _host.num_sms() if size == 1 else _resident_clusters(size) * size


@functools.lru_cache(maxsize=None)
def _resident_clusters(size):
    try:
        from cutlass.utils import HardwareInfo

        return HardwareInfo().get_max_active_clusters(size)
    except Exception:  # noqa: BLE001 - an older driver: assume every SM joins one
        return _host.num_sms() // size


def _kernel(a_dtype, c_dtype, options):
    opts = {k: cutlass_dtype(v) if k == "b_dtype" else v for k, v in options.items()}
    if "max_ctas" not in opts:
        opts["max_ctas"] = max_ctas(options.get("cluster_mn", (1, 1)))
    return PersistentGemm(ab_dtype=cutlass_dtype(a_dtype), c_dtype=cutlass_dtype(c_dtype), **opts)


def compiled(ma, mb, mc, a, c, serial_args=(), **options):
    """The kernel for these dtypes and options, compiled once per key (shapes are dynamic) for the
    JIT executor: call it with CuTe tensors. ``serial_args``: what follows the stream (the tile
    workspace and flags of in-kernel split-K / stream-K, the device scales)."""
    k = key(a.dtype, c.dtype, options)
    if k not in _CACHE:
        kern = _kernel(a.dtype, c.dtype, options)
        _CACHE[k] = cute.compile(kern, ma, mb, mc, cutlass.Int32(1), cutlass.Float32(1.0),
                                 _host.current_stream(), *serial_args, options=_host.launch_options())
        _host.record_verdict(VERDICT_OF, k, kern)
    return _CACHE[k]


def fake_operands(ab_dtype, b_dtype, c_dtype, k_align=16, c_rows_free=False, a_major="k", b_major="k",
                  batched=False, c_cols_free=False, c_major="n"):
    """Fake row-major A (M x K), B (N x K), C (M x N) for compiles without tensors, A and B of their
    own types: M any, N a multiple of 8, K and the (symbolic) leading strides multiples of ``k_align``.
    ``c_rows_free``: C's rows are a symbol of their own (host-reduced split-K's workspace has
    splits x tile-padded M rows). ``a_major="m"`` / ``b_major="n"``: A / B with unit stride along M / N
    (a transposed operand), its other stride a multiple of ``k_align``. ``batched``: (M, K, L), (N, K, L),
    (M, N, L), each product's base 16-byte aligned (its L stride a multiple of ``k_align``).
    ``c_cols_free``: C's columns are a symbol of their own (SwiGLU stores half of B's N). ``c_major="m"``:
    C column-major (unit stride along M, its column stride a multiple of ``k_align``) and N any (a swap-AB
    GEMM's N is the token count)."""
    from cutlass.cute.runtime import make_fake_tensor

    M, K = cute.sym_int32(), cute.sym_int32(divisibility=k_align)
    N = cute.sym_int32() if c_major == "m" else cute.sym_int32(divisibility=8)

    L = cute.sym_int32()

    def rows(dtype, shape, mn_major=False):
        lead = cute.sym_int64(divisibility=k_align)
        if batched:
            return make_fake_tensor(dtype, (*shape, L), (1, lead, cute.sym_int64(divisibility=k_align)) if mn_major
                                    else (lead, 1, cute.sym_int64(divisibility=k_align)), assumed_align=16)
        return make_fake_tensor(dtype, shape, (1, lead) if mn_major else (lead, 1), assumed_align=16)

    return (rows(ab_dtype, (M, K), a_major == "m"), rows(b_dtype, (N, K), b_major == "n"),
            rows(c_dtype, (cute.sym_int32() if c_rows_free else M,
                           cute.sym_int32(divisibility=8) if c_cols_free else N), c_major == "m"))


def fake_workspace(cols_divisibility=16):
    """The fp32 tile workspace and the int32 flags of in-kernel split-K / stream-K, for fake compiles.
    The workspace is tile-padded: its columns are a multiple of bN, and every bN is one of 16."""
    from cutlass.cute.runtime import make_fake_tensor

    d = cols_divisibility
    return (make_fake_tensor(cutlass.Float32, (cute.sym_int32(), cute.sym_int32(divisibility=d)),
                             (cute.sym_int64(divisibility=d), 1), assumed_align=16),
            make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=16))


def fake_epilogue(kern):
    """The fused epilogue's fake bias (N,), residual (M, N) and swiglu_keep's h (M, N / 2) for fake compiles
    (None where the kernel has none): bias and residual of any length and row stride, element-aligned (scalar
    loads); h 16-byte aligned with rows of a multiple of 8 elements (its 16-byte stores)."""
    from cutlass.cute.runtime import make_fake_tensor

    bias = res = aux = None
    if kern.epi.bias is not None:
        dt = cutlass.Float32 if kern.epi.bias == "f32" else kern.c_dtype
        bias = make_fake_tensor(dt, (cute.sym_int32(),), (1,), assumed_align=dt.width // 8)
    if kern.epi.residual:
        shape, stride = (cute.sym_int32(), cute.sym_int32()), (cute.sym_int64(), 1)
        if kern.batched:  # (M, N, L)
            shape, stride = shape + (cute.sym_int32(),), stride + (cute.sym_int64(),)
        res = make_fake_tensor(kern.c_dtype, shape, stride, assumed_align=kern.c_dtype.width // 8)
    if kern.epi.keep:  # 16-byte stores of 8 columns: a 16-byte aligned base, rows a multiple of 8 elements
        aux = make_fake_tensor(kern.c_dtype, (cute.sym_int32(), cute.sym_int32(divisibility=8)),
                               (cute.sym_int64(divisibility=8), 1), assumed_align=16)
    return bias, res, aux


def trailing(ws=None, flags=None, scale_a=None, scale_b=None, bias=None, residual=None, aux=None):
    """The kernel's optional arguments after the stream, in order, without the trailing Nones."""
    args = [ws, flags, scale_a, scale_b, bias, residual, aux]
    while args and args[-1] is None:
        args.pop()
    return tuple(args)


def compiled_ffi(a_dtype, c_dtype, **options):
    """The same kernel compiled for TVM-FFI calls, once per key, with fake operands (those of the
    CPU tests: ``fake_operands``; K aligned to 8 elements when A and B share a type, 16 otherwise)
    and the caller's current stream. Called as ``f(a, b, c, splits, alpha, [workspace, flags],
    [scale_a, scale_b], [bias, residual, h])`` with torch tensors (None for an absent one, trailing
    ones left out: ``trailing``)."""
    k = key(a_dtype, c_dtype, options) + ("tvm-ffi",)
    f = _CACHE.get(k)
    if f is None:
        from cutlass.cute.runtime import make_fake_tensor

        kern = _kernel(a_dtype, c_dtype, options)
        ops = fake_operands(kern.ab_dtype, kern.b_dtype, kern.c_dtype, k_align=8 if kern.b_dtype is kern.ab_dtype else 16,
                            c_rows_free=kern.split_k and not kern.serial, a_major=kern.a_major, b_major=kern.b_major,
                            batched=kern.batched, c_cols_free=kern.epi.swiglu, c_major=kern.c_major)
        ws = fake_workspace() if (kern.serial or kern.stream_k) else (None, None)
        sc = (tuple(make_fake_tensor(cutlass.Float32, (1,), (1,), assumed_align=4) for _ in range(2))
              if kern.device_scale else (None, None))
        extra = trailing(*ws, *sc, *fake_epilogue(kern))
        f = _CACHE[k] = cute.compile(kern, *ops, cutlass.Int32(1), cutlass.Float32(1.0), _host.fake_env_stream(),
                                     *extra, options=_host.ffi_options())
        _host.record_verdict(VERDICT_OF, k[:-1], kern)
    return f


def scale_tensors(scales) -> Tuple:
    """(scale_a, scale_b) as the one-element fp32 CUDA tensors the device_scale kernels read."""
    for nm, t in zip(("scale_a", "scale_b"), scales):
        if t.numel() != 1 or str(t.dtype) != "torch.float32" or not t.is_cuda:
            raise GemmConfigError(f"{nm}: a device scale is a one-element torch.float32 CUDA tensor (got "
                                  f"{tuple(t.shape)} {t.dtype} on {t.device}); pass scale.float().reshape(1)")
    return tuple(t.reshape(1) for t in scales)


class GemmPlan:
    """What gemm() decided for one (shape, dtypes, configuration): the compiled kernel, the split
    count, the workspace; calling it only launches (``plan(a, b, c, alpha, scales, bias, residual, aux)``,
    b as (N, K); bias, residual and swiglu_keep's h (``aux``) for a kernel compiled with that fused epilogue).

    ``target``: "c" (the kernel writes c), "host" (fp32 partial tiles into ``ws``, summed by torch
    into c), or "flags" (in-kernel split-K / stream-K through ``ws`` and ``flags``)."""

    def __init__(self, a_dtype, c_dtype, options, splits: int, target: str = "c", ws=None, flags=None,
                 total=None, rows: Optional[int] = None):
        self.options, self.splits, self.target = options, splits, target
        self.ws, self.flags, self.total, self.rows = ws, flags, total, rows
        self.device_scale = bool(options.get("device_scale"))
        self.ffi = _host.ffi_enabled()
        out_dtype = ws.dtype if target == "host" else c_dtype
        self.f = compiled_ffi(a_dtype, out_dtype, **options) if self.ffi else None
        self.mid = (ws, flags) if target == "flags" else (None, None)
        self.epilogue = bool(options.get("bias") or options.get("residual")
                             or options.get("activation") == "swiglu_keep")  # tensors to pass
        # the common case, one launch writing c, without the general path's branches
        plain = target == "c" and not self.device_scale and not self.epilogue
        self.launch = self._direct if (self.ffi and plain) else self.__call__

    def _direct(self, a, b, c, alpha=1.0, scales=(), bias=None, residual=None):
        self.f(a, b, c, 1, alpha)

    def __call__(self, a, b, c, alpha=1.0, scales=(), bias=None, residual=None, aux=None):
        out = self.ws if self.target == "host" else c
        args = trailing(*self.mid, *(scales or (None, None)), bias, residual, aux)
        if self.ffi:
            self.f(a, b, out, self.splits, alpha, *args)
        else:
            self._jit(a, b, out, alpha, args)
        if self.target == "host":
            import torch

            M, N = c.shape
            torch.sum(self.ws.view(self.splits, self.rows, N)[:, :M], dim=0, out=self.total)  # fp32 sum ...
            c.copy_(self.total)  # ... rounded once into c

    def _jit(self, a, b, out, alpha, args):
        ma, mb = to_cute(a), to_cute(b)
        mc = _host.to_cute(out, 0) if self.options.get("c_major") == "m" else to_cute(out)  # column-major C
        extra = tuple(None if t is None else _host.to_cute(t, list(t.stride()).index(1) if 1 in t.stride() else 0)
                      for t in args)
        f = compiled(ma, mb, mc, a, out, serial_args=extra, **self.options)
        f(ma, mb, mc, cutlass.Int32(self.splits), cutlass.Float32(float(alpha)), _host.current_stream(), *extra)
