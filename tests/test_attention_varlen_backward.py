"""The packed attention backward (``ops.attention_varlen_backward``, ``FlashAttentionBackwardVarlen``): each key
block's steps are its own sequence's Q blocks that see it, the sequence-order table lists every (sequence, K/V
head, key block) once, the pre-pass puts each row where the kernel reads it, the program (and its proof) is the
dense backward's, and the kernels compile for sm_90a. On the H200: bench/attention_varlen.py (dQ, dK, dV against
fp64 through autograd)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from _varlen_cases import LENGTHS, _RANDOM, _offsets  # noqa: E402
from warpsched.kernels.attention import backward as ab  # noqa: E402
from warpsched.kernels.attention import live_units, varlen  # noqa: E402
from warpsched.kernels.attention.backward_host import default_options  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402


def _sequence_order_table(lengths_k, heads, block_n, garbage=-7):
    """A table SequenceOrderTable may write (ties between sequences in sequence order), its unwritten words
    past the count left as ``garbage``."""
    entries = live_units.reference_sequence_order(lengths_k, heads, block_n)
    words = [len(entries), 0] + [w for b, h, j in entries for w in (b, h << live_units.KEY_BITS | j)]
    size = live_units.backward_table_size(sum(lengths_k), len(lengths_k), heads, block_n)
    assert len(words) <= size
    return words + [garbage] * (size - len(words))


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (False, (100, 37))])
@pytest.mark.parametrize("lq,lk", LENGTHS)
def test_a_key_blocks_steps_are_its_sequences_q_blocks_that_see_it(causal, window, lq, lk, live):
    """Backward, packed: a key block's steps walk, per query head of its group, exactly the Q blocks of its
    own sequence with a query that sees one of its keys; a block past its sequence's keys has none. With
    ``live_units`` every key block that holds keys is exactly one unit, the sequences with more key blocks
    first, and a unit past the table's count (whatever its unwritten words hold) has no step and no keys."""
    g = (ab.FlashAttentionBackwardVarlenLive if live else ab.FlashAttentionBackwardVarlen)(
        head_dim=64, causal=causal, window_size=window)
    g.cu_q, g.cu_k = _offsets(lq), _offsets(lk)
    table = _sequence_order_table(lk, 2, g.block_n) if live else None
    g.grid_setup(max(lq), max(lk), 4, 2, len(lq), table)
    left, right = (None, 0) if causal and window is None else (window or (None, None))
    seen = []
    for unit in range(g.num_units):
        n_block, kv_head, b = g.unit_coords(unit)
        if n_block * g.block_n < lk[b]:
            seen.append((b, kv_head, n_block))
        elif live:
            assert unit >= table[0] and g.steps_of(unit) == 0
        if live and unit >= table[0]:
            assert (n_block, kv_head, b) == (g.n_blocks, 0, 0)
        assert g.seq_bounds(unit) == (g.cu_q[b], lq[b], g.cu_k[b], lk[b])
        keys = range(n_block * g.block_n, min(lk[b], (n_block + 1) * g.block_n))

        def sees(r):
            lo = 0 if left is None else max(0, r - left)
            hi = lk[b] - 1 if right is None else min(lk[b] - 1, r + right)
            return any(lo <= key <= hi for key in keys)
        blocks = sorted({r // g.block_m for r in range(lq[b]) if sees(r)})
        steps = [g.step_coords(unit, s) for s in range(g.steps_of(unit))]
        want = [(kv_head * 2 + h, m, b) for h in range(2) for m in blocks]
        assert steps == want, (unit, steps[:3], want[:3])  # a block past its sequence's keys: no step
    assert sorted(seen) == sorted(set(seen)) == [(b, h, j) for b, n in enumerate(lk) for h in range(2)
                                                 for j in range(-(-n // g.block_n))]
    if live:
        blocks = [-(-lk[b] // g.block_n) for b, _, _ in seen]
        assert blocks == sorted(blocks, reverse=True)  # the sequences with more key blocks first
        assert len(seen) == table[0] and g.num_units >= table[0]


@pytest.mark.parametrize("lengths", [[0, 1, 300, 77, 513], [64, 64, 0, 0, 1], [129], [0, 0, 5], [700, 700, 3]]
                         + _RANDOM)
def test_the_sequence_order_lists_each_sequences_key_blocks_together_in_head_order(lengths):
    """The Python twin of SequenceOrderTable: every (sequence, K/V head, key block) with keys once, within a
    sequence head after head and key blocks in order (the dense grid's head-major order), within the bound
    the host sizes the table from."""
    entries = live_units.reference_sequence_order(lengths, 3, 128)
    assert sorted(entries) == [(b, h, j) for b, n in enumerate(lengths) for h in range(3) for j in range(-(-n // 128))]
    for b in {e[0] for e in entries}:
        mine = [i for i, e in enumerate(entries) if e[0] == b]
        assert mine == list(range(mine[0], mine[0] + len(mine)))
        assert [entries[i][1:] for i in mine] == sorted(entries[i][1:] for i in mine)
    assert len(entries) <= 3 * live_units.max_blocks(sum(lengths), len(lengths), 128)
    assert all(live_units.decode_entry(b, h << live_units.KEY_BITS | j) == (b, h, j) for b, h, j in entries)


def test_live_units_are_for_the_packed_backward_in_its_own_order():
    for kw, word in ((dict(), "varlen=False"), (dict(varlen=True, lpt=True), "lpt=True")):
        with pytest.raises(AttentionConfigError, match=f"live_units=True with .*{word}"):
            ab.FlashAttentionBackward(head_dim=128, tma_stats=True, live_units=True, **kw)


def test_the_sequence_order_table_and_the_live_backward_compile_for_sm90a():
    ptx = live_units.compiled_sequence_order(128, arch="sm_90a").artifacts.PTX
    assert "atom.shared" in ptx or "atom.add" in ptx or "red.shared" in ptx  # the level histogram
    options = dict(default_options(128, varlen=True), live_units=True)
    ptx = varlen.compile_backward_for_cpu(head_dim=128, causal=True, **options).artifacts.PTX
    assert "cp.reduce.async.bulk.tensor" in ptx


def test_the_varlen_backward_is_the_backwards_program():
    for hd, causal in ((128, True), (64, False)):
        options = default_options(hd, varlen=True)
        options.pop("zero_in_prep")  # the host's
        assert options.pop("live_units")  # the packed default: FlashAttentionBackwardVarlenLive's own
        plain = ab.build(ab.FlashAttentionBackward(head_dim=hd, causal=causal, **dict(options, unit_in_regs=False)),
                         verbose=False, exhaustive_deadlock_race_check=False)
        for cls in (ab.FlashAttentionBackwardVarlen, ab.FlashAttentionBackwardVarlenLive):
            packed = ab.build(cls(head_dim=hd, causal=causal, **options), verbose=False,
                              exhaustive_deadlock_race_check=False)
            assert packed.fingerprint == plain.fingerprint  # the backward's shipped proof covers it


def test_the_backward_defaults_drop_the_unit_table_past_its_key_blocks():
    """The packed backward's defaults take live_units; past the key blocks its table numbers a sequence (millions of
    keys) they fall back to the plain packed kernel instead of refusing a call that passed no options, and a
    caller's own options are kept as given (the host refuses live_units there by name)."""
    limit = live_units.MAX_KEY_BLOCKS * 64
    assert varlen.backward_options(128, None, limit)["live_units"]
    assert "live_units" not in varlen.backward_options(128, None, limit + 1)
    rest = {k: v for k, v in varlen.backward_options(128, None, 1).items() if k != "live_units"}
    assert varlen.backward_options(128, None, limit + 1) == rest
    own = dict(default_options(128, varlen=True))
    assert varlen.backward_options(128, own, limit + 1)["live_units"]
    assert varlen.backward_options(64, None, 100, window_size=(16, 0))["window_size"] == (16, 0)


def test_the_varlen_backward_compiles_for_sm90a():
    ptx = varlen.compile_backward_for_cpu(head_dim=128, causal=True, **default_options(128, varlen=True)).artifacts.PTX
    assert "cp.reduce.async.bulk.tensor" in ptx  # dQ's TMA reduce-add into the packed accumulator


@pytest.mark.parametrize("block_m", [64, 128])
@pytest.mark.parametrize("lengths", [[0, 1, 300, 77, 513], [64, 64, 0, 0, 1], [129], [0, 0, 5]] + _RANDOM)
def test_stats_rows_is_where_the_varlen_pre_pass_puts_each_row(lengths, block_m):
    """``stats_rows`` (the LSE gradient's destination rows, computed on the device) against the rows
    ``VarlenStatsPrep`` writes, read off its indexing in Python: sequence b's row s at padded_first_block(start,
    b, block_m) * block_m + s; unique, inside ``padded_stats_rows``; unpadded, the row itself."""
    torch = pytest.importorskip("torch")
    from warpsched.kernels.attention.backward_units import padded_first_block

    cu = _offsets(lengths)
    want = [padded_first_block(cu[b], b, block_m) * block_m + s for b, n in enumerate(lengths) for s in range(n)]
    got = varlen.stats_rows(torch.tensor(cu, dtype=torch.int32), cu[-1], True, block_m).tolist()
    assert got == want and len(set(got)) == len(got)
    assert all(r < varlen.padded_stats_rows(cu[-1], len(lengths), block_m) for r in got)
    assert varlen.stats_rows(torch.tensor(cu, dtype=torch.int32), cu[-1], False).tolist() == list(range(cu[-1]))


def test_fold_dlse_subtracts_each_rows_gradient_from_its_delta():
    torch = pytest.importorskip("torch")

    lengths = [3, 0, 70]
    cu = torch.tensor(_offsets(lengths), dtype=torch.int32)
    rows = varlen.padded_stats_rows(73, 3)
    delta = torch.full((1, 2, rows), 5.0)
    dlse = torch.randn(2, 73)
    varlen.fold_dlse(delta, dlse, cu, True)
    at = varlen.stats_rows(cu, 73, True)
    torch.testing.assert_close(delta[0][:, at], 5.0 - dlse)
    untouched = torch.ones(rows, dtype=torch.bool)
    untouched[at] = False
    assert (delta[0][:, untouched] == 5.0).all()  # the padding rows keep the pre-pass's values


def test_unit_in_regs_reads_the_units_offsets_once():
    """unit_in_regs: the CTA's unit and its sequence's bounds are read at the top, not after every barrier wait
    (the same traced values reused: fewer global loads in the kernel); refused for unpacked batches."""
    import re

    options = default_options(128, varlen=True)
    plain = varlen.compile_backward_for_cpu(head_dim=128, causal=True, **dict(options, unit_in_regs=False)).artifacts.PTX
    held = varlen.compile_backward_for_cpu(head_dim=128, causal=True, **options).artifacts.PTX
    assert len(re.findall(r"ld\.global", held)) < len(re.findall(r"ld\.global", plain)) // 2
    with pytest.raises(AttentionConfigError, match="unit_in_regs=True with varlen=False"):
        ab.FlashAttentionBackward(head_dim=128, unit_in_regs=True)


def test_the_packed_default_options_compile_and_keep_the_backwards_program():
    """backward_host.default_options(D, varlen=True): the dense kernel's options on packed batches (TMA stores of dK / dV
    beside register stores for a sequence's partial last keys; 128-row Q blocks at head dim 64), the unit held
    in registers; the program is the dense one (its shipped proof), the pre-pass zeroing the flat dQ compiles."""
    import re

    import cutlass

    from warpsched.kernels.attention.backward_host import compiled_varlen_prep

    for hd in (64, 128):
        options = default_options(hd, varlen=True)
        assert options.pop("zero_in_prep") is True
        ptx = varlen.compile_backward_for_cpu(head_dim=hd, causal=True, **options).artifacts.PTX
        assert re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta", ptx) and "st.global" in ptx
        plain = ab.build(ab.FlashAttentionBackward(head_dim=hd, causal=True, **default_options(hd)), verbose=False,
                         exhaustive_deadlock_race_check=False)
        packed = ab.build(ab.FlashAttentionBackwardVarlen(head_dim=hd, causal=True, **options), verbose=False,
                          exhaustive_deadlock_race_check=False)
        assert packed.fingerprint == plain.fingerprint
    prep = compiled_varlen_prep(cutlass.BFloat16, 128, arch="sm_90a", block_m=128, zero_dq=True).artifacts.PTX
    assert "st.global.v4.f32" in prep or "st.global.v4.b32" in prep  # the accumulator's rows, 16 bytes a store
    # head dim 256: the packed kernel takes the dense default, the query split (8/8 packed cases on the H200)
    assert default_options(256, varlen=True) == default_options(256) == {"tma_stats": True, "split_queries": True,
                                                                         "own_first": True}


@pytest.mark.parametrize("hd", [64, 128, 256])
def test_the_varlen_pre_pass_reads_rows_as_the_dense_one_does(hd):
    """VarlenStatsPrep is row-parallel as StatsPrep: D / 8 threads a row, one 16-byte load of O and of dO each
    (not a thread reading a whole row, 2 D / 8 loads, which made it 3.4x the dense pre-pass's time), the row's
    products summed by log2(D / 8) butterfly shuffles, and two 16-byte zero stores a thread into dQ."""
    import math
    import re

    import cutlass

    from warpsched.kernels.attention.backward_host import compiled_prep, compiled_varlen_prep

    packed = compiled_varlen_prep(cutlass.BFloat16, hd, arch="sm_90a", zero_dq=True).artifacts.PTX
    dense = compiled_prep(cutlass.BFloat16, hd, arch="sm_90a", padded=True).artifacts.PTX
    for ptx in (packed, dense):
        assert len(re.findall(r"ld\.global(\.nc)?\.v4", ptx)) == 2
        assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == int(math.log2(hd // 8))
        assert len(re.findall(r"st\.global\.v4", ptx)) == 2


def test_zero_in_prep_needs_the_flat_padded_accumulator():
    torch = pytest.importorskip("torch")
    assert varlen.backward_fill(dict(default_options(128, varlen=True), zero_in_prep=False)) is torch.zeros
    assert varlen.backward_fill(default_options(128, varlen=True)) is torch.empty
    with pytest.raises(AttentionConfigError, match="zero_in_prep=True with tma_stats=True, flat_dq=False"):
        varlen.backward_fill(dict(tma_stats=True, zero_in_prep=True))


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("hd", [64, 128, 256])
def test_the_hosts_own_compile_takes_the_default_and_live_options(hd, live, monkeypatch):
    """``attention_varlen_backward``'s compile path for the packed defaults (and ``live_units``), as a call builds it:
    the unit table's block and the post-pass's flat tile come from the packed kernel (the dense one refuses
    ``unit_in_regs`` / ``live_units`` and does not know ``zero_in_prep``), and the TVM-FFI compile takes the
    table after the offsets."""
    pytest.importorskip("tvm_ffi")
    import cutlass

    from warpsched.kernels import _host

    # the arch a GPU would give the compile (as tests/test_gemm_launch.py does)
    monkeypatch.setattr(_host, "ffi_options", lambda arch=None: _host.ptx_options("sm_90a") + " --enable-tvm-ffi")
    options = dict(default_options(hd, varlen=True), **({"live_units": True} if live else {}))
    key = (cutlass.BFloat16, hd, True, tuple(sorted(options.items())))
    # head dim 256: 64-key units (the warp groups split D), dQ in rows and columns (no flat tiles)
    assert varlen.backward_facts(key) == ((64, None) if hd == 256 else (128, (64, 1, 0)))
    assert varlen._compiled(key, backward=True) is not None
