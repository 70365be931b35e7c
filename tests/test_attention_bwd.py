"""The attention backward (warpsched.kernels.attention.backward) as a checked program: SAFE for every step
count, twins with planted bugs rejected where they are wrong, the kernel traced for sm_90a with the
program the CPU checks, and the host's argument errors. Numbers on the H200: docs/attention.md
("Backward", bench/attention_bwd_check.py)."""
from __future__ import annotations

import re

import pytest

from warpsched import ValidationError, domain_loop, schedule
from warpsched.kernels import _host
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention.forward import AttentionConfigError
from _barriers import foreign_barriers, named_barriers
from _planting import planted

QUIET = {"verbose": False, "progress": False, "cache_verdict": False}


def _check(grad_schedules=None, writer_schedule=None, **kw):
    """The program (checked), with a twin schedule planted in place of the gradient or the dQ writer's."""
    twins = {k: v for k, v in (("grad_schedule", grad_schedules), ("dq_writer_schedule", writer_schedule)) if v}
    with planted(ab, **twins):
        return ab.build(**kw, **QUIET)


def test_program_is_safe_for_every_step_count():
    mgr = _check()
    assert mgr.result.checker.verdict == "SAFE"
    assert [t.name for t in mgr.tasks] == ["LoadTask", "DQWriter", "Grad0", "Grad1"]


# ------------------------------------------------------------------ planted bugs
@schedule
def _kv_released_before_the_loop(smem_kv, smem_qdo, grads, smem_dq, steps, wg):
    """K / V handed back before the steps that read them."""
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = smem_kv.init()
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=acc_dv, acc_dk=acc_dk)
    smem_kv.wait()
    smem_kv.release()  # planted: the S / dP / dQ GEMMs below still read K and V
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
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


@schedule
def _qdo_released_before_the_dkv_gemms_retire(smem_kv, smem_qdo, grads, smem_dq, steps, wg):
    """The Q / dO stage released while dV += P^T dO and dK += dS^T Q still read it: the load task
    refills it with a later step's tiles under the running GEMMs."""
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
        smem_qdo.release()  # planted: before the retire below
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        smem_qdo.retire()
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_dq.commit()
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


@schedule
def _dq_handed_over_before_it_is_written(smem_kv, smem_qdo, grads, smem_dq, steps, wg):
    """The dQ stage committed to the writer before the warp group stores dQ into it: the TMA
    reduce-add may read the tile while it is being written."""
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
        smem_dq.commit()  # planted: before the store below
        smem_dq.store(acc_dq=acc_dq)
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


@schedule
def _writer_reduces_before_its_wait(smem_dq0, smem_dq1, steps):
    """The dQ writer issues warp group 1's reduce-add before waiting for its stage."""
    with domain_loop(0, steps, 1):
        smem_dq0.wait()
        smem_dq0.reduce_add()
        smem_dq0.release()
        smem_dq1.reduce_add()  # planted: before the wait below
        smem_dq1.wait()
        smem_dq1.release()


@schedule
def _writer_skips_a_stage(smem_dq0, smem_dq1, steps):
    """The dQ writer forgets warp group 1's stage: that warp group's second step waits forever."""
    with domain_loop(0, steps, 1):
        smem_dq0.wait()
        smem_dq0.reduce_add()
        smem_dq0.release()


@schedule
def _dq_before_the_other_ds_is_ready(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other):
    """``shared_ds``: the dQ GEMM issued before waiting for the other warp group's dS tile (it reads a tile
    that may still hold the previous step's dS, or be half written)."""
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
        ds_mine.acquire()
        ds_mine.store(ds=ds, acc_dp=acc_dp)
        ds_mine.commit()
        smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk)
        ds_other.gemm_operand()  # planted: before the wait below
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        ds_other.wait()
        smem_qdo.retire()
        ds_other.release()
        smem_qdo.release()
        smem_dq.acquire()
        smem_dq.store(acc_dq=acc_dq)
        smem_dq.commit()
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def test_shared_ds_program_is_safe_and_its_early_dq_twin_is_rejected():
    """shared_ds (head dim 128): the warp groups swap dS tiles through SmemDS; issuing the dQ GEMM before
    the other warp group's tile is ready is rejected at the planted call."""
    g = ab.FlashAttentionBackward(shared_ds=True)
    assert _check(g=g).result.checker.verdict == "SAFE"
    with pytest.raises(ValidationError) as e:
        _check(g=g, grad_schedules=_dq_before_the_other_ds_is_ready)
    msg = str(e.value)
    assert "SmemDS" in msg and "gemm_operand" in msg and re.search(HERE, msg), msg
    with pytest.raises(AttentionConfigError, match=r"shared_ds=True at head dim 64 with block_m=64.*block_m=128"):
        ab.FlashAttentionBackward(head_dim=64, shared_ds=True)


