"""Head dim 256's backward with the step's queries split between the warp groups (``split_queries=True``): warp
group w computes S^T and dP^T for its 32 queries only, writes P^T and dS^T into its SMEM tiles (``SmemDS``), and
both warp groups' dV / dK GEMMs (their half of D, over all 64 queries) and dQ GEMMs (all 64 queries, over the
keys, A = the two adjacent dS tiles as one) read both warp groups' tiles. Proven SAFE, traced as checked, its
WGMMA shapes counted; twins that read the other warp group's tiles before they are in, or give them back before
the last GEMM reading them retires, are rejected at the planted call. Numbers on the GPU: docs/attention.md
("Head dim 256, and 128-row Q blocks")."""
from __future__ import annotations

import re

import cutlass
import cutlass.cute as cute
import pytest

from warpsched import ValidationError, domain_loop, schedule
from warpsched.kernels import _host
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention.backward_schedules import split_dq, split_tiles, start_unit, step_scores
from warpsched.kernels.attention.forward import AttentionConfigError

from _planting import QUIET, planted, planted_line

OPTS = dict(host.D_SPLIT_OPTIONS, split_queries=True)


@pytest.mark.parametrize("causal, order", [(False, {}), (True, {}), (True, {"own_first": True}),
                                           (True, {"own_regs": True})])
def test_the_query_split_is_safe_and_its_dS_tiles_lie_back_to_back(causal, order):
    """``own_first``: the dV / dK k-blocks of the warp group's own queries issued before the wait for the other's
    tiles (two commit groups); ``own_regs``: those k-blocks with A from registers. The same proof obligations."""
    g = ab.FlashAttentionBackward(head_dim=256, causal=causal, **dict(OPTS, **order))
    assert (g.sdp_cols, g.exchange, g.dq_parts) == (32, True, 2)
    mgr = ab.build(g, **QUIET)
    assert mgr.result.checker.verdict == "SAFE"
    assert [t.name for t in mgr.tasks] == ["LoadTask", "DQWriter", "Grad0", "Grad1"]
    ds0, ds1 = g.alloc_ds
    # the dQ GEMM's A operand is one 64-row view over both (SmemAllocator.view_span)
    assert ds0.size_bytes == ds1.size_bytes == 32 * 64 * 2 and ds1.offset == ds0.offset + ds0.size_bytes
    # the same SMEM as the duplicated-GEMM kernel: a dS tile of 64 queries per warp group there, dS and P
    # tiles of 32 here
    plain = ab.FlashAttentionBackward(head_dim=256, causal=causal, **host.D_SPLIT_OPTIONS)
    assert sum(a.size_bytes for a in g.alloc_ds + g.alloc_p) == sum(a.size_bytes for a in plain.alloc_ds)


def test_the_default_at_head_dim_256_is_the_split_with_own_first_everywhere():
    """Dense or packed, with a window, mask_mod, softcap or the deterministic order: the query split with
    ``own_first`` (each run on the H200 with it: bench/attention_training_masks.py 13/13, the deterministic check,
    bench/attention_varlen.py 8/8)."""
    assert host.default_options(256) == host.default_options(256, varlen=True) == dict(OPTS, own_first=True)
    for extra in ({}, {"window_size": (128, 0)}, {"softcap": 30.0}, {"deterministic": True}):
        args = dict(dict(window_size=None, mask_mod=None, softcap=None, deterministic=False), **extra)
        options, _ = host._options_and_key("bfloat16", 256, True, {}, args["window_size"], args["mask_mod"],
                                           args["softcap"], args["deterministic"])
        assert options["split_queries"] and options["own_first"], extra


@pytest.mark.parametrize("extra", [{"window_size": (100, 0)}, {"softcap": 30.0}, {"deterministic": True}, "varlen"])
def test_the_split_traces_with_masks_the_deterministic_order_and_packed_batches(extra, capfd):
    """The default there too: the traced program is checked and ptxas keeps it within its registers with no wgmma
    serialized."""
    from warpsched.kernels.attention import varlen

    options = dict(OPTS, own_first=True)
    capfd.readouterr()
    with _host.ptxas_remarks():
        if extra == "varlen":
            varlen.compile_backward_for_cpu(head_dim=256, causal=True, **options)
        else:
            host.compile_for_cpu(head_dim=256, causal=True, **dict(options, **extra))
    out, err = capfd.readouterr()
    assert _host.ptxas_findings(out + err) == (0, 0, False), (out + err)[-2000:]


