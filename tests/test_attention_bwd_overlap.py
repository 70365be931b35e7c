"""The attention backward's overlapped step (``overlap_scores``: S and dP in two WGMMA groups, P computed
while dP's runs, the queries' LSE / delta loaded under both; ``overlap_dq``: the dK GEMM issued last and dQ
staged while it runs; ``tma_stats``: LSE / delta loaded by TMA with Q / dO and read from the stage): SAFE
with every other option, twins rejected at the planted call, and the kernel traced with the waits and
copies the program names."""
from __future__ import annotations

import re

import pytest

from warpsched import ValidationError, domain_loop, schedule
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from _planting import QUIET, planted, planted_line




@pytest.mark.parametrize("options", [
    dict(overlap_scores=True), dict(overlap_dq=True), dict(overlap_scores=True, overlap_dq=True),
    dict(overlap_scores=True, overlap_dq=True, shared_ds=True, causal=True),
    dict(overlap_scores=True, overlap_dq=True, shared_ds=True, wg_order=True),
    dict(overlap_scores=True, overlap_dq=True, head_dim=64, window_size=(100, 0)),
    dict(tma_stats=True, overlap_dq=True, shared_ds=True, causal=True),
    dict(tma_stats=True, overlap_dq=True, head_dim=64, deterministic=True),
    dict(tma_stats=True, overlap_dq=True, shared_ds=True, tma_store_dkv=True, causal=True),
    dict(tma_store_dkv=True, head_dim=64, mask_mod=lambda b, h, q, k: k <= q),
    dict(tma_stats=True, tma_store_dkv=True, shared_ds=True, dq_stages=2),
    dict(tma_stats=True, tma_store_dkv=True, head_dim=64, qdo_stages=3, dq_stages=2, deterministic=True),
    dict(tma_stats=True, early_stats=True, overlap_dq=True, shared_ds=True, tma_store_dkv=True, dq_stages=2,
         flat_dq=True, causal=True),
    dict(tma_stats=True, early_stats=True, head_dim=256, deterministic=True),
    dict(tma_stats=True, early_stats=True, head_dim=64, block_m=128, shared_ds=True, dq_stages=2, causal=True),
], ids=["scores", "dq", "both", "both-sds-causal", "both-sds-order", "both-d64-window", "tma-stats-sds",
        "tma-stats-d64-deterministic", "tma-store-sds", "tma-store-d64-mask", "dq-ring-sds", "rings-d64-det",
        "early-stats-odq-sds", "early-stats-d256-det", "early-lse-d64-rows"])
def test_overlapped_programs_are_safe(options):
    mgr = ab.build(ab.FlashAttentionBackward(**options), **QUIET)
    assert mgr.result.checker.verdict == "SAFE"


@schedule
def _p_before_s_retires(smem_kv, smem_qdo, grads, smem_dq, steps, wg, overlap_scores=True, overlap_dq=True):
    """P computed after a wait that leaves both GEMM groups in flight: S^T is still being written."""
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = smem_kv.init()
    lse2, delta = smem_kv.init_stats(acc_s=acc_s)
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=acc_dv, acc_dk=acc_dk)
    smem_kv.wait()
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        smem_qdo.gemm_operand(idx=idx)
        smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
        smem_kv.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)
        grads.stats(lse2=lse2, delta=delta)
        smem_kv.retire(pending=2)  # planted: pending=1 retires S
        grads.probs(acc_s=acc_s, lse2=lse2)  # reads S^T while its group may still write it
        smem_kv.retire()
        grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)
        smem_qdo.mma_dv(p=p, acc_dv=acc_dv)
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        smem_qdo.mma_dk(ds=ds, acc_dk=acc_dk)
        smem_qdo.retire(pending=1)
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_dq.commit()
        smem_qdo.retire()
        smem_qdo.release()
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


