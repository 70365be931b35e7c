"""``mask_first``: the backward's P mask written on the exponent (-inf) before the exp2, not on P (0) after it. The
mask's branch then comes before the exp2 run, and the exp2 instructions share one basic block with dS's math (dP -
delta, the products, the 16-bit packing), which ptxas interleaves with them; with the mask after, the branch split
the two and the MUFU instructions issued back to back, each warp stalled a fixed 8 cycles on the next. Same program
(the change is inside one piece of work), the head dim 128 default, opt-in elsewhere (slower at head dim 64). What
it is worth on the GPU: docs/attention.md ("At locked clocks")."""
from __future__ import annotations

import re

import pytest

from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as bh
from warpsched.kernels.attention.config import switches_on

QUIET = {"verbose": False}


def test_the_default_where_it_was_measured_faster():
    assert bh.default_options(128).get("mask_first") and bh.default_options(128, full=True).get("mask_first")
    assert bh.default_options(128, varlen=True).get("mask_first")
    assert not bh.default_options(128, deterministic=True).get("mask_first")  # the order its checks ran with
    options, _ = bh._options_and_key("bfloat16", 128, True, {}, None, None, None, True)
    assert "mask_first" not in options and options["deterministic"]
    assert not bh.default_options(64).get("mask_first") and not bh.default_options(64, full=True).get("mask_first")
    assert not bh.default_options(256).get("mask_first")


@pytest.mark.parametrize("head_dim,causal", [(64, True), (128, True), (128, False)])
def test_same_program_and_recorded(head_dim, causal):
    opts = dict(bh.default_options(head_dim), mask_first=False)
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **dict(opts, mask_first=True))
    plain = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **opts)
    assert ab.build(g, **QUIET).fingerprint == ab.build(plain, **QUIET).fingerprint
    assert "mask_first" in switches_on(g) and "mask_first" not in switches_on(plain)


def _exp2_run_then_branch(ptx):
    """Whether the first step's exp2 run is followed by a compiler branch before the dS tile's warp-group barrier:
    the PTX from the first ``ex2.approx`` to the next ``bar.sync``, without the inline-asm blocks (an mbarrier wait's
    own retry loop)."""
    start = ptx.index("ex2.approx")
    segment = ptx[start:ptx.index("bar.sync", start)]
    segment = re.sub(r"// begin inline asm.*?// end inline asm", "", segment, flags=re.S)
    return re.search(r"^\s*(?:@%p\d+\s+)?bra", segment, flags=re.M) is not None


def test_the_exp2_run_shares_its_block_with_the_ds_math():
    """Causal head dim 128: with the mask after the exp2, a branch (the diagonal block's mask) sits between the
    exp2 run and dS; with ``mask_first`` the branch comes before the first exp2 and none follows it."""
    opts = bh.default_options(128)
    after = bh.compile_for_cpu(head_dim=128, causal=True, **dict(opts, mask_first=False)).artifacts.PTX
    first = bh.compile_for_cpu(head_dim=128, causal=True, **dict(opts, mask_first=True)).artifacts.PTX
    assert _exp2_run_then_branch(after)
    assert not _exp2_run_then_branch(first)
    assert "0fFF800000" in first  # the -inf the mask writes on the exponent
