"""Packed variable-length sequences in the attention forward (``ops.attention_varlen``,
``FlashAttentionVarlen``): every unit reads its own sequence's rows and keys (``seq_bounds``) and visits
the K/V tiles its rows see, at least one; the program (and its proof) is the register-store forward's;
the kernel compiles for sm_90a; bad input is refused naming the fix. On the H200:
bench/attention_varlen.py (O and LSE against fp64 with empty and one-token sequences, time against
FlashAttention-4's varlen forward)."""
from __future__ import annotations

import os
import re
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import live_units, varlen  # noqa: E402
from warpsched.kernels.attention.masks import AttentionConfigError  # noqa: E402
from warpsched import LAUNCH_COUNTER, WorkQueue  # noqa: E402
from _varlen_cases import LENGTHS, _RANDOM, _offsets  # noqa: E402


@pytest.mark.parametrize("live", ["lpt", "seq", None])
@pytest.mark.parametrize("causal,window,hd", [(False, None, 128), (True, None, 64), (False, (100, 37), 128),
                                              (True, (255, 0), 256)])
@pytest.mark.parametrize("lq,lk", LENGTHS)
def test_a_unit_reads_its_sequence_and_the_tiles_its_rows_see(causal, window, hd, lq, lk, live):
    options = dict(varlen.static_varlen_options(hd, causal), live_units=bool(live), lpt_units=live == "lpt")
    g = varlen.forward_kernel(hd, causal, window_size=window, **options)
    g.cu_q, g.cu_k = _offsets(lq), _offsets(lk)
    if live == "seq":  # the table LiveUnitTable writes on the device; its size bounds the count
        g.unit_table = live_units.reference_table(lq, g.block_m)
    elif live == "lpt":
        g.unit_table = live_units.reference_longest_first_table(lq, g.block_m, causal, 3)
    if live:
        assert g.unit_table[0] <= live_units.max_blocks(sum(lq), len(lq), g.block_m)
    g.grid_setup(max(lq), max(lk), 4, 2, len(lq), live=g.unit_table[0] if live else None)
    if live:
        g.ctas = 5  # the launched grid: the snake rounds (lpt) must still name every unit once
    left, right = (None, 0) if causal and window is None else (window or (None, None))
    seen = set()
    for u in range(g.num_units):
        q_block, head, b, _ = g.unit_coords(u)
        assert g.seq_bounds(u) == (g.cu_q[b], lq[b], g.cu_k[b], lk[b])
        first, count = g.kv_first_tile(u), g.kv_tiles_of(u)
        assert count >= 1 and first >= 0  # the checker proves every count >= 1
        rows = range(q_block * g.block_m, min(lq[b], (q_block + 1) * g.block_m))
        seen |= {(b, head, r) for r in rows}
        assert rows or not live  # the live units are the blocks that hold rows
        if not rows:  # a block past its sequence's rows: one tile, whatever the keys
            assert count == 1
        for r in rows:  # every key the row sees is in a visited tile of its own sequence
            lo = 0 if left is None else max(0, r - left)
            hi = lk[b] - 1 if right is None else min(lk[b] - 1, r + right)
            assert all(first <= key // g.block_n < first + count for key in range(lo, hi + 1)), (u, r)
    assert seen == {(b, h, r) for b in range(len(lq)) for h in range(4) for r in range(lq[b])}  # every row once


@pytest.mark.parametrize("lengths,heads,kv_heads,hd", [([2048] * 16, 16, 16, 128), ([4096] * 8, 16, 4, 64)])
def test_causal_pairs_give_every_cta_the_same_work_on_equal_sequences(lengths, heads, kv_heads, hd):
    """The packed causal forward deals its live units in zigzag pairs (``causal_pairs``): on the H200's 132 CTAs
    each one's K/V tiles are within 3.5 % of the mean on equal sequences (the last, partial round's share), where the table dealt in turn gave
    16 x 2048 some CTAs 1.2x the mean; every (sequence, head, Q block) is still one unit."""
    def per_cta(pairs):
        options = dict(varlen.static_varlen_options(hd, True), causal_pairs=pairs, max_ctas=132)
        g = varlen.forward_kernel(hd, True, **options)
        g.cu_q = g.cu_k = _offsets(lengths)
        g.unit_table = live_units.reference_table(lengths, g.block_m)
        g.grid_setup(max(lengths), max(lengths), heads, kv_heads, len(lengths), live=g.unit_table[0])
        assert g.causal_pairs == pairs
        work, units = [0] * g.ctas, set()
        for t in range(g.num_units):
            q_block, head, b, _ = g.unit_coords(t)
            units.add((b, head, q_block))
            work[t % g.ctas] += g.kv_tiles_of(t)
        assert units == {(b, h, j) for b, n in enumerate(lengths) for h in range(heads)
                         for j in range(-(-n // g.block_m))}
        return max(work) / (sum(work) / len(work))

    assert per_cta(True) <= 1.035
    # GQA keeps the table's own order (the H200 measured the pairs 1-5 % slower there)
    assert varlen.static_varlen_options(hd, True, group=heads // kv_heads).get("causal_pairs") is (heads == kv_heads)
    if heads == kv_heads == 16:
        assert per_cta(False) >= 1.15  # the order before: the table from its end, dealt in turn


def test_dynamic_units_fetch_from_the_tables_counter_and_are_proven():
    """dynamic_units: a scheduler warp takes each CTA's next unit from the live table's word 1 (an atomic add, the
    unit stored into the queue's stage, its 16 bytes completed on the stage's barrier): the program has the fetch task and is SAFE; the option
    needs the live table."""
    import re

    options = dict(varlen.static_varlen_options(128, True), dynamic_units=True)
    g = varlen.forward_kernel(128, True, **options)
    assert not g.causal_pairs  # a static order: the queue hands units out in table order
    mgr = att.build(g, verbose=False)
    result = mgr._run_checker()
    assert result.verdict == "SAFE" and "UnitTask" in result.loop_note and "units_per_cta >= 0" in result.loop_note
    ptx = varlen.compile_for_cpu(head_dim=128, causal=True, **options).artifacts.PTX
    assert len(re.findall(r"atom\.global\.add", ptx)) == 1
    # the response stored, then the fetching thread's release arrival (not st.async: undefined in a cluster of
    # one CTA; not a relaxed complete_tx: racecheck reports the readers; not a shared-to-shared bulk copy:
    # memcheck refuses one into the issuing CTA)
    assert "st.async" not in ptx and "mbarrier.complete_tx" not in ptx and "shared::cluster.shared::cta" not in ptx
    assert len(re.findall(r"st\.shared\.v4\.b32[^\n]*\n\s*mbarrier\.arrive\.release\.cta\.shared::cta\.b64", ptx)) == 1
    with pytest.raises(AttentionConfigError, match="dynamic_units=True"):
        att.FlashAttention(**dict(options, varlen=True, live_units=False))
    # the one-stage queue: three warp groups (head dim 64, non-causal) are proven too
    three = varlen.forward_kernel(64, False, **dict(varlen.static_varlen_options(64, False, 4096), dynamic_units=True))
    assert three.wgs == 3 and att.build(three, verbose=False)._run_checker().verdict == "SAFE"


def test_dynamic_units_takes_the_queues_stage_count():
    """dynamic_units=n: the unit queue has n stages (units claimed n ahead of the warp groups', so the load warp
    is not held to one unit ahead), a program of its own that is proven; True is one stage; other values refused."""
    base = varlen.static_varlen_options(128, True)
    one = varlen.forward_kernel(128, True, **dict(base, dynamic_units=True))
    two = varlen.forward_kernel(128, True, **dict(base, dynamic_units=2))
    assert one.dynamic_units == 1 and two.dynamic_units == 2 and one.config != two.config
    mgr = att.build(two, verbose=False)
    queue = next(r for t in mgr.tasks for r in t.src_resources if r.name == "UnitQueue")
    assert queue.pipeline_config.num_stages == 2
    assert mgr.fingerprint != att.build(one, verbose=False).fingerprint
    assert mgr._run_checker().verdict == "SAFE"
    for bad in (5, -1, 1.5, "2"):
        with pytest.raises(AttentionConfigError, match="dynamic_units="):
            varlen.forward_kernel(128, True, **dict(base, dynamic_units=bad))


def test_the_load_warp_can_fetch_the_units_itself():
    """load_fetches_units: the load warp asks for the next unit once a unit's loads are issued (in its work-tile
    tail, where a queue's fetch belongs), and no scheduler warp runs; proven at one and two stages, compiled with
    one atomic add; refused without dynamic_units."""
    import re

    base = varlen.static_varlen_options(128, True)
    for stages in (1, 2):
        g = varlen.forward_kernel(128, True, **dict(base, dynamic_units=stages, load_fetches_units=True))
        mgr = att.build(g, verbose=False)
        assert [t.name for t in mgr.tasks] == ["LoadTask", "Softmax0", "Softmax1"]
        load = mgr.tasks[0]
        assert any(r.name == "UnitQueue" for r in load.dst_resources)
        assert mgr._run_checker().verdict == "SAFE"
    ptx = varlen.compile_for_cpu(head_dim=128, causal=True, **dict(base, dynamic_units=2,
                                                                   load_fetches_units=True)).artifacts.PTX
    assert len(re.findall(r"atom\.global\.add", ptx)) == 1
    with pytest.raises(AttentionConfigError, match="load_fetches_units=True"):
        varlen.forward_kernel(128, True, **dict(base, load_fetches_units=True))


def test_the_queued_options_hand_the_units_out_as_ctas_free_up():
    """queued_varlen_options: the load warp claims each next live unit from a two-stage queue (no scheduler
    warp, no causal pairs: the queue hands units out in table order); it differs from the static form only
    there; it is the default, and the static unit orders (lpt_units, every block) start from the static form."""
    for hd, causal, top, group in ((128, True, None, 1), (64, True, 8000, 4), (64, False, 512, 1),
                                   (64, False, 4096, 1), (256, False, None, 1)):
        options = varlen.queued_varlen_options(hd, causal, top, group)
        static = varlen.static_varlen_options(hd, causal, top, group)
        assert varlen.varlen_options(hd, causal, top, group) == options
        assert options["dynamic_units"] == 2 and options["load_fetches_units"] and not options["causal_pairs"]
        assert not static["dynamic_units"] and not static["load_fetches_units"]
        assert ({k for k in options if options[k] != static.get(k)}
                <= {"dynamic_units", "load_fetches_units", "causal_pairs", "producer_regs", "consumer_regs"})
        g = varlen.forward_kernel(hd, causal, **options)
        assert g.dynamic_units == 2 and g.load_fetches_units and not g.causal_pairs
        # the load warp group's fetch gets room (two warp groups: 32 registers, 232 for the warp groups)
        assert (g.producer_regs, g.consumer_regs) == ((32, 232) if g.wgs == 2 else (24, 160))
        assert g.wgs == varlen.forward_kernel(hd, causal, **static).wgs  # the same Q blocks
    varlen.forward_kernel(128, True, **dict(varlen.static_varlen_options(128, True), lpt_units=True))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lpt_heads", [0, 1, 2, 3])
def test_the_queue_can_hand_out_the_longest_first_table_in_groups_of_heads(causal, lpt_heads):
    """``lpt_units`` with the queue: the units in the longest-first table's order within groups of ``lpt_heads``
    K/V heads (0: all), a group's K/V heads and their GQA query heads innermost; every (sequence, head, Q block)
    is one unit, and within a group no unit's level is above an earlier one's, so the last units a group hands
    out are its shortest."""
    lengths, heads, kv_heads = [700, 0, 1, 3000, 130, 2048, 64], 8, 4
    options = dict(varlen.queued_varlen_options(128, causal, max(lengths), heads // kv_heads), lpt_units=True,
                   lpt_heads=lpt_heads, max_ctas=132)
    g = varlen.forward_kernel(128, causal, **options)
    assert g.lpt_units and g.dynamic_units and g.lpt_heads == lpt_heads
    order, level = live_units.reference_levels(lengths, g.block_m, causal, live_units.levels_for(max(lengths),
                                                                                                   g.block_m))
    g.cu_q = g.cu_k = _offsets(lengths)
    g.unit_table = live_units.reference_longest_first_table(lengths, g.block_m, causal,
                                                            live_units.levels_for(max(lengths), g.block_m))
    g.grid_setup(max(lengths), max(lengths), heads, kv_heads, len(lengths), live=len(order))
    units = [g.unit_coords(t) for t in range(g.num_units)]
    assert sorted((b, h, j) for j, h, b, _ in units) == sorted(
        (b, h, j) for b, j in order for h in range(heads))
    assert all(kv == h // (heads // kv_heads) for _, h, _, kv in units)
    per = kv_heads if lpt_heads == 0 else min(lpt_heads, kv_heads)
    groups = {}
    for j, h, b, kv in units:
        groups.setdefault(kv // per, []).append(level[(b, j)])
    assert list(groups) == sorted(groups)  # group after group
    for levels in groups.values():
        assert levels == sorted(levels, reverse=True)
    with pytest.raises(AttentionConfigError, match="lpt_heads"):
        varlen.forward_kernel(128, causal, **dict(varlen.static_varlen_options(128, causal), lpt_units=True,
                                                  lpt_heads=2))


def test_the_queued_longest_first_kernel_traces_and_fetches_from_the_counter():
    """The same order traced on device values: it compiles for sm_90a with the queue's one counter fetch, and its
    program is the queued default's (the order lives in the units' arithmetic, not in the barrier protocol)."""
    options = varlen.queued_varlen_options(64, True, 8000, 4)
    ptx = varlen.compile_for_cpu(head_dim=64, causal=True, **dict(options, lpt_units=True, lpt_heads=4)).artifacts.PTX
    assert len(re.findall(r"atom\.global\.add", ptx)) == 1
    plain = att.build(varlen.forward_kernel(64, True, **options), verbose=False, exhaustive_deadlock_race_check=False)
    lpt = att.build(varlen.forward_kernel(64, True, **dict(options, lpt_units=True, lpt_heads=4)), verbose=False,
                    exhaustive_deadlock_race_check=False)
    assert lpt.fingerprint == plain.fingerprint


def test_varlen_leaves_the_program_and_its_proof_as_they_are():
    for hd, causal in ((128, False), (64, True)):
        options = dict(varlen.static_varlen_options(hd, causal), live_units=False, unit_in_regs=False)
        plain = att.build(att.FlashAttention(head_dim=hd, causal=causal, **options), verbose=False,
                          exhaustive_deadlock_race_check=False)
        packed = att.build(att.FlashAttentionVarlen(head_dim=hd, causal=causal, **options), verbose=False,
                           exhaustive_deadlock_race_check=False)
        assert packed.fingerprint == plain.fingerprint  # shipped.py lists the varlen forms: test_proof_manifest


def test_live_units_are_proven_for_a_cta_without_units():
    """The live-unit grid is sized from the table's bound, so a CTA may get no unit: its proof must say so."""
    mgr = att.build(varlen.forward_kernel(128, True, **varlen.varlen_options(128, True)), verbose=False)
    result = mgr._run_checker()
    assert result.verdict == "SAFE"
    assert "every units_per_cta >= 0" in result.loop_note


@pytest.mark.parametrize("lengths,block_m", [([5, 0, 1, 300, 129], 128), ([0, 0], 64), ([64] * 40, 64),
                                             ([1] * 70 + [1000], 192), (_RANDOM[0], 128)])
def test_the_live_table_lists_every_block_that_holds_rows_within_its_bound(lengths, block_m):
    table = live_units.reference_table(lengths, block_m)
    pairs = list(zip(table[2::2], table[3::2]))
    assert table[0] == len(pairs) == sum(-(-n // block_m) for n in lengths)
    assert all(j * block_m < lengths[b] for b, j in pairs) and len(set(pairs)) == len(pairs)
    assert len(table) <= live_units.table_size(sum(lengths), len(lengths), block_m)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lengths,block_m,levels", [([5, 0, 1, 300, 129], 128, 3), ([1000, 64, 3, 700], 64, 4),
                                                    (_RANDOM[1], 128, 6), ([130] * 9, 64, 1)])
def test_longest_first_levels_are_work_order(lengths, block_m, levels, causal):
    order, level = live_units.reference_levels(lengths, block_m, causal, levels)
    assert sorted(order) == sorted(zip(live_units.reference_table(lengths, block_m)[2::2],
                                       live_units.reference_table(lengths, block_m)[3::2]))
    assert [level[p] for p in order] == sorted((level[p] for p in order), reverse=True)
    assert all(0 <= lv < levels for lv in level.values())
    if levels >= max(-(-n // block_m) for n in lengths):  # exact levels: more K/V tiles never comes later
        tiles = {(b, j): (j + 1 if causal else -(-lengths[b] // block_m)) for b, j in order}
        assert [tiles[p] for p in order] == sorted(tiles.values(), reverse=True)


@pytest.mark.parametrize("units,ctas", [(23, 5), (20, 5), (4, 5), (1, 1), (133, 132)])
def test_snake_rounds_name_every_unit_once(units, ctas):
    g = varlen.forward_kernel(128, True, **dict(varlen.static_varlen_options(128, True), lpt_units=True))
    g.num_units, g.ctas = units, ctas
    assert sorted(g._snake(t) for t in range(units)) == list(range(units))
    if units >= 2 * ctas:  # the second round reversed: CTA 0 takes its last position
        assert g._snake(ctas) == 2 * ctas - 1


def test_the_plain_varlen_class_refuses_live_units():
    with pytest.raises(AttentionConfigError, match="FlashAttentionVarlenLive"):
        att.FlashAttentionVarlen(live_units=True, **att.TUNED)
    with pytest.raises(AttentionConfigError, match="persistent=True"):
        att.FlashAttention(live_units=True)


def test_the_live_table_kernels_compile_for_sm90a():
    ptx = live_units.compiled(128, arch="sm_90a").artifacts.PTX
    assert "shfl.sync.up" in ptx and "st.global" in ptx
    for causal in (True, False):
        ptx = live_units.compiled(192, arch="sm_90a", longest_first=causal).artifacts.PTX
        assert "atom.shared" in ptx and "bar.sync" in ptx and "st.global" in ptx


def test_varlen_refuses_the_tma_store_epilogue():
    with pytest.raises(AttentionConfigError, match="tma_store_o=False"):
        att.FlashAttentionVarlen(**att.TUNED)


def test_the_varlen_kernel_compiles_for_sm90a():
    c = varlen.compile_for_cpu(head_dim=128, causal=True, **varlen.varlen_options(128, True))
    assert "cp.async.bulk.tensor" in c.artifacts.PTX and "st.global" in c.artifacts.PTX


@pytest.mark.parametrize("hd,causal", [(64, True), (128, False)])
def test_the_forward_holds_its_unit_once_a_tile(hd, causal):
    """unit_in_regs (forward, a packed default): each task computes its unit's coordinates and bounds when the tile
    starts, so the consumer warp groups' K/V loop loads neither the live table nor the offsets (without it both are
    loaded before every S tile's mask): fewer global loads, the same program; refused for unpacked batches."""
    import re

    options = dict(varlen.static_varlen_options(hd, causal, 4096), unit_in_regs=False)
    plain = varlen.compile_for_cpu(head_dim=hd, causal=causal, **options).artifacts.PTX
    held = varlen.compile_for_cpu(head_dim=hd, causal=causal, **dict(options, unit_in_regs=True)).artifacts.PTX
    n_plain, n_held = (len(re.findall(r"ld\.global", p)) for p in (plain, held))
    assert n_held <= n_plain * 2 // 3, (n_held, n_plain)
    # the same program: the mask and the loads read the held values only
    loose = att.build(varlen.forward_kernel(hd, causal, **options), verbose=False,
                      exhaustive_deadlock_race_check=False)
    tight = att.build(varlen.forward_kernel(hd, causal, **dict(options, unit_in_regs=True)), verbose=False,
                      exhaustive_deadlock_race_check=False)
    assert tight.fingerprint == loose.fingerprint
    with pytest.raises(AttentionConfigError, match="unit_in_regs=True with varlen=False"):
        att.FlashAttention(head_dim=hd, unit_in_regs=True)


class _Fake:
    """Enough of a torch tensor for the argument checks (no GPU, no torch)."""

    def __init__(self, shape, dtype="torch.bfloat16", cuda=True):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, "cuda" if cuda else "cpu"


@pytest.mark.parametrize("q,k,cu_q,cu_k,words", [
    ((10, 4, 128), (12, 2, 128), (3,), (3,), None),
    ((2, 10, 4, 128), (12, 2, 128), (3,), (3,), "expected (total_tokens, heads, head_dim)"),
    ((10, 3, 128), (12, 2, 128), (3,), (3,), "multiple of the key/value heads"),
    ((10, 4, 96), (12, 2, 96), (3,), (3,), "one of (64, 128, 256)"),
    ((10, 4, 128), (12, 2, 128), (3,), (4,), "both hold B + 1"),
    ((10, 4, 128), (12, 2, 128), (1,), (1,), "B + 1 offsets"),
])
def test_bad_varlen_input_is_refused_naming_the_fix(q, k, cu_q, cu_k, words):
    args = (_Fake(q), _Fake(k), _Fake(k), _Fake(cu_q, "torch.int32"), _Fake(cu_k, "torch.int32"))
    if words is None:
        varlen.check_args(*args)
        return
    with pytest.raises(AttentionConfigError) as e:
        varlen.check_args(*args)
    assert words in str(e.value)


def test_offsets_must_be_int32_on_the_gpu():
    q, k = _Fake((10, 4, 128)), _Fake((12, 2, 128))
    with pytest.raises(AttentionConfigError, match="torch.int32"):
        varlen.check_args(q, k, k, _Fake((3,), "torch.int64"), _Fake((3,), "torch.int32"))
    with pytest.raises(AttentionConfigError, match="move it to the GPU"):
        varlen.check_args(q, k, k, _Fake((3,), "torch.int32", cuda=False), _Fake((3,), "torch.int32"))


def test_the_queued_kernel_is_the_program_its_proof_is_about():
    """The queue's counter exists only when the kernel is traced; the program ``warpsched prove`` checked (its
    counter ``LAUNCH_COUNTER``) must be the one the compile traces: the same fingerprint (which tells a counter
    queue from a CLC one: their barrier protocols differ), served from the manifest."""
    from warpsched.manager import capture_managers
    from warpsched.verify.manifest import MANIFEST

    options = varlen.queued_varlen_options(128, True, 4096, 1)
    proven = att.build(varlen.forward_kernel(128, True, **options), verbose=False,
                       exhaustive_deadlock_race_check=False)
    queue = next(r for r in proven.program.resources if isinstance(r, WorkQueue))
    assert queue.counter_fed and queue.tile_scheduler_config.counter is LAUNCH_COUNTER
    with capture_managers() as managers:
        varlen.compile_for_cpu(head_dim=128, causal=True, **options)
    traced = [m for m in managers if any(isinstance(r, WorkQueue) and r.counter_fed for r in m.program.resources)]
    assert traced and all(m.fingerprint == proven.fingerprint for m in traced)
    assert MANIFEST.lookup(proven.fingerprint) is not None
    clc = att.build(varlen.forward_kernel(128, True, **options), verbose=False, exhaustive_deadlock_race_check=False)
    next(r for r in clc.program.resources if isinstance(r, WorkQueue)).tile_scheduler_config.counter = None
    clc._fingerprint = None
    assert clc.fingerprint != proven.fingerprint  # a CLC queue is another program