HERE = r"test_attention_bwd\.py:\d+"  # the planted call's file:line
KERNEL = r"attention/backward\.py:\d+"  # an omission: the call that is left waiting, in the kernel's schedule


@pytest.mark.parametrize("kw, resource, what, where", [
    ({"grad_schedules": _kv_released_before_the_loop}, "SmemKV", "mma_sdp", HERE),
    ({"grad_schedules": _qdo_released_before_the_dkv_gemms_retire}, "SmemQdO", "race", HERE),
    ({"grad_schedules": _dq_handed_over_before_it_is_written}, "SmemDQ", "store", HERE),
    ({"writer_schedule": _writer_reduces_before_its_wait}, "SmemDQ1", "reduce_add", HERE),
    ({"writer_schedule": _writer_skips_a_stage}, "SmemDQ1", "never uses it", KERNEL),
], ids=["kv-released-early", "qdo-released-before-dkv-retire", "dq-committed-before-store",
        "writer-reduces-before-wait", "writer-skips-a-stage"])
def test_planted_bugs_are_rejected_where_they_are(kw, resource, what, where):
    with pytest.raises(ValidationError) as e:
        _check(**kw)
    msg = str(e.value)
    print(msg)
    assert resource in msg and what in msg, msg
    assert re.search(where, msg), msg


# ------------------------------------------------------------------ the kernel, traced on the CPU
def _compile(head_dim, causal, shared_ds=False):
    from warpsched.verify.verdicts import VERDICTS

    ptx = host.compile_for_cpu(head_dim=head_dim, causal=causal, shared_ds=shared_ds).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    return ptx, (fingerprint, VERDICTS.get(fingerprint).verdict)


@pytest.mark.parametrize("head_dim, causal, shared_ds", [
    (128, False, False), (128, True, True), pytest.param(64, True, False, marks=pytest.mark.slow),
    pytest.param(128, True, False, marks=pytest.mark.slow)])
def test_kernel_traces_the_checked_program(head_dim, causal, shared_ds):
    ptx, looked_up = _compile(head_dim, causal, shared_ds)
    counts = _host.count_ptx(ptx)
    # per warp group: S^T and dP^T (D / 16 k-steps each), dV and dK (4 each), dQ (4 over 64 keys, or
    # shared_ds 8 over 128 keys, at half the width)
    assert counts["wgmma.mma_async"] == 2 * (2 * head_dim // 16 + 12 + (4 if shared_ds else 0))
    dq_cols = head_dim // 2 if shared_ds else head_dim
    assert len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx)) == 2 * dq_cols // 32  # dQ, 32-float boxes
    assert not re.findall(r"(red|atom)\.global", ptx)  # no fp32 atomics on the math warp groups
    fingerprint, verdict = looked_up[0], looked_up[1]
    cpu = ab.build(ab.FlashAttentionBackward(head_dim=head_dim, causal=causal, shared_ds=shared_ds), verbose=False,
                   exhaustive_deadlock_race_check=False)
    assert verdict == "SAFE"
    assert fingerprint == cpu.fingerprint
    # the dS tile's and the epilogue's syncs run on each warp group's own named barrier, no id picked by hand
    assert named_barriers(ptx) and not foreign_barriers(ptx, cpu.program.tasks), named_barriers(ptx)


# ------------------------------------------------------------------ host argument errors
class _T:
    def __init__(self, shape, dtype="torch.bfloat16", cuda=True):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, "cuda:0" if cuda else "cpu"


def test_head_dim_96_is_refused_with_the_alternative():
    q = _T((1, 2, 16, 96))
    with pytest.raises(AttentionConfigError, match="head dims.*scaled_dot_product_attention"):
        host.check_args(q, q, q, q, q, _T((1, 2, 16), "torch.float32"))


def test_lse_shape_is_named():
    q = _T((1, 2, 16, 64))
    with pytest.raises(AttentionConfigError, match=r"lse \(1, 2, 15\).*return_lse=True"):
        host.check_args(q, q, q, q, q, _T((1, 2, 15), "torch.float32"))


def test_dout_dtype_is_named():
    q = _T((1, 2, 16, 64))
    with pytest.raises(AttentionConfigError, match="dout"):
        host.check_args(q, q, q, q, _T((1, 2, 16, 64), "torch.float16"), _T((1, 2, 16), "torch.float32"))


