"""80-row Q blocks in the backward at head dim 128 (``block_m=80``, FA3's / FA4's non-causal tile): dQ is
computed transposed (dQ^T = K^T dS^T: 80 is no WGMMA M), staged flat in the accumulator's register order and
put back by a transposed post-pass.

Three things must agree for dQ to land in place: the swapped GEMM's operand views are the same bytes as the
tiles TMA and ``write_ds`` wrote (SMEM offsets compared here for every element), the register order
``stage_dq`` writes (CuTe's own partition of a 64 x 80 accumulator, read at trace time), and the host's
permutation (``flat_coords`` / ``FLAT_TO_ROWS_T`` / ``DQConvert(rows=80)``). The kernel is compiled for
sm_90a on the CPU and its PTX read; its numbers are checked on the GPU (``bench/attention_bwd_check.py
--variants m80``).
"""
from __future__ import annotations

import re

import cutlass
import cutlass.cute as cute
import pytest

from warpsched.kernels import _host
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention import backward_post as post
from warpsched.kernels.attention.forward import AttentionConfigError

M80 = dict(host.default_options(128), block_m=80, dq_stages=1)


def _offsets(layout, shape, transpose=False):
    """{(i, j, stage): SMEM offset} of a swizzled layout (plain Python, called while tracing);
    ``transpose``: keyed (j, i, stage), to compare a (rows, D) view with a (D, rows) one."""
    return {((j, i, k) if transpose else (i, j, k)): layout((i, j, k))
            for k in range(shape[2]) for i in range(shape[0]) for j in range(shape[1])}


def _views(out):
    g = ab.FlashAttentionBackward(head_dim=128, **M80)
    lay, m, st = g._layouts(), g.block_m, g.qdo_stages
    # Q / dO: the (queries, D) tile TMA writes and the (D, queries) view the dV / dK GEMMs read
    out["q"] = _offsets(lay["sQ"], (m, 128, st)) == _offsets(lay["sQt"], (128, m, st), transpose=True)
    # K^T as the swapped dQ GEMM's A (D half, keys, 2 * key half + D half) and as the plain kernel's B
    out["kt"] = _offsets(lay["sKtA"], (64, 64, 4)) == _offsets(lay["sKt"], (64, 64, 4))
    # dS: (queries, keys) as the swapped GEMM's B, as the plain one's A, and (keys, queries) as write_ds stores it
    ds = _offsets(lay["sdS"], (m, 64, 1))
    out["ds"] = ds == _offsets(lay["sdSB"], (m, 64, 1))
    out["dst"] = ds == _offsets(lay["sdSt"], (64, m, 1), transpose=True)


@cute.jit
def _probe(fill: cutlass.Constexpr, out: cutlass.Constexpr):
    fill(out)


def _traced(monkeypatch, fill):
    """What ``fill`` (plain Python) records while a Hopper compile traces it: layouts and MMA partitions exist
    only there."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    out = {}
    cute.compile(_probe, fill, out, options=_host.ptx_options("sm_90a"))
    return out


def test_the_swapped_gemms_operands_are_the_bytes_the_tiles_were_written_as(monkeypatch):
    assert _traced(monkeypatch, _views) == {"q": True, "kt": True, "ds": True, "dst": True}


def _fill(seen):
    mma = post.DQConvert(cutlass.BFloat16, 128, 64, 1, rows=80)._mma()
    for t in range(post.THREADS):
        c = mma.get_slice(t).partition_C(cute.make_identity_tensor((post.ROWS, 80)))
        seen[t] = [c[v] for v in range(cute.size(c))]


def test_a_transposed_flat_tile_is_the_register_order_of_the_64_by_80_accumulator(monkeypatch):
    seen = _traced(monkeypatch, _fill)
    covered = set()
    for t, coords in seen.items():
        assert len(coords) == 40  # 64 x 80 fp32 over 128 threads
        for v, (d, q) in enumerate(coords):  # accumulator rows are columns of D, its columns queries
            index = (v // 4) * 4 * post.THREADS + 4 * t + v % 4  # stage_dq: chunk v // 4, slot t, value v % 4
            assert post.flat_coords(index, 64, 1, rows=80) == (q, d)
            covered.add(index)
    assert covered == set(range(80 * 64))


def test_the_hosts_transposed_permutation_puts_every_flat_value_at_its_row_and_column():
    import numpy as np

    shape, rows, dq_cols = (2, 3, 160, 128), 80, 64
    index = np.arange(np.prod(shape)).reshape(post.flat_view_shape(shape, dq_cols, 1, rows))
    placed = index.transpose(post.FLAT_TO_ROWS_T).reshape(shape)
    tile = rows * dq_cols
    for b, h, r, c in [(0, 0, 0, 0), (1, 2, 159, 127), (0, 1, 85, 33), (1, 0, 9, 69), (1, 1, 79, 64)]:
        t, within = divmod(int(placed[b, h, r, c]), tile)
        col_block, rest = t % 2, t // 2
        row_block, bh = rest % 2, rest // 2
        assert divmod(bh, shape[1]) == (b, h)
        q, d = post.flat_coords(within, dq_cols, 1, rows=rows)
        assert (row_block * rows + q, col_block * dq_cols + d) == (r, c)


@pytest.mark.parametrize("causal", [False, True])
def test_the_80_row_kernel_is_safe_and_runs_80_wide_gemms(causal):
    from warpsched.verify.verdicts import VERDICTS

    ptx = host.compile_for_cpu(head_dim=128, causal=causal, **M80).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=128, causal=causal, **M80)
    assert fingerprint == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    gemms = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    # per warp group (each has its own code): S^T, dP^T (8 k-blocks over D each) and the swapped dQ^T (8 over
    # two key halves) are 80 wide; dV, dK (5 k-blocks of 16 queries each) are 128 wide
    assert gemms.count("m64n80k16") == 2 * (8 + 8 + 8) and gemms.count("m64n128k16") == 2 * (5 + 5)
    # the LSE / delta stages start on 128-byte boundaries: 96 floats a stage
    assert g.stats_stride == 96 and g.split_stats


def test_the_transposed_post_pass_compiles_with_16_byte_loads_and_stores():
    ptx = host.compiled_post(cutlass.BFloat16, 128, 64, 1, 80, arch="sm_90a").artifacts.PTX
    loads = re.findall(r"ld\.global[.\w]*", ptx)
    assert loads and all(".v4" in x for x in loads), loads
    assert re.findall(r"stmatrix[.\w]*\.trans", ptx)
    assert len(re.findall(r"st\.global\.v4", ptx)) == 5  # 80 rows x 64 columns, 16 rows a pass


@pytest.mark.parametrize("bad, match", [
    (dict(dq_stages=2), "dq_stages=1"),
    (dict(varlen=True), "unpacked batches"),
    (dict(flat_dq=False), "flat_dq=True"),
    (dict(deterministic=True), "deterministic=True"),
])
def test_80_row_blocks_refuse_what_they_do_not_support_and_name_the_fix(bad, match):
    with pytest.raises(AttentionConfigError, match=re.escape(match)):
        ab.FlashAttentionBackward(head_dim=128, **dict(M80, **bad))
    with pytest.raises(AttentionConfigError, match="block_m=64"):
        ab.FlashAttentionBackward(head_dim=64, **dict(M80, shared_ds=True))
