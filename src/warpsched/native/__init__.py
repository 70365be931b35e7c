"""warpsched's native launch path (torch is imported by ``load()``): a torch C++ extension (``linear.cpp``,
``attention.cpp``, what they share in ``native.h``) with the ops ``torch.ops.warpsched_native.linear(x, weight,
bias, swiglu)``, a linear layer (or one with the SwiGLU of ``warpsched.nn.functional.linear(...,
activation="swiglu")``) whose autograd node and launches are C++; ``torch.ops.warpsched_native.gemm(x, weight,
bias, activation=None)``, its GEMM with the epilogue's activation and no autograd node (what inference and a
compiled graph's linear layers call, the graph's autograd being the traced ``nn.functional`` one); and
``attention_fwd`` / ``attention_bwd``, attention's forward and backward with ``torch.ops.warpsched``'s signatures
(what ``warpsched.nn.scaled_dot_product_attention`` calls, eager and compiled).

Why: a decode step is host-bound. A Python ``autograd.Function`` per layer, its backward handed to autograd's
device thread and back to Python, and each launch's Python make a small model's step slower than torch's
all-C++ one, with the kernels no slower (docs/torch.md, "The native launch path").

How: the kernels are the Python path's. On the first call with a new key (shapes, strides, dtype, device,
alignment) the C++ calls back ``resolve`` (a TVM-FFI global function): it runs the call through the Python
path (which compiles or tunes the kernel and writes the output) and returns the kernel's TVM-FFI function,
which later calls launch from C++. A plan that is not one launch (split-K summed by the host) runs through
``resolve`` on every call: the same result at the Python path's cost.

Building: ``load()`` builds the extension once per torch / tvm-ffi version with ``torch.utils.cpp_extension``
(a C++17 compiler and ninja; 20 s to a minute) into the warpsched cache directory, then loads it
(``warpsched native`` on the command line does it ahead). Where it cannot
(no compiler, ``WARPSCHED_NATIVE=0``), ``load()`` returns None, ``reason()`` says why, and ``warpsched.nn``
keeps its Python path.
"""
from __future__ import annotations

import os
import sys
import threading

ENV_NATIVE = "WARPSCHED_NATIVE"
SOURCES = [os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in ("linear.cpp", "attention.cpp")]
KIND_GEMM, KIND_SWIGLU_FORWARD, KIND_SWIGLU_BACKWARD, KIND_ATTENTION_FORWARD, KIND_ATTENTION_BY_HOST = 0, 1, 2, 3, 4
KIND_ATTENTION_BACKWARD, KIND_SWIGLU_KEEP = 5, 6

_LOCK = threading.Lock()
_STATE = {"tried": False, "op": None, "reason": "not loaded yet"}


def reason() -> str:
    """Why the native path is not in use ("" when it is)."""
    return _STATE["reason"]


def load():
    """``torch.ops.warpsched_native.linear`` (built on first use), or None where it cannot be built."""
    if _STATE["tried"]:
        return _STATE["op"]
    with _LOCK:
        if not _STATE["tried"]:
            _STATE["op"], _STATE["reason"] = _build()
            _STATE["tried"] = True
            if _STATE["op"] is None and not _STATE["reason"].startswith(ENV_NATIVE):
                import warnings

                warnings.warn(f"warpsched: the native launch path is unavailable ({_STATE['reason']}); "
                              "warpsched.nn runs on its Python path (slower per call; `warpsched native` says "
                              f"more, {ENV_NATIVE}=0 silences this)", RuntimeWarning, stacklevel=2)
    return _STATE["op"]


def build_directory() -> str:
    """Where the extension is built for this torch / tvm-ffi / Python (under the warpsched cache directory)."""
    import torch
    import tvm_ffi

    from ..cachedir import cache_dir

    tag = f"torch{torch.__version__}-tvmffi{tvm_ffi.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(cache_dir(), "native", tag.replace("+", "_"))


