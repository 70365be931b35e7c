"""``warpsched.nn.flash`` (flash_attn.cute's interface), on the CPU: how flash_attn's bottom-right causal
alignment and windows map onto warpsched's top-left kernels, which calls each argument reaches, and what is
refused by name. The numbers (against FlashAttention-4's own functions and an fp64 reference) are checked on
the H200 by ``bench/flash_interface_check.py``.

This machine has no torch: ``nn/flash.py`` runs against a stand-in torch (tensors with a shape and
``transpose``), the real ``nn/attention.py`` beside it, and stand-ins for ``warpsched.ops``, the ops
``nn.attention._run`` picks and the custom ops, which record each call (``EAGER["on"]`` says whether the call is
eager or traced)."""
from __future__ import annotations

import os
import sys
import types

import pytest

from _module_file import exec_module_file

FLASH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "warpsched", "nn", "flash.py")
ATTENTION = os.path.join(os.path.dirname(FLASH), "attention.py")


class ConfigError(ValueError):
    """The stand-in AttentionConfigError."""


class T:
    """A stand-in tensor: a shape, whether it wants a gradient, and the transposes it went through."""

    def __init__(self, *shape, requires_grad=False, tag="t"):
        self.shape, self.requires_grad, self.tag = tuple(shape), requires_grad, tag

    def dim(self):
        return len(self.shape)

    def __getitem__(self, idx):  # t[:, start:]: the keys from start on
        start = idx[1].start or 0
        return T(self.shape[0], self.shape[1] - start, *self.shape[2:], requires_grad=self.requires_grad,
                 tag=f"{self.tag}[{start}:]")

    def transpose(self, a, b):
        s = list(self.shape)
        s[a], s[b] = s[b], s[a]
        return T(*s, requires_grad=self.requires_grad, tag=f"{self.tag}^T")


EAGER = {"on": True, "native": False}


@pytest.fixture
def flash(monkeypatch):
    calls = []
    EAGER["on"], EAGER["native"] = True, False
    torch = types.ModuleType("torch")
    torch.Tensor = T
    torch.is_grad_enabled = lambda: True
    torch.equal = lambda a, b: a.tag == b.tag
    torch.zeros_like = lambda t: T(*t.shape, tag="zeros")

    class Function:
        @classmethod
        def apply(cls, *args):
            calls.append((cls.__name__, args))
            return T(*args[0].shape, tag="out-grad"), T(1, tag="lse-grad")
    torch.autograd = types.SimpleNamespace(Function=Function)
    ops = types.ModuleType("warpsched.ops")

    def recorder(name, out_of):
        def f(*args, **kwargs):
            calls.append((name, args, kwargs))
            return out_of(*args), T(1, tag="lse")
        return f
    ops.attention = recorder("attention", lambda q, *a: T(*q.shape, tag="out"))
    torch.are_deterministic_algorithms_enabled = lambda: False

    def grads(name):
        def f(*args, **kwargs):
            calls.append((name, args, kwargs))
            return T(*args[0].shape, tag="dq"), T(*args[1].shape, tag="dk"), T(*args[2].shape, tag="dv")
        return f
    ops.attention_backward = grads("attention_backward")
    torch_ops = types.ModuleType("warpsched.torch_ops")
    torch_ops.attention_bwd = grads("torch_ops.attention_bwd")
    torch.ops = types.SimpleNamespace(warpsched=types.SimpleNamespace(attention_bwd=grads("op.attention_bwd")))
    run = {"attention_fwd": recorder("attention_fwd", lambda q, *a: T(*q.shape, tag="out")),
           "attention_bwd": grads("attention_bwd")}
    torch.ops.warpsched.attention_varlen_fwd = recorder("op.attention_varlen_fwd", lambda q, *a: T(*q.shape, tag="out"))
    torch.ops.warpsched.attention_varlen_bwd = grads("op.attention_varlen_bwd")
    ops.attention_varlen_backward = grads("attention_varlen_backward")
    eager_mod = types.ModuleType("warpsched.nn._eager")
    eager_mod.eager = lambda t: EAGER["on"]
    functional = types.ModuleType("warpsched.nn.functional")
    functional._native_ready = lambda: EAGER["native"]

    def attention_lse(*args):
        calls.append(("native.attention_lse", args, {}))
        return T(*args[0].shape, tag="out-native"), T(1, tag="lse-native")
    torch.ops.warpsched_native = types.SimpleNamespace(attention_lse=types.SimpleNamespace(default=attention_lse))
    ops.attention_varlen = recorder("attention_varlen", lambda q, *a: T(*q.shape, tag="out"))
    ops.attention_paged = recorder("attention_paged", lambda q, *a: T(*q.shape, tag="out"))
    pkg = types.ModuleType("warpsched")
    pkg.ops, pkg.torch_ops, pkg.__path__ = ops, torch_ops, []
    masks = types.ModuleType("warpsched.kernels.attention.masks")
    masks.AttentionConfigError = ConfigError
    mods = {"torch": torch, "warpsched": pkg, "warpsched.ops": ops, "warpsched.torch_ops": torch_ops,
            "warpsched.nn._eager": eager_mod,
            "warpsched.nn.functional": functional,
            "warpsched.nn": types.ModuleType("warpsched.nn"), "warpsched.kernels": types.ModuleType("k"),
            "warpsched.kernels.attention": types.ModuleType("a"), "warpsched.kernels.attention.masks": masks}
    mods["warpsched.nn"].__path__ = []
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    # nn/attention.py itself (its varlen routing and window sides), its op choice (_run) the recorders
    attention = exec_module_file("warpsched.nn.attention", ATTENTION, monkeypatch)
    attention._run = lambda name, t: run[name]  # the op nn.scaled_dot_product_attention runs (native or custom)
    return exec_module_file("warpsched.nn.flash", FLASH), calls


