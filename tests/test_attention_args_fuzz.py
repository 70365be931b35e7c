"""Fuzzed arguments for the attention entry points' checks (varlen, paged, split-KV, the kernels'
options): whatever a caller passes, the answer is the input accepted or an AttentionConfigError (a
ValueError) that names the argument, never another exception from inside warpsched. Duck-typed tensors,
so this runs without torch or a GPU."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("cutlass")

from warpsched.kernels.attention import paged, split_kv, varlen  # noqa: E402
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402

DTYPES = ["torch.bfloat16", "torch.float16", "torch.float32", "torch.int32", "torch.int64", "weird"]


class _Fake:
    def __init__(self, shape, dtype, cuda=True, contiguous=True):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, "cuda" if cuda else "cpu"
        self._contiguous = contiguous

    def is_contiguous(self):
        return self._contiguous


def _junk(r):
    """A random argument: a fake tensor of random rank, sizes and dtype, or a non-tensor."""
    kind = r.random()
    if kind < 0.1:
        return r.choice([None, 3, "q", 2.5, [1, 2], object()])
    shape = [r.choice([0, 1, 2, 3, 5, 64, 128, 256, 96]) for _ in range(r.choice([0, 1, 2, 3, 4, 5]))]
    return _Fake(shape, r.choice(DTYPES), cuda=r.random() > 0.1, contiguous=r.random() > 0.1)


@pytest.mark.parametrize("seed", range(40))
def test_varlen_and_paged_checks_answer_every_input_with_a_named_error(seed):
    r = random.Random(seed)
    for _ in range(50):
        for check, n in ((varlen.check_args, 5), (paged.check_args, 5)):
            args = [_junk(r) for _ in range(n)]
            try:
                check(*args)
            except AttentionConfigError as e:
                assert str(e) and any(w in str(e) for w in ("q", "k", "v", "cu_seqlens", "page", "cache", "head"))


@pytest.mark.parametrize("seed", range(10))
def test_split_counts_and_kernel_options_answer_every_input_with_a_named_error(seed):
    r = random.Random(seed)
    values = [None, -1, 0, 1, 2, 7, 128, 129, 1.5, True, "4", (2, 3), [1]]
    for _ in range(100):
        n, sk = r.choice(values), r.choice([1, 100, 128, 5000])
        try:
            got = split_kv.check_splits(n, sk, 128)
            assert got is None or 1 <= got <= split_kv.MAX_SPLITS
        except AttentionConfigError as e:
            assert "num_splits=" in str(e)
        options = {name: r.choice([False, True, None, 0, 2]) for name in
                   r.sample(["split_kv", "varlen", "paged", "tma_store_o", "o_buffer", "unit_overlap", "q_stages",
                             "causal", "causal_pairs", "persistent", "lpt_heads", "k_ahead", "early_rescale",
                             "max_chains", "overlap", "try_waits"], r.randrange(1, 6))}
        if "lpt_heads" in options and r.random() < 0.5:
            options["lpt_heads"] = r.choice([-3, 1, 8, 2.0, "8", 10 ** 6])
        try:
            att.FlashAttention(head_dim=r.choice([64, 128, 256]), **options)
        except AttentionConfigError as e:
            assert "=" in str(e)


BWD_OPTIONS = ["shared_ds", "wg_order", "overlap_scores", "overlap_dq", "tma_stats", "tma_store_dkv", "varlen",
               "deterministic", "dq_stages", "qdo_stages", "early_stats", "causal", "lpt", "lpt_heads", "flat_dq",
               "block_m"]
BLOCK_M = [64, 80, 96, 128, None, True]
# the 80-row kernel's options (one random option of BWD_OPTIONS then changed): most single changes are refused
M80 = {"shared_ds": True, "flat_dq": True, "tma_stats": True, "dq_stages": 1, "block_m": 80}


@pytest.mark.parametrize("seed", range(20))
def test_backward_options_build_a_safe_program_or_answer_with_a_named_error(seed):
    """Random sets of the backward's options: the kernel object is refused with an AttentionConfigError that
    names the option, or its program builds SAFE, or the build is rejected with a finding that says how to
    fix it (a ring past the SMEM); never another exception."""
    from warpsched import ValidationError
    from warpsched.kernels.attention import backward as ab

    r = random.Random(seed)
    for _ in range(5):
        options = {name: r.choice(BLOCK_M if name == "block_m" else [False, True, None, 0, 1, 2, 3])
                   for name in r.sample(BWD_OPTIONS, r.randrange(1, 7))}
        if r.random() < 0.3:
            name = r.choice(BWD_OPTIONS)
            options = dict(M80, **{name: r.choice(BLOCK_M if name == "block_m" else [False, True, None, 1, 2])})
        try:
            g = ab.FlashAttentionBackward(head_dim=r.choice([64, 128, 256]), **options)
        except AttentionConfigError as e:
            assert "=" in str(e), (options, str(e))
            continue
        try:
            mgr = ab.build(g, verbose=False, progress=False, cache_verdict=False)
        except ValidationError as e:
            assert "fix:" in str(e), (options, str(e))
            continue
        assert mgr.result.checker.verdict == "SAFE", options


@pytest.mark.parametrize("seed", range(10))
def test_the_entry_points_name_an_argument_that_is_not_a_tensor(seed):
    """``attention``, ``attention_backward`` and ``attention_varlen`` read shapes and strides for their plan lookups
    before their checks:
    an argument that is not a tensor must still get the checks' named error, never an AttributeError."""
    from warpsched.kernels.attention import backward_host as bwd
    from warpsched.kernels.attention import host

    r = random.Random(seed)
    for _ in range(30):
        for entry, n in ((host.attention, 3), (bwd.attention_backward, 6), (varlen.attention_varlen, 5)):
            args = [_junk(r) for _ in range(n)]
            args[r.randrange(n)] = r.choice([None, 3, "q", 2.5, [1, 2], object()])
            if entry is varlen.attention_varlen:
                args.append(r.choice([0, 16, 128]))  # max_seqlen_q
            with pytest.raises(AttentionConfigError):
                entry(*args, causal=r.random() < 0.5)


def test_attention_names_operands_that_are_not_4d_before_reading_their_shapes():
    """ops.attention's plan lookup and GQA packing read q / k / v shapes first: a 0-D or 3-D tensor gets the
    4-dimension refusal, not an IndexError from inside."""
    from _fake_tensor import FakeTensor
    from warpsched.kernels.attention import host

    four = FakeTensor((1, 2, 16, 64))
    for q, k, v in ((FakeTensor(()), FakeTensor(()), four), (four, FakeTensor((2, 16, 64)), four)):
        with pytest.raises(AttentionConfigError, match="expected 4 dimensions"):
            host.attention(q, k, v)

