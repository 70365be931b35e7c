"""tools/ptx_snapshot.py --compare: what a refactor's PTX evidence rests on (no compile here)."""
from __future__ import annotations

import os
import subprocess
import sys

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "ptx_snapshot.py")
PTX = ".entry kernel_cutlass_kernel_{sym}_0(\n\tmov.u32 %r1, {imm};\n\tret;\n"


def _compare(tmp_path, before, after):
    for name, text in (("before", before), ("after", after)):
        os.makedirs(tmp_path / name, exist_ok=True)
        (tmp_path / name / "k.ptx").write_text(text)
    return subprocess.run([sys.executable, TOOL, "--compare", str(tmp_path / "before"), str(tmp_path / "after")],
                          capture_output=True, text=True)


def test_a_moved_module_renames_the_symbol_only(tmp_path):
    out = _compare(tmp_path, PTX.format(sym="warpschedkernelsgemm_kernelX", imm=1),
                   PTX.format(sym="warpschedkernelsgemmkernelX", imm=1))
    assert out.returncode == 0 and "k.ptx: identical" in out.stdout, out.stdout + out.stderr


def test_a_changed_instruction_is_reported(tmp_path):
    out = _compare(tmp_path, PTX.format(sym="a", imm=1), PTX.format(sym="a", imm=2))
    assert out.returncode == 1 and "k.ptx: DIFFERS in 1 lines" in out.stdout, out.stdout + out.stderr


def test_a_missing_variant_is_reported(tmp_path):
    os.makedirs(tmp_path / "before")
    os.makedirs(tmp_path / "after")
    (tmp_path / "before" / "k.ptx").write_text(PTX.format(sym="a", imm=1))
    out = subprocess.run([sys.executable, TOOL, "--compare", str(tmp_path / "before"), str(tmp_path / "after")],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "missing" in out.stdout
