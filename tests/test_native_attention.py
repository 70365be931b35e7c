"""warpsched.native's attention ops (attention.cpp) on the CPU (torch-only; the kernels' run is
``bench/native_linear_check.py --attention`` on the GPU): stand-in resolvers whose "kernels" are Python functions
over fp32 CPU tensors take the GPU kernels' place, so what is checked is the C++: the plan cache (one resolve per
key, then launches), O's allocation in q's order, GQA-packed views, planless keys, and the backward's program
(its allocations, pre-pass, kernel and dQ conversion, the deterministic turn words)."""
import math

import pytest

torch = pytest.importorskip("torch")
tvm_ffi = pytest.importorskip("tvm_ffi")

from _dl_view import view  # noqa: E402  (imports torch)
import warpsched.native as native  # noqa: E402


@pytest.fixture(scope="module")
def op(native_op):
    return native_op


class StandIn:
    def __init__(self):
        self.resolves, self.launches = 0, 0


def _attention_ref(q, k, v, causal, scale):
    """(O, LSE) in fp32 for (B, H, S, D) q and (B, H_kv, S_k, D) k / v (GQA by repeating K / V heads)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


class AttentionStandIn(StandIn):
    """A resolver for attention's forward: the reference into the outputs, then a plan launching it as
    ``host.attention`` launches its kernel, f(q, k, v, out, lse, scale)."""

    def __init__(self):
        super().__init__()
        self.scalars = []

    def attention(self, q, k, v, out, lse, scale):
        self.launches += 1
        o, m = _attention_ref(view(q), view(k), view(v), self.scalars[-1][0] == 1.0, scale)
        view(out).copy_(o)
        view(lse).copy_(m)

    def __call__(self, kind, activation, scalars, *operands):
        assert kind == native.KIND_ATTENTION_FORWARD
        self.resolves += 1
        self.scalars.append(list(scalars))
        q, k, v, lse, out = (torch.from_dlpack(t) for t in operands)
        causal, scale = scalars[0] == 1.0, (None if scalars[1] != scalars[1] else scalars[1])
        o, m = _attention_ref(q, k, v, causal, scale)
        out.copy_(o)
        lse.copy_(m)
        return [tvm_ffi.convert(self.attention), ["in0", "in1", "in2", "out", "in3",
                                                  scale if scale is not None else q.shape[-1] ** -0.5]]


@pytest.mark.parametrize("causal", [False, True])
def test_native_attention_forward_launches_its_plan_with_o_in_q_order(op, causal):
    from warpsched.kernels.attention import out_in_q_order

    standin = AttentionStandIn()
    native.register_resolver(standin)
    g = torch.Generator().manual_seed(int(causal))
    q = torch.randn(2, 5, 4, 16, generator=g).transpose(1, 2)  # (B, H, S, D) over (B, S, H, D) memory
    k, v = (torch.randn(2, 2, 5, 16, generator=g) for _ in range(2))
    for step in range(3):
        out, lse = torch.ops.warpsched_native.attention_fwd(q, k, v, causal, None, -1, -1, None)
        ref_o, ref_m = _attention_ref(q, k, v, causal, None)
        torch.testing.assert_close(out, ref_o)
        torch.testing.assert_close(lse, ref_m)
        assert out_in_q_order(q) and out.transpose(1, 2).is_contiguous()  # O made in q's memory order
        assert (standin.resolves, standin.launches) == (1, step)
    assert standin.scalars[0][:1] == [float(causal)] and standin.scalars[0][1] != standin.scalars[0][1]  # None: NaN
    assert standin.scalars[0][2:4] == [-1.0, -1.0] and standin.scalars[0][4] != standin.scalars[0][4]


def test_native_attention_out_layout_is_the_python_rule(op):
    """The C++ allocation of O against ``kernels.attention.out_in_q_order`` / ``empty_out`` over q layouts."""
    from warpsched.kernels.attention import empty_out

    native.register_resolver(AttentionStandIn())
    for shape in [(1, 1, 4, 8), (1, 3, 1, 8), (2, 3, 4, 8), (1, 2, 2, 8)]:
        B, H, S, D = shape
        for q in (torch.randn(B, H, S, D), torch.randn(B, S, H, D).transpose(1, 2),
                  torch.randn(B, S, 3 * H, D)[:, :, :H].transpose(1, 2)):
            k = v = torch.randn(B, H, S, D)
            out, _ = torch.ops.warpsched_native.attention_fwd(q, k, v)
            assert out.stride() == empty_out(q).stride(), (shape, q.stride())


class PackedAttentionStandIn(AttentionStandIn):
    """As AttentionStandIn, but its plan runs over GQA-packed views (``host.gqa_packed``'s (B, H_kv, group *
    S_q, D) q, O and LSE), as ``host.attention`` launches a packed decode."""

    def __call__(self, kind, activation, scalars, *operands):
        plan = super().__call__(kind, activation, scalars, *operands)
        q, k = torch.from_dlpack(operands[0]), torch.from_dlpack(operands[1])
        B, H, S, D = q.shape
        shape = [B, k.shape[1], H // k.shape[1] * S, D]
        fn, params = plan
        return [fn, [["view", "in0", shape], "in1", "in2", ["view", "out", shape], ["view", "in3", shape[:3]],
                     params[5]]]


def test_native_attention_launches_through_packed_views(op):
    standin = PackedAttentionStandIn()
    native.register_resolver(standin)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 8, 2, 16, generator=g)  # 4 query heads per K/V head, 2 rows each: 8 packed rows
    k, v = (torch.randn(2, 2, 7, 16, generator=g) for _ in range(2))
    for step in range(2):
        out, lse = torch.ops.warpsched_native.attention_fwd(q, k, v, False, 0.25, -1, -1, None)
        ref_o, ref_m = _attention_ref(q, k, v, False, 0.25)
        torch.testing.assert_close(out, ref_o)
        torch.testing.assert_close(lse, ref_m)
        assert (standin.resolves, standin.launches) == (1, step)


def test_attention_resolver_describes_packed_and_plain_plans(monkeypatch):
    """``native.resolve`` for attention's forward on CPU tensors: the Python host's outputs copied into the C++'s,
    then the plan ``host.attention`` kept, with q / O / LSE viewed packed for a GQA decode."""
    from warpsched import torch_ops
    from warpsched.kernels.attention import host

    raw = tvm_ffi.convert(lambda *args: None)
    monkeypatch.setattr(torch_ops, "attention_fwd", lambda q, k, v, causal, scale, l, r, cap: _attention_ref(
        q, k, v, causal, scale))
    monkeypatch.setattr(host, "_PLANS", {})
    nan = float("nan")
    for q, causal in ((torch.randn(1, 8, 2, 16), False), (torch.randn(1, 8, 5, 16), True)):
        k = v = torch.randn(1, 2, 7, 16)
        packed = host.gqa_packed(q, 2, causal)
        host._PLANS[host._plan_key(q if packed is None else packed, k, v, causal, None, None, None, None, None)] = \
            (raw, 0.25)
        out, lse = torch.full(q.shape, nan), torch.full(q.shape[:3], nan)
        fn, params = native.resolve(native.KIND_ATTENTION_FORWARD, None, [float(causal), nan, -1.0, -1.0, nan],
                                    q, k, v, lse, out)
        ref_o, ref_m = _attention_ref(q, k, v, causal, None)
        torch.testing.assert_close(out, ref_o)
        torch.testing.assert_close(lse, ref_m)
        assert fn.same_as(raw) and params[1:3] == ["in1", "in2"] and params[5] == 0.25
        if causal:  # a causal mask depends on the query's row: never packed
            assert params[0] == "in0" and params[3:5] == ["out", "in3"]
        else:
            assert params[0] == ["view", "in0", [1, 2, 8, 16]] and params[4] == ["view", "in3", [1, 2, 8]]


class PlanlessAttentionStandIn(AttentionStandIn):
    """No plan for attention (as a split-KV call): the first call resolves into the C++'s outputs, later ones ask
    for the host's own outputs (``KIND_ATTENTION_BY_HOST``), which the C++ returns as they are."""

    def __init__(self):
        super().__init__()
        self.by_host = []

    def __call__(self, kind, activation, scalars, *operands):
        if kind == native.KIND_ATTENTION_BY_HOST:
            q, k, v = (torch.from_dlpack(t) for t in operands)
            o, m = _attention_ref(q, k, v, scalars[0] == 1.0, None)
            self.by_host.append(o)
            return [o, m]
        super().__call__(kind, activation, scalars, *operands)
        return None


