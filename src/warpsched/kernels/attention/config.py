"""The attention kernels' configuration records (no cutlass import)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class AttentionConfig:
    """What one FlashAttention (forward) or FlashAttentionBackward compiles from, resolved and validated
    (``kernel.config``): the defaults filled in, the dtype by name, a ``mask_mod`` by its name. Frozen:
    the kernel object carries trace-time state besides, this record does not change."""

    kernel: str  # "forward" or "backward"
    dtype: str
    head_dim: int
    causal: bool
    block_m: int
    block_n: int
    stages: int  # K/V stages (forward), Q/dO stages (backward)
    window_left: Optional[int] = None
    window_right: Optional[int] = None
    mask_mod: Optional[str] = None
    softcap: Optional[float] = None
    options: tuple = ()  # the kernel's other tuning switches that are on, by name


# FlashAttentionBackward's switches in AttentionConfig.options' order; a valued one (name: its value when off) is
# named with its value
BACKWARD_SWITCHES = ("shared_ds", "wg_order", "varlen", "deterministic", "overlap_scores", "overlap_dq", "tma_stats",
                     "tma_store_dkv", "dq_stages", "flat_dq", "flat_boxes", "stage_first", "lpt", "lpt_heads",
                     "live_units", "unit_in_regs", "early_stats", "dq_finish", "dkv_in_ds", "dq_defer",
                     "split_queries", "own_first", "own_regs", "poly_exp2", "poly_interleave", "ds_stages", "grid3d",
                     "mask_first")
VALUED_OFF = {"dq_stages": 1, "flat_boxes": 1, "lpt_heads": None, "poly_exp2": 0, "ds_stages": 1}


def switches_on(kernel):
    """The switches of a FlashAttentionBackward ``kernel`` that are on, by name (``dq_stages=2``, ``flat_boxes=4``...),
    in ``BACKWARD_SWITCHES``' order."""
    out = []
    for name in BACKWARD_SWITCHES:
        value = getattr(kernel, name)
        if name in VALUED_OFF:
            if value != VALUED_OFF[name]:
                out.append(f"{name}={value}")
        elif value:
            out.append(name)
    return tuple(out)
