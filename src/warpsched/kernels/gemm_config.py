"""The persistent GEMM's configuration constants and its error type (no cutlass import)."""
from __future__ import annotations

SCHEDULES = ("cooperative", "pingpong")
DEFAULT_TILES = {"cooperative": (128, 256), "pingpong": (128, 128)}
H200_SMS = 132
# the deepest ring chosen by default: 13 stages (64x64 bf16 fills SMEM with 13) is what the
# exhaustive checker covers within its default 500k states; 16 or more stops it INCOMPLETE
MAX_AUTO_STAGES = 13


class GemmConfigError(ValueError):
    """An unsupported tile / schedule / dtype combination or tensor shape (raised on the host)."""