def test_native_attention_without_a_plan_returns_the_hosts_outputs_uncopied(op):
    standin = PlanlessAttentionStandIn()
    native.register_resolver(standin)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 3, 16, generator=g)
    k = v = torch.randn(1, 4, 6, 16, generator=g)
    for step in range(3):
        out, lse = torch.ops.warpsched_native.attention_fwd(q, k, v, True, None, -1, -1, None)
        ref_o, ref_m = _attention_ref(q, k, v, True, None)
        torch.testing.assert_close(out, ref_o)
        torch.testing.assert_close(lse, ref_m)
        assert standin.resolves == 1 and len(standin.by_host) == step
        if step:  # the host's tensor itself, not a copy into the C++'s allocation
            assert out.data_ptr() == standin.by_host[-1].data_ptr()


def _grads_ref(q, k, v, dout, causal, scale):
    """(dQ, dK, dV) in fp32 of ``_attention_ref``'s O (dK / dV summed over each K/V head's query heads)."""
    with torch.enable_grad():  # also where autograd's engine calls the stand-in, grad mode off
        q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o, _ = _attention_ref(q, k, v, causal, scale)
        return torch.autograd.grad(o, (q, k, v), dout)


LOG2E = 1.0 / math.log(2.0)


class BackwardStandIn(StandIn):
    """A resolver for attention's backward: the reference gradients, then a program of three Python "kernels"
    with the GPU's calling conventions: the pre-pass fills delta, the LSE padded to whole Q blocks (times log2 e)
    and zeroes dQaccum; the kernel writes dQ / scale into dQaccum and dK, dV; the conversion writes
    dQ = scale * dQaccum (``convert=False``: none, the C++ converts with ATen)."""

    def __init__(self, block_m=4, convert=True, planless=False):
        super().__init__()
        self.block_m, self.convert, self.planless = block_m, convert, planless
        self.calls, self.turns, self.scalars = [], [], []

    def prep(self, out, dout, lse, delta, lse_padded, dq_acc):
        self.calls.append("prep")
        S = view(lse).shape[-1]
        assert view(delta).shape[-1] == view(lse_padded).shape[-1] == view(dq_acc).shape[2]
        assert view(dq_acc).shape[2] % self.block_m == 0 and view(dq_acc).shape[2] - S < self.block_m
        view(delta)[..., :S] = (view(dout) * view(out)).sum(-1)
        view(lse_padded)[..., :S] = view(lse) * LOG2E
        view(dq_acc).fill_(float("nan"))  # then zeroed, as the pre-pass zeroes it
        view(dq_acc).zero_()

    def kernel(self, q, k, v, dout, lse_padded, delta, dq_acc, dk, dv, *rest):
        self.calls.append("kernel")
        *turns, scale = rest
        if turns:
            self.turns.append(view(turns[0]).view(torch.int32).clone())
        S = view(q).shape[2]
        # the pre-pass ran first, on this call's tensors
        assert torch.allclose(view(delta)[..., :S], (view(dout) * self.o).sum(-1))
        dq, dk_, dv_ = _grads_ref(view(q), view(k), view(v), view(dout), self.causal, scale)
        view(dq_acc)[:, :, :S] = dq / scale
        view(dk).copy_(dk_)
        view(dv).copy_(dv_)

    def post(self, dq_acc, dq, scale):
        self.calls.append("post")
        view(dq).copy_(view(dq_acc)[:, :, :view(dq).shape[2]] * scale)

    def __call__(self, kind, activation, scalars, *operands):
        assert kind == native.KIND_ATTENTION_BACKWARD
        self.resolves += 1
        self.scalars.append(list(scalars))
        q, k, v, out, dout, lse = (torch.from_dlpack(t) for t in operands)
        self.causal, self.o = scalars[0] == 1.0, out
        scale = q.shape[-1] ** -0.5 if scalars[1] != scalars[1] else scalars[1]
        grads = list(_grads_ref(q, k, v, dout, self.causal, scale))
        if self.planless:
            return [grads, None]
        post = tvm_ffi.convert(self.post) if self.convert else None
        return [grads, [tvm_ffi.convert(self.prep), tvm_ffi.convert(self.kernel), post, [6, -1, 3],
                        [float(self.block_m), scale]]]