def _build():
    if os.environ.get(ENV_NATIVE, "1") == "0":
        return None, f"{ENV_NATIVE}=0"
    try:
        import torch
        from torch.utils import cpp_extension
        from tvm_ffi import libinfo

        if not _REGISTERED:
            register_resolver()
        lib = libinfo.find_libtvm_ffi()
        build_dir = build_directory()
        os.makedirs(build_dir, exist_ok=True)
        if not os.path.exists(os.path.join(build_dir, "warpsched_native.so")):
            print("warpsched: building the native launch path (once per torch version, 20 s to a minute)",
                  file=sys.stderr, flush=True)
        cpp_extension.load(name="warpsched_native", sources=SOURCES, build_directory=build_dir,
                           extra_include_paths=[libinfo.find_include_path()], extra_cflags=["-O2"],
                           extra_ldflags=[lib, f"-Wl,-rpath,{os.path.dirname(lib)}"], is_python_module=False,
                           verbose=False)
        _register_fakes(torch)
        from ..kernels.gemm import swiglu

        torch.ops.warpsched_native.swiglu_keep_from(swiglu.KEEP_FROM)
        return torch.ops.warpsched_native.linear, ""
    except Exception as e:  # noqa: BLE001 - no compiler, no headers: the Python path stays
        return None, f"{type(e).__name__}: {str(e)[:400]}"


