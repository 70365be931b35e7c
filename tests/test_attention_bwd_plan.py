"""``attention_backward`` keeps a plan per (shapes, strides, dtypes, device, causal, scale, masks): a model's later
calls with that key launch the same pre-pass, kernel and dQ conversion on new tensors, with the same arguments,
without the checks and decisions of the first (``backward_host._plan``). On the CPU: the compiled kernels are
recorders and torch's allocator is a stand-in; the kernels and their bits run on the H200 (bench/model_block.py's
gradient check, bench/attention_bwd_check.py)."""
from __future__ import annotations

import sys
import types

import pytest

from _fake_tensor import FakeTensor, _prod

bwd = pytest.importorskip("warpsched.kernels.attention.backward_host")


class T(FakeTensor):
    """A FakeTensor with the methods the backward's host calls on its inputs and outputs."""

    def is_contiguous(self):
        return True

    def contiguous(self):
        return self

    def zero_(self):
        return self

    def narrow(self, dim, start, length):  # 1-D: a piece of a flat buffer, at its byte offset
        assert dim == 0 and self.dim() == 1
        return T((length,), self.dtype, ptr=self._ptr + start * self._item, itemsize=self._item)

    def view(self, *shape):
        n = _prod(self.shape)
        shape = tuple(n // -_prod(shape) if d == -1 else d for d in shape)
        assert _prod(shape) == n
        return T(shape, self.dtype, ptr=self._ptr, itemsize=self._item)

    def unbind(self, dim):
        assert dim == 0
        step = _prod(self.shape[1:]) * self._item
        return tuple(T(self.shape[1:], self.dtype, ptr=self._ptr + i * step, itemsize=self._item)
                     for i in range(self.shape[0]))


def fake_torch(made):
    def empty(*shape, device=None, dtype=None):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        made.append(T(shape, str(dtype), ptr=4096 * (len(made) + 2), itemsize=4 if "32" in str(dtype) else 2))
        return made[-1]
    return types.SimpleNamespace(empty=empty, zeros=empty, float32="torch.float32", int32="torch.int32")


@pytest.fixture
def host(monkeypatch):
    """(launches, checks): every kernel launch as (kernel, shapes and dtypes of its tensors), and how often the full
    path's argument checks ran."""
    launches, checks, made = [], [], []
    monkeypatch.setitem(sys.modules, "torch", fake_torch(made))
    monkeypatch.setattr(bwd._host, "ffi_enabled", lambda: True)

    def recorder(name):
        def launch(*args):
            launches.append((name, tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else a for a in args)))
            assert all(a.data_ptr() % 16 == 0 for a in args if hasattr(a, "shape"))  # what TMA and the fakes need
        return launch
    monkeypatch.setattr(bwd, "compiled_ffi", lambda key: recorder(("kernel",) + key[:3]))
    monkeypatch.setattr(bwd, "compiled_prep", lambda dtype, d, padded=False: recorder(("prep", padded)))
    monkeypatch.setattr(bwd, "compiled_post", lambda dtype, d, *flat: recorder(("post",) + flat))
    monkeypatch.setattr(bwd, "flat_dq_tile", lambda key: (64, 2, 0))
    real_check = bwd.check_args
    monkeypatch.setattr(bwd, "check_args", lambda *a: (checks.append(1), real_check(*a)))
    monkeypatch.setattr(bwd, "_PLANS", {})
    return launches, checks


def inputs(B=1, H=8, Hk=2, S=16, D=128):
    """q, k, v, out and dout as a model hands them: (B, S, H, D) memory seen as (B, H, S, D); the (B, H, S) LSE."""
    def heads(h):
        return T((B, h, S, D), strides=(S * h * D, D, h * D, 1))
    return heads(H), heads(Hk), heads(Hk), heads(H), heads(H), T((B, H, S), "torch.float32", itemsize=4)


def test_a_later_call_launches_what_the_first_did_without_its_checks(host):
    launches, checks = host
    first = bwd.attention_backward(*inputs(), causal=True)
    n = len(launches)
    second = bwd.attention_backward(*inputs(), causal=True)
    assert [name[0] for name, _ in launches[:n]] == ["prep", "kernel", "post"]
    assert launches[0][0] == ("prep", True) and launches[1][0][2:] == (128, True)
    assert launches[2][0] == ("post", 64, 2, 0)
    assert launches[n:] == launches[:n]  # the same kernels, the same argument shapes and dtypes and scale
    assert checks == [1]  # the second call skipped the checks
    for a, b in zip(first, second):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
    assert first[1].shape == (1, 2, 16, 128) and first[0].shape == (1, 8, 16, 128)