def _backward_case(seed, B=2, H=4, H_kv=2, S=7, D=16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=g).transpose(1, 2)  # as a model hands them: (B, S, H, D) memory
    k, v = (torch.randn(B, S, H_kv, D, generator=g).transpose(1, 2) for _ in range(2))
    out, lse = _attention_ref(q, k, v, True, None)
    return q, k, v, out, torch.randn(out.shape, generator=g), lse


@pytest.mark.parametrize("convert", [True, False])
def test_native_attention_backward_runs_its_program(op, convert):
    standin = BackwardStandIn(convert=convert)
    native.register_resolver(standin)
    q, k, v, out, dout, lse = _backward_case(5)
    ref = _grads_ref(q, k, v, dout, True, None)
    for step in range(3):
        dq, dk, dv = torch.ops.warpsched_native.attention_bwd(q, k, v, out, dout, lse, True, None, -1, -1, None)
        for got, want in zip((dq, dk, dv), ref):
            torch.testing.assert_close(got, want)
            assert got.is_contiguous() and got.shape == want.shape
        assert standin.resolves == 1
        assert standin.calls == ["prep", "kernel"] * step if not convert else \
            standin.calls == ["prep", "kernel", "post"] * step
    assert standin.scalars[0][0] == 1.0 and standin.scalars[0][2:4] == [-1.0, -1.0] and standin.scalars[0][5] == 0.0
    assert dk.data_ptr() + dk.numel() * 4 == dv.data_ptr()  # one allocation for dK and dV, as the host's plan


