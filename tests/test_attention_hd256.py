"""Head dim 256 on the CPU: what ``ops.attention`` compiles for it (80-key K/V tiles, one Q stage,
O stored by TMA through it: what fits the SMEM next to two K/V stages), traced and compiled for
sm_90a with its program SAFE, and the PTX's WGMMA shapes and counts, its exp2 count (each P once)
and its P conversion (16-bit pairs) pinned."""
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
    assert (options["q_stages"], options["tma_store_o"], options["o_buffer"], options["block_n"]) == (1, True, False, 80)
    assert options.get("causal_pairs", False) == causal
    g = att.FlashAttention(head_dim=256, causal=causal, **options)
    assert g.kv_stages == 2 and g.q_bytes == 128 * 256 * 2 and g.kv_bytes == 80 * 256 * 2
    assert g.o_through_q and g.pinned_exp2
    assert g.q_bytes + 2 * 2 * g.kv_bytes + 1024 <= 232448  # Q + two K and two V stages + barriers: the sm_90 SMEM


@pytest.mark.parametrize("causal", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_hd256_compiles_and_is_safe(causal):
    ptx = host.compile_for_cpu(head_dim=256, causal=causal, **host.tuned_options(256, causal)).artifacts.PTX
    assert VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"
    # S = Q K^T: K = 256 is 16 WGMMA k-steps of m64n80; O += P V: an 80-key tile is 5 k-steps of m64n256;
    # each at two sites (S: before the loop and in it; P V: in the loop and after it), per warp group
    want = {"wgmma.mma_async.sync.aligned.m64n80k16": 2 * 16 * 2, "wgmma.mma_async.sync.aligned.m64n256k16": 2 * 5 * 2,
            "setmaxnreg.inc.sync.aligned.u32 \t240": 1}
    assert _common.count_ptx(ptx, want) == want
    # each P element's exp2 evaluated once (register_math.exp2_pinned): 4 softmax sites x (a thread's 40 P
    # values + its 2 rows' rescale factors); unpinned, the compiler evaluated 80 of them twice (248)
    assert ptx.count("ex2.approx") == 4 * (40 + 2)
    # P goes to 16 bits two values a register (register_math.store_p), never one by one (which cost two PRMTs
    # a register to pack for the P V WGMMA)
    assert "cvt.rn.bf16.f32" not in ptx and ptx.count("cvt.rn.bf16x2.f32") >= 4 * 20
