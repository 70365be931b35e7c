"""tools/ncu_sass_summary.py on a small export in Nsight Compute's per-instruction CSV form: opcodes
counted without predicates, kernels kept apart, the most-stalled instruction shown in its place."""
from __future__ import annotations

import os
import subprocess
import sys

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "ncu_sass_summary.py")
HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"# Samples","Instructions Executed"')


def _export(tmp_path, kernels, *extra):
    lines = []
    for name, rows in kernels:
        lines += [f'"Kernel Name","{name}",', HEADER]
        lines += [f'"0x{i:x}","{src}","{stall}","0","{stall}","{n}"' for i, (src, n, stall) in enumerate(rows)]
    path = tmp_path / "sass.csv"
    path.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, TOOL, str(path), "--context", "1", *extra], capture_output=True, text=True)


def test_opcodes_stalls_and_kernels(tmp_path):
    out = _export(tmp_path, [
        ("kernel_a", [("      MUFU.EX2 R1, R2", 300, 5), ("@!P0  MUFU.EX2 R3, R4", 100, 5),
                      ("      WARPGROUP.DEPBAR.LE gsb0, 0x0", 400, 90), ("      FMNMX R5, R6, R7, !PT", 200, 0)]),
        ("kernel_b", [("      FMUL R1, R2, R3", 50, 1)]),
    ])
    assert out.returncode == 0, out.stderr
    a, b = out.stdout.split("== ")[1:]
    assert "kernel_a" in a and "executed instructions 0.0 M, stall samples 100" in a
    assert "| MUFU.EX2 | 0.00 | 40.0% | 10.0% |" in a  # 300 + 100 of 1000, the predicated one included
    assert "| WARPGROUP.DEPBAR.LE | 0.00 | 40.0% | 90.0% |" in a
    assert "most stalled: 90.0% of samples" in a and ">        400 WARPGROUP.DEPBAR.LE gsb0, 0x0" in a
    assert "kernel_b" in b and "| FMUL | 0.00 | 100.0% | 100.0% |" in b and "MUFU" not in b


def test_regions_sum_each_stretch_of_a_count(tmp_path):
    """--regions 8: the instructions that ran 8 times, in stretches (a gap of up to 3 others bridged); the
    others are not counted."""
    rows = [("      BAR.SYNC 0x2, 0x80", 8, 40), ("      ULDC UR6, c[0x0][0x66c]", 8, 60),
            ("      FFMA R1, R2, R3, R4", 64, 500), ("      STS [R5], R6", 8, 5),
            *[("      NOP", 64, 0)] * 6, ("      SYNCS.ARRIVE R7", 8, 30)]
    out = _export(tmp_path, [("kernel_a", rows)], "--regions", "8")
    assert out.returncode == 0, out.stderr
    assert "instructions that ran 8 times: 135 stall samples in 2 stretches" in out.stdout
    assert "[    0-    3]    105  BAR.SYNC 0x2, 0x80 ... STS [R5], R6" in out.stdout
    assert "[   10-   10]     30  SYNCS.ARRIVE R7" in out.stdout



def test_reasons_name_the_opcodes_that_wait(tmp_path):
    """--reasons: each stall reason's total over the kernel, most first, with the opcodes holding it."""
    header = HEADER + ',"stall_wait","stall_long_sb"'
    lines = ['"Kernel Name","kernel_a",', header,
             '"0x0","      MUFU.EX2 R1, R2","30","0","30","64","25","5"',
             '"0x1","@!P0  BRA 0x10","50","0","50","64","0","50"',
             '"0x2","      MUFU.EX2 R3, R4","10","0","10","64","10","0"']
    path = tmp_path / "sass.csv"
    path.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, TOOL, str(path), "--reasons"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "stall samples by reason (90 samples)" in text
    assert "long_sb               55 (61.1%): BRA 50, MUFU.EX2 5" in text
    assert "wait                  35 (38.9%): MUFU.EX2 35" in text
    assert text.index("long_sb ") < text.index("wait ")
