"""tools/attention_clocked_ab.py's host side: shapes parsed, side orders rotated so every side leads once per cycle,
and kernel durations read from Nsight Compute's raw CSV in its own units."""
from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "attention_clocked_ab.py")
_spec = importlib.util.spec_from_file_location("attention_clocked_ab", TOOL)
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)


def test_parse_shape():
    assert ab.parse_shape("16x16x1024:64:causal") == (16, 16, 16, 1024, 64, True)
    assert ab.parse_shape("4x8x4096:128:full") == (4, 8, 8, 4096, 128, False)
    assert ab.parse_shape("4x32/8x2048:128:causal") == (4, 32, 8, 2048, 128, True)
    with pytest.raises(SystemExit, match="'causal' or 'full'"):
        ab.parse_shape("4x8x4096:128:window")


def test_rotation_leads_each_side_once():
    names = ["default", "again", "es", "FA4"]
    firsts = [ab.rotated(names, r)[0] for r in range(len(names))]
    assert sorted(firsts) == sorted(names)
    assert all(sorted(ab.rotated(names, r)) == sorted(names) for r in range(7))


@pytest.mark.parametrize("unit,scale", [("usecond", 1.0), ("nsecond", 1e-3), ("msecond", 1e3)])
def test_durations_in_microseconds(monkeypatch, unit, scale):
    text = ('"ID","Kernel Name","gpu__time_duration.sum"\n'
            f'"","","{unit}"\n'
            '"0","kernel_a","1,250.5"\n'
            '"1","kernel_b","300"\n')

    def fake_run(cmd, **kw):
        assert cmd[:3] == ["ncu", "-i", "r.ncu-rep"]
        return subprocess.CompletedProcess(cmd, 0, stdout=text, stderr="")

    monkeypatch.setattr(ab.subprocess, "run", fake_run)
    assert ab.durations("r.ncu-rep") == pytest.approx([1250.5 * scale, 300 * scale])


NAMES = {  # kernel names as CuTe DSL and FA4 emit them (prefixes of the real ones)
    "ours_bwd": "kernel_cutlass_kernel_warpschedkernelsattentionbackwardFlashAttentionBackward_object_at__CopyAtom",
    "ours_fwd": "kernel_cutlass_kernel_warpschedkernelsattentionforwardFlashAttention_object_at__CopyAtom_ThrID10",
    "fa4_bwd": "kernel_cutlass_kernel_flash_attncuteflash_bwd_sm90FlashAttentionBackwardSm90_object_at__tensor0000",
    "fa4_fwd": "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__Tensorgmem",
    "fa4_pre": "kernel_cutlass_kernel_flash_attncuteflash_bwd_preprocessFlashAttentionBackwardPreprocess_object_at__",
    "fa4_post": "kernel_cutlass_kernel_flash_attncuteflash_bwd_postprocessFlashAttentionBackwardPostprocess_object_at",
    "ours_prep": "kernel_cutlass_kernel_warpschedkernelsattentionbackward_prepStatsPrep_object_at__Tensorgmem",
}


@pytest.mark.parametrize("mode,matched", [("backward", {"ours_bwd", "fa4_bwd"}), ("forward", {"ours_fwd", "fa4_fwd"})])
def test_each_mode_profiles_the_main_kernels_only(mode, matched):
    """ncu's ``--kernel-name regex:`` searches the name: one main kernel per side and launch, so that durations map
    to the launch order (the backward's pre- and post-passes, ours and FA4's, are left out)."""
    import re

    pattern = ab.KERNELS[mode].removeprefix("regex:")
    assert {k for k, name in NAMES.items() if re.search(pattern, name)} == matched
