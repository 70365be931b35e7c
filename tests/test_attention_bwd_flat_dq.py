"""``flat_dq``: the backward's dQ tiles in register order (backward_math.stage_dq, backward_post).

The layout is only right if three places agree: the WGMMA accumulator's (row, column) per register, the
order ``stage_dq`` writes the registers in, and the permutation the host's conversion undoes
(``backward_post.flat_coords`` / ``flat_to_rows`` / ``DQConvert``). The first is read here from CuTe's own
partition at trace time; the kernels are compiled for sm_90a on the CPU and their PTX read.
"""
from __future__ import annotations

import re

import cutlass
import cutlass.cute as cute
import pytest

from warpsched.kernels import _host
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention import backward_post as post
from warpsched.kernels.attention.forward import AttentionConfigError

GEOMETRIES = [(64, 1), (128, 2), (128, 1)]  # (dq_cols, parts): hd 64 / 128 (shared_ds), hd 256, hd 128 plain


def _fill(seen, part_cols):
    """Plain Python, called while tracing: every thread's (row, column) per accumulator register."""
    mma = post.DQConvert(cutlass.BFloat16, 128, part_cols, 1)._mma()
    for t in range(post.THREADS):
        c = mma.get_slice(t).partition_C(cute.make_identity_tensor((post.ROWS, part_cols)))
        seen[t] = [c[v] for v in range(cute.size(c))]


@cute.jit
def _register_coords(part_cols: cutlass.Constexpr, seen: cutlass.Constexpr):
    _fill(seen, part_cols)


@pytest.mark.parametrize("dq_cols, parts", GEOMETRIES)
def test_flat_order_is_the_register_order_of_the_wgmma_accumulator(monkeypatch, dq_cols, parts):
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")  # the probe builds a Hopper WGMMA
    part_cols = dq_cols // parts
    seen = {}
    cute.compile(_register_coords, part_cols, seen, options=_host.ptx_options("sm_90a"))  # traced: seen filled
    covered = set()
    for p in range(parts):
        for t, coords in seen.items():
            for v, (row, col) in enumerate(coords):
                # stage_dq: register v of thread t -> chunk v // 4 of the part, 16-byte slot t, value v % 4
                index = p * post.ROWS * part_cols + (v // 4) * 4 * post.THREADS + 4 * t + v % 4
                assert post.flat_coords(index, dq_cols, parts) == (row, p * part_cols + col)
                covered.add(index)
    assert covered == set(range(post.ROWS * dq_cols))


@pytest.mark.parametrize("head_dim, causal", [(64, True), (128, True), (128, False), (256, True)])
def test_flat_dq_kernels_are_safe_and_stage_with_16_byte_stores(head_dim, causal):
    from warpsched.kernels.attention import backward as ab
    from warpsched.verify.verdicts import VERDICTS

    opts = dict(host.default_options(head_dim), flat_dq=True)
    plain_opts = dict(host.default_options(head_dim), flat_dq=False)
    plain = host.compile_for_cpu(head_dim=head_dim, causal=causal, **plain_opts).artifacts.PTX
    flat = host.compile_for_cpu(head_dim=head_dim, causal=causal, **opts).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, **opts)
    assert fingerprint == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    # the reduce-add tiles the flat buffer (3-D view) instead of (S, D, H, B)
    assert "cp.reduce.async.bulk.tensor.3d" in flat and "cp.reduce.async.bulk.tensor.4d" in plain
    v4 = lambda ptx: len(re.findall(r"st\.shared\.v4\.b32", ptx))  # noqa: E731
    assert v4(flat) > v4(plain)


def test_the_post_pass_loads_16_bytes_and_compiles_for_each_geometry():
    for dq_cols, parts in GEOMETRIES:
        head_dim = 256 if parts == 2 else dq_cols if dq_cols == 128 else 128
        ptx = host.compiled_post(cutlass.BFloat16, head_dim, dq_cols, parts, arch="sm_90a").artifacts.PTX
        loads = re.findall(r"ld\.global[.\w]*", ptx)
        assert loads and all(".v4" in x for x in loads), loads