def test_the_kernel_traces_the_checked_program():
    from warpsched.verify.verdicts import VERDICTS

    ptx = host.compile_for_cpu(head_dim=256, causal=True, **OPTS).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    cpu = ab.build(ab.FlashAttentionBackward(head_dim=256, causal=True, **OPTS), verbose=False,
                   exhaustive_deadlock_race_check=False)
    assert fingerprint == cpu.fingerprint
    # per warp group: S^T and dP^T of its 32 queries over D = 256 (16 k-steps of m64n32 each); dV and dK over
    # the 64 queries (4 k-steps of m64n128, two from each warp group's tile); dQ's two 64-column parts over the
    # 64 keys (4 k-steps of m64n64 each). The duplicated kernel issues the S / dP GEMMs as m64n64.
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n32k16", ptx)) == 2 * 2 * 16
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16", ptx)) == 2 * 2 * 4
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx)) == 2 * 2 * 4
    # P^T and dS^T into the warp group's tiles by stmatrix .trans: 64 keys x 32 queries a tile is two x4 stores
    # of four 8x8 matrices per warp, per tile and warp group
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.trans", ptx)) == 2 * 2 * 2


def test_own_first_without_the_split_is_refused():
    with pytest.raises(AttentionConfigError, match=r"own_first=True, own_regs=False with split_queries=False.*"
                                                   r"or both False"):
        ab.FlashAttentionBackward(head_dim=256, own_first=True, **host.D_SPLIT_OPTIONS)


def test_own_regs_traces_with_its_register_sourced_gemms():
    """``own_regs``: per warp group two of each dV / dK GEMM's four k-steps come from registers (the own
    queries), two from the other warp group's tiles; 168 registers, no spills (test_ptxas_health's kind)."""
    ptx = host.compile_for_cpu(head_dim=256, causal=True, **dict(OPTS, own_regs=True)).artifacts.PTX
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16", ptx)) == 2 * 2 * 4
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n32k16", ptx)) == 2 * 2 * 16


@schedule
def _tiles_written_while_the_own_gemm_reads_their_registers(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine,
                                                           ds_other, **_):
    """``own_regs`` with the own k-blocks issued before the tiles are written: the tile store reads P^T / dS^T
    registers a wgmma in flight holds as its A operand (undefined behaviour in the PTX ISA)."""
    regs, lse2, delta, idx = start_unit(smem_kv, smem_qdo, grads, True)
    _, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = regs
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, None, True, True, False, False)
        smem_qdo.mma_dkv_own(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
        ds_mine.acquire()
        ds_mine.store(ds=ds, acc_dp=acc_dp, p=p)  # planted: the registers the own GEMM still reads
        ds_mine.commit()
        ds_other.wait()
        ds_other.gemm_operand()
        smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg, halves=(1 - wg,))
        split_dq(smem_kv, smem_qdo, smem_dq, ds_mine, ds_other, acc_dq, wg)
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def test_tiles_written_from_registers_an_own_gemm_still_reads_are_rejected():
    g = ab.FlashAttentionBackward(head_dim=256, **dict(OPTS, own_regs=True))
    with planted(ab, grad_schedule_split=_tiles_written_while_the_own_gemm_reads_their_registers):
        with pytest.raises(ValidationError) as e:
            ab.build(g, **QUIET)
    msg = str(e.value)
    assert "mma_dkv_own" in msg and planted_line(__file__, "planted: the registers the own GEMM") in msg, msg


@cute.jit
def _probe(fill: cutlass.Constexpr, out: cutlass.Constexpr):
    fill(out)  # plain Python run while a Hopper compile traces: layouts exist only there


def _split_views(out):
    g = ab.FlashAttentionBackward(head_dim=256, **OPTS)
    lay = g._layouts()
    tile = 32 * 64  # elements of one warp group's tile (32 queries x 64 keys)
    span = {(q, k): lay["sdS"]((q, k, 0)) for q in range(64) for k in range(64)}
    # write_ds stores warp group w's (key, query) tile from its start; the dQ GEMM reads query 32 w + q of the span
    out["dS halves"] = all(lay["sdSt"]((k, q, 0)) + w * tile == span[(32 * w + q, k)]
                           for w in range(2) for q in range(32) for k in range(64))
    # the dV / dK GEMMs' A view of a tile (keys, queries; keys contiguous) is the bytes write_ds stored
    out["A view"] = all(lay["sPA"]((k, q, 0)) == lay["sdSt"]((k, q, 0)) for q in range(32) for k in range(64))


