"""FlashAttention forward for Hopper (H100 / H200, sm_90a), written as a warpsched program.

O = softmax(Q K^T * scale) V per (batch, head), with the log-sum-exp of every row; Q, K, V in the
layout torch SDPA uses, (B, H, S, D) (K and V may have fewer heads: grouped-query attention);
bf16 or fp16; head dim 64, 128 or 256; any S_q, S_k >= 1 (tails are masked); causal is top-left
aligned, as ``scaled_dot_product_attention(is_causal=True)``.

A work unit is a 128-row Q block of one (batch, head) (``wgs=3``, hd64: 192 rows, a third consumer
warp group). Persistent (default): one CTA per SM walks a static WorkQueue of units (order:
attention/units.py); ``persistent=False``: one CTA per unit. 384 threads in three warp groups:

    LoadTask  (warp 0, 24 regs)   per unit: q.acquire; TMA both 64-row Q tiles; q.commit
                                            for j < kv_tiles: k.acquire; TMA K_j; k.commit
                                                              v.acquire; TMA V_j; v.commit
    Softmax0  (warps 4-7, 240)    per unit: reset O / max / sum; q.wait
    Softmax1  (warps 8-11, 240)             for j < kv_tiles:
                                              order.acquire (Softmax0) | order.wait (Softmax1)
                                              k.wait; S_j = Q K_j^T; j >= 1: v.wait; O += P_{j-1} V_{j-1}
                                              order.commit | order.release
                                              k.retire(1); k.release; softmax_j (mask, max, exp2, sum)
                                              j >= 1: v.retire(0); v.release
                                              P_j -> 16-bit registers; O *= exp2(max change)
                                            q.release; v.wait; O += P V (last); v.retire; v.release
                                            o.store (O / sum -> global, LSE)

MathOrder (a 1-stage AsyncAsync pipeline, no data) makes the warp groups issue their GEMMs in turn,
so one's softmax runs while the other's GEMMs hold the tensor cores; inside a warp group softmax_j
overlaps O += P_{j-1} V_{j-1}. The K/V loop length is read per unit (``kv_tiles_of``; without
persistence a ``trip_count``): the checker proves every count >= 1 and every number of units per CTA.
Resources and their work: attention/resources.py; epilogues: attention/epilogue.py; host side:
attention.host (``TUNED`` defaults). docs/attention.md.
"""
from __future__ import annotations

import math
from typing import Optional

from .. import _host
from .._device import H200_SMS
from . import declared
from . import live_units
from . import masks as amasks
from .masks import AttentionConfigError  # noqa: F401 (where the kernels and hosts import it from)
from .ahead import load_ahead_schedule, softmax_ahead_schedule
from .schedules import load_schedule, softmax_schedule, unit_fetch_schedule
from .schedules import next_tile as _next_tile  # noqa: F401 (tests write twins with them)
from .schedules import tile_loop as _tiles  # noqa: F401
from .epilogue import GmemO
from .resources import MathOrder, Scores, SmemK, SmemQ, SmemV
from .register_math import WG_ROWS
from .config import AttentionConfig
from .poly_exp2 import refusal as poly_exp2_refusal
from .units import WorkUnits

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum

from warpsched import (LAUNCH_COUNTER, PipelineConfig, SmemAllocation, SmemAllocator, Task, TaskManager,
                       TileSchedulerConfig, WorkQueue, threads, trip_count)

HEAD_DIMS = (64, 128, 256)
# What attention.host.prepare() / ops.attention compile without tuning keywords; each option is
# correct for bf16 / fp16, hd 64 / 128, causal or not, and was faster on the H200: the Q ring with a
# TMA-store epilogue, O from its own SMEM tile (o_buffer), causal units in long / short pairs over
# few heads (causal_pairs). The measurements: docs/attention.md, one section per option.
TUNED = {"q_stages": 2, "tma_store_o": True, "o_buffer": True, "causal_pairs": True}


# ---------------------------------------------------------------------------------- program
class AttentionTask(Task):
    """A task whose K/V loop length is a per-work-tile domain provider (persistent kernels)."""

    g = None

    def kv_tiles_of(self, tile_idx):
        """K/V tiles of this work tile (causal: up to the diagonal; the checker takes every count >= 1)."""
        return self.g.kv_tiles_of(tile_idx[0])


def build_tuned(verbose=True, **manager_options):
    """The program ``warpsched.ops.attention`` runs by default (``TUNED``: Q ring, O buffer and
    TMA store, causal pairs): ``warpsched check examples/hopper/attention.py:build_tuned``."""
    return build(FlashAttention(**TUNED), verbose=verbose, **manager_options)


