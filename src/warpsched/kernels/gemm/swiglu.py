"""SwiGLU on an interleaved pre-activation, forward and backward, as two elementwise CuTe DSL kernels.

The gate / up GEMM (``ops.interleave_gate_up``'s weight) writes z (T, 2 I) as 8 gate features then the same
8 up features, and so on. Under autograd the block needs h = silu(g) * u from z and, in the backward,
dz = (dh u silu'(g), dh silu(g)) interleaved the same way, which is the gradient the GEMM's dX = dz W and
dW = dz^T x take as they are (no weight or gradient copied back to [gate | up] order). torch's elementwise
ops on z's 8-wide runs cannot use 16-byte accesses and take several passes (silu, product, their
backwards); here each thread moves one run pair with 16-byte loads and stores, in one pass each way:

    forward   thread u: g = z[16 u : 16 u + 8], up = z[16 u + 8 : 16 u + 16]  ->  h[8 u : 8 u + 8]
    backward  thread u: dh[8 u : 8 u + 8], g, up                              ->  dz[16 u : 16 u + 16]

in fp32, with silu(x) = x / (1 + exp(-x)) computed as the GEMM's fused epilogue does (``epilogue._act``), so
the forward's h equals the fused epilogue's. The tensors are flat contiguous views (the host's); no
pipelines, so no warpsched program.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .. import _host
from .ops import GemmArgumentError, swiglu_interleaved

THREADS = 256
RUN = 8  # features in a gate (or up) run: one 16-byte access of 16-bit values


def _sigmoid(x):
    f32 = cutlass.Float32
    return cute.arch.rcp_approx(f32(1.0) + cute.math.exp(-x, fastmath=True))


class SwiGLUForward:
    """h (n,) = silu(g) * up of the interleaved z (2 n,), n a multiple of 8."""

    def __init__(self, dtype=cutlass.BFloat16):
        self.dtype = dtype

    @cute.jit
    def __call__(self, mZ: cute.Tensor, mH: cute.Tensor, stream):
        runs = cute.size(mH) // RUN
        self.kernel(mZ, mH).launch(grid=[(runs + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mZ: cute.Tensor, mH: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        u = bid * THREADS + tidx
        z = cute.flat_divide(mZ, (2 * RUN,))
        h = cute.flat_divide(mH, (RUN,))
        if u < cute.size(mH) // RUN:
            pair = cute.make_rmem_tensor(cute.make_layout(2 * RUN), self.dtype)
            cute.autovec_copy(z[(None, u)], pair)
            x = pair.load().to(cutlass.Float32)
            out = cute.make_rmem_tensor(cute.make_layout(RUN), cutlass.Float32)
            for i in cutlass.range_constexpr(RUN):
                g = x[i]
                out[i] = g * _sigmoid(g) * x[RUN + i]
            res = cute.make_rmem_tensor(cute.make_layout(RUN), self.dtype)
            res.store(out.load().to(self.dtype))
            cute.autovec_copy(res, h[(None, u)])


class SwiGLUBackward:
    """dz (2 n,) interleaved = (dh up silu'(g), dh silu(g)) for dh (n,) and the interleaved z (2 n,)."""

    def __init__(self, dtype=cutlass.BFloat16):
        self.dtype = dtype

    @cute.jit
    def __call__(self, mdH: cute.Tensor, mZ: cute.Tensor, mdZ: cute.Tensor, stream):
        runs = cute.size(mdH) // RUN
        self.kernel(mdH, mZ, mdZ).launch(grid=[(runs + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1],
                                         stream=stream)

    @cute.kernel
    def kernel(self, mdH: cute.Tensor, mZ: cute.Tensor, mdZ: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        u = bid * THREADS + tidx
        z = cute.flat_divide(mZ, (2 * RUN,))
        dz = cute.flat_divide(mdZ, (2 * RUN,))
        dh = cute.flat_divide(mdH, (RUN,))
        if u < cute.size(mdH) // RUN:
            pair = cute.make_rmem_tensor(cute.make_layout(2 * RUN), self.dtype)
            grad = cute.make_rmem_tensor(cute.make_layout(RUN), self.dtype)
            cute.autovec_copy(z[(None, u)], pair)
            cute.autovec_copy(dh[(None, u)], grad)
            x = pair.load().to(cutlass.Float32)
            d = grad.load().to(cutlass.Float32)
            out = cute.make_rmem_tensor(cute.make_layout(2 * RUN), cutlass.Float32)
            for i in cutlass.range_constexpr(RUN):
                g, up = x[i], x[RUN + i]
                s = _sigmoid(g)
                silu = g * s
                out[i] = d[i] * up * (s + silu * (cutlass.Float32(1.0) - s))  # silu' = s (1 + g (1 - s))
                out[RUN + i] = d[i] * silu
            res = cute.make_rmem_tensor(cute.make_layout(2 * RUN), self.dtype)
            res.store(out.load().to(self.dtype))
            cute.autovec_copy(res, dz[(None, u)])


_CACHE = {}


def _fake(dtype, n):
    from cutlass.cute.runtime import make_fake_tensor

    return make_fake_tensor(dtype, (n,), (1,), assumed_align=16)


def compiled(direction, dtype, arch=None):
    """The kernel for TVM-FFI calls on flat tensors: ``forward``: ``f(z, h)``; ``backward``: ``f(dh, z, dz)``
    (``arch``: a CPU compile for that arch, its PTX kept)."""
    from cutlass.cute.runtime import make_fake_stream

    key = (direction, dtype, arch)
    if key not in _CACHE:
        n = cute.sym_int32(divisibility=RUN)
        two_n = cute.sym_int32(divisibility=2 * RUN)
        options = _host.ffi_options(arch)
        stream = make_fake_stream() if arch else _host.fake_env_stream()
        if direction == "forward":
            args = (SwiGLUForward(dtype), _fake(dtype, two_n), _fake(dtype, n))
        else:
            args = (SwiGLUBackward(dtype), _fake(dtype, n), _fake(dtype, two_n), _fake(dtype, two_n))
        _CACHE[key] = cute.compile(*args, stream, options=options)
    return _CACHE[key]


# ------------------------------------------------------------------------------- torch
def _kernels_take(*tensors):
    """The kernels run on CUDA 16-bit tensors with TVM FFI (the launch path of every warpsched op); else torch."""
    return _host.ffi_enabled() and all(t.is_cuda and t.dtype == tensors[0].dtype for t in tensors) and \
        str(tensors[0].dtype) in ("torch.bfloat16", "torch.float16")


def _flat(t):
    """``t`` as a flat contiguous tensor with a 16-byte aligned start (a copy only where it is not one)."""
    t = t.contiguous()
    return t.view(-1) if t.data_ptr() % 16 == 0 else t.clone().view(-1)


def swiglu_forward(z):
    """h (..., I) = silu(gate) * up of the interleaved pre-activation z (..., 2 I) (``ops.swiglu_interleaved``'s
    value: one pass of the ``SwiGLUForward`` kernel on CUDA, torch's ops elsewhere)."""
    import torch

    if not _kernels_take(z) or z.shape[-1] % (2 * RUN):
        return swiglu_interleaved(z)
    h = torch.empty(*z.shape[:-1], z.shape[-1] // 2, device=z.device, dtype=z.dtype)
    if h.numel():
        compiled("forward", _host.cutlass_dtype(z.dtype))(_flat(z), h.view(-1))
    return h


def swiglu_backward(dh, z):
    """dz (..., 2 I), interleaved as z, of h = ``swiglu_forward(z)`` for the upstream gradient dh (..., I)."""
    import torch

    if tuple(dh.shape[:-1]) != tuple(z.shape[:-1]) or 2 * dh.shape[-1] != z.shape[-1]:
        raise GemmArgumentError(f"swiglu_backward: dh {tuple(dh.shape)} must be z {tuple(z.shape)} with half its last "
                                "dimension (h = swiglu_forward(z) has I features for z's 2 I)")

    if not _kernels_take(dh, z) or z.shape[-1] % (2 * RUN):
        with torch.enable_grad():
            zz = z.detach().requires_grad_()
            (dz,) = torch.autograd.grad(swiglu_interleaved(zz), zz, dh)
        return dz
    dz = torch.empty(z.shape, device=z.device, dtype=z.dtype)
    if dz.numel():
        compiled("backward", _host.cutlass_dtype(z.dtype))(_flat(dh), _flat(z), dz.view(-1))
    return dz


# --------------------------------------------------------------- z and h from one GEMM
# tokens: from here a SwiGLU layer's forward under autograd is one GEMM storing z and h (``swiglu_keep``), below
# the GEMM writing z and ``swiglu_forward``; read by nn.functional's node and pushed into the native node
# (``nn.functional.swiglu_keep_from`` changes both). docs/torch.md ("The SwiGLU GEMM that keeps z") has the timing.
KEEP_FROM = 1024
_KEEP = {}  # (shapes, strides, dtypes, device, bias) -> the swiglu_keep GemmPlan


def swiglu_keep_plan(x2, weight, bias=None):
    """The plan of ``swiglu_keep`` for a 2-D x: the configuration ``linear(..., activation="swiglu")`` tuned for this
    shape (tuned on the first call) with the epilogue option ``swiglu_keep`` (gemm.epilogue): C holds z, the
    plan's ``aux`` tensor receives h. None where the SwiGLU GEMM's plan is not one launch of a ``GemmPlan``."""
    from . import ops as gemm_ops
    from .launch import GemmPlan

    key = (x2.shape, x2.stride(), weight.shape, weight.stride(), x2.dtype, weight.dtype, x2.get_device(),
           None if bias is None else (bias.shape, bias.dtype))
    if key not in _KEEP:
        gemm_ops.linear(x2, weight, bias, "swiglu")  # tunes and keeps the SwiGLU GEMM's plan
        base = gemm_ops.linear_plan(x2, weight, bias, "swiglu")
        plan = None
        if isinstance(base, GemmPlan) and base.target != "host":
            plan = GemmPlan(x2.dtype, x2.dtype, dict(base.options, activation="swiglu_keep"), base.splits,
                            base.target, base.ws, base.flags)
        _KEEP[key] = plan
    return _KEEP[key]


def swiglu_keep(x, weight, bias=None):
    """(z, h) of a SwiGLU layer in one GEMM: z (..., 2 I) = x @ weight.T + bias (the interleaved pre-activation the
    backward needs) and h (..., I) = silu(gate) * up of z, computed by the GEMM's epilogue from z in fp32 (the
    values ``linear(x, weight, bias, "swiglu")`` returns). ``weight``: (2 I, K), gate and up interleaved
    (``ops.interleave_gate_up``). Where no one-launch plan exists (or off CUDA), the SwiGLU GEMM's z and
    ``swiglu_forward(z)``."""
    import torch

    from . import ops as gemm_ops

    gemm_ops._require_tensors(x=x, weight=weight, bias=bias)
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1] or weight.shape[0] % (2 * RUN):
        raise GemmArgumentError(f"swiglu_keep: x {tuple(x.shape)}, weight {tuple(weight.shape)}: expected x (..., K) "
                                "and weight (2 I, K), gate and up interleaved in 8-row blocks (ops.interleave_gate_up: "
                                "2 I a multiple of 16)")
    K = weight.shape[-1]
    x2 = x if x.dim() == 2 else x.reshape(-1, K)
    plan = swiglu_keep_plan(x2, weight, bias) if _kernels_take(x2, weight) and x2.shape[0] else None
    if plan is None:
        z = gemm_ops.linear(x2, weight, bias)
        h = swiglu_forward(z)
    else:
        z = torch.empty(x2.shape[0], weight.shape[0], device=x.device, dtype=x.dtype)
        h = torch.empty(x2.shape[0], weight.shape[0] // 2, device=x.device, dtype=x.dtype)
        plan(x2, weight, z, 1.0, (), bias, None, h)
    lead = tuple(x.shape[:-1])
    return z.view(*lead, z.shape[-1]), h.view(*lead, h.shape[-1])