def test_native_attention_backward_deterministic_zeroes_its_turn_words(op):
    standin = BackwardStandIn(block_m=4)
    native.register_resolver(standin)
    q, k, v, out, dout, lse = _backward_case(6, S=9)
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2):
            torch.ops.warpsched_native.attention_bwd(q, k, v, out, dout, lse, True, 0.3, -1, -1, None)
    finally:
        torch.use_deterministic_algorithms(False)
    assert standin.scalars[0][5] == 1.0 and standin.scalars[0][1] == 0.3
    (turns,) = standin.turns  # the second call's (the first ran on the host)
    assert turns.shape == (2 * 4 * 3,) and not turns.any()  # (batch, query head, Q block of 4 of 12 padded rows)
    torch.ops.warpsched_native.attention_bwd(q, k, v, out, dout, lse, True, 0.3, -1, -1, None)
    assert standin.resolves == 2  # deterministic is part of the key: a new plan


def test_native_attention_backward_without_a_program_asks_the_host_each_call(op):
    standin = BackwardStandIn(planless=True)
    native.register_resolver(standin)
    q, k, v, out, dout, lse = _backward_case(7)
    for step in range(3):
        dq, _, _ = torch.ops.warpsched_native.attention_bwd(q, k, v, out, dout, lse, True, None, -1, -1, None)
        torch.testing.assert_close(dq, _grads_ref(q, k, v, dout, True, None)[0])
        assert standin.resolves == step + 1 and not standin.calls


