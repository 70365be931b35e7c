"""``grid3d``: the dense backward launched on a (key blocks, K/V heads, batches) grid, its unit's coordinates read
from the block index. With the 1-D grid, the key block is the block index modulo the key-block count, a run-time
division that ptxas recomputes inside the step loop (an integer division by ``MUFU.RCP`` and a dozen instructions a
step) rather than hold in a register. The program is the 1-D grid's (same fingerprint, SAFE), the PTX loses its
divisions, and the orders it cannot serve are refused by name. What it is worth on the GPU: docs/attention.md ("At
locked clocks")."""
from __future__ import annotations

import re

import pytest

from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as bh
from warpsched.kernels.attention.config import switches_on
from warpsched.kernels.attention.forward import AttentionConfigError

QUIET = {"verbose": False}


def _divisions(ptx):
    return len(re.findall(r"^\s*(?:div|rem)\.[su]32", ptx, flags=re.M))


@pytest.mark.parametrize("head_dim,causal", [(64, True), (64, False), (128, True), (128, False), (256, True)])
def test_same_program_and_recorded(head_dim, causal):
    opts = dict(bh.default_options(head_dim, full=not causal), grid3d=False)
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **dict(opts, grid3d=True))
    plain = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **opts)
    assert ab.build(g, **QUIET).fingerprint == ab.build(plain, **QUIET).fingerprint
    assert "grid3d" in switches_on(g) and "grid3d" not in switches_on(plain)


@pytest.mark.parametrize("extra,named", [({"deterministic": True}, "deterministic=True"),
                                         ({"lpt": True}, "lpt=True"), ({"dq_finish": True}, "dq_finish=True")])
def test_orders_it_cannot_serve_are_refused(extra, named):
    with pytest.raises(AttentionConfigError, match=re.escape(named)) as e:
        ab.FlashAttentionBackward(head_dim=128, causal=True, **dict(bh.default_options(128), grid3d=True, **extra))
    assert "grid3d=False" in str(e.value)


def test_the_kernel_divides_less():
    """Head dim 128, not causal: the 1-D grid's kernel has 13 integer divisions / remainders in its PTX, 3 are left
    (the key-block count and the load warp's step order); the block's y / z indices are read instead."""
    ptx = bh.compile_for_cpu(head_dim=128, causal=False, **dict(bh.default_options(128), grid3d=True)).artifacts.PTX
    assert _divisions(ptx) <= 3
    assert "%ctaid.y" in ptx and "%ctaid.z" in ptx


@pytest.mark.parametrize("head_dim,causal,extra,taken", [
    (64, True, {}, True), (64, False, {}, True),            # head dim 64: causal or not
    (128, False, {}, True), (128, True, {}, False),         # head dim 128: non-causal only (causal measured slower)
    (64, True, {"window_size": (100, 0)}, True),            # a mask keeps the block-index coordinates
    (64, True, {"deterministic": True}, False),             # its turns count units by their linear index
    (128, False, {"deterministic": True}, False),
    (256, False, {}, False)])
def test_which_calls_get_it_by_default(head_dim, causal, extra, taken):
    """A call without options gets ``grid3d`` where it measured faster, never with an order it cannot serve, and the
    kernel it picks is built (the refusals above would raise here)."""
    args = dict(dict(window_size=None, mask_mod=None, softcap=None, deterministic=False), **extra)
    options, key = bh._options_and_key("bfloat16", head_dim, causal, {}, args["window_size"], args["mask_mod"],
                                       args["softcap"], args["deterministic"])
    assert bool(options.get("grid3d")) is taken and (("grid3d", True) in key[3]) is taken
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **options)
    assert g.grid3d is taken
    assert not bh.default_options(head_dim, varlen=True).get("grid3d")  # the packed kernel's units are a table
