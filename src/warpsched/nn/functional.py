"""``linear`` with autograd on warpsched's GEMM (imports torch).

On CUDA the layer runs on the native launch path where it is built (``warpsched.native``: the autograd node of a
plain or SwiGLU layer and every launch in C++, the same kernels). Where it cannot be built, the Python path
below runs instead; the other activations' autograd nodes are Python either way (their GEMMs native).

Forward y = act(x W^T + bias) with x (..., K) and W (N, K): ``warpsched.ops.gemm(x, W.t(), bias=bias,
activation=act)`` (the custom op ``torch.ops.warpsched.linear`` when torch.compile or another tracer is
looking: ``_linear``), the bias and the activation fused into the GEMM's epilogue. Backward: dX = dZ W
reads W row-major (an N-major B) and dW = dZ^T X reads dZ^T column-major (an M-major A) and X
row-major (an N-major B): the persistent GEMM takes those 16-bit operands as they are
(``PersistentGemm(a_major=..., b_major=...)``), so no weight or activation is copied. The bias
gradient is dZ summed over the rows (torch).

Shapes: in_features and out_features must be multiples of 8 (the GEMM's TMA moves 16-byte rows; an
unaligned layer is refused, by ``Linear`` when it is built and by ``linear`` when it is called,
naming the padding that fixes it). The token count T (x's rows) may be anything: it is the forward's
and dX's M, which is free, but dW's contraction, which must be a multiple of 8, so for an unaligned T
the backward appends zero rows to dZ and X up to the next multiple of 8 for the dW GEMM (zero rows
add nothing to dZ^T X: the result is exact). That copies dZ and X once per backward, for unaligned
token counts only.

SwiGLU (``activation="swiglu"``): W is the gate and up weights as one (2 I, K) weight interleaved in blocks
of 8 rows (``warpsched.ops.interleave_gate_up``, made once when the weights are loaded) and y = silu(x W_g^T)
* (x W_u^T) has I features. Without a gradient the product runs in the GEMM's epilogue from
``SWIGLU_FUSED_FROM`` tokens on (where it was timed faster than the plain GEMM + torch's product); below, the
plain GEMM (with its swap-AB tiles) and the product in torch. With one, the GEMM keeps the interleaved
pre-activation z and the product and its gradient are one elementwise kernel each on z as it is
(``kernels.gemm.swiglu``: 16-byte accesses to its 8-wide gate / up runs, where torch's elementwise kernels on
them made a prefill block's forward + backward 12% slower on the H200, docs/torch.md), so neither the weight
nor its gradient is reordered. From ``kernels.gemm.swiglu.KEEP_FROM`` tokens the forward is one GEMM whose
epilogue stores both z and the product (``swiglu_keep``; ``swiglu_keep_from`` moves the threshold).

The activation's gradient dZ = dY * act'(Z):
- relu and relu2 are computed from the saved output Y (relu' = [Y > 0]; relu2' = 2 relu(Z) = 2 sqrt(Y)),
  so the forward stays one fused GEMM;
- gelu, gelu_tanh and silu need Z: when a gradient is needed the forward runs the GEMM with the bias
  fused, keeps Z and applies the activation in torch (what torch.nn.Linear + the activation saves);
  without one (inference, ``torch.no_grad``) the activation is fused too.
"""
from __future__ import annotations

import contextlib

import torch

from .. import torch_ops  # noqa: F401 (registers torch.ops.warpsched.*)
from ..kernels import _host
from ..kernels.gemm import ops as _gemm_ops
from ..kernels.gemm import swiglu as _swiglu
from ..kernels.gemm.ops import GemmArgumentError
from ._eager import eager

_OP = torch.ops.warpsched.linear


def _linear(x, weight, bias=None, activation=None):
    """act(x @ weight.T + bias): on CUDA, the native GEMM (``warpsched.native``, launched from C++, eager or under
    a tracer) where it is built; else warpsched's GEMM through ``gemm.ops.linear`` (its short host path for a
    model's every call), or the custom op ``torch.ops.warpsched.linear`` where a tracer is looking
    (``_eager.eager``). The same kernels either way. ``weight`` (N, K) may be a transposed view (dX = dY W is
    ``_linear(dy, w.t())``)."""
    if x.is_cuda and _native_ready():  # the native GEMM (warpsched.native): launched from C++, also where a
        # compiled graph calls it (a C++ kernel the dispatcher runs without a hop through Python)
        return torch.ops.warpsched_native.gemm.default(x, weight, bias, activation)
    if eager(x):
        return _gemm_ops.linear(x, weight, bias, activation)
    return _OP(x, weight, bias, activation)


