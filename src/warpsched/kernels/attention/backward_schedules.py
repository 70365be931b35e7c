"""The schedules of warpsched's FlashAttention backward (``warpsched.kernels.attention.backward``): the load
task's, the dQ writer warp's and the two gradient warp groups' (dQ over each warp group's own keys, or
with ``shared_ds`` over all keys through the swapped dS tiles; ``wg_order``: turns for the S / dP GEMMs;
``split_queries``: the queries split between the warp groups, P^T and dS^T swapped).
docs/attention.md, "Backward"."""
from __future__ import annotations

from warpsched import domain_loop, schedule


@schedule
def load_schedule(smem_kv, smem_qdo, steps):
    """K / V, then each step's Q / dO stage."""
    smem_kv.acquire()
    smem_kv.tma_load()
    smem_kv.commit()
    with domain_loop(0, steps, 1):
        smem_qdo.acquire()
        smem_qdo.tma_load()
        smem_qdo.commit()


def take_turn(order, wg):
    """``wg_order``: warp group 0 waits until 1 has issued its previous S / dP GEMMs, 1 until 0 has issued
    this step's (a 1-stage AsyncAsync pipeline with no data, as the forward's MathOrder), so one warp
    group's softmax / dS math runs while the other's GEMMs hold the tensor cores."""
    if order is not None:
        order.acquire() if wg == 0 else order.wait()


def pass_turn(order, wg):
    if order is not None:
        order.commit() if wg == 0 else order.release()


def read_stage_stats(smem_qdo, lse2, delta, split_stats, wg):
    """``tma_stats``: the step's LSE and delta from the Q / dO stage, or with ``split_stats`` the LSE alone
    (delta is read after P); ``wg``: the warp group, whose queries they are with ``split_queries``."""
    if split_stats:
        smem_qdo.load_lse(lse2=lse2, wg=wg)
    else:
        smem_qdo.load_stats(lse2=lse2, delta=delta, wg=wg)


@schedule
def grad_schedule(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine=None, ds_other=None, order=None,
                  overlap_scores=False, overlap_dq=False, tma_stats=False, tma_store_dkv=False, split_stats=False,
                  dq_parts=1, early_stats=False, dkv_in_ds=False):
    """One consumer warp group: the S / dP GEMMs, P and dS, the dV / dK GEMMs and the dQ GEMM of every
    step, retired before the step's Q / dO stage is released; K / V released after the last step.
    ``ds_mine`` / ``ds_other`` (``shared_ds``): dS goes through ``SmemDS`` and the dQ GEMM covers all 128
    keys for half of D: this warp group hands its dS tile to the other one and waits for the other's.
    ``order`` (``wg_order``): the warp groups take turns issuing their S / dP GEMMs (``take_turn``).
    ``overlap_scores``: S and dP in two commit groups, the queries' LSE / delta loaded while they run and P
    computed while dP's runs (``tma_stats``: read from the Q / dO stage). ``overlap_dq``: the dK GEMM issued
    last, dQ staged while it runs. ``tma_store_dkv``: dK and dV leave through the warp group's V half by TMA
    before K / V are released. ``split_stats`` (with ``tma_stats``): the LSE read before P, delta after it.
    ``dq_parts`` (head dim 256): dQ's columns in that many GEMMs in turn, each staged before the next is
    issued into the same accumulator. ``early_stats`` (with ``tma_stats``): the LSE / delta (with ``split_stats``
    the LSE alone) read from the stage before the S / dP GEMMs are issued, not among them (where the
    shared-memory loads waited behind the GEMMs' issue in the MIO queue: docs/attention.md, "The program").
    ``dkv_in_ds`` (with ``tma_store_dkv``): dK and dV leave through this warp group's dS tile, taken back once
    more after the last step, and the other warp group's tile is taken and returned once more to match."""
    regs, lse2, delta, idx = start_unit(smem_kv, smem_qdo, grads, overlap_scores)
    acc_s, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = regs
    with domain_loop(0, steps, 1):
        smem_qdo.wait()
        step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, order, overlap_scores, tma_stats,
                    split_stats, early_stats)
        if ds_mine is not None:
            ds_mine.acquire()  # the other warp group's previous dQ GEMM has read this tile
            ds_mine.store(ds=ds, acc_dp=acc_dp)
            ds_mine.commit()
        if overlap_dq:
            smem_qdo.mma_dv(p=p, acc_dv=acc_dv, wg=wg)
        else:
            smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
        if ds_other is not None:
            ds_other.wait()
            ds_other.gemm_operand()
            ds_mine.own_gemm_operand()  # this warp group's dQ GEMM reads its own tile too
        smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
        if overlap_dq:
            smem_qdo.mma_dk(ds=ds, acc_dk=acc_dk, wg=wg)
            smem_qdo.retire(pending=1)  # dV and dQ are done; dK's GEMM may still run
        else:
            smem_qdo.retire()
        if ds_other is not None:
            ds_other.release()
        if not overlap_dq:
            smem_qdo.release()
        smem_dq.acquire()  # the dQ writer has read this warp group's previous dQ
        smem_dq.store(acc_dq=acc_dq)
        for part in range(1, dq_parts):  # the accumulator's registers are free again once staged
            smem_kv.mma_dq(acc_dq=acc_dq, wg=wg, part=part)
            smem_kv.retire()
            smem_dq.store(acc_dq=acc_dq, part=part)
        smem_dq.commit()
        if overlap_dq:  # dQ went out to its stage while the dK GEMM ran
            smem_qdo.retire()
            smem_qdo.release()
    store_grads_at_end(smem_kv, grads, acc_dk, acc_dv, wg, ds_mine, ds_other, tma_store_dkv, dkv_in_ds)


