"""Head dim 256 on the CPU: what ``ops.attention`` compiles for it (64-key K/V tiles, one Q stage,
O stored from registers: what fits the SMEM next to two K/V stages), traced and compiled for
sm_90a with its program SAFE, and the PTX's WGMMA shapes and counts pinned."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host  # noqa: E402
from warpsched.verify.verdicts import VERDICTS  # noqa: E402


@pytest.mark.parametrize("causal", [False, True])
def test_hd256_tuned_options_fit_the_smem(causal):
    options = host.tuned_options(256, causal)
    assert (options["q_stages"], options["tma_store_o"], options["o_buffer"], options["block_n"]) == (1, False, False, 64)
    assert options.get("causal_pairs", False) == causal
    g = att.FlashAttention(head_dim=256, causal=causal, **options)
    assert g.kv_stages == 2 and g.q_bytes == 128 * 256 * 2 and g.kv_bytes == 64 * 256 * 2
    assert g.q_bytes + 2 * 2 * g.kv_bytes + 1024 <= 232448  # Q + two K and two V stages + barriers: the sm_90 SMEM


@pytest.mark.parametrize("causal", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_hd256_compiles_and_is_safe(causal):
    ptx = host.compile_for_cpu(head_dim=256, causal=causal, **host.tuned_options(256, causal)).artifacts.PTX
    assert VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"
    # S = Q K^T: K = 256 is 16 WGMMA k-steps of m64n64; O += P V: a 64-key tile is 4 k-steps of m64n256;
    # each at two sites (S: before the loop and in it; P V: in the loop and after it), per warp group
    want = {"wgmma.mma_async.sync.aligned.m64n64k16": 2 * 16 * 2, "wgmma.mma_async.sync.aligned.m64n256k16": 2 * 4 * 2,
            "setmaxnreg.inc.sync.aligned.u32 \t240": 1}
    assert _common.count_ptx(ptx, want) == want