ALIGN = 8  # elements: a 16-bit GEMM's K and N (16-byte TMA rows)

ACTIVATIONS = {
    None: None,
    "relu": torch.nn.functional.relu,
    "relu2": lambda y: torch.nn.functional.relu(y).square(),
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "swiglu": None,  # linear() handles it (``_swiglu_with_grad``); never reaches _LinearFunction's activation
}
FROM_OUTPUT = ("relu", "relu2")  # their gradient is a function of the output


SWIGLU_FUSED_FROM = 16  # tokens: below, the unfused SwiGLU (docs/torch.md "Fused epilogues on the H200")


class _SwiGLULinear(torch.autograd.Function):
    """h = silu(gate) * up of z = x W^T + bias, the GEMM's interleaved pre-activation, as one autograd node: the
    GEMM, then the product on z as it is (``kernels.gemm.swiglu``: one elementwise kernel each way; from
    ``KEEP_FROM`` tokens one GEMM storing z and h, ``swiglu_keep``); the backward
    makes dz interleaved like the weight and runs the GEMM's backward on it. Eager (without the native path): one
    node where a linear and a separate product took two (each Python backward is a hand-over to autograd's device
    thread: docs/torch.md, "The decode backward's host path"). Under a tracer with the native path: the same node
    over the native ops, whose SwiGLU kernels beat what inductor makes of the product on z's 8-wide runs."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        if x.numel() >= _swiglu.KEEP_FROM * x.shape[-1]:  # read while traced: a compiled graph is guarded on it
            z, h = _swiglu_keep(x, weight, bias)
        else:
            z = _linear(x, weight, bias)
            h = _swiglu_forward(z)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, weight, z)
        return h

    @staticmethod
    def backward(ctx, dh):
        x, weight, z = ctx.saved_tensors
        return _linear_grads(ctx.needs_input_grad, _swiglu_backward(dh, z), x, weight, ctx.has_bias)


def _swiglu_keep(x, weight, bias):
    """(z, h) from one GEMM (``kernels.gemm.swiglu.swiglu_keep``): the native op where it is built, else the
    Python path's."""
    if x.is_cuda and _native_ready():
        return torch.ops.warpsched_native.swiglu_keep.default(x, weight, bias)
    return _swiglu.swiglu_keep(x, weight, bias)


def _swiglu_forward(z):
    return _swiglu.swiglu_forward(z) if eager(z) else torch.ops.warpsched_native.swiglu_forward.default(z)


def _swiglu_backward(dh, z):
    return _swiglu.swiglu_backward(dh, z) if eager(z) else torch.ops.warpsched_native.swiglu_backward.default(dh, z)


def _swiglu_with_grad(x, weight, bias):
    """SwiGLU under autograd: one node (``_SwiGLULinear``) eager, or under a tracer (torch.compile) where the native
    ops are built, so dz reaches the GEMM's backward interleaved like the weight; under a tracer without them, the
    GEMM's node and the product as torch's ops, which inductor fuses."""
    if eager(x) or (x.is_cuda and _native_ready()):
        return _SwiGLULinear.apply(x, weight, bias)
    return _gemm_ops.swiglu_interleaved(_LinearFunction.apply(x, weight, bias, None))


def check_activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}: expected one of {list(ACTIVATIONS)} (swiglu: the gate and "
                         "up weights interleaved by warpsched.ops.interleave_gate_up)")


def _check_dtypes(x, weight):
    if x.dtype != weight.dtype or x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"warpsched linear: x is {x.dtype}, weight {weight.dtype}; both must be torch.bfloat16 "
                        "or torch.float16 (convert the module with .to(torch.bfloat16))")


