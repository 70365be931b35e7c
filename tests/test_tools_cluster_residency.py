"""tools/cluster_residency.py: the overlap count it reports (the most CTAs running at one instant) and its
probe kernel compiled for sm_90a on the CPU, reading the timer and SM registers it needs."""
from __future__ import annotations

import importlib.util
import os

import pytest

pytest.importorskip("cutlass")

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "cluster_residency.py")


def _tool():
    spec = importlib.util.spec_from_file_location("cluster_residency", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_most_at_once_counts_overlapping_intervals():
    tool = _tool()
    # four CTAs resident together, then two that started only after two of them ended
    rows = [(0, 10, 0), (0, 10, 1), (1, 12, 2), (1, 12, 3), (11, 20, 0), (11, 21, 1)]
    assert tool.most_at_once(rows) == 4
    assert tool.most_at_once([(0, 5, 0), (6, 9, 0)]) == 1  # one after the other
    assert tool.most_at_once([(0, 5, 0), (5, 9, 1)]) == 1  # an end sorts before a start at the same instant


def test_probe_compiles_and_reads_the_timer_and_the_sm():
    ptx = _tool().compile_for_cpu(size=4, smem_bytes=200_000, hold_ns=1000)
    assert "%globaltimer" in ptx and "%smid" in ptx
    assert ".reqntid 384, 1, 1" in ptx  # the GEMM's threads (the cluster and SMEM are set at launch)