def test_work_units_cover_every_key_block_and_step():
    """Every (key block, K/V head, batch) is one unit; a unit's steps walk each query head of its group
    over the Q blocks that see its keys (causal: from the diagonal), on Python ints."""
    for causal in (False, True):
        g = ab.FlashAttentionBackward(head_dim=64, causal=causal)
        g.grid_setup(seqlen_q=300, seqlen_k=260, heads=6, kv_heads=2, batches=2)
        seen = set()
        for unit in range(g.num_units):
            n_block, kv_head, batch = g.unit_coords(unit)
            seen.add((n_block, kv_head, batch))
            steps = [g.step_coords(unit, s) for s in range(g.steps_of(unit))]
            first = n_block * 128 // 64 if causal else 0
            want = [(kv_head * 3 + h, m, batch) for h in range(3) for m in range(first, 5)]
            assert steps == want
        assert len(seen) == g.num_units == 3 * 2 * 2


def test_lpt_orders_the_units_longest_first_over_every_head():
    """``lpt``: the same units (a bijection onto (key block, K/V head, batch)), in non-increasing step
    counts over the whole grid, so the hardware's in-order dispatch is longest-processing-time first; the
    default order walks one (batch, K/V head) at a time (its steps fall and rise again); refused where it
    does not apply, naming why."""
    for head_dim, block_m in ((128, 64), (64, 128)):
        g = ab.FlashAttentionBackward(head_dim=head_dim, causal=True, block_m=block_m, tma_stats=True, lpt=True)
        plain = ab.FlashAttentionBackward(head_dim=head_dim, causal=True, block_m=block_m, tma_stats=True)
        for x in (g, plain):
            x.grid_setup(seqlen_q=1000, seqlen_k=1000, heads=6, kv_heads=3, batches=2)
        units = [g.unit_coords(u) for u in range(g.num_units)]
        assert sorted(units) == sorted(plain.unit_coords(u) for u in range(plain.num_units))
        assert len(set(units)) == g.num_units == 8 * 3 * 2
        steps = [g.steps_of(u) for u in range(g.num_units)]
        assert steps == sorted(steps, reverse=True) and steps[0] > steps[-1]
        plain_steps = [plain.steps_of(u) for u in range(plain.num_units)]
        assert plain_steps != sorted(plain_steps, reverse=True)
        for u in range(g.num_units):  # a unit's steps are its coordinates', whatever the order
            n, h, b = g.unit_coords(u)
            twin = next(v for v in range(plain.num_units) if plain.unit_coords(v) == (n, h, b))
            assert [g.step_coords(u, s) for s in range(g.steps_of(u))] == \
                [plain.step_coords(twin, s) for s in range(plain.steps_of(twin))]
    for kw, word in ((dict(causal=False), "causal=False"), (dict(causal=True, deterministic=True), "deterministic=True")):
        with pytest.raises(ab.AttentionConfigError, match=f"lpt=True with .*{word}.*longest-first order"):
            ab.FlashAttentionBackward(head_dim=128, lpt=True, **kw)


@pytest.mark.parametrize("head_dim", [128, 256])
def test_delta_pre_pass_compiles_to_vector_loads(head_dim):
    """The pre-pass reads each row of O and dO with 16-byte loads (at most 128 columns in registers at once)
    and writes one fp32 delta per row."""
    import cutlass

    ptx = host.compiled_prep(cutlass.BFloat16, head_dim, arch="sm_90a").artifacts.PTX
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4", ptx)) == 2 * head_dim * 2 // 16
    assert len(re.findall(r"st\.global", ptx)) == 1


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_stats_pre_pass_reads_rows_coalesced_and_zeroes_the_dq_accumulator(head_dim):
    """StatsPrep (the default's pre-pass): D / 8 threads per row, one 16-byte load of O and of dO each, the
    row's products summed by log2(D / 8) butterfly shuffles; each thread zeroes its 8 fp32 columns of the dQ
    accumulator (two 16-byte stores), and one lane writes delta and the LSE times log2 e (in S or past it),
    so the backward's steps do not multiply it."""
    import cutlass

    ptx = host.compiled_prep(cutlass.BFloat16, head_dim, arch="sm_90a", padded=True).artifacts.PTX
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4", ptx)) == 2
    assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == {64: 3, 128: 4, 256: 5}[head_dim]
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == 2
    assert len(re.findall(r"st\.global\.b32", ptx)) == 4
    assert len(re.findall(r"mul\.f32\s+%r\d+, %r\d+, 0f3FB8AA3B;", ptx)) == 1  # LSE * log2 e


@pytest.mark.parametrize("shared_ds", [False, True])
def test_turn_taking_is_safe_and_a_turn_kept_deadlocks(shared_ds):
    """wg_order: the warp groups alternate issuing their S / dP GEMMs through MathOrder; a twin whose
    second warp group never hands the turn back is rejected at its wait, naming the missing release."""
    g = ab.FlashAttentionBackward(wg_order=True, shared_ds=shared_ds)
    assert _check(g=g).result.checker.verdict == "SAFE"
    from warpsched.kernels.attention import backward_schedules as sched

    real_pass = sched.pass_turn

    def keeps_turn(order, wg):
        if wg == 0:
            real_pass(order, wg)  # warp group 1 waits but never releases (planted)

    sched.pass_turn = keeps_turn
    try:
        with pytest.raises(ValidationError) as e:
            _check(g=g)
    finally:
        sched.pass_turn = real_pass
    msg = str(e.value)
    assert "MathOrder.wait() is never released" in msg and "task 'Grad1'" in msg, msg