@schedule
def _qdo_released_under_the_dk_gemm(smem_kv, smem_qdo, grads, smem_dq, steps, wg, overlap_scores=True,
                                    overlap_dq=True):
    """The Q / dO stage handed back while the dK GEMM (issued last) still reads Q."""
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = smem_kv.init()
    lse2, delta = smem_kv.init_stats(acc_s=acc_s)
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=acc_dv, acc_dk=acc_dk)
    smem_kv.wait()
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        smem_qdo.gemm_operand(idx=idx)
        smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
        smem_kv.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)
        grads.stats(lse2=lse2, delta=delta)
        smem_kv.retire(pending=1)
        grads.probs(acc_s=acc_s, lse2=lse2)
        smem_kv.retire()
        grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)
        smem_qdo.mma_dv(p=p, acc_dv=acc_dv)
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        smem_qdo.mma_dk(ds=ds, acc_dk=acc_dk)
        smem_qdo.retire(pending=1)
        smem_qdo.release()  # planted: before the retire of the dK GEMM, which reads Q
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_dq.commit()
        smem_qdo.retire()
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def _twin(schedule_fn, **options):
    g = ab.FlashAttentionBackward(overlap_scores=True, overlap_dq=True, **options)
    with planted(ab, grad_schedule=schedule_fn):
        return ab.build(g, **QUIET)


def test_p_read_before_the_s_group_retires_is_rejected_there():
    with pytest.raises(ValidationError) as e:
        _twin(_p_before_s_retires)
    msg = str(e.value)
    assert "probs" in msg and "mma_s" in msg and planted_line(__file__, "reads S^T while") in msg, msg


def test_qdo_released_under_the_dk_gemm_is_rejected_there():
    with pytest.raises(ValidationError) as e:
        _twin(_qdo_released_under_the_dk_gemm)
    msg = str(e.value)
    assert "SmemQdO" in msg and planted_line(__file__, "planted: before the retire") in msg, msg


@schedule
def _stats_read_before_the_stage_is_waited(smem_kv, smem_qdo, grads, smem_dq, steps, wg, overlap_scores=True,
                                           overlap_dq=True, tma_stats=True):
    """tma_stats: LSE / delta read from the Q / dO ring before the wait for the step's stage."""
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = smem_kv.init()
    lse2, delta = smem_kv.init_stats(acc_s=acc_s)
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=acc_dv, acc_dk=acc_dk)
    smem_kv.wait()
    with domain_loop(0, steps, 1):
        smem_qdo.load_stats(lse2=lse2, delta=delta)  # planted: before the wait (the TMA may still be writing)
        smem_qdo.wait()
        smem_qdo.gemm_operand(idx=idx)
        smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
        smem_kv.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)
        smem_kv.retire(pending=1)
        grads.probs(acc_s=acc_s, lse2=lse2)
        smem_kv.retire()
        grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)
        smem_qdo.mma_dv(p=p, acc_dv=acc_dv)
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        smem_qdo.mma_dk(ds=ds, acc_dk=acc_dk)
        smem_qdo.retire(pending=1)
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_dq.commit()
        smem_qdo.retire()
        smem_qdo.release()
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def test_stats_read_before_the_wait_is_rejected_there():
    with pytest.raises(ValidationError) as e:
        _twin(_stats_read_before_the_stage_is_waited, tma_stats=True)
    msg = str(e.value)
    assert "SmemQdO" in msg and "load_stats" in msg and planted_line(__file__, "planted: before the wait") in msg, msg


def test_tma_stats_kernel_loads_lse_and_delta_with_q_and_do():
    """tma_stats: two 1-D tile TMAs (LSE, delta) per Q / dO stage and no global load on the math warp
    groups; the pre-pass pads both buffers."""
    import cutlass

    ptx = host.compile_for_cpu(head_dim=64, causal=False, tma_stats=True).artifacts.PTX
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.shared::cta\.global", ptx)) == 2
    assert not re.findall(r"ld\.global", ptx)
    prep = host.compiled_prep(cutlass.BFloat16, 64, arch="sm_90a", padded=True).artifacts.PTX
    assert len(re.findall(r"st\.global\.b32", prep)) == 4  # delta and LSE, in and past S (test_attention_bwd: the rest)


