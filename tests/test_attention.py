"""warpsched.kernels.attention.forward (FlashAttention forward, Hopper) on the CPU: the program SAFE for
every K/V tile count in both consumer schedules (twins with planted bugs: test_attention_twins.py), the kernel
traced and compiled for sm_90a with fake tensors (the checks run inside the trace on the same
program ``warpsched check`` builds), PTX barrier / TMA / wgmma counts pinned, and the host-side
errors of ``warpsched.ops.attention``."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)

from _barriers import foreign_barriers, named_barriers  # noqa: E402
from warpsched.kernels import _host  # noqa: E402
from warpsched.kernels.attention import forward as att  # noqa: E402
from warpsched.kernels.attention import host  # noqa: E402
from warpsched.verify.verdicts import VERDICTS  # noqa: E402

# Derivations (two consumer tasks, K and V rings of S stages, 1-stage Q, 1-stage MathOrder; the
# lowering peels the first iteration of the overlapped loop):
#  wgmma: hd128, bN 128: S = Q K^T is 8 k-blocks of m64n128k16, O += P V 8 k-blocks of m64n128k16;
#    overlap: QK in the peeled and the main iteration, PV in the main iteration and after the loop:
#    2 tasks x (2 x 8 + 2 x 8) = 64; one commit and one wait per GEMM site: 2 x 4; at hd128 and 256
#    the P V GEMM's two waits are fenced (resources.fenced_wgmma_wait: a wait under a branch and one
#    after it), 2 more each: 2 x (4 + 2) = 12.
#    no overlap: 2 tasks x (8 + 8) = 32, 2 x 2 commits / waits.
#  TMA: Q (two 64-row boxes) + K + V = 4 copies; a 128-element bf16 row is 2 boxes of 64: 8 for hd128.
#  setmaxnreg: one dec (producer warp group, 24) and one inc (consumers, 240).
#  Q ring (q_stages=2): Q has 2 full + 2 empty barriers (mbarrier.init + 2), same GEMMs and copies;
#    hd128 leaves room for 2 K/V stages (8 K/V barriers, not 12); bN 192 at hd64: S is 4 k-blocks of
#    m64n192k16, P V 12 k-blocks of m64n64k16: 2 x (2 x 4 + 2 x 12) = 64.
EXPECTED = {  # (head dim, causal, overlap, persistent, FlashAttention options)
    (128, False, True, True, ()): {"wgmma.mma_async": 64, "wgmma.mma_async.sync.aligned.m64n128k16": 64,
                         "wgmma.commit_group": 8, "wgmma.wait_group": 12, "cp.async.bulk.tensor": 8,
                         "mbarrier.init": 16, "expect_tx": 3, "setmaxnreg": 2,
                         "setmaxnreg.inc.sync.aligned.u32 \t240": 1, "setmaxnreg.dec.sync.aligned.u32 \t24": 1},
    (128, True, True, False, ()): {"wgmma.mma_async": 64, "wgmma.commit_group": 8, "wgmma.wait_group": 12,
                               "cp.async.bulk.tensor": 8, "mbarrier.init": 16, "expect_tx": 3, "setmaxnreg": 2},
    (64, True, False, True, ()): {"wgmma.mma_async": 24, "wgmma.mma_async.sync.aligned.m64n128k16": 8,
                        "wgmma.mma_async.sync.aligned.m64n64k16": 16, "wgmma.commit_group": 4,
                        "wgmma.wait_group": 4, "cp.async.bulk.tensor": 4, "mbarrier.init": 20, "expect_tx": 3,
                        "setmaxnreg": 2},
    (64, False, True, True, (("q_stages", 2),)): {
        "wgmma.mma_async": 48, "wgmma.mma_async.sync.aligned.m64n128k16": 16,
        "wgmma.mma_async.sync.aligned.m64n64k16": 32, "wgmma.commit_group": 8, "wgmma.wait_group": 8,
        "cp.async.bulk.tensor": 4, "mbarrier.init": 22, "expect_tx": 3, "setmaxnreg": 2},
    (128, False, True, True, (("q_stages", 2),)): {
        "wgmma.mma_async": 64, "wgmma.mma_async.sync.aligned.m64n128k16": 64, "wgmma.commit_group": 8,
        "wgmma.wait_group": 12, "cp.async.bulk.tensor": 8, "mbarrier.init": 14, "expect_tx": 3, "setmaxnreg": 2},
    (64, False, True, True, (("block_n", 192), ("q_stages", 2))): {
        "wgmma.mma_async": 64, "wgmma.mma_async.sync.aligned.m64n192k16": 16,
        "wgmma.mma_async.sync.aligned.m64n64k16": 48, "wgmma.commit_group": 8, "wgmma.wait_group": 8,
        "cp.async.bulk.tensor": 4, "mbarrier.init": 22, "expect_tx": 3, "setmaxnreg": 2},
    # tma_store_o: per warp group one TMA store of its 64-row O tile (2 boxes at hd128), one bulk
    # commit / read-wait, one proxy fence, two named barriers (+1 CTA barrier); O is written to SMEM
    # as 32 b32 pairs a thread (no 16-bit st.global of O; the LSE still goes out directly).
    (128, False, True, True, (("q_stages", 2), ("tma_store_o", True))): {
        "wgmma.mma_async": 64, "wgmma.commit_group": 8, "wgmma.wait_group": 12, "cp.async.bulk.tensor": 12,
        "cp.async.bulk.tensor.4d.global.shared": 4, "cp.async.bulk.commit_group": 2,
        "cp.async.bulk.wait_group.read": 2, "fence.proxy.async.shared::cta": 2, "bar.sync": 5,
        "st.shared.b32": 64, "mbarrier.init": 14, "expect_tx": 3, "setmaxnreg": 2},
    # o_buffer: the same TMA stores from a per-warp-group O tile; the read-wait comes before the next
    # store and once more after the tile loop (GmemO.drain): 4; Q's ring and 2 K/V stages as above.
    (128, True, True, True, (("causal_pairs", True), ("o_buffer", True), ("q_stages", 2), ("tma_store_o", True))): {
        "wgmma.mma_async": 64, "wgmma.commit_group": 8, "wgmma.wait_group": 12, "cp.async.bulk.tensor": 12,
        "cp.async.bulk.tensor.4d.global.shared": 4, "cp.async.bulk.commit_group": 2,
        "cp.async.bulk.wait_group.read": 4, "fence.proxy.async.shared::cta": 2, "bar.sync": 5,
        "st.shared.b32": 64, "mbarrier.init": 14, "expect_tx": 3, "setmaxnreg": 2},
    # wgs=3 (hd64): three consumer tasks: 3 x (2 x 4 + 2 x 4) = 48 m64n128k16 + ... = 72 wgmma, 12 commits /
    # waits; Q is three 64-row boxes (5 TMA loads, 3 stores); 4 K/V stages (16 barriers) + Q ring (4) + two
    # MathOrder pipelines (4) = 24 mbarrier.init; 160 registers a consumer thread (512 threads).
    (64, False, True, True, (("o_buffer", True), ("q_stages", 2), ("tma_store_o", True), ("wgs", 3))): {
        "wgmma.mma_async": 72, "wgmma.commit_group": 12, "wgmma.wait_group": 12, "cp.async.bulk.tensor": 8,
        "cp.async.bulk.tensor.4d.global.shared": 3, "cp.async.bulk.commit_group": 3,
        "cp.async.bulk.wait_group.read": 6, "fence.proxy.async.shared::cta": 3, "bar.sync": 7,
        "st.shared.b32": 48, "mbarrier.init": 24, "expect_tx": 3, "setmaxnreg": 2,
        "setmaxnreg.inc.sync.aligned.u32 \t160": 1, "setmaxnreg.dec.sync.aligned.u32 \t24": 1,
        "ex2.approx": 396},
    # exp2 sites (ex2.approx; each is one MUFU.EX2 in the SASS): a warp group's softmax step is 2 rows x 32
    # columns + 2 corrections = 66, in the peeled and the main iteration: 132 a warp group, 3 x 132 = 396 at
    # wgs=3 with pinned_exp2 (without it the compiler evaluates P's exp2 again after the P V wait at 160
    # registers: 576). ring_order: MathOrder02 (2 more mbarriers), the same GEMMs.
    (64, True, True, True, (("causal_pairs", True), ("o_buffer", True), ("q_stages", 2), ("ring_order", True),
                            ("tma_store_o", True), ("wgs", 3))): {
        "wgmma.mma_async": 72, "wgmma.commit_group": 12, "wgmma.wait_group": 12, "cp.async.bulk.tensor": 8,
        "cp.async.bulk.wait_group.read": 6, "bar.sync": 7, "st.shared.b32": 48, "mbarrier.init": 26,
        "setmaxnreg.inc.sync.aligned.u32 \t160": 1, "ex2.approx": 396},
    # TUNED at hd64 (240 registers): 2 x 132 exp2 sites, the compiler evaluates each once without pinning
    (64, True, True, True, (("causal_pairs", True), ("o_buffer", True), ("q_stages", 2), ("tma_store_o", True))): {
        "wgmma.mma_async": 48, "wgmma.commit_group": 8, "wgmma.wait_group": 8, "ex2.approx": 264,
        "setmaxnreg.inc.sync.aligned.u32 \t240": 1},
    # unit_overlap (attention/ahead.py): no peeled iteration and no P V after the loop; per warp group the S
    # GEMM before the tile loop and S + P V in the loop: 2 x (4 + 4 + 8) = 32 wgmma, 2 x 3 commits / waits; the
    # softmax before the tile loop and in it: 2 x 2 x 66 = 264 exp2; TMA loads of Q (two boxes) and K before
    # the tile loop and in it, V in it, one O store per warp group: 4 + 2 + 1 + 2 = 9.
    (64, True, True, True, (("causal_pairs", True), ("o_buffer", True), ("q_stages", 2), ("tma_store_o", True),
                            ("unit_overlap", True))): {
        "wgmma.mma_async": 32, "wgmma.mma_async.sync.aligned.m64n128k16": 16,
        "wgmma.mma_async.sync.aligned.m64n64k16": 16, "wgmma.commit_group": 6, "wgmma.wait_group": 6,
        "cp.async.bulk.tensor": 9, "cp.async.bulk.tensor.4d.global.shared": 2, "cp.async.bulk.wait_group.read": 4,
        "ex2.approx": 264, "bar.sync": 5, "mbarrier.init": 22, "setmaxnreg.inc.sync.aligned.u32 \t240": 1},
    # k_ahead + early_rescale + max_chains=4 on TUNED at hd128: the same GEMMs, commits, waits and exp2; V is
    # loaded in the loop (V_{j-1}) and once after it (the last tile), 2 boxes each: 2 more TMA copies
    (128, False, True, True, tuple(sorted(dict(att.TUNED, k_ahead=True, early_rescale=True,
                                               max_chains=4).items()))): {
        "wgmma.mma_async": 64, "wgmma.commit_group": 8, "wgmma.wait_group": 12, "cp.async.bulk.tensor": 14,
        "ex2.approx": 264, "setmaxnreg.inc.sync.aligned.u32 \t240": 1},
}
TRACED = {}




@pytest.fixture(scope="module")
def ptx():
    """PTX of each EXPECTED variant, compiled on first use (about 15 s each: all but one in the slow tier)."""
    class Compiled(dict):
        def __missing__(self, key):
            hd, causal, overlap, persistent, options = key
            self[key] = host.compile_for_cpu(head_dim=hd, causal=causal, overlap=overlap,
                                            persistent=persistent, **dict(options)).artifacts.PTX
            TRACED[key] = VERDICTS.looked_up[-1]  # the fingerprint the kernel trace was checked with
            return self[key]
    return Compiled()


_QUICK_KEY = (128, True, True, True, tuple(sorted(att.TUNED.items())))  # ops.attention's default: quick tier
_PTX_KEYS = [pytest.param(key, marks=() if key == _QUICK_KEY else pytest.mark.slow) for key in EXPECTED]


@pytest.mark.parametrize("key", _PTX_KEYS)
def test_ptx_counts(ptx, key):
    want = EXPECTED[key]
    assert _host.count_ptx(ptx[key], want) == want


@pytest.mark.parametrize("key", _PTX_KEYS)
def test_traced_program_is_the_cpu_program(ptx, key):
    ptx[key]  # compiles it (the kernel trace records the fingerprint it was checked with)
    hd, causal, overlap, persistent, options = key
    cpu = att.build(att.FlashAttention(head_dim=hd, causal=causal, overlap=overlap, persistent=persistent,
                                       **dict(options)),
                    verbose=False,
                    exhaustive_deadlock_race_check=False)
    assert TRACED[key] == cpu.fingerprint
    assert VERDICTS.get(TRACED[key]).verdict == "SAFE"  # what the kernel trace was checked with
    assert not foreign_barriers(ptx[key], cpu.program.tasks), named_barriers(ptx[key])  # the O epilogue's: its task's


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("persistent", [True, False])
def test_checker_safe_for_every_kv_tile_count(overlap, persistent):
    mgr = att.build(att.FlashAttention(overlap=overlap, persistent=persistent), verbose=False, progress=False,
                    cache_verdict=False)
    res = mgr.result.checker
    assert mgr.result.accepted and res.verdict == "SAFE"
    if persistent:  # a K/V count per work tile, any number of work tiles per CTA
        assert "domain end kv_tiles_of [LoadTask, Softmax0, Softmax1]: every count >= 1" in res.report()
        assert "every units_per_cta >= 1" in res.report()
    else:
        assert "every kv_tiles >= 1" in res.report()
    assert {t.name for t in mgr.tasks} == {"LoadTask", "Softmax0", "Softmax1"}
    pipelined = {r.name for t in mgr.tasks for r in t.src_resources + t.dst_resources
                 if getattr(r, "pipeline_config", None) is not None}
    assert pipelined == {"SmemQ", "SmemK", "SmemV", "MathOrder"}


@pytest.mark.parametrize("kwargs,needle", [
    (dict(head_dim=96), "supported head dims are"),
    (dict(head_dim=256), "head dim 256 fits with block_n=64 or 80, q_stages=1"),
    (dict(block_n=100), "block_n=100"),
    (dict(kv_stages=9), "need 2 <= stages"),
    (dict(q_stages=3), "q_stages=3"),
    (dict(q_stages=2, persistent=False), "with persistent=True"),
    (dict(head_dim=128, q_stages=2, kv_stages=3), "need 2 <= stages"),
    (dict(o_buffer=True, q_stages=2), "needs tma_store_o=True"),
    (dict(wgs=3, head_dim=128), "wgs=3"),
    (dict(wgs=4, head_dim=64), "wgs=4"),
])
def test_config_errors(kwargs, needle):
    with pytest.raises(att.AttentionConfigError, match=needle):
        att.FlashAttention(**kwargs)


def test_tma_store_o_through_a_single_q_stage():
    """With one Q stage, O leaves through it (the head dim 256 default): the next unit's Q load waits for
    the store, and the program says so (Q written by its own warp group only, released after the store)."""
    g = att.FlashAttention(head_dim=256, block_n=80, tma_store_o=True)
    assert g.q_stages == 1 and g.o_through_q and g.kv_stages == 2
    mgr = att.build(g, verbose=False, progress=False, cache_verdict=False)
    assert mgr.result.accepted and mgr.result.checker.verdict == "SAFE"


def test_fp32_is_rejected():
    import cutlass

    with pytest.raises(att.AttentionConfigError, match="BFloat16 and Float16"):
        att.FlashAttention(dtype=cutlass.Float32)


class _FakeTensor:
    def __init__(self, shape, dtype="torch.bfloat16", cuda=True):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, "cuda:0" if cuda else "cpu"


_Q = _FakeTensor((2, 8, 100, 128))
_KV = _FakeTensor((2, 2, 300, 128))


@pytest.mark.parametrize("q,k,v,needle", [
    (_Q, _KV, _KV, None),  # GQA 8 / 2, S_q != S_k
    (_FakeTensor((8, 100, 128)), _KV, _KV, "expected 4 dimensions"),
    (_Q, _FakeTensor((2, 2, 300, 128), cuda=False), _KV, "move it to the GPU"),
    (_FakeTensor((2, 8, 100, 128), dtype="torch.float32"), _KV, _KV, "supported: torch.bfloat16"),
    (_Q, _FakeTensor((2, 2, 300, 128), dtype="torch.float16"), _KV, "dtypes differ"),
    (_FakeTensor((2, 8, 100, 96)), _FakeTensor((2, 2, 300, 96)), _FakeTensor((2, 2, 300, 96)), "head dim 96"),
    (_Q, _FakeTensor((2, 3, 300, 128)), _FakeTensor((2, 3, 300, 128)), "multiple of the key/value heads"),
    (_Q, _KV, _FakeTensor((2, 2, 301, 128)), "they must match"),
    (_FakeTensor((2, 8, 0, 128)), _KV, _KV, "empty input"),
    ("not a tensor", _KV, _KV, "pass a torch.Tensor"),
])
def test_host_argument_errors(q, k, v, needle):
    if needle is None:
        host.check_args(q, k, v)
        return
    with pytest.raises(att.AttentionConfigError, match=needle):
        host.check_args(q, k, v)


def test_ops_imports_the_kernel_lazily():
    code = "import sys, warpsched.ops; print('cutlass' in sys.modules, 'warpsched.kernels.attention.host' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,heads,kv_heads,batches", [(1, 1, 1, 1, 1), (1000, 77, 8, 2, 3), (300, 1000, 4, 4, 2)])
def test_work_units_cover_every_block_once(causal, sq, sk, heads, kv_heads, batches):
    """The unit -> (Q block, head, batch) map is a bijection; causal visits the longest K/V loops
    first; the K/V count stops at the diagonal (top-left aligned) and is >= 1."""
    g = att.FlashAttention(causal=causal)
    g.grid_setup(sq, sk, heads, kv_heads, batches)
    coords = [g.unit_coords(u) for u in range(g.num_units)]
    assert sorted(c[:3] for c in coords) == [(b, h, n) for b in range(-(-sq // 128)) for h in range(heads)
                                             for n in range(batches)]
    assert all(kv == h // (heads // kv_heads) for _, h, _, kv in coords)
    counts = [g.kv_tiles_of(u) for u in range(g.num_units)]
    want = [-(-(min(sk, (c[0] + 1) * 128) if causal else sk) // 128) for c in coords]
    assert counts == want and min(counts) >= 1
    if causal:
        assert counts == sorted(counts, reverse=True)


@pytest.mark.parametrize("hd,causal,builder", [(128, True, att.build_tuned), pytest.param(
    64, False, host.build_tuned_hd64, marks=pytest.mark.slow)], ids=["build_tuned", "build_tuned_hd64"])
def test_tuned_default_is_a_checked_program(ptx, hd, causal, builder):
    """ops.attention's default (attention.host.tuned_options) is the program `warpsched check
    examples/hopper/attention.py:build_tuned` (hd64 non-causal: `:build_tuned_hd64`) proves: same
    fingerprint as the kernel's trace, its PTX pinned."""
    key = (hd, causal, True, True, tuple(sorted(host.tuned_options(hd, causal).items())))
    assert key in EXPECTED, "the tuned configuration's PTX must be pinned in EXPECTED"
    ptx[key]  # compiles it (the kernel trace records the fingerprint it was checked with)
    mgr = builder(verbose=False, exhaustive_deadlock_race_check=False)
    assert mgr.fingerprint == TRACED[key]
    assert VERDICTS.get(TRACED[key]).verdict == "SAFE"


def test_tuned_options_per_problem():
    """Non-causal hd64 runs three consumer warp groups; causal keeps TUNED (wgs=3 lost there on the
    H200) below LONG_CAUSAL_HD64 query rows and from there runs three in a ring, one CTA per unit in
    groups of 8 heads longest-first; causal_pairs only in
    causal keys (it changes nothing else)."""
    assert host.tuned_options(128, True) == host.TUNED == host.tuned_options(128, True, 1 << 20)
    assert host.tuned_options(64, True) == host.TUNED == host.tuned_options(64, True, host.LONG_CAUSAL_HD64 - 1)
    long = dict(host.TUNED, wgs=3, ring_order=True, persistent=False, q_stages=1, lpt_heads=8)
    del long["causal_pairs"]
    assert host.tuned_options(64, True, host.LONG_CAUSAL_HD64) == long
    assert host.tuned_options(64, False, 1 << 20) == host.tuned_options(64, False)
    assert host.tuned_options(64, False) == {"q_stages": 2, "tma_store_o": True, "o_buffer": True, "wgs": 3}
    assert host.tuned_options(128, False) == {"q_stages": 2, "tma_store_o": True, "o_buffer": True}
    # non-causal hd128 over LONG_FULL_HD128 keys or more: 176-key tiles, one Q stage, O through it; causal and the
    # other head dims keep theirs
    assert host.tuned_options(128, False, 4096, host.LONG_FULL_HD128 - 1) == host.tuned_options(128, False)
    assert host.tuned_options(128, False, 4096, host.LONG_FULL_HD128) == {"q_stages": 1, "tma_store_o": True,
                                                                         "o_buffer": False, "block_n": 176}
    for hd, causal in ((128, True), (64, False), (256, False)):
        assert host.tuned_options(hd, causal, None, 1 << 20) == host.tuned_options(hd, causal)
    assert host.tuned_options(64, False) is not host.tuned_options(64, False)  # callers may edit it


@pytest.mark.parametrize("wgs", [2, 3])
@pytest.mark.parametrize("sq,sk,heads,kv_heads,batches,ctas", [
    (1024, 1024, 16, 16, 16, 132), (4096, 4096, 16, 16, 4, 132), (16384, 16384, 32, 32, 1, 132),
    (1000, 1000, 16, 4, 4, 132), (513, 700, 8, 2, 2, 132), (1, 1, 2, 2, 1, 132), (1000, 1000, 16, 4, 4, 7),
    (2048, 2048, 8, 1, 1, 7), (640, 640, 5, 5, 3, 11)])
def test_causal_pairs_cover_every_block_once_and_balance(wgs, sq, sk, heads, kv_heads, batches, ctas):
    """``causal_pairs``: a bijection onto (Q block, head, batch) for every grid (both tails of the
    pair rounds: an odd and an even number of slots per CTA); no CTA gets more K/V tiles than under
    the longest-first order; two rounds touch at most 2 ctas / nblocks + 2 heads (their K / V fit L2)."""
    rows = 64 * wgs
    g = att.FlashAttention(causal=True, causal_pairs=True, max_ctas=ctas, head_dim=64, wgs=wgs)
    flat = att.FlashAttention(causal=True, max_ctas=ctas, head_dim=64, wgs=wgs)
    for f in (g, flat):
        f.grid_setup(sq, sk, heads, kv_heads, batches)
    coords = [g.unit_coords(u) for u in range(g.num_units)]
    nb = -(-sq // rows)
    assert sorted(c[:3] for c in coords) == [(b, h, n) for b in range(nb) for h in range(heads) for n in range(batches)]
    counts = [g.kv_tiles_of(u) for u in range(g.num_units)]
    assert counts == [-(-min(sk, (c[0] + 1) * rows) // 128) for c in coords] and min(counts) >= 1

    def worst(f):
        load = [0] * f.ctas
        for u in range(f.num_units):
            load[u % f.ctas] += f.kv_tiles_of(u)
        return max(load)

    # 128-row blocks: a pair's K/V tiles add up to nb + 1 (equal work); 192-row blocks cover 1.5 K/V
    # tiles each, so pairs differ by a tile or two: within one unit's work of the longest-first order
    assert worst(g) <= (worst(flat) if wgs == 2 else worst(flat) + max(counts))
    per_two_rounds = {}
    for u, c in enumerate(coords):
        per_two_rounds.setdefault(u // (2 * g.ctas), set()).add(c[1:3])
    assert max(len(h) for h in per_two_rounds.values()) <= 2 * g.ctas // nb + 2


@pytest.mark.parametrize("group", [1, 3, 8, 64])
@pytest.mark.parametrize("sq,heads,kv_heads,batches", [(8192, 16, 16, 2), (1000, 8, 2, 3), (1, 4, 4, 1)])
def test_lpt_heads_is_longest_first_within_groups_of_heads(group, sq, heads, kv_heads, batches):
    """Causal ``lpt_heads``: a bijection onto (Q block, head, batch); the units come group after group of
    ``lpt_heads`` (batch, head) pairs (the last one smaller when they do not divide) and within a group in
    non-increasing K/V tile counts, so in-order dispatch is longest-first per group; refused without causal,
    with causal_pairs, or below 0."""
    g = att.FlashAttention(causal=True, persistent=False, head_dim=64, wgs=3, lpt_heads=group)
    g.grid_setup(sq, sq, heads, kv_heads, batches)
    coords = [g.unit_coords(u) for u in range(g.num_units)]
    nb = -(-sq // 192)
    assert sorted(c[:3] for c in coords) == [(b, h, n) for b in range(nb) for h in range(heads) for n in range(batches)]
    assert all(kv == h // (heads // kv_heads) for _, h, _, kv in coords)
    pairs, size = heads * batches, min(group, heads * batches)
    start = 0
    for first in range(0, pairs, size):
        members = list(range(first, min(first + size, pairs)))
        span = nb * len(members)
        assert sorted({b * heads + h for _, h, b, _ in coords[start:start + span]}) == members
        counts = [g.kv_tiles_of(u) for u in range(start, start + span)]
        assert counts == sorted(counts, reverse=True)
        start += span
    assert start == g.num_units
    for kw in (dict(causal=False, lpt_heads=4), dict(causal=True, causal_pairs=True, lpt_heads=4),
               dict(causal=True, lpt_heads=-1)):
        with pytest.raises(att.AttentionConfigError, match="lpt_heads=.*causal kernel without causal_pairs"):
            att.FlashAttention(head_dim=64, **kw)


def test_kernel_options_take_the_long_key_tiles_for_one_run_only(monkeypatch):
    """A plain non-causal hd128 call over LONG_FULL_HD128 keys or more runs the 176-key tiles when it is one K/V
    run per Q block; a call split into runs (few Q blocks: decode) keeps the shipped split kernel's 128-key
    tiles, and so do a mask_mod / softcap / window call, a caller's options and an out TMA cannot write."""
    monkeypatch.setattr(host._host, "num_sms", lambda: 132)
    long_k = host.LONG_FULL_HD128
    opts, splits = host.kernel_options((4, 32, long_k, 128), long_k, False, {})
    assert splits == 1 and opts == host.tuned_options(128, False, None, long_k) and opts["block_n"] == 176
    opts, splits = host.kernel_options((4, 32, 4096, 128), long_k - 1, False, {})
    assert splits == 1 and opts == host.tuned_options(128, False)
    opts, splits = host.kernel_options((1, 8, 16, 128), 4 * long_k, False, {})  # decode: split into runs
    assert splits > 1 and opts == host.split_options(host.tuned_options(128, False))
    masked = host.kernel_options((4, 32, long_k, 128), long_k, False, {}, plain=False)
    assert masked == (host.tuned_options(128, False), 1)
    assert host.kernel_options((4, 32, long_k, 128), long_k, False, {"block_n": 128}) == ({"block_n": 128}, 1)
    assert host.kernel_options((4, 32, long_k, 128), long_k, False, {}, out_tma=False) == ({}, 1)
    assert host.kernel_options((4, 32, long_k, 128), long_k, False, None, out_tma=False) == ({}, 1)  # None: none
    assert host.kernel_options((4, 32, long_k, 128), long_k, True, {})[0] == host.tuned_options(128, True)


def test_every_forward_kernel_a_plain_call_picks_is_shipped(monkeypatch):
    """Over a grid of call shapes (one query to long prefill, few heads to many, short to 64k keys), the
    kernel ``ops.attention`` picks by itself for a call without tuning keywords or masks is one of
    ``shipped.attention_forward_configs`` (so its proof ships in the manifest), split-KV forms included: a
    long causal hd64 call with few heads is split on the shipped split kernel, not on the three-warp-group ring
    (which no run measured split)."""
    from warpsched.kernels import shipped

    monkeypatch.setattr(host._host, "num_sms", lambda: 132)
    configs = [(hd, causal, opts) for _, hd, causal, opts in shipped.attention_forward_configs()]
    picked = set()
    for hd in (64, 128, 256):
        for causal in (False, True):
            for b, h in ((1, 1), (1, 8), (4, 32)):
                for sq in (1, 16, 1000, host.LONG_CAUSAL_HD64, 3 * host.LONG_CAUSAL_HD64):
                    for sk in (sq, 77, 4096, host.LONG_FULL_HD128, 4 * host.LONG_FULL_HD128 + 5):
                        for num_splits in (None, 1, 3):  # chosen, or the caller's
                            opts, splits = host.kernel_options((b, h, sq, hd), sk, causal, {}, num_splits)
                            assert (hd, causal, opts) in configs, (b, h, sq, sk, hd, causal, num_splits, opts)
                            picked.add((hd, causal, tuple(sorted(opts.items())), splits > 1))
    assert len({p[:3] for p in picked}) == len(configs)  # and the grid reaches every shipped form
