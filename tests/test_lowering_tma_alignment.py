"""A TMA copy into SMEM whose address is not 128-byte aligned in every stage is rejected while the kernel is
traced, at the work's schedule call (lower/tx_bytes.py, TxLedger.aligned): on the hardware it is a run-time
"misaligned address" fault. The tma_copy example with 64-byte stages (its stage 1 starts 64 bytes in) is
rejected; 128-byte and 32 KiB stages compile."""
from __future__ import annotations

import os
import sys

import pytest

from warpsched import ValidationError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _compile(tile_mn):
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    try:
        import tma_copy
    finally:
        sys.path.pop(0)
    kern = tma_copy.TmaCopy(cutlass.BFloat16, tile_mn=tile_mn, num_stages=3)
    m, n = cute.sym_int32(), cute.sym_int32()
    x, y = (make_fake_tensor(cutlass.BFloat16, (m, n), (cute.sym_int64(divisibility=8), 1), assumed_align=16)
            for _ in range(2))
    return cute.compile(kern, x, y, make_fake_stream(), options="--keep-ptx")


def test_a_stage_that_is_not_128_byte_aligned_is_rejected_at_the_schedule_call(monkeypatch):
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    with pytest.raises(ValidationError) as e:
        _compile((1, 32))  # 64-byte stages: stage 1 at byte 64
    msg = str(e.value)
    assert "[TMA alignment]" in msg and "only 64-byte aligned" in msg, msg
    assert "resource 'SmemTiles'" in msg and "task 'LoadTask'" in msg, msg
    assert "tma_copy.py:" in msg and "smem.tma_load(coords=coords)" in msg, msg
    assert "pad each stage of the destination to a multiple of 128 bytes" in msg, msg


@pytest.mark.parametrize("tile_mn", [(2, 32), (64, 256)])
def test_stages_of_128_byte_multiples_compile(monkeypatch, tile_mn):
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    assert "cp.async.bulk.tensor" in _compile(tile_mn).artifacts.PTX
