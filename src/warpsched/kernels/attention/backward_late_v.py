"""``late_v`` (FlashAttention-4's start of a unit): the backward's V in a pipeline of its own.

With one K / V stage, a unit's first S GEMM waits for K, V and the first Q / dO stage: every byte of the unit's
start. With ``late_v`` the load warp loads K, then the first Q / dO stage, then V, and a gradient warp group
waits for K before its loop and for V inside its first step, after issuing the S GEMM and before the dP GEMM: the
first GEMM starts once K and the first stage are in. A unit with no step (a causal key block past every query)
still waits for V after its loop (``if_empty()``), since its zero dK / dV leave through the V tile, and its load
warp loads V there; the checker proves that every step count >= 0 loads and waits for V exactly once
(``backward_schedules``). docs/attention.md, "Backward"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass
import cutlass.cute as cute

from warpsched import MemoryResource, PipelineConfig, StageInfo, WorkAttr, consumer_work, producer_work

from .backward_resources import dp_gemm, load_key_tiles, store_v_grads, v_footprint
from .masks import AttentionConfigError


def late_v_option(g, late_v) -> bool:
    """``late_v`` of kernel ``g`` (its other options set), or an AttentionConfigError naming what it cannot serve:
    V is waited for between the S and dP GEMMs (two commit groups: ``overlap_scores``), in each warp group's own
    key half (not head dim 256's D split), and dK / dV leave through V or from registers (not ``dkv_in_ds``)."""
    if late_v and (not g.overlap_scores or g.d_split or g.dkv_in_ds):
        raise AttentionConfigError(
            f"late_v=True with overlap_scores={g.overlap_scores}, head_dim={g.head_dim}, dkv_in_ds={g.dkv_in_ds}: "
            "V's own stage is waited for between the S and dP GEMMs, which needs them in two commit groups "
            "(tma_stats=True or overlap_scores=True), the keys split between the warp groups (head dim 64 or 128) "
            "and dK / dV stored through V or from registers (dkv_in_ds=False); else late_v=False")
    return bool(late_v)


def v_stage(g):
    """The kernel's ``SmemV`` (one stage of V's bytes) with ``late_v``, else None."""
    if not g.late_v:
        return None
    return SmemV(name="SmemV", g=g,
                 pipeline_config=PipelineConfig.create_tma_async_pipeline_cfg(num_stages=1, num_bytes=g.v_bytes))


@dataclass(kw_only=True)
class SmemV(MemoryResource):
    """The unit's V block (two 64-key halves, one per warp group), one stage of its own: read by the dP GEMMs,
    and with ``tma_store_dkv`` the way dK / dV leave."""

    g: Any = None

    def get_smem_requirements(self):
        return [self.g.alloc_v]

    @producer_work
    def tma_load(self, stage_info: StageInfo):
        v = stage_info.context.values
        load_key_tiles(self.g, stage_info, ((v.tma_v, v.mV, v.sV),))

    def consumer_footprint(self, task_name):
        """Each gradient warp group's half (``backward_resources.v_footprint``)."""
        return v_footprint(self.g, task_name)

    @consumer_work(work_attrs=WorkAttr.WGMMA)  # reads V (and dO: SmemQdO.gemm_operand) until its retire
    @cute.jit
    def mma_dp(self, stage_info: StageInfo, acc_dp, idx, *, wg: cutlass.Constexpr = 0):
        """dP^T = V_w dO_i^T, its own commit group (``backward_resources.dp_gemm``)."""
        dp_gemm(self.g, stage_info, acc_dp, idx, wg, "SmemV.mma_dp")

    @consumer_work(work_attrs=WorkAttr.WRITES)
    def store_grads(self, stage_info: StageInfo, acc_dk, acc_dv, *, wg: cutlass.Constexpr = 0):
        """``tma_store_dkv``: dV and dK leave through this warp group's V half (``store_v_grads``)."""
        store_v_grads(self.g, stage_info, acc_dk, acc_dv, wg)
