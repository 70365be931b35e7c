"""The persistent GEMM's configuration constants and its error type (no cutlass import)."""
from __future__ import annotations

SCHEDULES = ("cooperative", "pingpong", "pingpong_shared")
# pingpong_shared: ping-pong over ONE ring that both math warp groups release (see gemm_program)
DEFAULT_TILES = {"cooperative": (128, 256), "pingpong": (128, 128), "pingpong_shared": (128, 128)}
H200_SMS = 132


class GemmConfigError(ValueError):
    """An unsupported tile / schedule / dtype combination or tensor shape (raised on the host)."""