@pytest.mark.parametrize("window, causal, sq, sk, expected", [
    ((None, None), True, 100, 100, (True, None, 0)),  # as many queries as keys: the kernels' causal itself
    ((64, None), True, 100, 100, (True, (64, 0), 0)),
    ((-1, -1), False, 100, 300, (False, None, 0)),
    ((None, None), True, 100, 300, (False, (None, 200), 0)),  # bottom-right: query i sees keys up to i + 200
    ((None, None), True, 1, 4096, (False, None, 0)),  # decode: one token sees its whole cache, no mask
    ((250, 0), True, 100, 300, (False, (50, 200), 0)),  # keys i + 200 - 250 .. i + 200
    ((300, 0), True, 100, 300, (False, (None, 200), 0)),  # every lower bound i - 100 <= 0: no left bound
    ((64, 16), False, 50, 80, (False, (34, 46), 0)),
    ((None, 5), False, 100, 100, (False, (None, 5), 0)),
    # a sliding window over a long cache: query i sees keys i + 616 .. i + 872; the first 616 are nobody's
    ((256, 0), True, 128, 1000, (False, (0, 256), 616)),
    ((10, 0), True, 100, 300, (False, (0, 10), 190)),
    ((0, 0), True, 1, 4096, (False, None, 4095)),  # one token, its own key alone
])
def test_bottom_right_windows_become_top_left_ones(flash, window, causal, sq, sk, expected):
    mod, _ = flash
    assert mod._bounds(window, causal, sq, sk, "f") == expected


@pytest.mark.parametrize("window, causal, sq, sk, words", [
    ((None, None), True, 300, 100, "see no key"),  # more queries than keys: the first 200 see none
    ((5, 3), True, 10, 10, "causal ends the window"),
    ((-2, 0), False, 10, 10, "not a key count"),
    ((1.5, 0), False, 10, 10, "not a key count"),
    (7, False, 10, 10, "expected (left, right)"),
])
def test_windows_the_kernels_cannot_express_are_refused(flash, window, causal, sq, sk, words):
    mod, _ = flash
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        mod._bounds(window, causal, sq, sk, "f")


def test_keys_no_query_sees_are_left_out_of_the_call(flash):
    mod, calls = flash
    sliced = []
    q, k = T(1, 128, 8, 64, tag="q"), T(1, 1000, 2, 64, tag="k")
    k.__class__ = type("Sliceable", (T,), {"__getitem__": lambda self, idx: sliced.append(idx) or
                                           T(1, 1000 - idx[1].start, 2, 64, tag="k-tail")})
    mod.flash_attn_func(q, k, k, causal=True, window_size=(256, 0))
    name, args, kwargs = calls[0]
    assert sliced == [(slice(None), slice(616, None))] * 2 and args[1].shape == (1, 2, 384, 64)
    assert name == "attention_fwd" and args[3] is False and args[5:7] == (0, 256)  # causal, window left / right