@schedule
def grad_schedule_split(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, split_stats=False,
                        early_stats=False, own_first=False, own_regs=False):
    """``split_queries`` (head dim 256): this warp group's S^T / dP^T cover its 32 of the step's queries; its P^T
    and dS^T go into its ``SmemDS`` tiles, and once the other warp group's are in, the dV / dK GEMMs (this warp
    group's half of D, over all 64 queries) and the dQ GEMM's two parts (all 64 queries, over the keys) read both
    warp groups' tiles, each GEMM group declaring both. The other's tiles are released after the last dQ part
    has retired; this warp group's own are written again only after the other released them (``acquire``).
    ``own_first``: the dV / dK GEMMs' k-blocks of this warp group's own queries issued before the wait for the
    other's tiles, the other's k-blocks after it (two commit groups); ``own_regs``: those own k-blocks with A from
    the P^T / dS^T registers (after the tiles are written: a wgmma's A registers may not be read until it retires)."""
    regs, lse2, delta, idx = start_unit(smem_kv, smem_qdo, grads, True)
    _, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = regs
    with domain_loop(0, steps, 1):
        split_tiles(smem_kv, smem_qdo, grads, ds_mine, wg, regs, idx, lse2, delta, split_stats, early_stats)
        if own_regs:  # this warp group's queries' k-blocks from its registers (read by nothing else until the retire)
            smem_qdo.mma_dkv_own(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
            ds_other.wait()
            ds_other.gemm_operand()
            smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg, halves=(1 - wg,))
        elif own_first:  # this warp group's queries' k-blocks while the other warp group's tiles are on their way
            ds_mine.own_gemm_operand()
            smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg, halves=(wg,))
            ds_other.wait()
            ds_other.gemm_operand()
            smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg, halves=(1 - wg,))
        else:
            ds_other.wait()
            ds_other.gemm_operand()
            ds_mine.own_gemm_operand()
            smem_qdo.mma_dkv_shared(acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
        split_dq(smem_kv, smem_qdo, smem_dq, ds_mine, ds_other, acc_dq, wg)
    smem_kv.release()
    grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def split_tiles(smem_kv, smem_qdo, grads, ds_mine, wg, regs, idx, lse2, delta, split_stats, early_stats):
    """``split_queries``: a step's S^T / dP^T of this warp group's queries, then its P^T and dS^T into its tiles,
    handed to the other warp group."""
    _, acc_dp, _, _, _, p, ds = regs
    smem_qdo.wait()
    step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, None, True, True, split_stats, early_stats)
    ds_mine.acquire()  # the other warp group's GEMMs of the previous step have read these tiles
    ds_mine.store(ds=ds, acc_dp=acc_dp, p=p)
    ds_mine.commit()


