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