def test_flat_dq_with_varlen_needs_padded_rows_and_says_so():
    from warpsched.kernels.attention.backward import FlashAttentionBackward

    with pytest.raises(AttentionConfigError, match="tma_stats=True, or flat_dq=False"):
        FlashAttentionBackward(head_dim=128, varlen=True, flat_dq=True, tma_stats=False)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_packed_kernel_with_flat_dq_is_safe_and_its_post_pass_compiles(head_dim):
    """varlen: a sequence's flat dQ tiles sit from its padded block on (as its LSE / delta), and
    ``DQConvertVarlen`` writes each back to the sequence's packed rows."""
    from warpsched.kernels.attention import varlen
    from warpsched.verify.verdicts import VERDICTS

    opts = dict(host.default_options(head_dim, varlen=True), flat_dq=True)
    ptx = varlen.compile_backward_for_cpu(head_dim=head_dim, causal=True, **opts).artifacts.PTX
    assert VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor\.3d", ptx)) == 2
    cols, parts = (128, 2) if head_dim == 256 else (64, 1)
    post = host.compiled_varlen_post(cutlass.BFloat16, head_dim, cols, parts, arch="sm_90a").artifacts.PTX
    assert len(re.findall(r"st\.global\.v4", post)) == 4 * parts


@pytest.mark.parametrize("dq_cols, parts, head_dim", [(64, 1, 128), (128, 2, 256), (64, 1, 64), (128, 1, 128)])
def test_the_hosts_permutation_puts_every_flat_value_at_its_row_and_column(dq_cols, parts, head_dim):
    """``flat_to_rows``'s view and permutation (numpy here: the same reshape / transpose semantics as torch's)
    take the value at each flat index to the (row, column) ``flat_coords`` gives it, tile by tile."""
    import numpy as np

    shape = (2, 3, 2 * post.ROWS, head_dim)
    index = np.arange(np.prod(shape)).reshape(post.flat_view_shape(shape, dq_cols, parts))
    rows = index.transpose(post.FLAT_TO_ROWS).reshape(shape)
    tile = post.ROWS * dq_cols
    for b, h, r, c in [(0, 0, 0, 0), (1, 2, 127, head_dim - 1), (0, 1, 70, 33), (1, 0, 9, head_dim // 2 + 5)]:
        flat = int(rows[b, h, r, c])
        t, within = divmod(flat, tile)
        col_blocks = head_dim // dq_cols
        col_block, rest = t % col_blocks, t // col_blocks
        row_block, bh = rest % (shape[2] // post.ROWS), rest // (shape[2] // post.ROWS)
        assert divmod(bh, shape[1]) == (b, h)
        row, col = post.flat_coords(within, dq_cols, parts)
        assert (row_block * post.ROWS + row, col_block * dq_cols + col) == (r, c)


@pytest.mark.parametrize("boxes", [2, 4])
def test_a_flat_tile_can_be_added_as_several_tma_boxes(boxes):
    """``flat_boxes``: each warp group's tile added by that many TMA boxes (same bytes, same order in
    dQaccum, so the post-pass is unchanged); the program stays SAFE."""
    from warpsched.verify.verdicts import VERDICTS

    opts = dict(host.default_options(128), flat_dq=True, flat_boxes=boxes)
    ptx = host.compile_for_cpu(head_dim=128, causal=True, **opts).artifacts.PTX
    assert VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor\.3d", ptx)) == 2 * boxes  # two warp groups' tiles


def test_flat_boxes_without_flat_dq_is_refused():
    from warpsched.kernels.attention.backward import FlashAttentionBackward

    with pytest.raises(AttentionConfigError, match="flat_boxes=2 with flat_dq=False"):
        FlashAttentionBackward(head_dim=128, flat_boxes=2)


def test_stage_first_is_the_same_program_with_the_same_gemms():
    """``stage_first`` only changes how the S / dP GEMMs address the Q / dO stage: the checked program and
    the WGMMA count are the default's."""
    from warpsched.kernels.attention import backward as ab
    from warpsched.verify.verdicts import VERDICTS

    base = host.compile_for_cpu(head_dim=128, causal=True, **host.default_options(128)).artifacts.PTX
    opts = dict(host.default_options(128), stage_first=True)
    ptx = host.compile_for_cpu(head_dim=128, causal=True, **opts).artifacts.PTX
    assert VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"
    g = ab.FlashAttentionBackward(head_dim=128, causal=True, **opts)
    assert VERDICTS.looked_up[-1] == ab.build(g, verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    count = lambda p: len(re.findall(r"wgmma\.mma_async", p))  # noqa: E731
    assert count(ptx) == count(base) > 0