def test_argument_checks_never_crash():
    """Random shapes, dtypes and devices: the backward's checks accept or raise AttentionConfigError,
    never another exception (hypothesis, 300 examples)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    dims = st.lists(st.integers(0, 300), min_size=0, max_size=5)
    dtypes = st.sampled_from(["torch.bfloat16", "torch.float16", "torch.float32", "torch.int8"])

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(dims, dtypes, st.booleans()), min_size=6, max_size=6))
    def run(specs):
        ts = [_T(shape, dtype, cuda) for shape, dtype, cuda in specs]
        try:
            host.check_args(*ts)
        except AttentionConfigError:
            pass

    run()


def test_a_compile_reports_the_verdict_its_trace_checked():
    """The kernel records (fingerprint, verdict) of the program it built while traced; the host's verdict
    table reads it from the kernel object (no global 'last looked up' state)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream

    kern = ab.FlashAttentionBackward(head_dim=64, causal=True)
    cute.compile(kern, *host.fake_operands(cutlass.BFloat16, 64), cutlass.Float32(0.125), make_fake_stream(),
                 options=_host.ptx_options("sm_90a"))
    table = {}
    _host.record_verdict(table, "key", kern)
    cpu = ab.build(ab.FlashAttentionBackward(head_dim=64, causal=True), verbose=False,
                   exhaustive_deadlock_race_check=False)
    assert table == {"key": "SAFE"} and kern.checked == (cpu.fingerprint, "SAFE")
    _host.record_verdict(table, "never compiled", ab.FlashAttentionBackward())
    assert table["never compiled"] == "not checked"


@pytest.mark.parametrize("group", [1, 2, 4, 5, 100])
def test_lpt_heads_orders_longest_first_within_each_group_of_heads(group):
    """``lpt_heads``: the same units (a bijection), group after group of ``lpt_heads`` (batch, K/V head) pairs
    (the last group smaller when they do not divide), longest-first within a group; refused without ``lpt``
    or below 1, naming the fix."""
    g = ab.FlashAttentionBackward(head_dim=128, causal=True, tma_stats=True, lpt=True, lpt_heads=group)
    plain = ab.FlashAttentionBackward(head_dim=128, causal=True, tma_stats=True)
    for x in (g, plain):
        x.grid_setup(seqlen_q=1000, seqlen_k=1000, heads=6, kv_heads=3, batches=3)  # 9 (batch, K/V head) pairs
    units = [g.unit_coords(u) for u in range(g.num_units)]
    assert sorted(units) == sorted(plain.unit_coords(u) for u in range(plain.num_units))
    pairs = [b * 3 + h for _, h, b in units]
    size = min(group, 9)
    groups = [pairs[i:i + 8 * size] for i in range(0, len(pairs), 8 * size)]  # 8 key blocks a pair
    assert [sorted(set(x)) for x in groups] == [list(range(i, min(i + size, 9))) for i in range(0, 9, size)]
    start = 0
    for x in groups:
        steps = [g.steps_of(u) for u in range(start, start + len(x))]
        assert steps == sorted(steps, reverse=True)
        start += len(x)
    for kw in (dict(lpt_heads=4), dict(lpt=True, lpt_heads=0), dict(lpt=True, lpt_heads=2.0)):
        with pytest.raises(ab.AttentionConfigError, match="lpt_heads=.*an int >= 1 with lpt=True"):
            ab.FlashAttentionBackward(head_dim=128, causal=True, **kw)


def test_the_lse_gradient_is_checked_against_the_lses_shape():
    """``dlse`` (what flash_attn's return_lse sends back): the LSE's shape, floating point, on q's device."""
    import types

    good = types.SimpleNamespace(shape=(2, 4, 33), device="cuda:0", is_floating_point=lambda: True,
                                 float=lambda: "as fp32")
    assert host.checked_dlse(good, (2, 4, 33), "cuda:0") == "as fp32"
    for bad, device in ((types.SimpleNamespace(shape=(2, 4, 32), device="cuda:0", is_floating_point=lambda: True),
                         "cuda:0"),
                        (types.SimpleNamespace(shape=(2, 4, 33), device="cuda:0", is_floating_point=lambda: False),
                         "cuda:0"),
                        (good, "cuda:1"), ("not a tensor", "cuda:0")):
        with pytest.raises(AttentionConfigError, match=re.escape("a floating-point (2, 4, 33) tensor on q's device")):
            host.checked_dlse(bad, (2, 4, 33), device)