def test_backward_resolver_describes_the_hosts_plan(monkeypatch):
    """``native.resolve`` for the backward on CPU tensors: the host's gradients, and the program its plan
    (``backward_host._plan``) would launch: the same compiled functions, block rows and scale."""
    from warpsched.kernels.attention import backward_host as bh

    fns = {name: tvm_ffi.convert(lambda *args: None) for name in ("prep", "kernel", "post")}
    q, k, v, out, dout, lse = _backward_case(8)
    grads = _grads_ref(q, k, v, dout, True, None)
    monkeypatch.setattr(bh, "attention_backward", lambda *a, **kw: grads)
    monkeypatch.setattr(bh, "_plannable", lambda *a: True)
    monkeypatch.setattr(bh, "compiled_prep", lambda *a, **kw: fns["prep"])
    monkeypatch.setattr(bh, "compiled_ffi", lambda key: fns["kernel"])
    monkeypatch.setattr(bh, "compiled_post", lambda *a, **kw: fns["post"])
    monkeypatch.setattr(bh, "flat_dq_tile", lambda key: (16, 1, 0))
    nan = float("nan")
    got, program = native.resolve(native.KIND_ATTENTION_BACKWARD, None, [1.0, nan, -1.0, -1.0, nan, 0.0],
                                  q, k, v, out, dout, lse)
    assert all(torch.equal(a, b) for a, b in zip(got, grads))
    assert [f.same_as(fns[n]) for f, n in zip(program[:3], ("prep", "kernel", "post"))] == [True] * 3
    options, _ = bh._options_and_key(q.dtype, 16, True, {}, None, None, None, False)
    assert program[4] == [float(options.get("block_m", bh.BLOCK_M)), 16 ** -0.5]
    monkeypatch.setattr(bh, "flat_dq_tile", lambda key: None)  # no flat tiles: no conversion kernel
    _, program = native.resolve(native.KIND_ATTENTION_BACKWARD, None, [1.0, 0.5, -1.0, -1.0, nan, 0.0],
                                q, k, v, out, dout, lse)
    assert program[2] is None and program[4][1] == 0.5
    monkeypatch.setattr(bh, "_plannable", lambda *a: False)
    assert native.resolve(native.KIND_ATTENTION_BACKWARD, None, [1.0, nan, -1.0, -1.0, nan, 0.0],
                          q, k, v, out, dout, lse)[1] is None


def test_native_attention_ops_refuse_bad_input_without_crashing(op):
    """Random ranks, shapes (zeros included) and dtypes through both attention ops and the real resolver (whose
    host refuses CPU tensors, and names what is wrong first): each call raises a Python exception with a message;
    the process never dies in the C++."""
    import random

    native.register_resolver()
    rng = random.Random(1)
    dtypes = [torch.float32, torch.int32, torch.bfloat16, torch.float16]
    refused = 0
    for _ in range(120):
        def t():
            return torch.zeros(tuple(rng.choice([0, 1, 2, 4, 8]) for _ in range(rng.choice([0, 1, 3, 4, 4, 5]))),
                               dtype=rng.choice(dtypes))
        q, k, v = t(), t(), t()
        try:
            if rng.random() < 0.5:
                torch.ops.warpsched_native.attention_fwd(q, k, v, rng.random() < 0.5, None, -1, -1, None)
            else:
                torch.ops.warpsched_native.attention_bwd(q, k, v, t(), t(), t(), rng.random() < 0.5, None, -1, -1,
                                                         None)
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            assert str(e).strip(), type(e)
            refused += 1
    assert refused == 120


class TrainingStandIn:
    """The forward's and the backward's stand-ins behind one resolver (kind decides)."""

    def __init__(self):
        self.forward, self.backward = AttentionStandIn(), BackwardStandIn()

    def __call__(self, kind, *rest):
        return (self.forward if kind == native.KIND_ATTENTION_FORWARD else self.backward)(kind, *rest)


