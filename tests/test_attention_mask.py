"""The causal mask's one assumption (attention.register_math.apply_mask): a thread's accumulator
coordinates in an S tile are thread 0's plus the thread's first element's, so each element's
offset from the thread's first one is static (an immediate in the compare). Checked on the
layouts the kernel builds, every thread of the warp group, every K/V tile width, both dtypes."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import forward as att  # noqa: E402


@pytest.mark.parametrize("dtype", ["BFloat16", "Float16"])
@pytest.mark.parametrize("head_dim,block_n", [(64, 64), (64, 128), (128, 128), (64, 176), (64, 192), (256, 64)])
def test_s_tile_coordinates_are_thread_0s_plus_the_first_elements(dtype, head_dim, block_n):
    import cutlass
    import cutlass.cute as cute

    g = att.FlashAttention(dtype=getattr(cutlass, dtype), head_dim=head_dim, block_n=block_n)
    seen = []

    @cute.jit
    def trace():
        qk_mma, _ = g._mmas()
        identity = cute.make_identity_tensor((att.WG_ROWS, block_n))
        base = qk_mma.get_slice(0).partition_C(identity)
        for tid in cutlass.range_constexpr(0, 128, 5):
            coords = qk_mma.get_slice(tid).partition_C(identity)
            for i in cutlass.range_constexpr(cute.size(coords)):
                seen.append((tid, i, tuple(coords[i]), tuple(coords[0]), tuple(base[i])))

    cute.compile(trace, options=_common.ptx_options("sm_90a"))  # traced, never run
    assert seen and all(isinstance(x, int) for x in seen[0][2] + seen[0][4])
    assert seen[0][4] == (0, 0)  # thread 0's first element is the tile's origin
    wrong = [(t, i) for t, i, c, first, b in seen if c != (first[0] + b[0], first[1] + b[1])]
    assert not wrong, wrong[:4]
    per_thread = len(seen) // len({t for t, *_ in seen})
    assert per_thread == att.WG_ROWS * block_n // 128  # every element of the thread's fragment
    # the threads together cover the tile once
    cover = {c for t, i, c, _, _ in seen}
    assert len(cover) == len(seen)
