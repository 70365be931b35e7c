"""warpsched.native: the C++ linear op's plumbing on the CPU (torch-only; the kernels' run is
bench/native_linear_check.py on the GPU). Stand-in "kernels" (TVM-FFI functions over Python callables on fp32 CPU
tensors) take the GPU kernels' place, so what is checked is the C++: its plan cache (one resolve per key, then
launches), the parameter slots it fills (operands, the output, its transpose, fixed values), the autograd node
(dX, dW, dbias, the SwiGLU's two kernels) and the fallback through the resolver. Then the resolver's parameter
lists for real compiled GEMM plans."""

import pytest

torch = pytest.importorskip("torch")
tvm_ffi = pytest.importorskip("tvm_ffi")

from _dl_view import view  # noqa: E402  (imports torch)
import warpsched.native as native  # noqa: E402
import warpsched.nn.functional as wf  # noqa: E402

F = torch.nn.functional


class StandIn:
    """A resolver whose plans launch Python "kernels": ``mode`` "plain" (a, b, c, splits, alpha, 6 x None, the
    bias at 9), "swapped" (out^T = W x^T written through the output's transpose, a workspace passed through)
    or "none" (no plan: every call resolved)."""

    def __init__(self, mode):
        self.mode, self.resolves, self.launches, self.activations, self.kinds = mode, 0, 0, [], []
        self.workspace = torch.zeros(4)

    def gemm(self, a, b, c, splits, alpha, *rest):
        self.launches += 1
        assert splits == 1 and alpha == 1.0
        if self.mode == "swapped":
            assert torch.equal(view(rest[0]), self.workspace) and len(rest) == 1
        A, B, C = view(a), view(b), view(c)
        r = A @ B.t()
        bias = [t for t in rest[:6] if t is not None and self.mode == "plain"]
        if bias:
            r = r + view(bias[0])
        C.copy_(r)

    def keep(self, a, b, c, splits, alpha, *rest):  # swiglu_keep: z into c, h into the aux (the 7th trailing one)
        self.launches += 1
        assert len(rest) == 7 and rest[6] is not None
        Z = view(a) @ view(b).t() + (view(rest[4]) if rest[4] is not None else 0)
        view(c).copy_(Z)
        view(rest[6]).copy_(swiglu_ref(Z))

    def swiglu(self, z, h):
        self.launches += 1
        Z = view(z).view(-1, 2, 8)
        view(h).view(-1, 8).copy_(F.silu(Z[:, 0]) * Z[:, 1])

    def __call__(self, kind, activation, scalars, *operands):
        self.resolves += 1
        self.activations.append(activation)
        self.kinds.append(kind)
        ts = [None if t is None else torch.from_dlpack(t) for t in operands]
        if kind == native.KIND_SWIGLU_KEEP:
            x, w, b, h, z = ts
            z.copy_(F.linear(x, w, b))
            h.copy_(swiglu_ref(z))
            return None if self.mode == "none" else [tvm_ffi.convert(self.keep), [
                "in0", "in1", "out", 1, 1.0, None, None, None, None, "in2" if b is not None else None, None, "in3"]]
        if kind == native.KIND_GEMM:
            x, w, b, out = ts
            out.copy_({None: lambda y: y, "relu": F.relu, "swiglu": swiglu_ref}[activation](F.linear(x, w, b)))
            if self.mode == "none" or activation is not None:  # the stand-in kernel has no epilogue
                return None
            if self.mode == "swapped":
                if b is not None:
                    return None
                return [tvm_ffi.convert(self.gemm), ["in1", "in0", "out_t", 1, 1.0, self.workspace]]
            return [tvm_ffi.convert(self.gemm), ["in0", "in1", "out", 1, 1.0, None, None, None, None,
                                                 "in2" if b is not None else None, None]]
        if kind == native.KIND_SWIGLU_FORWARD:
            z, h = ts
            h.copy_(swiglu_ref(z.view(-1, 16)).reshape(-1))
            return None if self.mode == "none" else [tvm_ffi.convert(self.swiglu), ["in0", "out"]]
        dh, z, dz = ts
        with torch.enable_grad():
            zz = z.view(-1, 16).clone().requires_grad_()
            (g,) = torch.autograd.grad(swiglu_ref(zz), zz, dh.view(-1, 8))
        dz.copy_(g.reshape(-1))
        return None