def build(g=None, *, kv_tiles=None, units_per_cta=None, verbose=True, **manager_options):
    """The program, for ``warpsched check`` on the CPU and for the kernel while it is traced.

    ``g``: the FlashAttention being traced (None on the CPU: the default configuration).
    ``kv_tiles``: one CTA per tile: the CTA's runtime K/V tile count (None on the CPU); every
    count >= 1 is proven. Persistent: the count is read per work tile (``kv_tiles_of``; every
    count >= 1 per tile), and ``units_per_cta`` (the CTA's number of work tiles) is declared:
    every count >= 1. The schedules are this module's names (``softmax_schedule`` ...): a test plants
    a bug by replacing one (tests/_planting.py), not through a parameter of this function."""
    if g is None:
        g = FlashAttention()
    wq = units = None
    if g.persistent:
        units = trip_count("units_per_cta", units_per_cta, min=0 if g.live_units else 1)
        if g.dynamic_units:  # a scheduler warp fetches each next unit into a stage every task reads: with one
            # stage it claims unit k + 1 once every task has started unit k; with n, n units ahead (docs/attention.md)
            # (load_fetches_units: the load warp fetches, once a unit's loads are issued; no scheduler warp)
            readers = (32 if g.load_fetches_units else 64) + 128 * g.wgs
            wq = WorkQueue(name="UnitQueue", pipeline_config=PipelineConfig.create_clc_fetch_async_pipeline_cfg(
                num_stages=g.dynamic_units, producer_group=threads(1), consumer_group=threads(readers),
                cta_layout_vmnk=(1, 1, 1, 1)),
                tile_scheduler_config=TileSchedulerConfig(
                    num_tiles=g.num_units, counter=LAUNCH_COUNTER if g.unit_counter is None else g.unit_counter))
        else:
            wq = WorkQueue(name="WorkQueue", tile_scheduler_config=TileSchedulerConfig(num_tiles=g.num_units))
    else:
        kv = trip_count("kv_tiles", kv_tiles)
    q_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=g.q_stages, num_bytes=g.q_bytes)
    k_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=g.kv_stages, num_bytes=g.kv_bytes)
    v_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=g.kv_stages, num_bytes=g.kv_bytes)
    smem_q = SmemQ(name="SmemQ", pipeline_config=q_cfg, g=g)
    smem_k = SmemK(name="SmemK", pipeline_config=k_cfg, g=g)
    smem_v = SmemV(name="SmemV", pipeline_config=v_cfg, g=g)
    turn = PipelineConfig.create_async_async_pipeline_cfg(num_stages=1, producer_group=threads(128),
                                                          consumer_group=threads(128))
    orders = [MathOrder(name="MathOrder" if g.wgs == 2 else f"MathOrder{wg}{wg + 1}", pipeline_config=turn)
              for wg in range(g.wgs - 1)]  # warp group wg hands the tensor cores to wg + 1
    ring_order = MathOrder(name="MathOrder02", pipeline_config=turn) if g.ring_order else None  # 2 hands it to 0
    queue = [wq] if wq is not None else []
    fetching = queue if g.load_fetches_units else []
    load = AttentionTask(name="LoadTask", src_resources=queue, dst_resources=[smem_q, smem_k, smem_v] + fetching,
                         warp_idx=0, num_warps=1, num_registers=g.producer_regs)
    load.g = g
    if g.unit_overlap:
        load.schedule = load_ahead_schedule(smem_q, smem_k, smem_v, load.kv_tiles_of, wq, units)
    else:
        load.schedule = load_schedule(smem_q, smem_k, smem_v, load.kv_tiles_of if g.persistent else kv, wq, units,
                                      **({"k_ahead": True} if g.k_ahead else {}),
                                      **({"fetch": True} if g.load_fetches_units else {}))
    tasks, outs = [load], []
    if g.dynamic_units and not g.load_fetches_units:  # warp 1 of the load warp group (warps 1-3 are otherwise idle)
        sched = AttentionTask(name="UnitTask", src_resources=queue, dst_resources=queue, warp_idx=1, num_warps=1,
                              num_registers=g.producer_regs)
        sched.g = g
        sched.schedule = unit_fetch_schedule(wq, units)
        tasks.append(sched)
    graph = {smem_q: list(queue), smem_k: list(queue), smem_v: list(queue),
             **{o: [] for o in orders + [ring_order] if o is not None}}
    for wg in range(g.wgs):
        scores = Scores(name=f"Scores{wg}", g=g)
        out = GmemO(name=f"GmemO{wg}", g=g, wg=wg)
        outs.append(out)
        order_in = orders[wg - 1] if wg > 0 else None
        order_out = orders[wg] if wg < g.wgs - 1 else None
        order_io = ([order_in] if order_in else [], [order_out] if order_out else [])
        if g.ring_order and wg != 1:  # 0 produces MathOrder02, 2 consumes it
            order_io[1 - wg // 2].append(ring_order)
        task = AttentionTask(name=f"Softmax{wg}", src_resources=[smem_q, smem_k, smem_v] + queue + order_io[0],
                             dst_resources=[scores] + ([] if g.o_through_q else [out]) + order_io[1],
                             warp_idx=4 * (1 + wg), num_warps=4,
                             num_registers=g.consumer_regs)
        task.g = g
        ring = {"q_ring": True} if g.q_stages > 1 else {}  # the default program stays as it was
        if g.early_rescale:
            ring["early_rescale"] = True
        if g.try_waits:
            ring["try_waits"] = True
        if g.o_through_q:
            ring["tma_store_o"] = True
        if g.o_buffer:
            ring["drain_o"] = True
        if g.wgs > 2:
            ring.update(chain=True, order_out=order_out, **({"ring": ring_order} if g.ring_order and wg != 1 else {}))
        if g.unit_overlap:
            task.schedule = softmax_ahead_schedule(
                smem_q, smem_k, smem_v, scores, orders[0], out, task.kv_tiles_of, wg, wq, units)
        else:
            task.schedule = softmax_schedule(
                smem_q, smem_k, smem_v, scores, orders[0] if g.wgs == 2 else order_in, out,
                task.kv_tiles_of if g.persistent else kv, wg, g.overlap, wq, units, **ring)
        tasks.append(task)
        graph[scores] = [smem_k]
        if not g.o_through_q:  # else O leaves through SmemQ.store_o
            graph[out] = [smem_v] + queue
    smem = SmemAllocator.for_resources(smem_q, smem_k, smem_v, *(outs if g.o_buffer else []))
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=smem, verbose=verbose,
                       **manager_options)