def test_tma_stats_with_varlen_is_the_same_program_and_loads_no_stats_from_global():
    """The packed backward with tma_stats: the dense tma_stats program (its proof), each step's LSE / delta by
    two TMAs from the sequence's padded block, and only the offsets left as global loads."""
    from warpsched.kernels.attention import varlen

    dense = ab.build(ab.FlashAttentionBackward(shared_ds=True, tma_stats=True), **QUIET)
    packed = ab.build(ab.FlashAttentionBackwardVarlen(shared_ds=True, tma_stats=True), **QUIET)
    assert packed.fingerprint == dense.fingerprint and packed.result.checker.verdict == "SAFE"
    plain = varlen.compile_backward_for_cpu(head_dim=64, causal=True).artifacts.PTX
    ptx = varlen.compile_backward_for_cpu(head_dim=64, causal=True, tma_stats=True).artifacts.PTX
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", ptx)) == 2
    # the two warp groups' 16 LSE and 16 delta loads gone; the load warp reads one offset more (padded_block0)
    assert len(re.findall(r"ld\.global", plain)) - len(re.findall(r"ld\.global", ptx)) == 2 * 2 * 16 - 1


@pytest.mark.parametrize("block_m", [64, 128])
def test_padded_sequences_get_disjoint_whole_blocks_inside_the_buffer(block_m):
    """backward_units.padded_block0 (and VarlenStatsPrep's rows): sequence b's ceil(len / block_m) blocks start
    at a block boundary, never overlap the next sequence's, and end inside T + block_m B rows, for random
    batches with empty and one-token sequences (64-row blocks; 128 at head dim 64)."""
    import random

    from warpsched.kernels.attention.backward_units import padded_stats_rows

    r = random.Random(3)
    for _ in range(200):
        lengths = [r.choice([0, 1, 63, 64, 65, 127, 128, 500, r.randrange(2000)]) for _ in range(r.randrange(1, 9))]
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        g = ab.FlashAttentionBackward(varlen=True, tma_stats=True, head_dim=64, block_m=block_m)
        g.grid_setup(max(lengths), 128, 1, 1, len(lengths))
        g.cu_q = g.cu_k = cu  # (padded_block0 reads the unit's sequence bounds)
        end = 0
        for b, n in enumerate(lengths):
            first = g.padded_block0(b * g.n_blocks)  # any unit of sequence b
            assert first * block_m >= end, (lengths, b)
            end = (first + -(-n // block_m)) * block_m
        assert end <= padded_stats_rows(cu[-1], len(lengths), block_m), lengths
        assert padded_stats_rows(cu[-1], len(lengths), block_m) % 4 == 0  # a 16-byte head stride for the TMA


@schedule
def _grads_stored_after_kv_release(smem_kv, smem_qdo, grads, smem_dq, steps, wg, tma_store_dkv=True):
    """tma_store_dkv: dK / dV staged in the V half after K / V were handed back."""
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = smem_kv.init()
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=acc_dv, acc_dk=acc_dk)
    smem_kv.wait()
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        smem_qdo.gemm_operand(idx=idx)
        smem_kv.mma_sdp(acc_s=acc_s, acc_dp=acc_dp, idx=idx, wg=wg)
        smem_kv.retire()
        grads.scores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds)
        smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk)
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        smem_qdo.retire()
        smem_qdo.release()
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_dq.commit()
    smem_kv.release()
    smem_kv.store_grads(acc_dk=acc_dk, acc_dv=acc_dv, wg=wg)  # planted: after the release


def test_grads_staged_after_the_kv_release_are_rejected_there():
    g = ab.FlashAttentionBackward(tma_store_dkv=True)
    with planted(ab, grad_schedule=_grads_stored_after_kv_release):
        with pytest.raises(ValidationError) as e:
            ab.build(g, **QUIET)
    msg = str(e.value)
    assert "SmemKV" in msg and "store_grads" in msg and planted_line(__file__, "planted: after the release") in msg, msg


