"""A busy-wait a planted race can put in one role, so a window that rarely opens by itself opens on
most launches. Called from a work body at trace time (a @cute.jit function: its loop is a runtime loop)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

DELAY_CYCLES = 20_000  # about 10 us at the H200's 1.98 GHz


@cute.jit
def planted_delay(warp: cutlass.Constexpr = -1, cycles: cutlass.Constexpr = DELAY_CYCLES):
    """Spin ``cycles`` SM clocks in warp ``warp`` of the CTA (every warp when -1)."""
    w = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if cutlass.const_expr(warp < 0):
        _spin(cycles)
    else:
        if w == warp:
            _spin(cycles)


@cute.jit
def _spin(cycles: cutlass.Constexpr):
    t0 = cute.arch.clock64()
    t = t0
    while t - t0 < cycles:
        t = cute.arch.clock64()