def test_inference_calls_the_forward_op_on_transposed_views(flash):
    """Inference runs the forward op ``nn.scaled_dot_product_attention`` runs (positional: q, k, v, causal, scale,
    window left / right with -1 for none, softcap); hints given in eager mode go to ``ops.attention``, which takes
    them; traced, the op (the hints change speed, not results)."""
    mod, calls = flash
    q, k, v = T(2, 100, 8, 64, tag="q"), T(2, 300, 2, 64, tag="k"), T(2, 300, 2, 64, tag="v")
    out, lse = mod.flash_attn_func(q, k, v, softmax_scale=0.1, causal=True, softcap=0.0, num_splits=1)
    name, args, kwargs = calls[0]
    assert name == "attention_fwd" and [a.tag for a in args[:3]] == ["q^T", "k^T", "v^T"]
    assert args[0].shape == (2, 8, 100, 64)
    assert args[3:] == (False, 0.1, -1, 200, None)  # bottom-right causal as a shifted window; 0.0: no cap
    assert out.shape == (2, 100, 8, 64) and lse is None  # O back in (B, S, H, D); no LSE unless asked
    assert mod.flash_attn_func(q, k, v, return_lse=True)[1].tag == "lse"
    calls.clear()
    mod.flash_attn_func(q, k, v, num_splits=4, pack_gqa=True)
    assert calls[0][0] == "attention" and calls[0][2]["num_splits"] == 4 and calls[0][2]["pack_gqa"] is True
    EAGER["on"] = False
    mod.flash_attn_func(q, k, v, num_splits=4, pack_gqa=True)
    assert calls[1][0] == "attention_fwd"


def test_a_gradient_goes_through_the_autograd_function_with_the_lse(flash):
    mod, calls = flash
    q = T(1, 16, 4, 128, requires_grad=True, tag="q")
    k = v = T(1, 16, 4, 128, tag="kv")
    out, lse = mod.flash_attn_func(q, k, v, causal=True, deterministic=True)
    name, args = calls[0]
    assert name == "_FlashAttention" and args[3:] == (True, None, None, None, None, True)
    assert lse.tag == "lse-grad"  # returned as FlashAttention-4 does when a gradient is wanted


class _Ctx:
    """A stand-in autograd context: what _FlashAttention.forward saved."""

    def __init__(self):
        self.saved_tensors = None

    def save_for_backward(self, *ts):
        self.saved_tensors = ts

    def set_materialize_grads(self, on):
        pass


@pytest.mark.parametrize("dlse, deterministic, eager, want", [
    (None, False, True, "attention_bwd"),  # the op nn.scaled_dot_product_attention's backward runs
    (None, False, False, "attention_bwd"),
    ("dlse", False, True, "torch_ops.attention_bwd"),  # the LSE's gradient: the host that takes it
    ("dlse", False, False, "op.attention_bwd"),  # traced: the custom op, which takes it too
    (None, True, True, "torch_ops.attention_bwd"),  # deterministic=True asked by the caller
    (None, True, False, "op.attention_bwd"),
])
def test_the_backward_takes_the_op_that_carries_what_it_needs(flash, dlse, deterministic, eager, want):
    mod, calls = flash
    EAGER["on"] = eager
    q, k = T(1, 4, 16, 128, tag="q"), T(1, 2, 16, 128, tag="k")
    ctx = _Ctx()
    mod._FlashAttention.forward(ctx, q, k, k, True, 0.5, (8, 0), 30.0, None, deterministic)
    assert calls[-1][0] == "attention_fwd" and calls[-1][1][3:] == (True, 0.5, 8, 0, 30.0)
    dlse_t = T(1, 4, 16, tag="dlse") if dlse else None
    dq, dk, dv = mod._FlashAttention.backward(ctx, T(1, 4, 16, 128, tag="do"), dlse_t)[:3]
    name, args, kwargs = calls[-1]
    assert name == want and args[6:] == (True, 0.5, 8, 0, 30.0) and (dq.tag, dk.tag, dv.tag) == ("dq", "dk", "dv")
    if want != "attention_bwd":
        assert kwargs == {"dlse": dlse_t, "deterministic": deterministic}