# ---------------------------------------------------------------------------------- kernel
class FlashAttention(WorkUnits):
    """Compile-time configuration (dtype, head dim, causal, K/V tile, stages) and the kernel."""

    def __init__(self, dtype=cutlass.BFloat16, head_dim=128, causal=False, block_n=128, kv_stages=None,
                 producer_regs=24, consumer_regs=None, overlap=True, persistent=True, max_ctas=H200_SMS, q_stages=1,
                 tma_store_o=False, causal_pairs=False, o_buffer=False, wgs=2, ring_order=False, pinned_exp2=None,
                 unit_overlap=False, mask_mod=None, softcap=None, window_size=None, split_kv=False,
                 varlen=False, paged=False, pv_wait_fence=None, lpt_heads=0, k_ahead=False, early_rescale=False,
                 max_chains=1, slice_stages=False, live_units=False, lpt_units=False, unit_in_regs=False,
                 dynamic_units=False, load_fetches_units=False, try_waits=False, poly_exp2=0):
        if dtype not in (cutlass.BFloat16, cutlass.Float16):
            raise AttentionConfigError(f"dtype {dtype.__name__}: supported are BFloat16 and Float16")
        if head_dim not in HEAD_DIMS:
            raise AttentionConfigError(f"head_dim={head_dim}: supported head dims are {HEAD_DIMS}")
        if block_n not in (64, 80, 128, 176, 192):
            raise AttentionConfigError(f"block_n={block_n}: expected 64, 80, 128, 176 or 192")
        self.dtype, self.head_dim, self.causal, self.block_n = dtype, head_dim, bool(causal), block_n
        if wgs not in (2, 3) or (wgs == 3 and head_dim != 64):
            raise AttentionConfigError(f"wgs={wgs}: expected 2 consumer warp groups, or 3 at head dim 64 (a 192-row "
                                       "Q block; 160 registers a thread do not hold hd128's O and S)")
        self.wgs = wgs  # consumer warp groups, 64 Q rows each: a work unit is 64 * wgs rows
        if ring_order and wgs != 3:
            raise AttentionConfigError(f"ring_order=True with wgs={wgs}: the strict 0 -> 1 -> 2 -> 0 turn needs wgs=3")
        self.ring_order = bool(ring_order)  # wgs=3: warp group 0's next turn also waits for warp group 2's
        # P's exp2 computed once (amath.exp2_pinned): the compiler evaluates it twice at wgs=3's 160 registers
        # and at head dim 256 (its 128 O registers a thread), which halves the softmax's MUFU rate there
        self.pinned_exp2 = (wgs == 3 or head_dim == 256) if pinned_exp2 is None else bool(pinned_exp2)
        self.block_m = wgs * WG_ROWS
        # the register file (65,536) over 128 * (wgs + 1) threads: 24 for the load warp group
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs or (240 if wgs == 2 else 160)
        self.overlap = bool(overlap)  # intra-warpgroup overlap of softmax_j with O += P_{j-1} V_{j-1}
        self.persistent, self.max_ctas = bool(persistent), max_ctas
        if q_stages not in (1, 2) or (q_stages == 2 and not self.persistent):
            raise AttentionConfigError(f"q_stages={q_stages}: expected 1, or 2 with persistent=True (a Q ring "
                                       "prefetches the next work unit's Q)")
        self.q_stages = q_stages
        # tma_store_o with one Q stage: the next unit's Q load waits for this unit's O store (FlashAttention-3's
        # head dim 256 epilogue, where no second Q stage fits); with two it does not
        self.tma_store_o = bool(tma_store_o)
        if o_buffer and not self.tma_store_o:
            raise AttentionConfigError("o_buffer=True is a TMA-store epilogue through a dedicated SMEM buffer: it "
                                       "needs tma_store_o=True (and q_stages=2)")
        # o_buffer: O leaves through a per-warp-group SMEM tile of its own, so Q is released after its
        # last S GEMM and the TMA store's SMEM reads are waited for only before the next store
        self.o_buffer = bool(o_buffer)
        self.o_through_q = self.tma_store_o and not self.o_buffer
        if unit_overlap and not (self.o_buffer and self.overlap and wgs == 2):
            raise AttentionConfigError("unit_overlap=True issues the next unit's first S GEMM with the last P V GEMM: "
                                       "it needs o_buffer=True (with tma_store_o, q_stages=2, persistent), "
                                       "overlap=True and wgs=2")
        self.unit_overlap = bool(unit_overlap)  # S runs one K/V tile ahead across units (attention/ahead.py)
        if split_kv and (self.tma_store_o or self.unit_overlap):
            raise AttentionConfigError("split_kv=True writes fp32 partial O from registers: it takes neither "
                                       "tma_store_o / o_buffer nor unit_overlap (pass tma_store_o=False)")
        # split_kv: a Q block's K/V tiles in runs, one unit each; O and LSE per run in fp32, (splits * B, H,
        # S_q, ...), which the host combines (attention.split_kv); the run count is the out's batch / q's
        self.split_kv = bool(split_kv)
        if varlen and (self.tma_store_o or self.unit_overlap or self.split_kv):
            raise AttentionConfigError("varlen=True stores each sequence's rows from registers (a TMA store of a "
                                       "64-row tile would write into the next sequence): it takes neither "
                                       "tma_store_o / o_buffer, unit_overlap nor split_kv (pass tma_store_o=False)")
        self.varlen = bool(varlen)  # packed sequences, FlashAttentionVarlen's cu_seqlens (units.seq_bounds)
        if live_units and not (self.varlen and self.persistent):
            raise AttentionConfigError(f"live_units=True with varlen={self.varlen}, persistent={self.persistent}: the "
                                       "live-unit table (attention.live_units) lists a packed batch's Q blocks for a "
                                       "persistent grid; pass varlen=True and persistent=True")
        # live_units: the units are the blocks that hold rows (live_units.LiveUnitTable), not max_seqlen_q's blocks
        # for every sequence; a CTA may have none, so the work-tile count is declared >= 0 (build)
        self.live_units = bool(live_units)
        if lpt_units and not self.live_units:
            raise AttentionConfigError("lpt_units=True orders the live-unit table longest first: it needs "
                                       "live_units=True (FlashAttentionVarlenLive)")
        # lpt_units: the table longest first (live_units.LongestFirstTable), dealt to the CTAs in snake rounds, or
        # with dynamic_units handed out by the queue in that order
        self.lpt_units = bool(lpt_units)
        if dynamic_units and not (self.live_units and not unit_overlap):
            raise AttentionConfigError(f"dynamic_units=True with live_units={self.live_units}, unit_overlap="
                                       f"{unit_overlap}: the live units are handed out in their order by the table's "
                                       "counter word; pass live_units=True, unit_overlap=False")
        # dynamic_units: a CTA takes the next live unit when it is free (a WorkQueue on the table's counter word,
        # lower/tile_queues.py), not every ctas-th one: short units no longer leave CTAs idle at the end. An int
        # is the queue's stage count (True: one): a CTA claims up to that many units beyond the one its warp
        # groups run, so its load warp may start that far ahead
        if isinstance(dynamic_units, bool) or dynamic_units in (0, 1, 2, 3, 4):
            self.dynamic_units = int(dynamic_units)
        else:
            raise AttentionConfigError(f"dynamic_units={dynamic_units!r}: expected False, True (one stage) or the "
                                       "unit queue's stage count, 1 to 4")
        # load_fetches_units: the load warp claims the next unit once it has issued a unit's loads (the claim
        # follows the loads, not the warp groups' epilogues), in place of the scheduler warp
        if load_fetches_units and not self.dynamic_units:
            raise AttentionConfigError("load_fetches_units=True fetches dynamic_units' queue: pass dynamic_units too")
        self.load_fetches_units = bool(load_fetches_units)
        if unit_in_regs and not self.varlen:
            raise AttentionConfigError("unit_in_regs=True with varlen=False: an unpacked batch's bounds are constants "
                                       "(unit_in_regs=False)")
        # unit_in_regs: a unit's coordinates and sequence bounds read once when its tile starts (units.hold_unit)
        self.unit_in_regs = bool(unit_in_regs)
        if paged and (self.varlen or self.unit_overlap):
            raise AttentionConfigError("paged=True reads K / V by page (FlashAttentionPaged): it takes neither varlen "
                                       "nor unit_overlap")
        self.paged = bool(paged)  # K / V in a paged cache, one block_n-key page per tile (units.physical_tile)
        self.out_dtype = cutlass.Float32 if self.split_kv else dtype
        amasks.check(mask_mod, softcap, self.unit_overlap)
        # a sliding window: the K/V tiles a unit visits start and end with it (units.kv_first_tile)
        self.window_left, self.window_right = amasks.window_bounds(window_size, self.causal, self.unit_overlap)
        self.mask_mod, self.softcap = mask_mod, softcap  # attention.masks: traced into the softmax's tile
        # the P V GEMM's wait stays after the softmax (resources.fenced_wgmma_wait); False: ptxas places it.
        # None: at head dim 128 and 256, where it measured 1.02-1.08x; at 64 the unfenced kernel was 1.01-1.07x
        self.pv_wait_fence = (head_dim != 64) if pv_wait_fence is None else bool(pv_wait_fence)
        if pinned_exp2 is None and self.unit_overlap:  # its hd128 loop otherwise evaluates 45 of 66 exp2 twice
            self.pinned_exp2 = True
        # causal + persistent: a CTA's consecutive slots hold a long and a short Q block of one head
        # (equal work per pair) and a round covers few heads, whose K / V stay in L2 (unit_coords); packed
        # batches with live_units: two neighbouring blocks of a sequence's zigzag (units._paired_live_coords)
        self.causal_pairs = (bool(causal_pairs) and self.causal and self.persistent
                             and not (self.split_kv or self.lpt_units or self.dynamic_units
                                      or (self.varlen and not self.live_units)))
        # causal: longest-first within groups of lpt_heads (batch, head) pairs (units.grouped_longest_first);
        # with persistent=False the hardware hands the next unit to the first free SM, so each group's short
        # units fill its tail while the CTAs that run at once read about lpt_heads heads' K / V
        # packed batches whose queue hands out the longest-first table (lpt_units with dynamic_units): the table's
        # blocks longest first within groups of lpt_heads K/V heads (0: all), causal or not (units._live_coords)
        queued_lpt = self.lpt_units and bool(self.dynamic_units)
        if (not isinstance(lpt_heads, int) or isinstance(lpt_heads, bool) or lpt_heads < 0
                or (lpt_heads and not queued_lpt and (not self.causal or self.causal_pairs or self.live_units))):
            raise AttentionConfigError(f"lpt_heads={lpt_heads!r} with causal={self.causal}, causal_pairs="
                                       f"{self.causal_pairs}, live_units={self.live_units}: expected an int >= 0, and "
                                       "> 0 only for a causal kernel without causal_pairs (its pair rounds are another "
                                       "order) or for packed units queued longest first (lpt_units=True with "
                                       "dynamic_units)")
        self.lpt_heads = lpt_heads
        if (k_ahead or early_rescale) and self.unit_overlap:
            raise AttentionConfigError("k_ahead / early_rescale reorder the default schedules' loads / O rescale: "
                                       "unit_overlap=True has schedules of its own (attention/ahead.py)")
        if early_rescale and not self.overlap:
            raise AttentionConfigError("early_rescale=True rescales O between the S and the P V GEMMs of one turn: "
                                       "it needs overlap=True")
        # k_ahead: the load task issues K_j before V_{j-1} (FlashAttention-3's order), so K no longer waits
        # behind the late release of a V stage (schedules.load_schedule)
        self.k_ahead = bool(k_ahead)
        # early_rescale: O *= corr_{j-1} while the S_j GEMM runs, before O += P_{j-1} V_{j-1} is issued, instead
        # of after the P V GEMM's wait (FlashAttention-3 at head dim 256: 128 multiplies a thread off the path
        # from that wait to the next turn's GEMMs)
        self.early_rescale = bool(early_rescale)
        # try_waits: each wait of the K / V / MathOrder stages in the softmax loop is led by a try_wait, so the
        # compiled wait is one non-blocking probe and a branch around the blocking loop (FA4's form), not the
        # blocking loop's probe, sleep and re-probe inline; code generation only, the barrier protocol is the same
        if try_waits and self.unit_overlap:
            raise AttentionConfigError("try_waits=True leads the default softmax schedule's waits: unit_overlap=True "
                                       "has schedules of its own (attention/ahead.py)")
        self.try_waits = bool(try_waits)
        if type(max_chains) is not int or max_chains not in (1, 2, 4, 8):
            raise AttentionConfigError(f"max_chains={max_chains!r}: expected 1, 2, 4 or 8 running maxima per row")
        self.max_chains = max_chains  # the softmax's row max in that many independent chains (register_math)
        if (why := poly_exp2_refusal(poly_exp2)) is not None:
            raise AttentionConfigError(why)
        self.poly_exp2 = poly_exp2
        # slice_stages: the GEMMs take their SMEM stage before the k-blocks, so each k-block's WGMMA descriptor
        # is one 64-bit add to the stage's (FA4's form) instead of both halves rebuilt per k-block (the profile
        # of docs/attention.md "Head dim 128, long and non-causal": 66 M more uniform instructions than FA4);
        # code generation only, the program is the same; measured 0.967x the default, so off
        self.slice_stages = bool(slice_stages)
        self.num_units = None  # runtime, set while tracing
        self.threads = 128 * (wgs + 1)
        self.qk_tile = (WG_ROWS, block_n, head_dim)  # (M, N, K) of S = Q K^T
        self.pv_tile = (WG_ROWS, head_dim, block_n)  # (M, N, K) of O += P V
        elem = dtype.width // 8
        self.q_bytes = self.block_m * head_dim * elem  # one Q stage: every warp group's tile
        self.kv_bytes = block_n * head_dim * elem
        capacity = cutlass.memory.get_smem_capacity_in_bytes("sm_90")
        self.o_bytes = self.block_m * head_dim * elem if o_buffer else 0  # every warp group's O tile
        fit = (capacity - 1024 - q_stages * self.q_bytes - self.o_bytes) // (2 * self.kv_bytes)
        self.kv_stages = kv_stages or min(4, fit)
        if not 2 <= self.kv_stages <= fit:
            hint = (" (head dim 256 fits with block_n=64 or 80, q_stages=1 and no o_buffer: "
                    "attention.host.tuned_options)"
                    if head_dim == 256 else "")
            raise AttentionConfigError(f"kv_stages={self.kv_stages}: K and V rings of {self.kv_bytes} bytes a stage "
                                       f"fit {fit} stages next to Q; need 2 <= stages <= {fit}{hint}")
        self.alloc_q = SmemAllocation("sQ", dtype=dtype, count=q_stages * self.block_m * head_dim, alignment=1024)
        self.alloc_k = SmemAllocation("sK", dtype=dtype, count=block_n * head_dim * self.kv_stages, alignment=1024)
        self.alloc_v = SmemAllocation("sV", dtype=dtype, count=block_n * head_dim * self.kv_stages, alignment=1024)
        self.alloc_o = [SmemAllocation(f"sO{wg}", dtype=dtype, count=WG_ROWS * head_dim, alignment=1024)
                        for wg in range(wgs)]  # o_buffer: one per warp group (the checker sees them apart)
        switches = ("overlap", "persistent", "tma_store_o", "o_buffer", "causal_pairs", "ring_order", "pinned_exp2",
                    "unit_overlap", "split_kv", "varlen", "live_units", "lpt_units", "paged", "pv_wait_fence",
                    "k_ahead", "early_rescale", "unit_in_regs", "dynamic_units", "load_fetches_units",
                    "try_waits")
        self.config = AttentionConfig(
            "forward", dtype.__name__, head_dim, self.causal, self.block_m, block_n, self.kv_stages, self.window_left,
            self.window_right, getattr(mask_mod, "__name__", None), softcap,
            tuple(n for n in switches if getattr(self, n)) + (f"q_stages={q_stages}", f"wgs={wgs}")
            + ((f"unit_queue_stages={self.dynamic_units}",) if self.dynamic_units > 1 else ())
            + ((f"lpt_heads={lpt_heads}",) if lpt_heads else ())
            + ((f"max_chains={max_chains}",) if max_chains > 1 else ())
            + ((f"poly_exp2={poly_exp2}",) if poly_exp2 else ()))

    def _mmas(self):
        k_major, mn_major = LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(), LayoutEnum.COL_MAJOR.sm90_mma_major_mode()
        qk = sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, k_major, k_major, cutlass.Float32, (1, 1, 1),
                                               self.qk_tile[:2])
        pv = sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, k_major, mn_major, cutlass.Float32, (1, 1, 1),
                                               self.pv_tile[:2], warpgroup.OperandSource.RMEM)
        return qk, pv

    def _layouts(self):
        q = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.qk_tile, self.dtype,
                                          self.wgs * self.q_stages)  # (stage, warp group): wgs * stage + wg
        k = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.qk_tile, self.dtype, self.kv_stages)
        v = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, self.pv_tile, self.dtype, self.kv_stages)
        for staged, alloc in ((q, self.alloc_q), (k, self.alloc_k), (v, self.alloc_v)):
            assert cute.cosize(staged) == alloc.count, "an SMEM layout's size differs from the allocation"
        return q, k, v

    def _splits(self, mQ, mO, batch_mode=0, out_mode=0):
        """``split_kv``: the K/V runs per Q block, the out's batch over q's (1 without splits)."""
        if cutlass.const_expr(not self.split_kv):
            return 1
        return cute.size(mO, mode=[out_mode]) // cute.size(mQ, mode=[batch_mode])

    @staticmethod
    def _sdhb(t, modes):
        """(B, H, S, D) -> the mode order TMA tiles: (S, D, H, B) for Q, K, O; (D, S, H, B) for V."""
        return cute.make_tensor(t.iterator, cute.select(t.layout, mode=modes))

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mO, mLSE, scale, stream)

    def _launch(self, mQ, mK, mV, mO, mLSE, scale, stream, mCuQ=None, mCuK=None, max_seqlen_q=None, mPages=None,
                mCacheLens=None, mUnits=None):
        """The launch the entry points trace (``FlashAttentionVarlen`` passes the cu_seqlens,
        ``FlashAttentionPaged`` the page table and the cache lengths)."""
        q_staged, k_staged, v_staged = self._layouts()
        qk_mma, pv_mma = self._mmas()
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        q = self._sdhb(mQ, [2, 3, 1, 0])
        k = self._sdhb(mK, [2, 3, 1, 0])
        v = self._sdhb(mV, [3, 2, 1, 0])
        tma_q, tQ = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, q, cute.slice_(q_staged, (None, None, 0)),
                                                           (WG_ROWS, self.head_dim))
        tma_k, tK = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, k, cute.slice_(k_staged, (None, None, 0)),
                                                           (self.block_n, self.head_dim))
        tma_v, tV = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, v, cute.slice_(v_staged, (None, None, 0)),
                                                           (self.head_dim, self.block_n))
        tma_o, tO = tma_q, tQ  # unused placeholders unless tma_store_o (O's strides are not checked for TMA then)
        if cutlass.const_expr(self.tma_store_o):  # O's 64-row tile has Q's tile shape and SMEM layout
            tma_o, tO = cute.nvgpu.cpasync.make_tiled_tma_atom(cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
                                                               self._sdhb(mO, [2, 3, 1, 0]),
                                                               cute.slice_(q_staged, (None, None, 0)),
                                                               (WG_ROWS, self.head_dim))
        if cutlass.const_expr(self.varlen):  # live_units: the count is on the device, the grid from the table's bound
            live = None
            if cutlass.const_expr(self.live_units):
                live = (cute.size(mUnits, mode=[0]) - live_units.HEADER) // 2
            self.grid_setup(max_seqlen_q, cute.size(mK, mode=[2]), cute.size(mQ, mode=[1]), cute.size(mK, mode=[1]),
                            cute.size(mCuQ, mode=[0]) - 1, live=live)
        else:
            self.grid_setup(cute.size(mQ, mode=[2]), cute.size(mK, mode=[2]), cute.size(mQ, mode=[1]),
                            cute.size(mK, mode=[1]), cute.size(mQ, mode=[0]), self._splits(mQ, mO))
        grid = cutlass.min(self.num_units, self.max_ctas) if cutlass.const_expr(self.persistent) else self.num_units
        self.kernel(tma_q, tQ, tma_k, tK, tma_v, tV, tma_o, tO, mO, mLSE, qk_mma, pv_mma, q_staged, k_staged, v_staged,
                    scale, mCuQ, mCuK, max_seqlen_q, mPages, mCacheLens, mUnits).launch(
                        grid=[grid, 1, 1], block=[self.threads, 1, 1], min_blocks_per_mp=1, stream=stream,
                        # dynamic_units: the queue's cluster-scoped barrier ops (lower/tile_queues.py) need a cluster
                        **({"cluster": [1, 1, 1]} if self.dynamic_units else {}))

    @cute.kernel
    def kernel(self, tma_q: cute.CopyAtom, mQ: cute.Tensor, tma_k: cute.CopyAtom, mK: cute.Tensor,
               tma_v: cute.CopyAtom, mV: cute.Tensor, tma_o: cute.CopyAtom, mO_tma: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor, qk_mma: cute.TiledMma,
               pv_mma: cute.TiledMma, q_staged: cute.ComposedLayout, k_staged: cute.ComposedLayout,
               v_staged: cute.ComposedLayout, scale: cutlass.Float32, mCuQ: Optional[cute.Tensor],
               mCuK: Optional[cute.Tensor], max_seqlen_q: Optional[cutlass.Int32], mPages: Optional[cute.Tensor],
               mCacheLens: Optional[cute.Tensor], mUnits: Optional[cute.Tensor]):
        bid, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            for atom in (tma_q, tma_k, tma_v):
                cute.nvgpu.cpasync.prefetch_descriptor(atom)
            if cutlass.const_expr(self.tma_store_o):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_o)
        # mQ / mK are the TMA views: (S, D, H, B)
        if cutlass.const_expr(self.varlen):
            self.cu_q, self.cu_k = mCuQ, mCuK
            live = None
            if cutlass.const_expr(self.live_units):
                self.unit_table, live = mUnits, mUnits[0]
                # word 1, zeroed by the table's kernel before each launch: dynamic_units' counter
                self.unit_counter = cute.make_tensor(mUnits.iterator + 1, cute.make_layout(1))
            self.grid_setup(max_seqlen_q, cute.size(mK, mode=[0]), cute.size(mQ, mode=[2]), cute.size(mK, mode=[2]),
                            cute.size(mCuQ, mode=[0]) - 1, live=live)
            if cutlass.const_expr(self.live_units):
                self.ctas = grid  # the launched grid (from the table's bound), not one from the count
        else:
            if cutlass.const_expr(self.paged):  # K / V: the cache as one batch of pages (units.physical_tile)
                self.page_table, self.cache_seqlens = mPages, mCacheLens
                self.pages_per_seq = cute.size(mPages, mode=[1])
            self.grid_setup(cute.size(mQ, mode=[0]), cute.size(mK, mode=[0]), cute.size(mQ, mode=[2]),
                            cute.size(mK, mode=[2]), cute.size(mQ, mode=[3]),
                            self._splits(mQ, mO, batch_mode=3, out_mode=0))
        if cutlass.const_expr(self.persistent):
            units_here = (self.num_units - bid + grid - 1) // grid  # >= 1: the grid never exceeds the units
            mgr = build(self, units_per_cta=units_here, verbose=False)  # checked here, while tracing
        else:
            mgr = build(self, kv_tiles=self.kv_tiles_of(bid), verbose=False)
        self.checked = _host.checked(mgr)  # the verdict its compile reports (attention.host.VERDICT_OF)
        declared.reset(self)  # the S GEMM reads only a declared Q stage (attention.declared)
        mgr.setup_resources_and_tasks()
        qk_zero = self._mmas()[0]
        qk_zero.set(warpgroup.Field.ACCUMULATE, False)
        qk_mma.set(warpgroup.Field.ACCUMULATE, True)
        pv_mma.set(warpgroup.Field.ACCUMULATE, True)
        view = mgr.smem_allocator.view
        o_buffer = {}
        if cutlass.const_expr(self.o_buffer):  # one 64-row O tile per warp group, Q's tile layout (tma_o's)
            o_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.qk_tile, self.dtype, 1)
            o_buffer = {f"sO{wg}": view(self.alloc_o[wg], o_layout) for wg in range(self.wgs)}
        mgr.run(tma_q=tma_q, tma_k=tma_k, tma_v=tma_v, qk_mma=qk_mma, qk_mma_zero=qk_zero, pv_mma=pv_mma,
                mQ=mQ, mK=mK, mV=mV, mO=self._sdhb(mO, [2, 3, 1, 0]), mLSE=mLSE, unit=bid, tma_o=tma_o,
                mO_tma=mO_tma,
                sQ=view(self.alloc_q, q_staged), sK=view(self.alloc_k, k_staged), sV=view(self.alloc_v, v_staged),
                scale=scale, scale_log2=scale * math.log2(math.e), **o_buffer)


