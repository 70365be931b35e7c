"""FlashAttention backward for Hopper (H100 / H200, sm_90a), written as a warpsched program.

Given Q, K, V, dO (B, H, S, D; K / V may have fewer heads: GQA), the forward's log-sum-exp and
delta = rowsum(dO * O) (fp32, (B, H, S_q)), it computes dK and dV (in the input dtype) and adds dQ
into an fp32 accumulation buffer (B, H, S_q rounded up to 64, D), which the host converts. bf16 or
fp16; head dim 64, 128 or 256 (at 256 the warp groups split D, and with ``split_queries`` each computes S^T /
dP^T for half of the step's queries); any S_q, S_k >= 1; causal top-left aligned, as the forward.

A work unit is a 128-key block of one (batch, K/V head); one CTA per unit (CTAs with the longest
loops, the first key blocks of a causal problem, first). The CTA keeps its K and V in SMEM and walks
every (query head of the K/V head's group, 64-row Q block) that sees its keys, so dK and dV (summed
over the group's query heads) stay in registers until the end. 384 threads in three warp groups:

    LoadTask (warp 0, 24 regs)  kv.acquire; TMA K, V (two 64-key halves each); kv.commit
                                for each step (query head, Q block): qdo.acquire; TMA Q_i, dO_i; qdo.commit
    Grad0 (warps 4-7, 240)      keys [64 wg, 64 wg + 64) of the block:  zero dK, dV; kv.wait
    Grad1 (warps 8-11, 240)     for each step: qdo.wait; S^T = K_w Q_i^T, dP^T = V_w dO_i^T (wgmma); retire
                                               P^T, dS^T (grads.scores; dS^T also into SMEM)
                                               dV += P^T dO_i, dK += dS^T Q_i (wgmma, A from registers)
                                               dQ_w = dS_w K_w (wgmma from SMEM); retire; qdo.release
                                               dQaccum += dQ_w (TMA reduce-add; times scale on the host)
                                kv.release; dK * scale, dV -> global

The step count per unit is read at run time (every count >= 0 is proven: a causal key block past
the last query has no step and writes zeros). docs/attention.md, "Backward".
"""
from __future__ import annotations

import math
from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from warpsched import PipelineConfig, SmemAllocation, SmemAllocator, Task, TaskManager, threads, trip_count

from .. import _host
from .backward_resources import Grads, MathOrder, SmemDQ, SmemDS, SmemKV, SmemQdO
from .backward_schedules import (dq_writer_schedule, grad_schedule, grad_schedule_deferred, grad_schedule_split,
                                 load_schedule)
from .config import AttentionConfig, switches_on
from .forward import AttentionConfigError
from .poly_exp2 import refusal as poly_exp2_refusal
from .masks import check as check_masks
from .masks import window_bounds
from .backward_math import HALF
from .backward_layouts import FLAT_ROW, BackwardLayouts
from .backward_units import BLOCK_M, BackwardUnits
from . import declared, dq_finish, dq_order

BWD_HEAD_DIMS = (64, 128, 256)