def test_the_tiles_each_warp_group_writes_are_the_bytes_both_gemms_read(monkeypatch):
    """SMEM offsets, element by element: the two warp groups' dS^T tiles, stored (key, query) back to back, are the
    (query, key) A operand of the dQ GEMM; a tile's MN-major A view (dV / dK) is the bytes stored."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    out = {}
    cute.compile(_probe, _split_views, out, options=_host.ptx_options("sm_90a"))
    assert out == {"dS halves": True, "A view": True}


@pytest.mark.parametrize("kw, words", [
    ({"head_dim": 128, "tma_stats": True}, "head_dim=128"),
    ({"head_dim": 256}, "tma_stats=False"),
    ({"head_dim": 256, "tma_stats": True, "overlap_dq": True}, "overlap_dq=True"),
])
def test_options_the_split_is_not_built_for_are_refused_naming_the_fix(kw, words):
    with pytest.raises(AttentionConfigError, match=rf"split_queries=True with .*{re.escape(words)}.*split_queries=False"):
        ab.FlashAttentionBackward(split_queries=True, **kw)


def _dq_released_early(smem_kv, smem_qdo, smem_dq, ds_mine, ds_other, acc_dq, wg):
    """``split_dq`` with the other warp group's tiles given back before the second part has retired."""
    ds_other.gemm_operand()
    ds_mine.own_gemm_operand()
    smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
    smem_qdo.retire()
    smem_qdo.release()
    smem_dq.acquire()
    smem_dq.store(acc_dq=acc_dq)
    ds_other.gemm_operand()
    ds_mine.own_gemm_operand()
    smem_kv.mma_dq(acc_dq=acc_dq, wg=wg, part=1)
    ds_other.release()  # planted: given back while the second dQ part may still read it
    smem_kv.retire()
    smem_dq.store(acc_dq=acc_dq, part=1)
    smem_dq.commit()


def _split_twin(early_tiles=False, early_release=False):
    """``grad_schedule_split`` with one bug planted (``early_tiles``: the dV / dK GEMMs issued before the other
    warp group's tiles are waited for; ``early_release``: the other warp group's tiles given back before the
    second dQ part, which reads them, has retired)."""

    @schedule
    def twin(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, **_):
        regs, lse2, delta, idx = start_unit(smem_kv, smem_qdo, grads, True)
        _, _, acc_dv, acc_dk, acc_dq, _, _ = regs
        with domain_loop(0, steps, 1):
            split_tiles(smem_kv, smem_qdo, grads, ds_mine, wg, regs, idx, lse2, delta, False, False)
            if early_tiles:
                ds_other.gemm_operand()  # planted: the other warp group's tiles read before they are waited for
                ds_mine.own_gemm_operand()
                smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
                ds_other.wait()
            else:
                ds_other.wait()
                ds_other.gemm_operand()
                ds_mine.own_gemm_operand()
                smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
            if early_release:
                _dq_released_early(smem_kv, smem_qdo, smem_dq, ds_mine, ds_other, acc_dq, wg)
            else:
                split_dq(smem_kv, smem_qdo, smem_dq, ds_mine, ds_other, acc_dq, wg)
        smem_kv.release()
        grads.store(acc_dk=acc_dk, acc_dv=acc_dv)
    return twin


@pytest.mark.parametrize("bug, marker", [({"early_tiles": True}, "planted: the other warp group's tiles read"),
                                         ({"early_release": True}, "planted: given back while")])
def test_twins_that_read_the_other_tiles_too_early_or_free_them_too_soon_are_rejected(bug, marker):
    g = ab.FlashAttentionBackward(head_dim=256, **OPTS)
    with planted(ab, grad_schedule_split=_split_twin(**bug)):
        with pytest.raises(ValidationError) as e:
            ab.build(g, **QUIET)
    msg = str(e.value)
    assert "SmemDS" in msg and planted_line(__file__, marker) in msg, msg


def test_the_twin_without_a_bug_is_safe():
    """The twins' body with nothing planted: what the two rejections above differ from."""
    g = ab.FlashAttentionBackward(head_dim=256, **OPTS)
    with planted(ab, grad_schedule_split=_split_twin()):
        assert ab.build(g, **QUIET).result.checker.verdict == "SAFE"