def test_a_mask_mod_runs_on_the_ops_host(flash):
    mod, calls = flash
    q = T(1, 4, 16, 64, tag="q")
    ctx = _Ctx()
    mask = lambda b, h, i, j: i >= j  # noqa: E731
    mod._FlashAttention.forward(ctx, q, q, q, False, None, None, None, mask, False)
    mod._FlashAttention.backward(ctx, T(1, 4, 16, 64, tag="do"), None)
    assert [c[0] for c in calls] == ["attention", "attention_backward"] and calls[1][2]["mask_mod"] is mask


def test_an_eager_cuda_call_with_a_gradient_takes_the_native_node(flash):
    """Where warpsched.native is built, an eager call wanting a gradient is the C++ node ``attention_lse`` (O and a
    differentiable LSE); a mask_mod or a traced call keeps the Python node."""
    mod, calls = flash
    EAGER["native"] = True
    q = T(1, 16, 4, 128, requires_grad=True, tag="q")
    q.is_cuda = True
    k = T(1, 16, 2, 128, tag="kv")
    out, lse = mod.flash_attn_func(q, k, k, causal=True, window_size=(8, 0), deterministic=True)
    name, args, _ = calls[-1]
    assert name == "native.attention_lse" and args[3:] == (True, None, 8, 0, None, True)
    assert out.shape == (1, 16, 4, 128) and lse.tag == "lse-native"
    mod.flash_attn_func(q, k, k, mask_mod=lambda b, h, i, j: True)
    EAGER["on"] = False
    mod.flash_attn_func(q, k, k)
    assert [c[0] for c in calls[-2:]] == ["_FlashAttention", "_FlashAttention"]


def test_flash_attention_4_arguments_without_a_kernel_are_refused_by_name(flash):
    mod, _ = flash
    q = T(1, 16, 4, 64)
    with pytest.raises(ConfigError, match="learnable_sink"):
        mod.flash_attn_func(q, q, q, learnable_sink=T(4))
    with pytest.raises(TypeError, match="unexpected keyword argument 'sofcap'"):
        mod.flash_attn_func(q, q, q, sofcap=30.0)
    mod.flash_attn_func(q, q, q, qv=None, score_mod=None, gather_bwd_recompute_p=False)  # defaults pass
    with pytest.raises(ConfigError, match="expected a 4-d"):
        mod.flash_attn_func(T(16, 4, 64), q, q)


def test_varlen_with_causal_needs_equal_query_and_key_offsets(flash):
    mod, calls = flash
    q = T(30, 4, 64, tag="q")
    cu, other = T(3, tag="cu"), T(3, tag="cu-k")
    out, lse = mod.flash_attn_varlen_func(q, q, q, cu, cu, 20, 20, causal=True, return_lse=True)
    name, args, kwargs = calls[0]
    assert name == "attention_varlen" and args[5:8] == (20, 20, True) and lse.tag == "lse"
    mod.flash_attn_varlen_func(q, q, q, cu, other, 20, 20)  # no mask: any offsets
    with pytest.raises(ConfigError, match="bottom-right"):
        mod.flash_attn_varlen_func(q, q, q, cu, other, 20, 20, causal=True)
    with pytest.raises(ConfigError, match="cu_seqlens_q, cu_seqlens_k"):
        mod.flash_attn_varlen_func(q, q, q, cu, None, 20, 20)


def test_a_traced_varlen_call_is_the_custom_ops(flash):
    """Under a tracer (no mask_mod) the varlen forward and backward are torch.ops.warpsched.attention_varlen_fwd /
    _bwd (positional: ..., max lengths, causal, scale, window left / right, softcap); equal offsets can only be
    seen as one tensor there, so distinct ones with causal are refused, saying so; a mask_mod stays on the ops."""
    mod, calls = flash
    EAGER["on"] = False
    q, cu = T(30, 4, 64, tag="q"), T(3, tag="cu")
    mod.flash_attn_varlen_func(q, q, q, cu, cu, 20, 20, causal=True, window_size=(8, 0), softcap=5.0)
    name, args, _ = calls[-1]
    assert name == "op.attention_varlen_fwd" and args[5:] == (20, 20, True, None, 8, 0, 5.0)
    ctx = _Ctx()
    mod._FlashVarlen.forward(ctx, q, q, q, cu, cu, 20, 20, True, 0.5, (8, 0), None, None)
    dq, dk, dv = mod._FlashVarlen.backward(ctx, T(30, 4, 64, tag="do"), None)[:3]
    name, args, _ = calls[-1]
    assert name == "op.attention_varlen_bwd" and args[6:] == (cu, cu, 20, 20, True, 0.5, 8, 0, None, None)
    assert (dq.tag, dk.tag, dv.tag) == ("dq", "dk", "dv")
    with pytest.raises(ConfigError, match="pass one tensor as both"):
        mod.flash_attn_varlen_func(q, q, q, cu, T(3, tag="cu"), 20, 20, causal=True)
    mod.flash_attn_varlen_func(q, q, q, cu, cu, 20, 20, mask_mod=lambda b, h, i, j: True)
    assert calls[-1][0] == "attention_varlen"