def check_features(in_features, out_features, where="warpsched.nn.Linear"):
    """Refuse a layer the GEMM cannot run: in_features (the forward's K) and out_features (its N)
    must be multiples of 8."""
    for name, n in (("in_features", in_features), ("out_features", out_features)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise GemmArgumentError(f"{where}: {name} = {n!r}: expected a positive int, as torch.nn.Linear takes")
    for name, n, fix in (("in_features", in_features, "zero columns to the weight and zero features to x"),
                         ("out_features", out_features, "zero rows to the weight (and zeros to the bias), then "
                                                        f"use the output's first {out_features} features")):
        if n % ALIGN:
            raise GemmArgumentError(f"{where}: {name} = {n} is not a multiple of {ALIGN}: warpsched's GEMM moves "
                                    f"16-byte rows (8 bf16 / fp16 elements); pad the layer to {name} = "
                                    f"{n + -n % ALIGN} (add {fix}) or use torch.nn.Linear for this layer")


def pad_tokens(t):
    """``t`` (T, C) with zero rows appended up to the next multiple of 8 (a copy), or ``t`` itself
    when T is one."""
    extra = -t.shape[0] % ALIGN
    return t if not extra else torch.nn.functional.pad(t, (0, 0, 0, extra))


def weight_grad(dy2, x2):
    """dW = dY^T X for dY (T, N) and X (T, K): T is this GEMM's contraction, so an unaligned T is
    zero-padded (``pad_tokens``; exact: zero rows add nothing)."""
    return _linear(pad_tokens(dy2).t(), pad_tokens(x2).t())  # (N, T) @ (T, K): dY^T column-major, X row-major


def _linear_grads(needs, dz, x, weight, has_bias):
    """(dX, dW, dbias) of z = x W^T + bias for the gradient dz (None where ``needs`` says no): dX = dz W reads W
    row-major, dW = dz^T X (``weight_grad``), dbias dz summed over the rows (fp32, torch)."""
    N, K = weight.shape
    dz2 = dz.reshape(-1, N)
    if not dz2.is_contiguous():
        dz2 = dz2.contiguous()  # autograd may hand an expanded gradient (e.g. of a sum)
    dx = dw = db = None
    if needs[0]:
        dx = _linear(dz2, weight.t()).view(*x.shape)  # (M, N) @ (N, K): W read row-major
    if needs[1]:
        dw = weight_grad(dz2, x.reshape(-1, K))
    if has_bias and needs[2]:
        db = dz2.sum(0, dtype=torch.float32).to(dz.dtype)
    return dx, dw, db


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, activation):  # linear() checked the arguments
        ctx.activation, ctx.has_bias = activation, bias is not None
        if activation is None or activation in FROM_OUTPUT:
            y = _linear(x, weight, bias, activation)
            ctx.save_for_backward(x, weight, y if activation in FROM_OUTPUT else None)
            return y
        z = _linear(x, weight, bias)  # the pre-activation, kept for the activation's gradient
        ctx.save_for_backward(x, weight, z)
        return ACTIVATIONS[activation](z)

    @staticmethod
    def backward(ctx, dy):
        x, weight, saved = ctx.saved_tensors
        act = ctx.activation
        if act == "relu":
            dy = dy * (saved > 0)
        elif act == "relu2":
            dy = dy * (2 * saved.float().sqrt()).to(dy.dtype)
        elif act is not None:
            with torch.enable_grad():
                z = saved.detach().requires_grad_()
                (dy,) = torch.autograd.grad(ACTIVATIONS[act](z), z, dy)
        return _linear_grads(ctx.needs_input_grad, dy, x, weight, ctx.has_bias) + (None,)


def _refuse_non_tensors(x, weight, bias):
    """The TypeError for the first of x, weight and bias that is not a tensor (bias may be None)."""
    refusal = _host.non_tensor({"x": x, "weight": weight, "bias": bias}, optional=("bias",),
                               hints={"bias": " or None"})
    if refusal:
        raise TypeError(f"warpsched.nn.functional.linear: {refusal} (as torch.nn.functional.linear)")


_NATIVE = []
_native_off = False  # set by without_native(); read in traced code, so a compiled graph is guarded on it


def _loaded():
    """``torch.ops.warpsched_native.linear`` (built on first use: ``warpsched.native``), or None where it is not."""
    if not _NATIVE:
        from .. import native

        op = native.load()
        _NATIVE.append(None if op is None else op.default)
    return _NATIVE[0]


def _native():
    """The native linear op where it is built and on (not within ``without_native``), else None."""
    return None if _native_off else _loaded()