def split_dq(smem_kv, smem_qdo, smem_dq, ds_mine, ds_other, acc_dq, wg):
    """``split_queries``: the step's dQ in two parts over both warp groups' dS tiles (each group declaring both), the
    Q / dO stage released once the first part and the dV / dK GEMMs have retired, the other's tiles once the
    second has."""
    ds_other.gemm_operand()
    ds_mine.own_gemm_operand()
    smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)
    smem_qdo.retire()
    smem_qdo.release()
    smem_dq.acquire()  # the dQ writer has read this warp group's previous dQ
    smem_dq.store(acc_dq=acc_dq)
    ds_other.gemm_operand()
    ds_mine.own_gemm_operand()
    smem_kv.mma_dq(acc_dq=acc_dq, wg=wg, part=1)
    smem_kv.retire()
    ds_other.release()
    smem_dq.store(acc_dq=acc_dq, part=1)
    smem_dq.commit()


def start_unit(smem_kv, smem_qdo, grads, stats):
    """A warp group's start of its unit: its registers, with ``stats`` (``overlap_scores``) those of the
    queries' LSE / delta too, the Q / dO ring's index, dK / dV zeroed, K / V waited. Returns
    (registers, lse2, delta, index); lse2 and delta are None without ``stats``."""
    regs = smem_kv.init()
    lse2 = delta = None
    if stats:
        lse2, delta = smem_kv.init_stats(acc_s=regs[0])
    idx = smem_qdo.init_index()
    grads.reset(acc_dv=regs[2], acc_dk=regs[3])
    smem_kv.wait()
    return regs, lse2, delta, idx


def step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, order, overlap_scores, tma_stats, split_stats,
                early_stats):
    """A step's S / dP GEMMs (issued in turn with ``order``), then P^T and dS^T in registers (with
    ``overlap_scores``: S and dP in two commit groups, P computed while dP's runs; the LSE / delta from the stage
    with ``tma_stats``, before the GEMMs with ``early_stats``, delta after P with ``split_stats``)."""
    acc_s, acc_dp, _, _, _, p, ds = regs
    take_turn(order, wg)
    if early_stats:
        read_stage_stats(smem_qdo, lse2, delta, split_stats, wg)
    smem_qdo.gemm_operand(idx=idx)
    if overlap_scores:
        smem_kv.mma_s(acc_s=acc_s, idx=idx, wg=wg)
        smem_qdo.gemm_operand_again()  # dP's group reads the stage too (dO), until its own retire
        smem_kv.mma_dp(acc_dp=acc_dp, idx=idx, wg=wg)
        pass_turn(order, wg)
        if tma_stats and not early_stats:
            read_stage_stats(smem_qdo, lse2, delta, split_stats, wg)
        elif not tma_stats:
            grads.stats(lse2=lse2, delta=delta)
        smem_kv.retire(pending=1)  # S is done; dP's GEMM may still run
        grads.probs(acc_s=acc_s, lse2=lse2)
        if split_stats:
            smem_qdo.load_delta(delta=delta, wg=wg)
        smem_kv.retire()
        grads.dscores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds, lse2=lse2, delta=delta)
    else:
        smem_kv.mma_sdp(acc_s=acc_s, acc_dp=acc_dp, idx=idx, wg=wg)
        pass_turn(order, wg)
        smem_kv.retire()
        grads.scores(acc_s=acc_s, acc_dp=acc_dp, p=p, ds=ds)


def store_grads_at_end(smem_kv, grads, acc_dk, acc_dv, wg, ds_mine, ds_other, tma_store_dkv, dkv_in_ds):
    """After the last step: dK and dV out (by TMA through the V half, or with ``dkv_in_ds`` through the dS tile
    taken back once more; else from registers) and K / V released."""
    if dkv_in_ds:
        smem_kv.release()
        ds_mine.acquire()  # the other warp group's last dQ GEMM has read this tile
        ds_mine.store_grads(acc_dk=acc_dk, acc_dv=acc_dv)
        ds_mine.commit()
        ds_other.wait()  # the other warp group's tile after its stores: the hand-overs stay paired
        ds_other.release()
    elif tma_store_dkv:
        smem_kv.store_grads(acc_dk=acc_dk, acc_dv=acc_dv, wg=wg)
        smem_kv.release()
    else:
        smem_kv.release()
        grads.store(acc_dk=acc_dk, acc_dv=acc_dv)