@pytest.mark.parametrize("eager", [True, False])
def test_the_varlen_lse_gradient_reaches_the_backward(flash, eager):
    mod, calls = flash
    EAGER["on"] = eager
    q, cu = T(30, 4, 64, tag="q"), T(3, tag="cu")
    ctx = _Ctx()
    mod._FlashVarlen.forward(ctx, q, q, q, cu, cu, 20, 20, True, None, None, None, None)
    dlse = T(4, 30, tag="dlse")
    mod._FlashVarlen.backward(ctx, T(30, 4, 64, tag="do"), dlse)
    name, args, kwargs = calls[-1]
    if eager:
        assert name == "attention_varlen_backward" and kwargs["dlse"] is dlse
    else:
        assert name == "op.attention_varlen_bwd" and args[-1] is dlse


def test_a_paged_cache_runs_the_paged_kernel_for_inference_only(flash):
    mod, calls = flash
    q, cache = T(4, 1, 8, 128, tag="q"), T(64, 128, 2, 128, tag="cache")
    table, used = T(4, 16, tag="table"), T(4, tag="used")
    out, _ = mod.flash_attn_varlen_func(q, cache, cache, page_table=table, seqused_k=used, causal=True)
    name, args, kwargs = calls[0]
    assert name == "attention_paged" and args[0].shape == (4, 8, 1, 128) and args[5] is False  # decode: no mask
    assert out.shape == (4, 1, 8, 128)
    with pytest.raises(ConfigError, match="one token a sequence"):
        mod.flash_attn_varlen_func(T(4, 3, 8, 128), cache, cache, page_table=table, seqused_k=used, causal=True)
    with pytest.raises(ConfigError, match="inference"):
        mod.flash_attn_varlen_func(T(4, 1, 8, 128, requires_grad=True), cache, cache, page_table=table,
                                   seqused_k=used)
    with pytest.raises(ConfigError, match="seqused_k"):
        mod.flash_attn_varlen_func(q, cache, cache, page_table=table)
    mod.flash_attn_varlen_func(q, cache, cache, page_table=table, seqused_k=used, window_size=(_Index(-1), None))
    for window, words in (((256, 0), "aligns per sequence"), ((1.5, 0), "not a key count"), (7, "expected")):
        with pytest.raises(ConfigError, match=words):
            mod.flash_attn_varlen_func(q, cache, cache, page_table=table, seqused_k=used, window_size=window)


def _flash_sees(i, sq, sk, causal, left, right):
    """The keys flash_attn's query i sees: bottom-right aligned, -1 / None unbounded."""
    d = i + sk - sq
    right = 0 if causal else right
    return {j for j in range(sk) if (left is None or j >= d - left) and (right is None or j <= d + right)}


def _mapped_sees(i, sk, mapping):
    causal, window, start = mapping
    left, right = (None, None) if window is None else window
    right = 0 if causal else right
    return {j + start for j in range(sk - start)
            if (left is None or j >= i - left) and (right is None or j <= i + right)}


def test_every_small_window_maps_to_the_same_keys_or_is_refused_for_a_query_without_any(flash):
    """Exhaustively over S_q, S_k <= 7 and every window: what a mapped call's kernels see (top-left, keys from
    the first one on) is flash_attn's set for every query; a refusal only where some query would see no key."""
    mod, _ = flash
    bounds = [None, 0, 1, 2, 3, 5, 8]
    checked = refused = 0
    for sq in range(1, 8):
        for sk in range(1, 8):
            for causal in (False, True):
                for left in bounds:
                    for right in ([0] if causal else bounds):
                        try:
                            mapping = mod._bounds((left, right), causal, sq, sk, "f")
                        except ConfigError:
                            refused += 1
                            assert any(not _flash_sees(i, sq, sk, causal, left, right) for i in range(sq))
                            continue
                        checked += 1
                        for i in range(sq):
                            assert _mapped_sees(i, sk, mapping) == _flash_sees(i, sq, sk, causal, left, right), \
                                (sq, sk, causal, left, right, mapping, i)
    assert checked > 1000 and refused > 100