def test_another_shape_stride_or_flag_goes_through_the_full_path(host):
    launches, checks = host
    bwd.attention_backward(*inputs(), causal=True)
    bwd.attention_backward(*inputs(S=24), causal=True)
    bwd.attention_backward(*inputs(), causal=False)
    q, k, v, out, dout, lse = inputs()
    bwd.attention_backward(q, k, v, out, T(dout.shape), lse, causal=True)  # dout contiguous: other strides
    assert len(checks) == 4


def test_a_plan_that_raises_falls_back_on_the_full_path(host, monkeypatch):
    launches, checks = host
    bwd.attention_backward(*inputs(), causal=True)
    (key,) = bwd._PLANS

    def refuses(*a):
        raise ValueError("misaligned")
    bwd._PLANS[key] = refuses
    dq, dk, dv = bwd.attention_backward(*inputs(), causal=True)
    assert len(checks) == 2 and dq.shape == (1, 8, 16, 128)


def test_mask_mod_and_given_options_are_never_planned(host):
    _, checks = host
    for _ in range(2):
        bwd.attention_backward(*inputs(), causal=True, mask_mod=lambda b, h, q, kv: q >= kv)
        bwd.attention_backward(*inputs(), causal=True, tma_stats=True, shared_ds=True)
    assert len(checks) == 4 and not bwd._PLANS


def test_deterministic_plans_zero_fresh_turn_words_every_call(host):
    launches, _ = host
    bwd.attention_backward(*inputs(), causal=True, deterministic=True)
    n = len(launches)
    bwd.attention_backward(*inputs(), causal=True, deterministic=True)
    assert launches[n:] == launches[:n]
    kernel_args = [args for name, args in launches if name[0] == "kernel"][1]
    assert ((8,), "torch.int32") in kernel_args  # one turn word per (batch, head, 64-row Q block)


def test_arguments_that_are_not_tensors_get_the_full_paths_message(host):
    """The plan's key is built before the checks: what it cannot read goes to the full path, whose error names it."""
    q, k, v, out, dout, lse = inputs()
    with pytest.raises(bwd.AttentionConfigError, match="pass a torch.Tensor"):
        bwd.attention_backward([1, 2], k, v, out, dout, lse, causal=True)
    with pytest.raises(bwd.AttentionConfigError, match=r"^lse is an object; pass a torch.Tensor \(the forward's "
                                                        r"log-sum-exp, ops.attention\(\.\.\., return_lse=True\)\)$"):
        bwd.attention_backward(q, k, v, out, dout, object(), causal=True)
    with pytest.raises(bwd.AttentionConfigError, match=r"^dout is a str; pass a torch.Tensor \(of q's shape and dtype\)$"):
        bwd.attention_backward(q, k, v, out, "dout", lse, causal=True)
    assert not bwd._PLANS


class Strided(T):
    def is_contiguous(self):
        return False


def test_a_reused_dq_accumulator_is_the_one_the_kernel_writes(host):
    """``prepare_backward(..., dq_acc=, dk=, dv=)``: a benchmark's kernel sides reuse one set of output buffers, so
    two kernels timed side by side write the same memory (bench/attention_bwd_check.py)."""
    launches, _ = host
    q, k, v, out, dout, lse = inputs(S=100)
    first = bwd.prepare_backward(q, k, v, out, dout, lse, causal=True)
    launch, dq_acc, dk, dv = bwd.prepare_backward(q, k, v, out, dout, lse, causal=True, dq_acc=first[1],
                                                  dk=first[2], dv=first[3])
    assert (dq_acc, dk, dv) == first[1:] and dq_acc.shape == (1, 8, 128, 128)  # S_q up to whole 64-row blocks
    launch()
    kernel_ptrs = [a for a in launches[-1][1] if isinstance(a, tuple)]
    assert ((1, 8, 128, 128), "torch.float32") in kernel_ptrs


@pytest.mark.parametrize("buf, words", [
    (T((1, 8, 100, 128), "torch.float32", itemsize=4), r"\(1, 8, 128, 128\).*64-row Q block"),
    (T((1, 8, 128, 128), "torch.float16"), "float32"),
    (Strided((1, 8, 128, 128), "torch.float32", itemsize=4), "contiguous"),
])
def test_a_reused_dq_accumulator_of_another_shape_is_refused(host, buf, words):
    """Refused naming what is expected, before anything is compiled or launched."""
    launches, _ = host
    n = len(launches)
    with pytest.raises(bwd.AttentionConfigError, match=words) as err:
        bwd.prepare_backward(*inputs(S=100), causal=True, dq_acc=buf)
    assert "dq_acc=None" in str(err.value) and len(launches) == n