# ---------------------------------------------------------------------------------- program
def build(g=None, *, steps=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` on the CPU and for the kernel while it is traced.

    ``g``: the FlashAttentionBackward being traced (None on the CPU: bf16, hd128, not causal).
    ``steps``: the CTA's runtime step count (None on the CPU); every count >= 0 is proven.
    The schedules are this module's names (``grad_schedule`` ...): a test plants a bug by replacing one
    (tests/_planting.py), not through a parameter of this function."""
    if g is None:
        g = FlashAttentionBackward()
    n = trip_count("steps", steps, min=0)
    kv_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=1, num_bytes=g.kv_bytes)
    # partial_stage: an 80-row block's LSE / delta fill 80 of each stage's 96 floats (128-byte stage starts)
    qdo_cfg = PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=g.qdo_stages, num_bytes=g.qdo_bytes,
        **({"partial_stage": True} if g.tma_stats and g.stats_stride != g.block_m else {}))
    smem_kv = SmemKV(name="SmemKV", pipeline_config=kv_cfg, g=g)
    smem_qdo = SmemQdO(name="SmemQdO", pipeline_config=qdo_cfg, g=g)
    load = Task(name="LoadTask", src_resources=[], dst_resources=[smem_kv, smem_qdo], warp_idx=0, num_warps=1,
                num_registers=g.producer_regs, schedule=load_schedule(smem_kv, smem_qdo, n))
    dq_cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=g.dq_stages, producer_group=threads(128),
                                                            consumer_group=threads(32))
    smem_dqs = [SmemDQ(name=f"SmemDQ{wg}", pipeline_config=dq_cfg, g=g, wg=wg) for wg in range(2)]
    finish = {"finish": True} if g.dq_finish else {}  # the dQ finish's work (a planted twin may not take it)
    writer = Task(name="DQWriter", src_resources=list(smem_dqs), dst_resources=[], warp_idx=1, num_warps=1,
                  num_registers=g.producer_regs, schedule=dq_writer_schedule(*smem_dqs, n, **finish))
    tasks, graph, grads_all = [load, writer], {smem_kv: [], smem_qdo: []}, []
    smem_dss = []
    if g.exchange:
        ds_cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=g.ds_stages, producer_group=threads(128),
                                                                consumer_group=threads(128))
        smem_dss = [SmemDS(name=f"SmemDS{wg}", pipeline_config=ds_cfg, g=g, wg=wg) for wg in range(2)]
    order = None
    if g.wg_order:
        turn = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(128),
                                                              consumer_group=threads(128))
        order = MathOrder(name="MathOrder", pipeline_config=turn)
        graph[order] = []
    for wg in range(2):
        grads = Grads(name=f"Grads{wg}", g=g, wg=wg)
        grads_all.append(grads)
        src, dst = [smem_kv, smem_qdo], [grads, smem_dqs[wg]]
        turn = {} if order is None else {"order": order}
        turn.update({n: True for n in ("overlap_scores", "overlap_dq", "tma_stats", "tma_store_dkv", "split_stats",
                                       "early_stats", "dkv_in_ds") if getattr(g, n)})
        if g.dq_parts > 1:
            turn["dq_parts"] = g.dq_parts
        if order is not None:
            (dst if wg == 0 else src).append(order)
        if g.split_queries:
            sched = grad_schedule_split(smem_kv, smem_qdo, grads, smem_dqs[wg], n, wg, smem_dss[wg], smem_dss[1 - wg],
                                        own_first=g.own_first, own_regs=g.own_regs,
                                        **{k: v for k, v in turn.items() if k in ("split_stats", "early_stats")})
        elif g.shared_ds:
            grad = grad_schedule_deferred if g.dq_defer else grad_schedule
            sched = grad(smem_kv, smem_qdo, grads, smem_dqs[wg], n, wg, smem_dss[wg], smem_dss[1 - wg], **turn)
        else:
            sched = grad_schedule(smem_kv, smem_qdo, grads, smem_dqs[wg], n, wg, **turn)
        if g.exchange:  # this warp group writes its SmemDS tiles and reads the other's
            src, dst = src + [smem_dss[1 - wg]], dst + [smem_dss[wg]]
            graph[smem_dss[wg]] = [smem_kv, smem_qdo]
        tasks.append(Task(name=f"Grad{wg}", src_resources=src, dst_resources=dst, warp_idx=4 * (1 + wg), num_warps=4,
                          num_registers=g.consumer_regs, schedule=sched))
        graph[grads] = [smem_kv, smem_qdo]
        graph[smem_dqs[wg]] = [smem_kv, smem_qdo]
    smem = SmemAllocator()
    if g.split_queries:  # the dQ GEMM's A operand spans both warp groups' dS tiles
        smem.add_adjacent(g.alloc_ds)
    for resource in (smem_kv, smem_qdo, *grads_all, *smem_dss, *smem_dqs):
        smem.add_resource(resource)
    smem.compute_layout()
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=smem, verbose=verbose,
                       **manager_options)


# ---------------------------------------------------------------------------------- kernel
class FlashAttentionBackward(BackwardUnits, BackwardLayouts):
    """Compile-time configuration (dtype, head dim, causal, Q / dO stages) and the kernel."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, causal=False, qdo_stages=None, producer_regs=24,
                 consumer_regs=240, shared_ds=False, wg_order=False, window_size=None, mask_mod=None, softcap=None,
                 varlen=False, deterministic=False, overlap_scores=False, overlap_dq=False, tma_stats=False,
                 tma_store_dkv=False, dq_stages=1, block_m=BLOCK_M, flat_dq=False, flat_boxes=1,
                 stage_first=False, lpt=False, lpt_heads=None, early_stats=False, dq_finish=False,
                 dkv_in_ds=False, dq_defer=False, live_units=False, unit_in_regs=False, split_queries=False,
                 own_first=False, own_regs=False, poly_exp2=0, poly_interleave=False, ds_stages=1,
                 grid3d=False, mask_first=False):
        if dtype not in (cutlass.BFloat16, cutlass.Float16):
            raise AttentionConfigError(f"dtype {dtype.__name__}: supported are BFloat16 and Float16")
        if head_dim not in BWD_HEAD_DIMS:
            raise AttentionConfigError(f"head_dim={head_dim}: the backward supports head dims {BWD_HEAD_DIMS}")
        if qdo_stages is None:  # head dim 256: one Q / dO stage beside K, V and the dQ tiles (208 KB of SMEM)
            qdo_stages = 1 if head_dim == 256 else 2
        if qdo_stages not in (1, 2, 3):
            raise AttentionConfigError(f"qdo_stages={qdo_stages}: expected 1, 2 or 3")
        self.dtype, self.head_dim, self.causal, self.qdo_stages = dtype, head_dim, bool(causal), qdo_stages
        # head dim 256 (d_split): both warp groups take the CTA's 64 keys and each owns one 128-column half of
        # D for dK, dV and dQ (64 keys x 256 columns of dK and dV would need 256 registers per thread); both
        # compute the full S and dP over D, so the program is the 64 / 128 one with the data split by columns
        self.d_split = head_dim == 256
        if self.d_split and (shared_ds or tma_store_dkv):
            raise AttentionConfigError(f"head_dim=256 with shared_ds={shared_ds}, tma_store_dkv={tma_store_dkv}: "
                                       "at head dim 256 the warp groups split D, not keys; both options need the "
                                       "64 / 128 split (shared_ds=False, tma_store_dkv=False)")
        self.key_halves = 1 if self.d_split else 2  # 64-key halves of the CTA's K / V block
        # split_queries (head dim 256): warp group w computes S^T / dP^T for the step's queries [32 w, 32 w + 32)
        # only, writes its P^T and dS^T into its SMEM tiles (SmemDS), and both warp groups' dV / dK / dQ GEMMs read
        # both warp groups' tiles: the S / dP GEMMs are no longer done twice (10.5 MFLOP a step, not 14.7)
        if split_queries and (not self.d_split or not tma_stats or overlap_dq or wg_order or block_m != BLOCK_M):
            raise AttentionConfigError(
                f"split_queries=True with head_dim={head_dim}, tma_stats={tma_stats}, overlap_dq={overlap_dq}, "
                f"wg_order={wg_order}, block_m={block_m}: the query split is built for head dim 256's 64-row steps "
                "with the LSE / delta from the stage (head_dim=256, tma_stats=True, block_m=64), without overlap_dq "
                "or wg_order; else split_queries=False")
        self.split_queries = bool(split_queries)
        if (own_first or own_regs) and not self.split_queries:
            raise AttentionConfigError(f"own_first={own_first}, own_regs={own_regs} with split_queries=False: they "
                                       "order the query split's dV / dK GEMMs (split_queries=True, or both False)")
        # split_queries: the own queries' dV / dK k-blocks with A from the P^T / dS^T registers, not the tiles
        # (implies own_first)
        self.own_regs = bool(own_regs)
        own_first = own_first or own_regs
        # split_queries: the dV / dK GEMMs' k-blocks of the warp group's own queries issued before it waits for
        # the other warp group's tiles (backward_schedules.grad_schedule_split)
        self.own_first = bool(own_first)
        if block_m not in (64, 80, 128):
            raise AttentionConfigError(f"block_m={block_m}: expected 64, 80 or 128 query rows per step")
        if block_m == 128 and (head_dim != 64 or not tma_stats):
            raise AttentionConfigError(f"block_m=128 with head_dim={head_dim}, tma_stats={tma_stats}: 128-row Q blocks "
                                       "fit the registers at head dim 64, with the LSE / delta read from the stage "
                                       "(tma_stats=True); else block_m=64")
        if block_m == 80 and (head_dim != 128 or varlen or deterministic or not (shared_ds and flat_dq and tma_stats)
                              or dq_stages != 1):
            raise AttentionConfigError(
                f"block_m=80 with head_dim={head_dim}, varlen={varlen}, deterministic={deterministic}, shared_ds="
                f"{shared_ds}, flat_dq={flat_dq}, tma_stats={tma_stats}, dq_stages={dq_stages}: 80-row Q blocks "
                "compute dQ transposed (dQ^T = K^T dS^T, 80 is no WGMMA M), for unpacked batches at head dim 128, with "
                "shared_ds=True, flat_dq=True, tma_stats=True and dq_stages=1 (two dQ stages do not fit in SMEM "
                "beside 80-row Q / dO stages); else block_m=64")
        self.block_m = block_m  # query rows per step (Q block)
        self.sdp_cols = block_m // 2 if self.split_queries else block_m  # queries of one warp group's S^T / dP^T
        # 80-row Q blocks (FA3's / FA4's non-causal head dim 128 tile): dQ^T = K^T dS^T, each warp group 64
        # columns of D (WGMMA M) by the block's 80 queries (N)
        self.dq_swap = block_m == 80
        self.d_cols = head_dim // 2 if self.d_split else head_dim  # dK / dV columns per warp group
        # the forward's sliding window: a key block's steps run over the Q blocks that see it (first_m_block,
        # end_m_block); only the blocks the window's edges cross are masked (backward_math.grads_of_scores)
        self.window_left, self.window_right = window_bounds(window_size, self.causal, False)
        # the forward's mask_mod and softcap: P recomputed as the forward made it, dS through the cap's derivative
        check_masks(mask_mod, softcap, False)
        self.mask_mod, self.softcap = mask_mod, softcap
        if shared_ds and (head_dim, block_m) not in ((128, 64), (128, 80), (64, 128)):
            raise AttentionConfigError(f"shared_ds=True at head dim {head_dim} with block_m={block_m}: it splits "
                                       "dQ in two halves, one per warp group: D's at head dim 128 (block_m=64 or 80), "
                                       "the Q block's rows at head dim 64 (block_m=128)")
        # shared_ds: the warp groups swap dS tiles and each computes half of dQ over all 128 keys (one dQ
        # reduce-add per step instead of two partial sums): half of D's columns at head dim 128, half of the
        # Q block's rows (ds_rows) with 128-row blocks at head dim 64
        self.shared_ds = bool(shared_ds)
        self.ds_rows = self.shared_ds and block_m == 128
        self.dq_cols = head_dim // 2 if (self.shared_ds and not self.ds_rows) or self.d_split else head_dim
        self.dq_rows = HALF if self.ds_rows else block_m  # dQ rows (queries) per warp group
        # d_split: the warp group's 128 dQ columns as two 64-column GEMMs in turn into one 32-register
        # accumulator; a 64 x 128 one beside dK and dV made ptxas serialize every WGMMA (C7512)
        self.dq_parts = 2 if self.d_split else 1
        self.dq_part_cols = self.dq_cols // self.dq_parts
        self.wg_order = bool(wg_order)  # the warp groups take turns issuing their S / dP GEMMs
        # P computed while the dP GEMM runs (LSE / delta loaded under both); dQ staged while the dK GEMM runs
        self.overlap_scores, self.overlap_dq = bool(overlap_scores or tma_stats), bool(overlap_dq)
        # dK / dV through the V halves and a TMA store each; varlen: a sequence's last, partial 64 keys from
        # registers (the TMA would write the next sequence's rows: backward_math.store_dkv_tma)
        self.tma_store_dkv = bool(tma_store_dkv)
        if dkv_in_ds and not (self.ds_rows and self.tma_store_dkv):
            raise AttentionConfigError(
                f"dkv_in_ds=True with head_dim={head_dim}, block_m={block_m}, shared_ds={shared_ds}, tma_store_dkv="
                f"{tma_store_dkv}: dK and dV fill a warp group's dS tile at head dim 64 with 128-row Q blocks "
                "(head_dim=64, block_m=128, shared_ds=True, tma_store_dkv=True); else dkv_in_ds=False")
        self.dkv_in_ds = bool(dkv_in_ds)  # both staged at once in the dS tile, one wait for their stores
        if dq_defer and (not self.shared_ds or self.dq_swap or not self.overlap_scores or wg_order or deterministic
                         or dq_finish):
            raise AttentionConfigError(
                f"dq_defer=True with shared_ds={shared_ds}, block_m={block_m}, tma_stats={tma_stats}, wg_order="
                f"{wg_order}, deterministic={deterministic}, dq_finish={dq_finish}: the dQ GEMM one step late is "
                "built for dQ shared between the warp groups (shared_ds=True, block_m 64 or 128, tma_stats=True), "
                "without wg_order, deterministic or dq_finish; else dq_defer=False")
        # a step's dQ GEMM issued at the next step, from dS tiles of two stages (backward_schedules)
        self.dq_defer = bool(dq_defer)
        if ds_stages not in (1, 2) or (ds_stages == 2 and not self.shared_ds):
            raise AttentionConfigError(f"ds_stages={ds_stages} with shared_ds={shared_ds}: the swapped dS tiles take "
                                       "1 or 2 stages, 2 only with shared_ds=True; else ds_stages=1")
        self.ds_stages = 2 if self.dq_defer or ds_stages == 2 else 1  # 2: step i + 1's dS written while i's is read
        self.exchange = self.shared_ds or self.split_queries  # the warp groups swap SMEM tiles (SmemDS)
        self.ds_parts = 2 if self.ds_rows else 1  # the dQ GEMM's A tiles per dS stage (row halves with ds_rows)
        if dq_stages not in (1, 2):
            raise AttentionConfigError(f"dq_stages={dq_stages}: expected 1 or 2")
        self.dq_stages = dq_stages  # dQ tiles per warp group on their way to the writer warp
        if flat_dq and varlen and not tma_stats:
            raise AttentionConfigError("flat_dq=True with varlen and tma_stats=False: the flat layout needs whole dQ "
                                       "tiles, which a packed batch has where its rows are padded per sequence as "
                                       "tma_stats pads the LSE / delta (tma_stats=True, or flat_dq=False)")
        # dQaccum and the SMEM dQ tiles in the accumulator's register order (backward_math.stage_dq): each
        # thread's 16-byte chunks side by side with its neighbours', so staging dQ is 16-byte stores at fixed
        # offsets from one address, not a swizzled address per element pair; the host's conversion
        # (backward_post) puts the rows and columns back in place
        self.flat_dq = bool(flat_dq)
        # flat_dq: each tile added by this many TMA boxes (tiles of ``dq_tile_floats / flat_boxes`` values)
        if flat_boxes not in (1, 2, 4, 8) or (flat_boxes > 1 and not self.flat_dq):
            raise AttentionConfigError(f"flat_boxes={flat_boxes} with flat_dq={self.flat_dq}: expected 1, 2, 4 or 8, "
                                       "and more than 1 only with flat_dq=True")
        self.flat_boxes = flat_boxes
        # the S / dP GEMMs' B operand: the Q / dO stage sliced before it is partitioned, so its address is
        # computed once a step (backward_resources._gemm_over_d; docs/attention.md, "The program")
        self.stage_first = bool(stage_first)
        # LSE / delta loaded by TMA with Q / dO from the pre-pass's padded copies (backward_prep.StatsPrep;
        # varlen: VarlenStatsPrep, each sequence's rows from a block boundary, backward_units.padded_block0)
        self.tma_stats = bool(tma_stats)
        # 128-row Q blocks: LSE and delta (32 registers each; 20 with 80 rows) are read from the stage one at a
        # time, each just before its use, so they never sit beside S, dP, dK and dV at once (80 rows with both
        # read early: 144 bytes of spills at 240 registers)
        self.split_stats = self.tma_stats and self.block_m in (80, 128)
        # the LSE / delta (split_stats: the LSE) read from the stage before the S / dP GEMMs are issued
        # (backward_schedules.grad_schedule)
        if early_stats and not self.tma_stats:
            raise AttentionConfigError(f"early_stats=True with tma_stats={self.tma_stats}: it moves the stage's LSE / "
                                       "delta reads, which need tma_stats=True")
        self.early_stats = bool(early_stats)
        if (why := poly_exp2_refusal(poly_exp2)) is not None:
            raise AttentionConfigError(why)
        self.poly_exp2 = poly_exp2
        if poly_interleave and not poly_exp2:
            raise AttentionConfigError("poly_interleave=True with poly_exp2=0: it orders the polynomial exponentials "
                                       "among MUFU's; set poly_exp2=k (k >= 2) or drop it")
        self.poly_interleave = bool(poly_interleave)  # each polynomial waits for the MUFU value before it
        self.varlen = bool(varlen)  # packed sequences: FlashAttentionBackwardVarlen (backward_units.seq_bounds)
        if deterministic and self.varlen:
            raise AttentionConfigError("deterministic=True with varlen: not yet; the packed backward adds dQ by "
                                       "fp32 reduce-adds (deterministic=False)")
        # dQ added in key-block order per Q block (attention.dq_order): FlashAttentionBackwardDeterministic
        self.deterministic = bool(deterministic)
        # causal: the grid's units longest first across every (batch, K/V head) (backward_units.unit_coords)
        # the units' order and where a CTA reads its unit (backward_units.BackwardUnits.unit_order_options)
        self.unit_order_options(lpt, lpt_heads, live_units, unit_in_regs, grid3d, dq_finish)
        self.mask_first = bool(mask_first)  # P's mask on the exponent, before the exp2 (backward_math.probs)
        # dQ converted inside the kernel by the key block that adds last into each Q block (attention.dq_finish),
        # not by a post-pass over the whole fp32 buffer
        if dq_finish and (not self.flat_dq or self.dq_swap or self.d_split or flat_boxes != 1 or self.varlen
                          or self.deterministic or self.window_left is not None or self.window_right is not None):
            raise AttentionConfigError(
                f"dq_finish=True with flat_dq={self.flat_dq}, block_m={block_m}, head_dim={head_dim}, flat_boxes="
                f"{flat_boxes}, varlen={self.varlen}, deterministic={self.deterministic}, window_size={window_size}: "
                "the in-kernel dQ finish converts whole flat 64 x 64 tiles of a dense batch (flat_dq=True, head dim "
                "64 or 128, block_m 64 or 128, flat_boxes=1), where every Q block has a key block that adds into it "
                "(no sliding window) and the adds' order is free (deterministic=False); else dq_finish=False")
        self.dq_finish = bool(dq_finish)
        self.block_n = HALF * self.key_halves
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs
        self.threads = 384
        elem = dtype.width // 8
        self.kv_bytes = 2 * self.block_n * head_dim * elem  # K and V of the block
        # Q and dO of a step (and with tma_stats its 64 fp32 LSE and delta values)
        self.qdo_bytes = 2 * self.block_m * head_dim * elem + (2 * self.block_m * 4 if self.tma_stats else 0)
        self.alloc_k = SmemAllocation("sK", dtype=dtype, count=self.block_n * head_dim, alignment=1024)
        self.alloc_v = SmemAllocation("sV", dtype=dtype, count=self.block_n * head_dim, alignment=1024)
        self.alloc_q = SmemAllocation("sQ", dtype=dtype, count=qdo_stages * self.block_m * head_dim, alignment=1024)
        self.alloc_do = SmemAllocation("sdO", dtype=dtype, count=qdo_stages * self.block_m * head_dim, alignment=1024)
        # each stage's LSE / delta from a 128-byte boundary (a TMA destination's alignment): 80 rows take 96 floats
        self.stats_stride = -(-self.block_m // 32) * 32
        self.alloc_lse, self.alloc_delta = (SmemAllocation(n, dtype=cutlass.Float32, count=qdo_stages * self.stats_stride,
                                                           alignment=128) for n in ("sLSE", "sDelta"))
        # split_queries: a warp group's dS tile holds its 32 queries' rows, and the two tiles lie back to back
        # (SmemAllocator.add_adjacent), so the dQ GEMM reads them as one 64-row A operand; P^T's halves beside
        self.alloc_ds = [SmemAllocation(f"sdS{wg}", dtype=dtype, count=self.ds_stages * HALF * self.sdp_cols,
                                        alignment=1024)
                         for wg in range(2)]
        self.alloc_p = ([SmemAllocation(f"sP{wg}", dtype=dtype, count=HALF * self.sdp_cols, alignment=1024)
                         for wg in range(2)] if self.split_queries else [])
        self.alloc_dq = [SmemAllocation(f"sdQ{wg}", dtype=cutlass.Float32,
                                        count=dq_stages * self.dq_rows * self.dq_cols, alignment=1024)
                         for wg in range(2)]
        self._check_smem_fit()
        self.seqlen_q = self.seqlen_k = self.heads = self.kv_heads = self.batches = None  # set while tracing
        self.config = AttentionConfig(
            "backward", dtype.__name__, head_dim, self.causal, self.block_m, self.block_n, qdo_stages, self.window_left,
            self.window_right, getattr(mask_mod, "__name__", None), softcap, switches_on(self))

    # ---- which part of a block a warp group takes
    def key_half(self, wg):
        """The 64-key half of the CTA's K / V block that warp group ``wg``'s S / dP GEMMs read and its dK / dV
        rows cover: its own, or with ``d_split`` the block's only one (both warp groups share it)."""
        return 0 if self.d_split else wg

    def dq_block(self, m_block, wg):
        """(row block, column block) of warp group ``wg``'s dQ tile (``dq_rows`` x ``dq_cols``) in dQaccum for
        Q block ``m_block``: ``ds_rows`` splits the Q block's rows, ``shared_ds`` at head dim 128 and
        ``d_split`` its columns."""
        rows = m_block * 2 + wg if self.dq_rows < self.block_m else m_block
        return rows, (wg if self.dq_cols < self.head_dim else 0)

    def flat_tile_index(self, batch, head, row_block, col_block):
        """``flat_dq``, dense batches: the index of dQ tile (``row_block``, ``col_block``) of (batch, head) in the
        flat dQaccum (tiles in (batch, head, row block, column block) order)."""
        row_blocks = self.m_blocks * (self.block_m // self.dq_rows)
        return ((batch * self.heads + head) * row_blocks + row_block) * (self.head_dim // self.dq_cols) + col_block

    def dq_operands(self, wg, half):
        """``shared_ds``: (the part of dS tile ``half``, the ``sKt`` stage) warp group ``wg``'s dQ GEMM reads:
        with ``ds_rows`` its own row half against K's key half ``half``, else the whole tile against K's
        (key half ``half``, D half ``wg``) block."""
        return (wg, half) if self.ds_rows else (0, 2 * half + wg)

    def dq_kt_view(self, wg, part):
        """Without ``shared_ds``: the ``sKt`` stage warp group ``wg``'s dQ GEMM ``part`` reads: its own key
        half, or with ``d_split`` the 64-column quarter ``part`` of its half of D."""
        return 2 * wg + part if self.d_split else wg

    def _dq_target(self, mdQacc):
        """What the dQ reduce-add's TMA tiles: (S, D, H, B), or with ``flat_dq`` the buffer as (FLAT_ROW,
        values / FLAT_ROW, boxes): tile ((batch * H + head) * row blocks + row block) * column blocks + column
        block is ``dq_tile_floats`` contiguous values, ``flat_boxes`` boxes (the host allocates it contiguous)."""
        if not self.flat_dq:
            return self._sdhb(mdQacc)
        box = self.dq_box_floats
        return cute.make_tensor(mdQacc.iterator, cute.make_layout(
            (FLAT_ROW, box // FLAT_ROW, cute.size(mdQacc) // box), stride=(1, FLAT_ROW, box)))

    @staticmethod
    def _sdhb(t):
        """(B, H, S, D) -> (S, D, H, B), the mode order TMA tiles."""
        return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[2, 3, 1, 0]))

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream)

    def _launch(self, mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mCuQ=None, mCuK=None,
                max_seqlen_q=None, max_seqlen_k=None, mSem=None, mdQ=None, mUnits=None):
        """The launch both entry points trace (``FlashAttentionBackwardVarlen`` passes the cu_seqlens)."""
        lay = self._layouts()
        sdp_mma, dkv_mma, dq_mma = self._mmas()
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tile = (HALF, self.head_dim)  # a 64-key half of K / V (and the dK / dV stores)
        atoms = [cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, self._sdhb(t), cute.slice_(lay[name], (None, None, 0)),
                                                        rows)
                 for t, name, rows in ((mQ, "sQ", (self.block_m, self.head_dim)), (mK, "sK", tile), (mV, "sV", tile),
                                       (mdO, "sdO", (self.block_m, self.head_dim)))]
        tma_dq, tdQ = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyReduceBulkTensorTileS2GOp(), self._dq_target(mdQacc),
            cute.slice_(lay["sdQ"], (None, None, 0)),
            (FLAT_ROW, self.dq_box_floats // FLAT_ROW) if self.flat_dq else (self.dq_rows, self.dq_cols))
        stats = (None, None, None, None)
        if cutlass.const_expr(self.tma_stats):  # (S_pad, H, B) views of the padded LSE / delta, 64-value tiles
            stats = tuple(x for t in (mLSE, mDelta) for x in cute.nvgpu.cpasync.make_tiled_tma_atom(
                g2s, cute.make_tensor(t.iterator, cute.select(t.layout, mode=[2, 1, 0])),
                cute.make_layout(self.block_m), (self.block_m,)))
        stores = (None, None, None, None)
        if cutlass.const_expr(self.tma_store_dkv):  # dK, dV from a V half (the load's layout and tile)
            stores = tuple(x for t in (mdK, mdV) for x in cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), self._sdhb(t), cute.slice_(lay["sV"], (None, None, 0)),
                tile))
        if cutlass.const_expr(self.varlen):
            self.grid_setup(max_seqlen_q, max_seqlen_k, cute.size(mQ, mode=[1]), cute.size(mK, mode=[1]),
                            cute.size(mCuQ, mode=[0]) - 1, mUnits)
        else:
            self.grid_setup(cute.size(mQ, mode=[2]), cute.size(mK, mode=[2]), cute.size(mQ, mode=[1]),
                            cute.size(mK, mode=[1]), cute.size(mQ, mode=[0]))
        self.kernel(atoms[0][0], atoms[0][1], atoms[1][0], atoms[1][1], atoms[2][0], atoms[2][1], atoms[3][0],
                    atoms[3][1], mLSE, mDelta, tma_dq, tdQ, self._sdhb(mdK), self._sdhb(mdV), sdp_mma,
                    dkv_mma, dq_mma, scale, mCuQ, mCuK, mUnits, max_seqlen_q, max_seqlen_k, mSem, mdQ,
                    mdQacc if self.dq_finish else None, *stats, *stores).launch(
                        grid=[self.n_blocks, self.kv_heads, self.batches] if self.grid3d else [self.num_units, 1, 1],
                        block=[self.threads, 1, 1], min_blocks_per_mp=1, stream=stream)

    @cute.kernel
    def kernel(self, tma_q: cute.CopyAtom, mQ: cute.Tensor, tma_k: cute.CopyAtom, mK: cute.Tensor,
               tma_v: cute.CopyAtom, mV: cute.Tensor, tma_do: cute.CopyAtom, mdO: cute.Tensor, mLSE: cute.Tensor,
               mDelta: cute.Tensor, tma_dq: cute.CopyAtom, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor,
               sdp_mma: cute.TiledMma, dkv_mma: cute.TiledMma, dq_mma: cute.TiledMma, scale: cutlass.Float32,
               mCuQ: Optional[cute.Tensor], mCuK: Optional[cute.Tensor], mUnits: Optional[cute.Tensor],
               max_seqlen_q: Optional[cutlass.Int32],
               max_seqlen_k: Optional[cutlass.Int32], mSem: Optional[cute.Tensor], mdQ: Optional[cute.Tensor],
               mdQsum: Optional[cute.Tensor], tma_lse: Optional[cute.CopyAtom],
               mLSEt: Optional[cute.Tensor], tma_delta: Optional[cute.CopyAtom], mDeltat: Optional[cute.Tensor],
               tma_dk: Optional[cute.CopyAtom], mdKt: Optional[cute.Tensor], tma_dv: Optional[cute.CopyAtom],
               mdVt: Optional[cute.Tensor]):
        bid, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            for atom in (tma_q, tma_k, tma_v, tma_do, tma_dq):
                cute.nvgpu.cpasync.prefetch_descriptor(atom)
            if cutlass.const_expr(self.tma_stats):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_lse)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_delta)
            if cutlass.const_expr(self.tma_store_dkv):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_dk)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_dv)
        # mQ / mK are the TMA views: (S, D, H, B)
        if cutlass.const_expr(self.varlen):
            self.cu_q, self.cu_k = mCuQ, mCuK
            self.grid_setup(max_seqlen_q, max_seqlen_k, cute.size(mQ, mode=[2]), cute.size(mK, mode=[2]),
                            cute.size(mCuQ, mode=[0]) - 1, mUnits)
            if cutlass.const_expr(self.unit_in_regs):
                self._hold(bid)  # units.HeldUnit: the CTA's one unit
        else:
            self.grid_setup(cute.size(mQ, mode=[0]), cute.size(mK, mode=[0]), cute.size(mQ, mode=[2]),
                            cute.size(mK, mode=[2]), cute.size(mQ, mode=[3]))
        mgr = build(self, steps=self.steps_of(bid), verbose=False)  # checked here, while tracing
        if cutlass.const_expr(self.deterministic):
            dq_order.require_safe(self)  # the hand-over between CTAs, by the grid checker
        if cutlass.const_expr(self.dq_finish):
            dq_finish.require_safe(self)
        self.checked = _host.checked(mgr)  # the verdict its compile reports (attention.backward_host.VERDICT_OF)
        declared.reset(self)  # the GEMMs read only declared stages (attention.declared)
        mgr.setup_resources_and_tasks()
        zeros = self._mmas()
        sdp_zero, dq_zero = zeros[0], zeros[2]
        sdp_zero.set(warpgroup.Field.ACCUMULATE, False)
        dq_zero.set(warpgroup.Field.ACCUMULATE, False)
        extra = {}
        if cutlass.const_expr(self.own_regs):  # the own queries' dV / dK k-blocks, A from registers
            extra["dkv_rs_mma"] = self._dkv_regs_mma()
        for m in (sdp_mma, dkv_mma, dq_mma, *extra.values()):
            m.set(warpgroup.Field.ACCUMULATE, True)
        lay = self._layouts()
        view = mgr.smem_allocator.view
        s = {name: view(alloc, lay[name]) for name, alloc in (("sK", self.alloc_k), ("sV", self.alloc_v),
                                                              ("sQ", self.alloc_q), ("sdO", self.alloc_do))}
        s.update(sKt=view(self.alloc_k, lay["sKtA" if self.dq_swap else "sKt"]), sQt=view(self.alloc_q, lay["sQt"]),
                 sdOt=view(self.alloc_do, lay["sdOt"]))
        for wg in cutlass.range_constexpr(2):
            if cutlass.const_expr(self.split_queries):  # 32-query tiles: P^T beside dS^T, both as A operands too
                s.update({f"sPt{wg}": view(self.alloc_p[wg], lay["sdSt"]),
                          f"sPA{wg}": view(self.alloc_p[wg], lay["sPA"]),
                          f"sdSA{wg}": view(self.alloc_ds[wg], lay["sPA"])})
            else:
                s[f"sdS{wg}"] = view(self.alloc_ds[wg], lay["sdSB" if self.dq_swap else "sdS"])
            s[f"sdSt{wg}"] = view(self.alloc_ds[wg], lay["sdSt"])
            s[f"sdQ{wg}"] = view(self.alloc_dq[wg], lay["sdQ"])
            if cutlass.const_expr(self.dkv_in_ds):  # dV, dK as two tiles per dS stage in the V halves' layout
                s[f"sdKV{wg}"] = view(self.alloc_ds[wg], lay["sdKV"])
        if cutlass.const_expr(self.split_queries):  # the two warp groups' dS tiles as one (64 queries, keys) tile
            s["sdS_both"] = mgr.smem_allocator.view_span(self.alloc_ds, lay["sdS"])
        if cutlass.const_expr(self.tma_stats):
            stats = cute.make_layout((self.block_m, self.qdo_stages), stride=(1, self.stats_stride))
            s.update(sLSE=view(self.alloc_lse, stats), sDelta=view(self.alloc_delta, stats),
                     tma_lse=tma_lse, mLSEt=mLSEt, tma_delta=tma_delta, mDeltat=mDeltat)
        if cutlass.const_expr(self.tma_store_dkv):
            s.update(tma_dk=tma_dk, mdKt=mdKt, tma_dv=tma_dv, mdVt=mdVt)
        mgr.run(tma_q=tma_q, tma_k=tma_k, tma_v=tma_v, tma_do=tma_do, mQ=mQ, mK=mK, mV=mV, mdO=mdO, mLSE=mLSE,
                mDelta=mDelta, tma_dq=tma_dq, mdQacc=mdQacc, mdK=mdK, mdV=mdV, sdp_mma=sdp_mma, sdp_mma_zero=sdp_zero,
                dkv_mma=dkv_mma, dq_mma=dq_mma, dq_mma_zero=dq_zero, unit=bid, scale=scale, mSem=mSem, mdQ=mdQ,
                mdQsum=mdQsum, scale_log2=scale * math.log2(math.e), **s, **extra)


class FlashAttentionBackwardVarlen(FlashAttentionBackward):
    """The backward over packed variable-length sequences: q, dO (1, H, total_q, D), k, v, dK, dV (1, H_kv,
    total_k, D) views of (total, heads, D) tensors, LSE and delta (1, H, total_q), dQaccum (1, H, total_q
    rounded up to 64, D), the int32 offsets ``mCuQ`` / ``mCuK`` (B + 1) and the longest sequences' lengths.
    The program is the backward's (backward_units.seq_bounds picks the rows and keys)."""

    def __init__(self, **options):
        super().__init__(varlen=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor, mCuQ: cute.Tensor,
                 mCuK: cute.Tensor, max_seqlen_q: cutlass.Int32, max_seqlen_k: cutlass.Int32, scale: cutlass.Float32,
                 stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mCuQ, mCuK, max_seqlen_q,
                     max_seqlen_k)


class FlashAttentionBackwardVarlenLive(FlashAttentionBackwardVarlen):
    """``FlashAttentionBackwardVarlen`` over ``live_units.SequenceOrderTable``'s units (``live_units=True``): the
    table ``mUnits`` (int32, ``live_units.backward_table_size`` words) comes after the offsets, and the grid is
    its capacity; a CTA past the table's count has no step (``backward_units.BackwardUnits.unit_coords``)."""

    def __init__(self, **options):
        super().__init__(live_units=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor, mCuQ: cute.Tensor,
                 mCuK: cute.Tensor, mUnits: cute.Tensor, max_seqlen_q: cutlass.Int32, max_seqlen_k: cutlass.Int32,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mCuQ, mCuK, max_seqlen_q,
                     max_seqlen_k, mUnits=mUnits)


class FlashAttentionBackwardDeterministic(FlashAttentionBackward):
    """The backward with dQ added in a fixed order (``deterministic=True``, attention.dq_order): the
    arguments of ``FlashAttentionBackward`` and ``mSem``, one Int32 word per (batch, query head, 64-row Q
    block), zero at launch. Same program (the intra-CTA schedules do not change); the hand-over between
    CTAs is ``dq_order.dq_protocol``'s, proven by the grid checker."""

    def __init__(self, **options):
        super().__init__(deterministic=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor, mSem: cute.Tensor,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mSem=mSem)


class FlashAttentionBackwardFinish(FlashAttentionBackward):
    """The backward that writes dQ itself (``dq_finish=True``, attention.dq_finish): the arguments of
    ``FlashAttentionBackward``, ``mSem`` (one Int32 word per (batch, query head, Q block), zero at launch: the
    pre-pass zeroes them) and ``mdQ`` (B, H, S_q, D) in the input dtype. Same program but for the writer warp's
    finish work; the hand-over between CTAs is ``dq_finish.finish_protocol``'s, proven by the grid checker."""

    def __init__(self, **options):
        super().__init__(**dict(options, dq_finish=True))

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor,
                 mDelta: cute.Tensor, mdQacc: cute.Tensor, mdK: cute.Tensor, mdV: cute.Tensor, mSem: cute.Tensor,
                 mdQ: cute.Tensor, scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mdO, mLSE, mDelta, mdQacc, mdK, mdV, scale, stream, mSem=mSem, mdQ=mdQ)