class _Index:
    """An integer type that is not int (as numpy's and a 0-d tensor's are): operator.index reads it."""

    def __init__(self, n):
        self.n = n

    def __index__(self):
        return self.n


def test_any_integer_type_is_a_window_bound(flash):
    mod, _ = flash
    assert mod._bounds((_Index(64), _Index(0)), True, 100, 100, "f") == (True, (64, 0), 0)
    assert mod._bounds((_Index(-1), None), False, 10, 10, "f") == (False, None, 0)


def _answered_or_refused(fn, args, kwargs):
    """fn(*args, **kwargs) returns, or raises AttentionConfigError, or the TypeError of a misspelled keyword (as any
    Python function raises it); anything else fails the test."""
    try:
        fn(*args, **kwargs)
    except ConfigError:
        pass
    except TypeError as e:
        assert "unexpected keyword argument" in str(e), (kwargs, e)


def test_fuzzed_arguments_are_answered_or_refused_by_name_never_crash(flash):
    """Random values for every argument the interface reads itself (windows, flags, shapes, hints): a result, or
    an AttentionConfigError / TypeError, never another exception from inside warpsched."""
    import random

    mod, _ = flash
    rng = random.Random(49)
    junk = [None, -2, -1, 0, 1, 7, 1.5, True, "left", (), (1,), (1, 2, 3), [3, 0], (None, -1), (0.5, 0), {},
            _Index(3), _Index(-5), float("nan")]
    checked = 0
    for _ in range(3000):
        window = rng.choice(junk + [(rng.choice(junk), rng.choice(junk)) for _ in range(3)])
        sq, sk = rng.randint(1, 9), rng.randint(1, 9)
        q, k = T(2, sq, 4, 64), T(2, sk, 2, 64)
        kwargs = dict(window_size=window, causal=rng.choice([True, False, 0, 1, None]),
                      softcap=rng.choice([0.0, None, 30.0]), num_splits=rng.choice([0, 1, 4]),
                      pack_gqa=rng.choice([None, True]), return_lse=rng.choice([True, False]))
        if rng.random() < 0.1:
            kwargs[rng.choice(["qv", "learnable_sink", "typo", "gather_bwd_token_chunk"])] = rng.choice(junk)
        _answered_or_refused(mod.flash_attn_func, (q, k, k), kwargs)
        checked += 1
    assert checked == 3000


def test_fuzzed_varlen_arguments_are_answered_or_refused_by_name_never_crash(flash):
    """flash_attn_varlen_func with random values for what the interface reads itself (offsets, longest lengths,
    windows, flags, a page table, eager or traced): a result, or an AttentionConfigError / TypeError."""
    import random

    mod, _ = flash
    rng = random.Random(50)
    junk = [None, -1, 0, 1, 7, 1.5, True, "x", (), (1,), (None, -1), (3, 0), _Index(4), float("nan")]
    cus = [None, T(3, tag="cu"), T(3, tag="cu"), "offsets", 5]
    checked = 0
    for _ in range(3000):
        EAGER["on"] = rng.random() < 0.5
        q = rng.choice([T(30, 4, 64), T(2, 30, 4, 64), T(30, 4), "q"])
        cu_q = rng.choice(cus)
        cu_k = cu_q if rng.random() < 0.5 else rng.choice(cus)
        kwargs = dict(window_size=rng.choice(junk + [(rng.choice(junk), rng.choice(junk))]),
                      causal=rng.choice([True, False, None, 1]), softcap=rng.choice([0.0, None, 5.0]),
                      return_lse=rng.choice([True, False]), max_seqlen_q=rng.choice(junk),
                      max_seqlen_k=rng.choice(junk))
        if rng.random() < 0.2:
            kwargs["page_table"] = rng.choice([T(2, 3), None])
            kwargs["seqused_k"] = rng.choice([T(2), None])
        if rng.random() < 0.1:
            kwargs[rng.choice(["qv", "typo", "seqused_q"])] = rng.choice(junk)
        _answered_or_refused(mod.flash_attn_varlen_func, (q, q, q, cu_q, cu_k), kwargs)
        checked += 1
    assert checked == 3000
