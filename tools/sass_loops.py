"""The tensor-core loops of compiled kernels, on the CPU: what one K/V tile (or k-block) costs in SASS.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/sass_loops.py A.ptx [B.ptx ...] [--top 14] [--min-hgmma 1] [--order]

Each PTX file (a ``ptx_options`` compile's ``.artifacts.PTX``, or ``tools/fa4_ptx_cpu.py``'s) is assembled
with ptxas for sm_90a (its register and spill report kept) and disassembled with nvdisasm. A loop is a
backward branch; for each loop that issues HGMMAs it prints its length, the forward-branched regions inside it
(code a tile may skip, such as a mask applied only on diagonal tiles) and the straight-line count that is
left, and its most frequent opcodes; ``--order`` adds the loop's events in issue order (the GEMMs and their commits,
the ``wgmma.wait_group`` waits, the MUFU and F2FP runs, branches and barrier waits), which shows, for example, whether
an exp2 run sits under a GEMM or after its wait. ptxas: ``$PTXAS``, else ``$CUDA_HOME/bin``, else the one on PATH;
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


# what --order shows of a loop, in issue order: the events that decide what overlaps what
WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*(0x[0-9a-f]+|\d+)")


def event(instr: str):
    """The ``--order`` token of one instruction, or None for the rest: ``HGMMA`` (``HGMMA|`` where it closes a commit
    group: ``gsb0``), ``wait<=n`` (``wgmma.wait_group n``), ``MUFU``, ``F2FP``, ``BRA`` (a predicated branch),
    ``try_wait`` / ``arrive`` (mbarrier), ``bar`` (a named barrier), ``STSM``."""
    op = opcode(instr)
    if op == "HGMMA":
        return "HGMMA|" if "gsb0" in instr else "HGMMA"
    m = WAIT.search(instr)
    if m:
        return f"wait<={int(m.group(1), 0)}"
    if op in ("MUFU", "F2FP", "STSM"):
        return op
    if op == "BRA" and instr.startswith("@"):
        return "BRA"
    if op == "SYNCS":
        return "try_wait" if "TRYWAIT" in instr else ("arrive" if "ARRIVE" in instr else None)
    if op == "BAR":
        return "bar"
    return None


GAP = 8  # other instructions (descriptor arithmetic, moves) a run of one event may have between its members


def order(body) -> str:
    """A loop body as its events in issue order: a run of one event as ``EVENTxN``, or ``EVENTxN/S`` when other
    instructions sit among its members (S: the instructions from its first member to its last; members at most
    ``GAP`` other instructions apart; an HGMMA run ends with ``|`` at the instruction that commits its group), and
    longer stretches of other instructions as ``+N``: ``HGMMAx8/30| wait<=1 +34 MUFUx32 ... MUFUx26/120 ...``."""
    out, kind, run, span, closed, gap = [], None, 0, 0, False, 0

    def flush():
        if kind is not None:
            out.append((kind if run == 1 else f"{kind}x{run}" + (f"/{span}" if span > run else ""))
                       + ("|" if closed else ""))

    for instr in body:
        tok = event(instr)
        if tok is None:
            gap += 1
            continue
        close = tok.endswith("|")
        tok = tok.rstrip("|")
        if tok == kind and not closed and gap <= GAP:
            run, span, closed, gap = run + 1, span + gap + 1, close, 0
            continue
        flush()
        if gap > GAP or (gap and kind is None):
            out.append(f"+{gap}")
        kind, run, span, closed, gap = tok, 1, 1, close, 0
    flush()
    if gap:
        out.append(f"+{gap}")
    return " ".join(out)


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
    ap.add_argument("--order", action="store_true", help="also each loop's events in issue order (HGMMA, commit, "
                    "wgmma waits, MUFU, F2FP, branches, barrier waits): what ptxas put under which GEMM")
    a = ap.parse_args()
    for path in a.ptx:
        usage, sass = assemble(path)
        instrs, labels = parse(sass)
        print(f"== {os.path.basename(path)}: {len(instrs)} instructions; {usage}")
        found = loops(instrs, labels, a.min_hgmma)
        for start, end, skippable, counts in found:
            n = end - start + 1
            top = ", ".join(f"{k} {v}" for k, v in counts.most_common(a.top))
            print(f"  [{start}, {end}] {n} instructions, {skippable} skippable, {n - skippable} straight, "
                  f"HGMMA {counts['HGMMA']}: {top}")
            # a loop of the kernel's own, not a barrier's out-of-line retry jumping back into one (those span
            # an EXIT), and the innermost: a loop around it repeats its order
            inner = not any(opcode(x) == "EXIT" for x in instrs[start:end + 1]) and not any(
                (s0, e0) != (start, end) and start <= s0 and e0 <= end for s0, e0, _, _ in found)
            if a.order and inner:
                print(f"    order: {order(instrs[start:end + 1])}")


if __name__ == "__main__":
    main()