def test_tma_store_dkv_kernel_stores_by_tma_only():
    """tma_store_dkv: dK and dV leave by bulk tensor stores (two 64-column boxes each per warp group at head
    dim 128), no st.global. Packed (varlen): the same TMA stores, and the register stores of a sequence's
    last, partial 64 keys beside them (the TMA would write the next sequence's rows)."""
    from warpsched.kernels.attention import varlen

    options = dict(head_dim=128, causal=True, shared_ds=True, tma_stats=True, overlap_dq=True, tma_store_dkv=True)
    ptx = host.compile_for_cpu(**options).artifacts.PTX
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.4d\.global\.shared::cta", ptx)) == 2 * 2 * 2
    assert not re.findall(r"st\.global", ptx)
    packed = varlen.compile_backward_for_cpu(**options).artifacts.PTX
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta", packed)) == 2 * 2 * 2  # (S, D, H)
    assert re.findall(r"st\.global", packed)


def test_kernel_traces_the_overlapped_waits():
    """Per warp group: wait_group 1 after the S / dP groups and after the dV / dQ / dK groups, then
    wait_group 0 after each; five commit groups a step (two before)."""
    ptx = host.compile_for_cpu(head_dim=128, causal=True, shared_ds=True, overlap_scores=True,
                               overlap_dq=True).artifacts.PTX
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d)", ptx)
    assert waits.count("1") == 4 and waits.count("0") == 4, waits
    assert len(re.findall(r"wgmma\.commit_group", ptx)) == 2 * 5


def test_ring_sizes_past_the_smem_are_refused_naming_the_fix():
    """dq_stages outside 1..2 is refused; a ring that does not fit in SMEM (three Q / dO stages and two dQ
    stages at head dim 128 with shared_ds: 240 KB) is refused when the kernel object is made, naming the
    knobs, before any trace (where the program's smem capacity check would also reject it)."""
    from warpsched.kernels.attention.forward import AttentionConfigError

    with pytest.raises(AttentionConfigError, match="dq_stages=3"):
        ab.FlashAttentionBackward(dq_stages=3)
    with pytest.raises(AttentionConfigError, match=r"qdo_stages=3, dq_stages=2: SMEM needs about 247456 bytes, more "
                       r"than sm_90's 232448 .*lower qdo_stages or dq_stages"):
        ab.FlashAttentionBackward(shared_ds=True, tma_stats=True, qdo_stages=3, dq_stages=2)
    with pytest.raises(AttentionConfigError, match="or use block_m=64"):  # 128-row blocks: three stages do not fit
        ab.FlashAttentionBackward(head_dim=64, shared_ds=True, tma_stats=True, block_m=128, qdo_stages=3,
                                  dq_stages=2)
    assert ab.FlashAttentionBackward(head_dim=64, tma_stats=True, qdo_stages=3, dq_stages=2).qdo_stages == 3


def test_early_stats_reads_the_stage_before_the_gemms_are_issued():
    """``early_stats``: per warp group the 16 shared-memory loads of the LSE / delta come after the Q / dO
    stage's wait and before the S GEMM's first wgmma (without it they follow the dP GEMM's issue); with 128-row
    blocks (split_stats) the LSE's alone; refused without tma_stats, naming why."""
    from warpsched.kernels.attention.forward import AttentionConfigError

    def loads_before_first_gemm(ptx):
        first = ptx.index("wgmma.mma_async")
        return len(re.findall(r"ld\.shared\.v2\.b32", ptx[:first]))

    base = dict(head_dim=128, causal=True, shared_ds=True, tma_stats=True, tma_store_dkv=True, flat_dq=True)
    early = host.compile_for_cpu(early_stats=True, **base).artifacts.PTX
    late = host.compile_for_cpu(**base).artifacts.PTX
    assert loads_before_first_gemm(early) == 16 and loads_before_first_gemm(late) == 0
    with pytest.raises(AttentionConfigError, match="early_stats=True with tma_stats=False: .*need tma_stats=True"):
        ab.FlashAttentionBackward(early_stats=True, tma_stats=False)
    # 128-row blocks (split_stats): the LSE alone (16 loads) before the GEMMs, delta still after P
    base64 = dict(head_dim=64, causal=True, shared_ds=True, block_m=128, tma_stats=True, tma_store_dkv=True,
                  flat_dq=True)
    assert loads_before_first_gemm(host.compile_for_cpu(early_stats=True, **base64).artifacts.PTX) == 16
    assert loads_before_first_gemm(host.compile_for_cpu(**base64).artifacts.PTX) == 0