def swiglu_ref(z):
    blocks = z.unflatten(-1, (z.shape[-1] // 16, 2, 8))
    return (F.silu(blocks[..., 0, :]) * blocks[..., 1, :]).flatten(-2)


@pytest.fixture(scope="module")
def op(native_op):
    return native_op


def _case(seed, shape=(3, 5, 32), n=48, bias=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).requires_grad_()
    w = torch.randn(n, shape[-1], generator=g).requires_grad_()
    b = torch.randn(n, generator=g).requires_grad_() if bias else None
    return x, w, b


def _grads(y, ins, seed=7):
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad(y, [t for t in ins if t is not None], dy)


@pytest.mark.parametrize("mode", ["plain", "swapped", "none"])
@pytest.mark.parametrize("bias", [True, False])
def test_native_linear_matches_torch_and_launches_its_plans(op, mode, bias):
    standin = StandIn(mode)
    native.register_resolver(standin)
    x, w, b = _case(["plain", "swapped", "none"].index(mode) * 2 + bias, bias=bias)
    for step in range(3):
        y = op(x, w, b, False)
        ref = F.linear(x, w, b)
        torch.testing.assert_close(y, ref)
        for got, want in zip(_grads(y, (x, w, b)), _grads(ref, (x, w, b))):
            torch.testing.assert_close(got, want)
        # the forward, dX and dW GEMMs each have their own key: resolved once, then launched from the C++;
        # without a plan (a swapped one has none with a bias) every call goes through the resolver
        planless = 3 if mode == "none" else (1 if mode == "swapped" and bias else 0)
        assert standin.resolves == 3 + planless * step
        assert standin.launches == (3 - planless) * step


def test_native_swiglu_node_runs_both_kernels(op):
    standin = StandIn("plain")
    native.register_resolver(standin)
    x, w, _ = _case(3, shape=(2, 7, 32), n=64, bias=False)
    for _ in range(2):
        y = op(x, w, None, True)
        ref = swiglu_ref(F.linear(x, w))
        torch.testing.assert_close(y, ref)
        for got, want in zip(_grads(y, (x, w)), _grads(ref, (x, w))):
            torch.testing.assert_close(got, want)
    # GEMMs: forward, dX, dW; SwiGLU forward launched from its plan the second time, its backward resolved
    # each time (the stand-in gives it no plan)
    assert standin.resolves == 3 + 1 + 2 and standin.launches == 3 + 1


@pytest.mark.parametrize("bias", [True, False])
def test_native_swiglu_node_keeps_z_from_one_gemm_from_the_threshold(op, bias):
    """From ``kernels.gemm.swiglu.KEEP_FROM`` tokens the node's forward is one GEMM writing z and h (kind swiglu_keep, h its
    operand 3): resolved once, then launched from the C++; no SwiGLU forward kernel runs. The C++ threshold is
    the Python one, and ``swiglu_keep_from`` moves both."""
    standin = StandIn("plain")
    native.register_resolver(standin)
    from warpsched.kernels.gemm import swiglu

    x, w, b = _case(11, shape=(1, swiglu.KEEP_FROM, 32), n=64, bias=bias)
    for _ in range(2):
        y = op(x, w, b, True)
        ref = swiglu_ref(F.linear(x, w, b))
        torch.testing.assert_close(y, ref)
        for got, want in zip(_grads(y, (x, w, b)), _grads(ref, (x, w, b))):
            torch.testing.assert_close(got, want)
    assert native.KIND_SWIGLU_FORWARD not in standin.kinds
    assert standin.kinds.count(native.KIND_SWIGLU_KEEP) == 1
    # resolved: keep, dX, dW once, the SwiGLU backward each call (no plan); launched: keep, dX, dW the second time
    assert standin.resolves == 3 + 2 and standin.launches == 3
    standin.kinds.clear()
    x1 = x[:, :-1].detach()  # one token fewer: below the threshold, the GEMM and the SwiGLU kernel
    op(x1, w.detach(), None if b is None else b.detach(), True)
    assert native.KIND_SWIGLU_FORWARD in standin.kinds and native.KIND_SWIGLU_KEEP not in standin.kinds
    standin.kinds.clear()
    with wf.swiglu_keep_from(1 << 40):  # never: the two-kernel forward at the threshold's own token count
        op(x.detach(), w.detach(), None, True)
    assert native.KIND_SWIGLU_FORWARD in standin.kinds and native.KIND_SWIGLU_KEEP not in standin.kinds
    assert torch.ops.warpsched_native.swiglu_keep_from(-1) == swiglu.KEEP_FROM  # put back


def test_native_linear_unaligned_tokens_pad_the_weight_gradient(op):
    standin = StandIn("plain")
    native.register_resolver(standin)
    x, w, b = _case(5, shape=(13, 16), n=24)
    y = op(x, w, b, False)
    for got, want in zip(_grads(y, (x, w, b)), _grads(F.linear(x, w, b), (x, w, b))):
        torch.testing.assert_close(got, want)


def test_native_linear_saves_no_gradient_without_one(op):
    native.register_resolver(StandIn("plain"))
    x, w, b = _case(9)
    with torch.no_grad():
        y = op(x, w, b, False)
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, F.linear(x, w, b))


def _stub_gemm_compile(monkeypatch):
    """``launch.compiled_ffi`` returning what CuTe DSL's compile returns for the GEMM (a kernel with defaulted
    parameters: its TVM-FFI function and its keyword wrapper's 12 parameters), TVM FFI on: the raw function."""
    from warpsched.kernels.gemm import launch

    raw = tvm_ffi.convert(lambda *args: None)

    class Compiled:
        @staticmethod
        def _kwargs_wrapper(mA, mB, mC, splits, alpha, mW=None, mF=None, mScaleA=None, mScaleB=None, mBias=None,
                            mRes=None, mAux=None):
            pass

        def __tvm_ffi_object__(self):
            return raw

    monkeypatch.setattr(launch, "compiled_ffi", lambda a_dtype, c_dtype, **options: Compiled())
    monkeypatch.setattr(launch._host, "ffi_enabled", lambda: True)
    return raw


def test_resolver_parameters_for_gemm_plans(monkeypatch):
    """``gemm_call`` on ``GemmPlan`` objects (their compiled kernel a stand-in with the GEMM's parameter list):
    the plain launch's 5 parameters padded with None to the kernel's 12, a bias plan's bias at its place, a
    swiglu_keep plan's h at the last, a swapped plan's operands exchanged with the output transposed, and no plan
    for the host-reduced split."""
    from warpsched.kernels.gemm import launch, ops as gemm_ops

    raw = _stub_gemm_compile(monkeypatch)
    plan = launch.GemmPlan("bfloat16", "bfloat16", {}, 1)
    fn, params = native.gemm_call(plan, False)
    assert fn.same_as(raw) and params == ["in0", "in1", "out", 1, 1.0] + [None] * 7
    fn, params = native.gemm_call(launch.GemmPlan("bfloat16", "bfloat16", {"bias": True}, 1), True)
    assert params == ["in0", "in1", "out", 1, 1.0, None, None, None, None, "in2", None, None]
    keep = launch.GemmPlan("bfloat16", "bfloat16", {"activation": "swiglu_keep"}, 1)
    fn, params = native.gemm_call(keep, False, aux="in3")
    assert params == ["in0", "in1", "out", 1, 1.0, None, None, None, None, None, None, "in3"]
    fn, params = native.gemm_call(gemm_ops._Swapped(plan), False)
    assert params == ["in1", "in0", "out_t", 1, 1.0] + [None] * 7
    assert native.gemm_call(gemm_ops._Swapped(plan), True) is None  # no epilogue tensors through a swap
    host = launch.GemmPlan("bfloat16", "bfloat16", {}, 2)
    host.target = "host"  # fp32 partial tiles summed by torch: three launches
    assert native.gemm_call(host, False) is None


def test_native_gemm_op_and_its_fake(op):
    """``warpsched_native::gemm`` (a compiled graph's GEMM, no autograd node) and the fake a tracer runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    native.register_resolver(StandIn("plain"))
    x, w, b = _case(11, shape=(2, 3, 32), n=48)
    with torch.no_grad():
        torch.testing.assert_close(torch.ops.warpsched_native.gemm(x, w, b), F.linear(x, w, b))
        torch.testing.assert_close(torch.ops.warpsched_native.gemm(x, w, None), F.linear(x, w))
        standin = StandIn("plain")
        native.register_resolver(standin)
        for act, f in (("relu", F.relu), ("swiglu", swiglu_ref), ("relu", F.relu)):
            torch.testing.assert_close(torch.ops.warpsched_native.gemm(x, w, b, act), f(F.linear(x, w, b)))
        assert standin.activations == ["relu", "swiglu", "relu"]  # keyed apart from the plain GEMM's plan
        with pytest.raises(RuntimeError, match="activation 'tanh' is none of"):
            torch.ops.warpsched_native.gemm(x, w, b, "tanh")
    xd, wd = x.detach(), w.detach()
    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(xd), mode.from_tensor(wd)
        assert torch.ops.warpsched_native.gemm(fx, fw, None).shape == (2, 3, 48)
        assert torch.ops.warpsched_native.gemm(fx, fw, None, "swiglu").shape == (2, 3, 24)
        assert torch.ops.warpsched_native.linear(fx, fw, None, True).shape == (2, 3, 24)


def test_native_ops_refuse_bad_input_without_crashing(op):
    """Random shapes, dtypes and ranks through both native ops (stand-in kernels): each call returns torch's
    result or raises a Python exception; the process never dies in the C++."""
    import random

    native.register_resolver(StandIn("plain"))
    rng = random.Random(0)
    dtypes = [torch.float32, torch.float64, torch.int32, torch.bfloat16]
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(150):
        xs = tuple(rng.choice([0, 1, 3, 8, 16]) for _ in range(rng.choice([0, 1, 2, 3])))
        ws = tuple(rng.choice([0, 1, 8, 16, 32]) for _ in range(rng.choice([1, 2, 3])))
        x = torch.zeros(xs, dtype=rng.choice(dtypes))
        w = torch.ones(ws, dtype=rng.choice(dtypes))
        b = torch.ones(ws[:1], dtype=w.dtype) if rng.random() < 0.3 else None
        try:
            with torch.no_grad():
                if rng.random() < 0.5:
                    got = op(x, w, b, rng.random() < 0.3)
                else:
                    got = torch.ops.warpsched_native.gemm(x, w, b, rng.choice([None, "relu", "swiglu"]))
        except (RuntimeError, IndexError, ValueError, TypeError):
            outcomes["refused"] += 1
            continue
        outcomes["ok"] += 1
        assert got.shape[:-1] == x.shape[:-1]
    assert outcomes["ok"] > 10 and outcomes["refused"] > 10, outcomes


def test_cli_native_builds_and_says_where(capsys):
    from warpsched.cli import main

    assert main(["native"]) == 0
    out = capsys.readouterr().out
    assert "warpsched native: loaded in" in out and native.build_directory() in out


def test_resolver_runs_the_python_path_into_the_output(monkeypatch):
    """``native.resolve`` (what the C++ calls on a new key), on CPU tensors: the GEMM through ``gemm.ops.linear``
    copied into the C++'s output and its plan's parameter list returned; the SwiGLU kernels' torch fallback into
    the output with no plan (the CPU has no kernel to launch)."""
    from warpsched.kernels.gemm import launch, ops as gemm_ops

    raw = _stub_gemm_compile(monkeypatch)
    plan = launch.GemmPlan("bfloat16", "bfloat16", {}, 1)
    seen = []
    monkeypatch.setattr(gemm_ops, "linear", lambda x, w, b, act: seen.append(act) or F.linear(x, w, b))
    monkeypatch.setattr(gemm_ops, "linear_plan", lambda x, w, b, act: plan)
    x, w = torch.randn(4, 16), torch.randn(8, 16)
    out = torch.full((4, 8), float("nan"))
    fn, params = native.resolve(native.KIND_GEMM, "relu", [], x, w, None, out)
    torch.testing.assert_close(out, F.linear(x, w))
    assert seen == ["relu"] and fn.same_as(raw) and params[:5] == ["in0", "in1", "out", 1, 1.0]

    for rows, features in ((3, 32), (1, 48)):  # 1 x 48: h and dh hold 24 values, no whole 16-wide block
        z = torch.randn(rows, features)
        h = torch.full((rows * features // 2,), float("nan"))
        assert native.resolve(native.KIND_SWIGLU_FORWARD, None, [], z.view(-1), h) is None
        torch.testing.assert_close(h.view(rows, -1), swiglu_ref(z))
        dh, dz = torch.randn(rows, features // 2), torch.full((rows * features,), float("nan"))
        assert native.resolve(native.KIND_SWIGLU_BACKWARD, None, [], dh.view(-1), z.view(-1), dz) is None
        with torch.enable_grad():
            zz = z.clone().requires_grad_()
            (want,) = torch.autograd.grad(swiglu_ref(zz), zz, dh)
        torch.testing.assert_close(dz.view(rows, features), want)


def test_a_compiled_graph_is_not_reused_across_without_native(monkeypatch):
    """The native switch is a guard of a compiled graph: a graph traced with the native path on is not run within
    ``without_native()`` (the benchmarks' A / B side), nor the other way round."""
    monkeypatch.setattr(wf, "_NATIVE", [object()])  # "built"
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x + 1 if wf._native_ready() else x - 1, backend="eager", fullgraph=True)
    x = torch.zeros(3)
    assert compiled(x).tolist() == [1, 1, 1]
    with wf.without_native():
        assert compiled(x).tolist() == [-1, -1, -1]
        assert wf._native() is None
    assert compiled(x).tolist() == [1, 1, 1]
    torch._dynamo.reset()


def _traced_swiglu_step(tokens=64):
    """The ops of a SwiGLU layer's forward, and of its node's backward, as a tracer sees them (fake CUDA tensors:
    no GPU needed; the backward called on the node directly, as the autograd engine wants a device)."""
    import types

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def forward(x, w):
        return wf.linear(x, w, activation="swiglu")

    def backward(dh, x, w, z):
        ctx = types.SimpleNamespace(saved_tensors=(x, w, z), needs_input_grad=(True, True, False), has_bias=False)
        return wf._SwiGLULinear.backward(ctx, dh)

    def ops(gm):
        return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    with FakeTensorMode():
        x = torch.empty(tokens, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(32, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dh, z = torch.empty(tokens, 16, device="cuda", dtype=torch.bfloat16), torch.empty(tokens, 32, device="cuda",
                                                                                          dtype=torch.bfloat16)
        return ops(make_fx(forward)(x, w)), ops(make_fx(backward)(dh, x.detach(), w.detach(), z))


def test_a_traced_swiglu_layer_runs_the_native_swiglu_kernels(op, cuda_build_torch):
    """Under a tracer (torch.compile's) the SwiGLU layer is the one node over the native ops: the GEMMs and the
    CuTe SwiGLU kernels (faster than inductor's fusion of the product on z's 8-wide runs), not torch's silu."""
    forward, backward = _traced_swiglu_step()
    assert {"warpsched_native.gemm.default", "warpsched_native.swiglu_forward.default"} <= forward, forward
    assert {"warpsched_native.gemm.default", "warpsched_native.swiglu_backward.default"} <= backward, backward
    assert not any("silu" in o for o in forward | backward)
    with wf.without_native():  # the Python path's graph: the GEMM's node and the product as torch ops
        forward, _ = _traced_swiglu_step()
    assert not any(o.startswith("warpsched_native") for o in forward) and any("silu" in o for o in forward), forward


def test_a_traced_swiglu_layer_keeps_z_from_one_gemm_from_the_threshold(op, cuda_build_torch):
    """Under a tracer, from ``swiglu.KEEP_FROM`` tokens the forward is the one-GEMM op (its fake gives z and h)."""
    from warpsched.kernels.gemm import swiglu

    forward, backward = _traced_swiglu_step(tokens=swiglu.KEEP_FROM)
    assert "warpsched_native.swiglu_keep.default" in forward, forward
    assert "warpsched_native.swiglu_forward.default" not in forward
    assert "warpsched_native.swiglu_backward.default" in backward


@pytest.mark.parametrize("tokens", [-1, 1.5, "512", True, None])
def test_swiglu_keep_from_refuses_what_is_no_token_count(tokens):
    from warpsched.kernels.gemm import swiglu

    before = swiglu.KEEP_FROM
    with pytest.raises(ValueError, match="expected a token count"):
        with wf.swiglu_keep_from(tokens):
            pass
    assert swiglu.KEEP_FROM == before  # nothing changed