@contextlib.contextmanager
def without_native():
    """Within it, ``linear`` and attention run on their Python path (``warpsched.native`` off in this process):
    the A / B side of the benchmarks that measure what the native path is worth. A graph ``torch.compile`` made
    outside it is not reused inside it (and the other way round): the switch is part of the graph's guards. Not
    for use across threads."""
    global _native_off
    saved, _native_off = _native_off, True
    try:
        yield
    finally:
        _native_off = saved


@torch.compiler.assume_constant_result
def _native_built() -> bool:
    """Whether the native ops are built and loaded (a tracer runs this once and keeps its answer: the load is
    no graph code)."""
    return _loaded() is not None


@contextlib.contextmanager
def swiglu_keep_from(tokens):
    """Within it, a SwiGLU layer with a gradient runs its forward as one GEMM storing z and h (``swiglu_keep``)
    from ``tokens`` tokens on (``kernels.gemm.swiglu.KEEP_FROM`` outside), in the Python and the native node: the
    A / B side of the benchmarks (a very large ``tokens``: never). Not for use across threads."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"swiglu_keep_from({tokens!r}): expected a token count, an int >= 0 (a very large one: never)")
    saved = _swiglu.KEEP_FROM
    _set_keep_from(tokens)
    try:
        yield
    finally:
        _set_keep_from(saved)


def _set_keep_from(tokens):
    _swiglu.KEEP_FROM = tokens
    if _native_built():
        torch.ops.warpsched_native.swiglu_keep_from(tokens)


def _native_ready() -> bool:
    """Whether the native ops are built and on (not within ``without_native``; a tracer reads that switch as a
    guarded constant, so toggling it recompiles rather than reusing a graph made for the other side)."""
    return not _native_off and _native_built()


def linear(x, weight, bias=None, activation=None):
    """``activation(torch.nn.functional.linear(x, weight, bias))`` on warpsched's GEMM, the bias and
    the activation fused into its epilogue, with autograd: x (..., K), weight (N, K), bias (N,) or
    None; bf16 or fp16; ``activation``: None, "relu", "relu2", "gelu" (erf), "gelu_tanh", "silu" or
    "swiglu" (weight and bias: gate and up interleaved by ``warpsched.ops.interleave_gate_up``; the output
    has N / 2 features). N and K must be multiples of 8 (``check_features``; 16 for N with swiglu); x may
    have any number of rows."""
    # the checks cost a model's every call: the messages are built only for what fails
    if activation is not None and activation not in ACTIVATIONS:
        check_activation(activation)
    if not (hasattr(x, "dtype") and hasattr(weight, "shape") and (bias is None or hasattr(bias, "shape"))):
        _refuse_non_tensors(x, weight, bias)
    try:
        N, K = weight.shape
    except ValueError:
        raise GemmArgumentError(f"warpsched.nn.functional.linear: weight {tuple(weight.shape)} must be 2-D "
                                "(out_features, in_features), as torch.nn.functional.linear's") from None
    if N % ALIGN or K % ALIGN:
        check_features(K, N, "warpsched.nn.functional.linear")
    if activation == "swiglu" and N % (2 * ALIGN):
        raise GemmArgumentError(f"warpsched.nn.functional.linear(activation='swiglu'): weight {tuple(weight.shape)} "
                                f"has {N} rows; expected the gate and up weights, (I, {K}) each with I a multiple of "
                                "8, interleaved by warpsched.ops.interleave_gate_up (2 I rows)")
    _check_dtypes(x, weight)
    grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or
                                        (bias is not None and bias.requires_grad))
    if grad and activation in (None, "swiglu") and x.is_cuda and eager(x):
        native = _native()  # the autograd node and the launches in C++ (warpsched.native), where it is built
        if native is not None:
            return native(x, weight, bias, activation == "swiglu")
    if grad:
        if activation == "swiglu":
            return _swiglu_with_grad(x, weight, bias)
        return _LinearFunction.apply(x, weight, bias, activation)
    if activation == "swiglu" and x.numel() < SWIGLU_FUSED_FROM * K:
        # few tokens: the swap-AB GEMM, then the product in torch
        return _gemm_ops.swiglu_interleaved(_linear(x, weight, bias))
    return _linear(x, weight, bias, activation)  # no gradient: one fused GEMM, nothing saved
