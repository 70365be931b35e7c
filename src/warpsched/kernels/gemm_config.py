"""The persistent GEMM's configuration constants and its error type (no cutlass import)."""
from __future__ import annotations

SCHEDULES = ("cooperative", "pingpong", "pingpong_shared")
# pingpong_shared: ping-pong over ONE ring that both math warp groups release (see gemm_program)
DEFAULT_TILES = {"cooperative": (128, 256), "pingpong": (128, 128), "pingpong_shared": (128, 128)}
H200_SMS = 132
# the deepest ring chosen by default (tiles below 64x128 would fit more): the exhaustive check of
# the traced program grows with the depth, and it runs at every compile: 8 stages about 0.5 s,
# 10 about 2.5 s, 13 about 30 s on the H200 host, 16 INCOMPLETE at the default 500k states
MAX_AUTO_STAGES = 8


class GemmConfigError(ValueError):
    """An unsupported tile / schedule / dtype combination or tensor shape (raised on the host)."""