class FlashAttentionVarlen(FlashAttention):
    """The forward over packed variable-length sequences (flash_attn_varlen_func's layout): q (1, H, total_q,
    D) and k, v (1, H_kv, total_k, D) views of (total, heads, D) tensors, ``mCuQ`` / ``mCuK`` the int32 first
    rows of each sequence and the end (B + 1), ``max_seqlen_q`` the longest sequence's rows; out as q and
    lse (1, H, total_q). The program is the register-store forward's (units.seq_bounds picks the rows).
    ``FlashAttentionVarlenLive`` runs the blocks that hold rows only."""

    def __init__(self, **options):
        if options.get("live_units"):
            raise AttentionConfigError("FlashAttentionVarlen(live_units=True): the live-unit form takes the table as "
                                       "an argument; use FlashAttentionVarlenLive (varlen.forward_kernel picks it)")
        super().__init__(varlen=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor,
                 mCuQ: cute.Tensor, mCuK: cute.Tensor, max_seqlen_q: cutlass.Int32, scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mO, mLSE, scale, stream, mCuQ, mCuK, max_seqlen_q)


class FlashAttentionVarlenLive(FlashAttention):
    """``FlashAttentionVarlen`` over the live blocks only (``live_units``): ``mUnits`` the int32 table that
    ``live_units.LiveUnitTable`` wrote from ``mCuQ`` (its size bounds the persistent grid)."""

    def __init__(self, **options):
        super().__init__(varlen=True, **{**options, "live_units": True})

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor,
                 mCuQ: cute.Tensor, mCuK: cute.Tensor, mUnits: cute.Tensor, max_seqlen_q: cutlass.Int32,
                 scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mO, mLSE, scale, stream, mCuQ, mCuK, max_seqlen_q, mUnits=mUnits)


class FlashAttentionPaged(FlashAttention):
    """The forward over a paged K/V cache (flash_attn's ``page_table`` / ``seqused_k``): q, out (B, H, S_q, D)
    and lse as the plain kernel's (with ``split_kv``: the runs' partials), k and v (1, H_kv, pages x
    block_n, D) views of (pages, block_n, H_kv, D) caches, ``mPages`` (B, pages per sequence) int32 the
    page of each K/V tile, ``mCacheLens`` (B,) int32 each sequence's keys. The program is the plain
    kernel's (units.physical_tile maps a tile to its page)."""

    def __init__(self, **options):
        super().__init__(paged=True, **options)

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor,
                 mPages: cute.Tensor, mCacheLens: cute.Tensor, scale: cutlass.Float32, stream):
        self._launch(mQ, mK, mV, mO, mLSE, scale, stream, mPages=mPages, mCacheLens=mCacheLens)