def test_native_attention_op_has_its_autograd_node_in_cpp(op):
    """``warpsched_native::attention``: O with a C++ autograd node whose backward is ``attention_bwd`` on what the
    forward saved (q, k, v, O, the LSE, the scalars)."""
    standin = TrainingStandIn()
    native.register_resolver(standin)
    q0, k0, v0, _, dout, _ = _backward_case(9)
    for step in range(2):
        q, k, v = (t.detach().clone().requires_grad_() for t in (q0, k0, v0))
        out = torch.ops.warpsched_native.attention(q, k, v, True, 0.3, -1, -1, None)
        assert "Python" not in type(out.grad_fn).__name__  # a C++ node, not an autograd.Function's
        torch.testing.assert_close(out, _attention_ref(q0, k0, v0, True, 0.3)[0])
        out.backward(dout)
        for got, want in zip((q.grad, k.grad, v.grad), _grads_ref(q0, k0, v0, dout, True, 0.3)):
            torch.testing.assert_close(got, want)
    assert standin.forward.resolves == standin.backward.resolves == 1  # then launched from the plans
    assert standin.forward.launches == 1 and standin.backward.calls == ["prep", "kernel", "post"]
    assert standin.backward.scalars[0][:5] == [1.0, 0.3, -1.0, -1.0, standin.backward.scalars[0][4]]
    with torch.no_grad():  # below autograd: the forward alone
        torch.testing.assert_close(torch.ops.warpsched_native.attention(q0, k0, v0, True, 0.3, -1, -1, None),
                                   _attention_ref(q0, k0, v0, True, 0.3)[0])


@pytest.fixture
def host_backward():
    """A CPU stand-in for the custom op ``warpsched::attention_bwd`` (the Python host; CUDA-only otherwise) that
    records its ``dlse`` and ``deterministic`` and returns the reference gradients of O alone."""
    from warpsched import torch_ops  # noqa: F401 (defines the op)

    seen = []

    def standin(q, k, v, out, dout, lse, causal=False, scale=None, window_left=-1, window_right=-1, softcap=None,
                dlse=None, deterministic=False):
        seen.append((dlse, deterministic))
        return tuple(g.contiguous() for g in _grads_ref(q, k, v, dout, causal, scale))
    lib = torch.library.Library("warpsched", "IMPL")  # noqa: TOR901
    lib.impl("attention_bwd", standin, "CPU")
    yield seen
    lib._destroy()


def test_native_attention_lse_op_returns_a_differentiable_lse(op, host_backward):
    """``warpsched_native::attention_lse`` (flash_attn_func's eager calls with a gradient): (O, LSE) from a C++
    node; a loss on O alone runs the native backward program; a loss that reaches the LSE, or ``deterministic``,
    the host's op with the LSE's gradient and the flag."""
    standin = TrainingStandIn()
    native.register_resolver(standin)
    q0, k0, v0, _, dout, _ = _backward_case(10)
    ref_o, ref_m = _attention_ref(q0, k0, v0, True, 0.3)
    q, k, v = (t.detach().clone().requires_grad_() for t in (q0, k0, v0))
    out, lse = torch.ops.warpsched_native.attention_lse(q, k, v, True, 0.3, -1, -1, None, False)
    assert "Python" not in type(out.grad_fn).__name__ and lse.grad_fn is out.grad_fn
    torch.testing.assert_close(out, ref_o)
    torch.testing.assert_close(lse, ref_m)
    out.backward(dout)
    for got, want in zip((q.grad, k.grad, v.grad), _grads_ref(q0, k0, v0, dout, True, 0.3)):
        torch.testing.assert_close(got, want)
    assert standin.backward.resolves == 1 and not host_backward
    dlse = torch.randn(lse.shape, generator=torch.Generator().manual_seed(3))
    for deterministic in (False, True):
        q, k, v = (t.detach().clone().requires_grad_() for t in (q0, k0, v0))
        out, lse = torch.ops.warpsched_native.attention_lse(q, k, v, True, 0.3, -1, -1, None, deterministic)
        ((out * dout).sum() + (lse * dlse).sum()).backward()
        got_dlse, got_det = host_backward[-1]
        assert torch.equal(got_dlse, dlse) and got_det is deterministic
    q, k, v = (t.detach().clone().requires_grad_() for t in (q0, k0, v0))
    out, _ = torch.ops.warpsched_native.attention_lse(q, k, v, True, 0.3, -1, -1, None, True)
    out.backward(dout)  # deterministic without the LSE's gradient: the host too, dlse None
    assert host_backward[-1] == (None, True) and len(host_backward) == 3
