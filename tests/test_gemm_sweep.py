"""bench/gemm_sweep.py on the CPU: shape selection, and the supervisor with fake children
(a hang and a crash) producing the bf16 and fp8 tables."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import gemm_sweep_configs as sweep  # noqa: E402  (the sweep's shape sets and configurations)


def test_shape_sets():
    assert len(sweep.SHAPE_SETS["all"]) == 24 and len(set(sweep.SHAPE_SETS["all"])) == 24
    assert sweep.VOCAB == [(m, 128256, 4096) for m in (64, 256, 1024, 4096, 16384)]
    assert sweep.parse_shapes("vocab,64x128256x4096,4096x4096x4096") == sweep.VOCAB + [(4096, 4096, 4096)]
    with pytest.raises(Exception, match="a set"):
        sweep.parse_shapes("4096x4096")


def test_every_tuned_configuration_exists():
    for shape in sweep.SHAPE_SETS["all"]:
        assert set(sweep.tune_set(*shape)) <= set(sweep.CONFIGS)
        assert all(sweep.CONFIGS[n].get("fp8") for n in sweep.fp8_tune_set(*shape))


def test_supervisor_selftest_tables():
    out = subprocess.run([sys.executable, os.path.join(BENCH, "gemm_sweep.py"), "--selftest", "--budget", "60"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "OUT": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "FAULT during check pp128x128" in text and "(hung=True" in text  # the hang was killed and excluded
    assert "bf16 geomean vs torch.matmul" in text and "fp8 geomean vs torch._scaled_mm" in text
    assert "| 4096x4096x4096 |" in text