def issue_dq(smem_kv, ds_mine, ds_other, acc_dq, wg):
    """``dq_defer``: the dQ GEMM of the step whose dS tiles both warp groups committed last (the other's waited
    here; this warp group's own is the stage it last handed over)."""
    ds_other.wait()
    ds_other.gemm_operand()
    ds_mine.own_gemm_operand()
    smem_kv.mma_dq(acc_dq=acc_dq, wg=wg)


def stage_dq(smem_dq, acc_dq):
    smem_dq.acquire()  # the dQ writer has read this warp group's previous dQ
    smem_dq.store(acc_dq=acc_dq)
    smem_dq.commit()


@schedule
def grad_schedule_deferred(smem_kv, smem_qdo, grads, smem_dq, steps, wg, ds_mine, ds_other, tma_stats=False,
                           tma_store_dkv=False, split_stats=False, early_stats=False, dkv_in_ds=False,
                           overlap_dq=False, **_):
    """``dq_defer`` (``shared_ds``): a step's dQ GEMM is issued at the next step, after that step's
    dS is computed and before its dS tile is written (two stages per warp group), and the last step's at the
    step's end. By then the other warp group committed its tile of the step long ago, so neither waits for the
    other's dS of the step it is on; the dV / dK GEMMs and the deferred dQ GEMM retire together (with
    ``overlap_dq``, the dK GEMM issued last and the deferred dQ staged while it runs).

    The issue is unconditional (ptxas serializes every wgmma of a kernel whose wgmma is in flight across a
    branch): at the first step it reads an empty hand-over of both warp groups and its result is dropped."""
    regs, lse2, delta, idx = start_unit(smem_kv, smem_qdo, grads, True)
    _, acc_dp, acc_dv, acc_dk, acc_dq, p, ds = regs
    with domain_loop(0, steps, 1) as d:
        with d.first_iter():  # an empty tile handed over, so that every step has a previous one to read
            ds_mine.acquire()
            ds_mine.commit()
        smem_qdo.wait()
        step_scores(smem_kv, smem_qdo, grads, wg, regs, idx, lse2, delta, None, True, tma_stats, split_stats,
                    early_stats)
        issue_dq(smem_kv, ds_mine, ds_other, acc_dq, wg)  # the previous step's dQ (at the first, dropped)
        ds_mine.acquire()  # the other warp group's dQ GEMM of two steps back has read this stage
        ds_mine.store(ds=ds, acc_dp=acc_dp)
        ds_mine.commit()
        if overlap_dq:  # the previous step's dQ staged while this step's dK GEMM runs
            smem_qdo.mma_dv(p=p, acc_dv=acc_dv, wg=wg)
            smem_qdo.mma_dk(ds=ds, acc_dk=acc_dk, wg=wg)
            smem_qdo.retire(pending=1)  # the previous step's dQ GEMM and the dV GEMM
            ds_other.release()
            with d.every(1, start=1):
                stage_dq(smem_dq, acc_dq)
            smem_qdo.retire()
            smem_qdo.release()
        else:
            smem_qdo.mma_dkv(p=p, ds=ds, acc_dv=acc_dv, acc_dk=acc_dk, wg=wg)
            smem_qdo.retire()  # the dV / dK GEMMs and the previous step's dQ GEMM
            ds_other.release()
            smem_qdo.release()
            with d.every(1, start=1):
                stage_dq(smem_dq, acc_dq)
        with d.last_iter():  # this step's dQ: no next step to issue it
            issue_dq(smem_kv, ds_mine, ds_other, acc_dq, wg)
            smem_kv.retire()
            ds_other.release()
            stage_dq(smem_dq, acc_dq)
    store_grads_at_end(smem_kv, grads, acc_dk, acc_dv, wg, ds_mine, ds_other, tma_store_dkv, dkv_in_ds)


@schedule
def dq_writer_schedule(smem_dq0, smem_dq1, steps, finish=False):
    """The dQ writer warp: per step, each warp group's dQ part added into dQaccum by TMA. ``finish``
    (``dq_finish``): once both of a step's adds are complete, the writer counts the key block on the Q block
    and, if it counted last, converts the Q block's dQ through the second warp group's stage it still holds."""
    with domain_loop(0, steps, 1):
        for smem_dq in (smem_dq0, smem_dq1):
            smem_dq.wait()
            smem_dq.reduce_add()
            if finish and smem_dq is smem_dq1:
                smem_dq.finish()
            smem_dq.release()
