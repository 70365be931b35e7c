"""The tensor-core loops of compiled kernels, on the CPU: what one K/V tile (or k-block) costs in SASS.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/sass_loops.py A.ptx [B.ptx ...] [--top 14] [--min-hgmma 1]

Each PTX file (a ``ptx_options`` compile's ``.artifacts.PTX``, or ``tools/fa4_ptx_cpu.py``'s) is assembled
with ptxas for sm_90a (its register and spill report kept) and disassembled with nvdisasm. A loop is a
backward branch; for each loop that issues HGMMAs it prints its length, the forward-branched regions inside it
(code a tile may skip, such as a mask applied only on diagonal tiles) and the straight-line count that is
left, and its most frequent opcodes. ptxas: ``$PTXAS``, else ``$CUDA_HOME/bin``, else the one on PATH;
nvdisasm: ``$NVDISASM``, else the PATH's, else triton's bundled copy.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

LABEL = re.compile(r"\s*(\.L_x_\d+):")
INSTR = re.compile(r"\s+/\*[0-9a-f]+\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\b.*?(\.L_x_\d+)")


def parse(sass: str):
    """(instructions, {label: index of the instruction it names}) of nvdisasm's ``-c`` text."""
    instrs, labels = [], {}
    for line in sass.splitlines():
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        m = INSTR.match(line)
        if m:
            instrs.append(m.group(1))
    return instrs, labels


def opcode(instr: str) -> str:
    """The opcode without its predicate and modifiers: ``@!P0 FSEL.FTZ R1, ...`` -> ``FSEL``."""
    return re.sub(r"^@!?U?P\w+\s+", "", instr).split()[0].split(".")[0]


def loops(instrs, labels, min_hgmma=1):
    """[(start, end, skippable, opcode counts)] of the loops (a branch back to a label) with HGMMAs;
    ``skippable``: the instructions that predicated forward branches inside the loop jump over."""
    out = []
    for end, ins in enumerate(instrs):
        m = BRANCH.search(ins)
        if not m or labels.get(m.group(1), end + 1) > end:
            continue
        start = labels[m.group(1)]
        body = instrs[start:end + 1]
        counts = collections.Counter(opcode(x) for x in body)
        if counts["HGMMA"] < min_hgmma:
            continue
        skipped = set()  # a union: nested and overlapping forward branches count an instruction once
        for i, x in enumerate(body):
            f = BRANCH.search(x)
            target = labels.get(f.group(1), -1) if f else -1
            if x.startswith("@") and start + i < target <= end:
                skipped.update(range(start + i + 1, target))
        out.append((start, end, len(skipped), counts))
    return out


def _tool(env, *candidates):
    for c in (os.environ.get(env), *candidates):
        if c and (os.path.isfile(c) or shutil.which(c)):
            return c
    return None


def assemble(ptx_path):
    """(ptxas's report, nvdisasm's text) of one PTX file."""
    ptxas = _tool("PTXAS", os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas"), "ptxas")
    try:
        import triton
        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    except ImportError:
        bundled = None
    nvdisasm = _tool("NVDISASM", "nvdisasm", bundled)
    if not ptxas or not nvdisasm:
        sys.exit(f"sass_loops: needs ptxas ({ptxas}) and nvdisasm ({nvdisasm}): set PTXAS / NVDISASM")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        report = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx_path, "-o", cubin], capture_output=True, text=True)
        if report.returncode:
            sys.exit(f"sass_loops: ptxas failed on {ptx_path}:\n{report.stderr[-2000:]}")
        sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True).stdout
    usage = ", ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", report.stderr))
    return usage, sass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ptx", nargs="+")
    ap.add_argument("--top", type=int, default=14, help="opcodes shown per loop")
    ap.add_argument("--min-hgmma", type=int, default=1)
    a = ap.parse_args()
    for path in a.ptx:
        usage, sass = assemble(path)
        instrs, labels = parse(sass)
        print(f"== {os.path.basename(path)}: {len(instrs)} instructions; {usage}")
        for start, end, skippable, counts in loops(instrs, labels, a.min_hgmma):
            n = end - start + 1
            top = ", ".join(f"{k} {v}" for k, v in counts.most_common(a.top))
            print(f"  [{start}, {end}] {n} instructions, {skippable} skippable, {n - skippable} straight, "
                  f"HGMMA {counts['HGMMA']}: {top}")


if __name__ == "__main__":
    main()
