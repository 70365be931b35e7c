"""The persistent GEMM's configuration constants and its error type (no cutlass import)."""
from __future__ import annotations

SCHEDULES = ("cooperative", "pingpong")
DEFAULT_TILES = {"cooperative": (128, 256), "pingpong": (128, 128)}
H200_SMS = 132


class GemmConfigError(ValueError):
    """An unsupported tile / schedule / dtype combination or tensor shape (raised on the host)."""