def _register_fakes(torch):
    """Fake (meta) implementations, so torch.compile traces the ops (their outputs: new contiguous tensors)."""

    @torch.library.register_fake("warpsched_native::gemm")
    def _gemm_fake(x, weight, bias, activation=None):
        return x.new_empty((*x.shape[:-1], weight.shape[0] // (2 if activation == "swiglu" else 1)))

    @torch.library.register_fake("warpsched_native::swiglu_forward")
    def _swiglu_forward_fake(z):
        return z.new_empty((*z.shape[:-1], z.shape[-1] // 2))

    @torch.library.register_fake("warpsched_native::attention_fwd")
    def _attention_fwd_fake(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None):
        from ..kernels.attention import empty_out

        B, H, S, _ = q.shape
        return empty_out(q), q.new_empty((B, H, S), dtype=torch.float32)

    @torch.library.register_fake("warpsched_native::attention")
    def _attention_fake(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None):
        from ..kernels.attention import empty_out

        return empty_out(q)

    @torch.library.register_fake("warpsched_native::attention_lse")
    def _attention_lse_fake(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None,
                            deterministic=False):
        from ..kernels.attention import empty_out

        B, H, S, _ = q.shape
        return empty_out(q), q.new_empty((B, H, S), dtype=torch.float32)

    @torch.library.register_fake("warpsched_native::attention_bwd")
    def _attention_bwd_fake(q, k, v, out, dout, lse, causal=False, scale=None, window_left=-1, window_right=-1,
                            softcap=None):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    @torch.library.register_fake("warpsched_native::swiglu_backward")
    def _swiglu_backward_fake(dh, z):
        return z.new_empty(z.shape)

    @torch.library.register_fake("warpsched_native::swiglu_keep")
    def _swiglu_keep_fake(x, weight, bias):
        n = weight.shape[0]
        return x.new_empty((*x.shape[:-1], n)), x.new_empty((*x.shape[:-1], n // 2))


_REGISTERED = []


def register_resolver(resolve_fn=None):
    """Register ``resolve`` (or a stand-in: the CPU tests') as the TVM-FFI global the C++ calls on a new key."""
    import tvm_ffi

    tvm_ffi.register_global_func("warpsched.native.resolve", resolve_fn or resolve, override=True)
    _REGISTERED[:] = [resolve_fn or resolve]
    if _STATE["op"] is not None:  # the plans the previous resolver gave go with it
        import torch

        torch.ops.warpsched_native.clear_plans()


def _torch_view(t):
    import torch

    return None if t is None else torch.from_dlpack(t)


def resolve(kind, activation, scalars, *operands):
    """Run one call through the Python path into its output (the last operand) and return its kernel as
    ``[function, parameters]``, each parameter a slot the C++ fills per call ("in0" .. "in5": the operands, "out"
    or "out_t": the output or its transpose) or a fixed value; None where the plan is not one launch.
    ``kind``: GEMM (x, weight, bias or None, out: ``gemm.ops.linear`` with the epilogue's ``activation``), SwiGLU
    forward (z, h) or backward (dh, z, dz), the flat tensors of ``kernels.gemm.swiglu`` (whole 16-feature gate /
    up blocks), the SwiGLU GEMM keeping z (x, weight, bias or None, h, z: ``gemm.swiglu.swiglu_keep``), attention's forward (q, k, v, lse, out; ``scalars``: causal, scale, window left / right,
    softcap, NaN for an absent one); ``KIND_ATTENTION_BY_HOST`` (q, k, v): the host's [O, LSE], for a key the
    first call found without a plan; ``KIND_ATTENTION_BACKWARD`` (q, k, v, out, dout, lse; ``scalars`` as the
    forward's, then deterministic): ``[[dq, dk, dv], program]``, the gradients the host computed and what the C++
    launches for the key next time (``_backward_program``; None: the host every call)."""
    ts = [_torch_view(t) for t in operands]
    if kind == KIND_GEMM:
        return _resolve_gemm(*ts, activation)
    if kind in (KIND_ATTENTION_FORWARD, KIND_ATTENTION_BY_HOST):
        causal, scale, left, right, softcap = [None if v != v else v for v in scalars]
        if kind == KIND_ATTENTION_BY_HOST:  # a key without a plan: the host's (O, LSE) themselves
            from .. import torch_ops

            return list(torch_ops.attention_fwd(*ts, bool(causal), scale, int(left), int(right), softcap))
        return _resolve_attention(*ts, causal, scale, left, right, softcap)
    if kind == KIND_ATTENTION_BACKWARD:
        return _resolve_attention_backward(*ts, *[None if v != v else v for v in scalars])
    if kind == KIND_SWIGLU_KEEP:
        return _resolve_swiglu_keep(*ts)
    return _resolve_swiglu(kind, *ts)


def _resolve_swiglu_keep(x, weight, bias, h, z):
    from ..kernels.gemm import swiglu

    plan = swiglu.swiglu_keep_plan(x, weight, bias) if swiglu._kernels_take(x, weight) else None
    if plan is None:
        zz, hh = swiglu.swiglu_keep(x, weight, bias)
        z.copy_(zz)
        h.copy_(hh)
        return None
    plan(x, weight, z, 1.0, (), bias, None, h)
    return gemm_call(plan, bias is not None, aux="in3")


def _resolve_attention_backward(q, k, v, out, dout, lse, causal, scale, left, right, softcap, deterministic):
    from .. import torch_ops
    from ..kernels.attention import backward_host

    causal, deterministic, window = bool(causal), bool(deterministic), torch_ops._window(int(left), int(right))
    grads = backward_host.attention_backward(q, k, v, out, dout, lse, causal=causal, scale=scale,
                                             window_size=window, softcap=softcap, deterministic=deterministic)
    return [list(grads), _backward_program(q, k, v, out, dout, lse, causal, scale, window, softcap, deterministic)]


def _backward_program(q, k, v, out, dout, lse, causal, scale, window, softcap, deterministic):
    """What ``backward_host._plan`` launches for this call's key, for the C++ to launch the same: [pre-pass, kernel,
    dQ conversion (None: scale * dQaccum rounded by ATen), [their parameter counts], [Q block rows, softmax scale]];
    None where the host would not plan the call (its full path each time)."""
    from ..kernels import _host
    from ..kernels.attention import backward_host as bh

    key = bh._plan_key(q, k, v, out, dout, lse, causal, scale, window, softcap, deterministic)
    if key is None or not bh._plannable(q, k, v, out, dout, lse):
        return None
    D = q.shape[3]
    options, kern_key = bh._options_and_key(q.dtype, D, causal, {}, window, None, softcap, deterministic)
    cdtype = _host.cutlass_dtype(q.dtype)
    flat = bh.flat_dq_tile(kern_key)
    steps = [_raw(bh.compiled_prep(cdtype, D, padded=True)), _raw(bh.compiled_ffi(kern_key)),
             _raw(bh.compiled_post(cdtype, D, *flat)) if flat is not None else (None, 0)]
    if any(fn is None for fn, _ in steps[:2]) or (flat is not None and steps[2][0] is None):
        return None
    return [*(fn for fn, _ in steps), [-1 if count is None else count for _, count in steps],
            [float(options.get("block_m", bh.BLOCK_M)), float(bh.softmax_scale(D, scale))]]


def _resolve_attention(q, k, v, lse, out, causal, scale, left, right, softcap):
    from .. import torch_ops
    from ..kernels.attention import host

    causal, left, right = bool(causal), int(left), int(right)
    window = torch_ops._window(left, right)
    o, m = torch_ops.attention_fwd(q, k, v, causal, scale, left, right, softcap)
    out.copy_(o)
    lse.copy_(m)
    packed = host.gqa_packed(q, k.shape[1], causal, None, window)  # a GQA decode run over its K/V heads
    if packed is not None:
        try:
            out.view(packed.shape), lse.view(packed.shape[:3])
        except RuntimeError:  # as host.attention: outputs that do not take the packed view run unpacked
            packed = None
    hit = host.plan_of(q if packed is None else packed, k, v, causal, scale, softcap, window)
    if hit is None:  # not one launch (split, copied): the Python path each call
        return None
    f, scale_value = hit
    raw, count = _raw(f)
    if raw is None:
        return None
    if packed is None:
        q_in, out_in, lse_in = "in0", "out", "in3"
    else:  # the kernel's operands are q, O and the LSE viewed with the K/V heads' rows packed
        shape = list(packed.shape)
        q_in, out_in, lse_in = ["view", "in0", shape], ["view", "out", shape], ["view", "in3", shape[:3]]
    params = [q_in, "in1", "in2", out_in, lse_in, scale_value]  # host.attention's launch: f(q, k, v, out, lse, scale)
    return [raw, params + [None] * ((count or len(params)) - len(params))]


def _resolve_gemm(x, weight, bias, out, activation=None):
    from ..kernels.gemm import ops as gemm_ops

    activation = None if activation is None else str(activation)
    out.copy_(gemm_ops.linear(x, weight, bias, activation))
    return gemm_call(gemm_ops.linear_plan(x, weight, bias, activation), bias is not None)


def gemm_call(plan, has_bias, aux=None):
    """``[function, parameters]`` of a linear layer's GEMM plan (``gemm.ops.GemmPlan``, or ``_Swapped`` around one:
    out^T = W x^T), as ``GemmPlan`` launches it, or None for a plan that is not one kernel launch. ``aux``: the
    slot of swiglu_keep's h."""
    from ..kernels.gemm.launch import trailing

    swapped = hasattr(plan, "inner")
    g = plan.inner if swapped else plan
    if g is None or not getattr(g, "ffi", False) or g.target == "host" or g.device_scale:
        return None
    if swapped and has_bias:
        return None  # a swapped plan runs without the epilogue's tensors
    raw, count = _raw(g.f)
    if raw is None:
        return None
    a, b, c = ("in1", "in0", "out_t") if swapped else ("in0", "in1", "out")
    if g.launch == g._direct:  # the plain launch (GemmPlan._direct)
        params = [a, b, c, 1, 1.0]
    else:  # GemmPlan.__call__: [workspace, flags], [scales], [bias, residual], trailing absent ones left out
        params = [a, b, c, g.splits, 1.0] + list(trailing(*g.mid, None, None, "in2" if has_bias else None, None, aux))
    if count is not None:
        params += [None] * (count - len(params))
    return [raw, params]


def _resolve_swiglu(kind, *ts):
    from ..kernels import _host
    from ..kernels.gemm import swiglu

    if kind == KIND_SWIGLU_FORWARD:
        z, h = ts
        h.copy_(swiglu.swiglu_forward(_gate_up_blocks(z)).view(-1))
        direction, inputs, params = "forward", (z,), ["in0", "out"]
    else:
        dh, z, dz = ts
        dz.copy_(swiglu.swiglu_backward(dh.view(-1, swiglu.RUN), _gate_up_blocks(z)).view(-1))
        direction, inputs, params = "backward", (dh, z), ["in0", "in1", "out"]
    if not swiglu._kernels_take(*inputs):
        return None
    raw, count = _raw(swiglu.compiled(direction, _host.cutlass_dtype(z.dtype)))
    if raw is None or count not in (None, len(params)):
        return None
    return [raw, params]


def _gate_up_blocks(z):
    """The flat interleaved z as rows of one 8-wide gate run and its up run (the kernels' and torch's layout); only
    z divides so: h and dh hold I features a row, which need not be a multiple of 16."""
    from ..kernels.gemm import swiglu

    return z.view(-1, 2 * swiglu.RUN)


def _raw(f):
    """(the TVM-FFI function under a compiled kernel, its parameter count or None when it has no defaults)."""
    import inspect

    import tvm_ffi

    if isinstance(f, tvm_ffi.Function):  # a kernel without defaulted parameters: the function itself
        return f, None
    wrapper = getattr(f, "_kwargs_wrapper", None)
    try:
        return f.__tvm_ffi_object__(), len(inspect.signature(wrapper).parameters)
    except (AttributeError, TypeError, ValueError):
        return None, None
