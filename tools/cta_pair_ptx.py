"""The PTX facts of a CTA pair (V = 2), side by side: warpsched's 2-CTA tcgen05 GEMM
(examples/blackwell/tcgen05_gemm_2cta.py) and CUTLASS's hand-written Blackwell dense GEMM with
``use_2cta_instrs=True`` (examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm.py of
github:NVIDIA/cutlass), both compiled on the CPU for sm_100a with fake tensors, same configuration:
fp16 A / B (K-major), fp32 accumulator, fp16 C, MMA tile 256 x 256 (128 rows per CTA), K tile 64,
cluster (2, 1), one accumulator stage, no TMA store. The pattern kernels of
examples/blackwell/patterns/umma_pairs.py are listed too (warpsched only).

  PYTHONPATH=src python3 tools/cta_pair_ptx.py [--cutlass PATH_TO_dense_gemm.py]

Without --cutlass the example is read from the NVIDIA/cutlass mirror (/work/.mirror/NVIDIA+cutlass/repo,
HEAD) with ``git show``. Output: the table on stdout and bench/results/cta_pair_ptx.txt.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import warnings

os.environ["CUTE_DSL_ARCH"] = "sm_100a"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("examples/hopper", "examples/blackwell", "examples/blackwell/patterns"):
    sys.path.insert(0, os.path.join(ROOT, sub))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

MIRROR = "/work/.mirror/NVIDIA+cutlass/repo"
EXAMPLE = "examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm.py"
PERSISTENT = "examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm_persistent.py"
LEADER_MASK = "-16777224"  # 0xFEFFFFF8: the barrier address with the pair's peer bit (and alignment) cleared


def _leader_regs(lines):
    """Registers holding "this CTA's place in the pair" (ctaid.x & 1, or the cluster rank's low bit)."""
    src = {m.group(1) for ln in lines for m in [re.search(r"mov\.u32\s+(%r\d+), %(?:ctaid\.x|cluster_ctarank)", ln)]
           if m}
    out = set()
    for ln in lines:
        m = re.search(r"and\.b32\s+(%r\d+), (%r\d+), 1;", ln)
        if m and m.group(2) in src:
            out.add(m.group(1))
    return out


def _leader_gated(lines, i, regs, back=40):
    """Is line i under a branch that skips it in the peer CTA (setp.ne <leader reg>, 0; @p bra)?"""
    preds = set()
    for ln in lines[max(0, i - back):i]:
        m = re.search(r"setp\.ne\.b32\s+(%p\d+), (%r\d+), 0;", ln)
        if m and m.group(2) in regs:
            preds.add(m.group(1))
        m = re.search(r"@(%p\d+) bra", ln)
        if m and m.group(1) in preds:
            return True
    return False


def _remote_targets(lines):
    """Which CTA each remote arrival (mapa + mbarrier.arrive.shared::cluster) targets, from the
    definition of mapa's rank operand: rank ^ 1 (the peer) or rank & ~1 / (rank / 2) * 2 (the leader)."""
    out = []
    for i, ln in enumerate(lines):
        if "mbarrier.arrive.shared::cluster" not in ln:
            continue
        mapa = next((x for x in reversed(lines[max(0, i - 6):i]) if "mapa.shared::cluster" in x), None)
        kind = "?"
        if mapa is not None:
            reg = mapa.rstrip(" ;").split(",")[-1].strip()
            for d in lines:
                m = re.match(rf"\s*(\w+)\.b32\s+{re.escape(reg)}, (%r\d+), (-?\d+);", d)
                if m:
                    op, imm = m.group(1), m.group(3)
                    kind = {("xor", "1"): "peer", ("shl", "1"): "leader", ("and", "-2"): "leader"}.get((op, imm), "?")
                    break
        out.append(kind)
    return out


def _init_counts(lines):
    out = set()
    for i, ln in enumerate(lines):
        if "mbarrier.init" not in ln:
            continue
        reg = ln.rstrip(" ;").split(",")[-1].strip()
        for d in reversed(lines[:i]):
            m = re.search(rf"mov\.(?:b|u)32\s+{re.escape(reg)}, (\d+);", d)
            if m:
                out.add(int(m.group(1)))
                break
    return sorted(out)


def facts(ptx: str):
    lines = ptx.splitlines()
    regs = _leader_regs(lines)
    arms = [i for i, ln in enumerate(lines) if "mbarrier.arrive.expect_tx" in ln]
    tx = []
    for i in arms:
        reg = lines[i].split(",")[-1].strip(" ;")
        for ln in reversed(lines[max(0, i - 4):i]):
            m = re.search(rf"mov\.b32\s+{re.escape(reg)}, (\d+);", ln)
            if m:
                tx.append(int(m.group(1)))
                break
    tma = [i for i, ln in enumerate(lines) if "cp.async.bulk.tensor" in ln]
    masked = set()
    for ln in lines:
        m = re.search(rf"and\.b32\s+(%r\d+), %r\d+, {LEADER_MASK};", ln)
        if m:
            masked.add(m.group(1))
    commits = [ln for ln in lines if "tcgen05.commit" in ln]
    masks = []
    for c in commits:
        reg = c.rstrip(" ;").split(",")[-1].strip()
        for j, ln in enumerate(lines):
            m = re.search(rf"mov\.b16\s+{re.escape(reg)}, (\d+);", ln)
            if m:
                masks.append(f"0b{int(m.group(1)):b}")
                break
            if re.search(rf"cvt\.u16\.u32\s+{re.escape(reg)}, ", ln):
                # (1 << v) | (1 << (v ^ 1)): this CTA and its peer
                window = lines[max(0, j - 10):j]
                pair = any("xor.b32" in x and x.rstrip(" ;").endswith(", 1") for x in window) and \
                    any("or.b32" in x for x in window)
                masks.append("self|peer" if pair else "computed")
                break
    def count(text):
        return sum(text in ln for ln in lines)

    return {
        "tcgen05.mma.cta_group::2 sites": count("tcgen05.mma.cta_group::2"),
        "tcgen05.mma.cta_group::1 sites": count("tcgen05.mma.cta_group::1"),
        "tcgen05.commit.cta_group::2 multicast sites": sum("cta_group::2" in c and "multicast::cluster" in c
                                                          for c in commits),
        "tcgen05.commit multicast masks": " ".join(masks) or "-",
        "TMA loads (cp.async.bulk.tensor) sites": len(tma),
        "TMA loads with .cta_group::2": sum("cta_group::2" in lines[i] for i in tma),
        "TMA barrier operand masked to the leader (& 0xFEFFFFF8)": sum(
            lines[i].rstrip(" ;").split("[")[-1].split("]")[0] in masked for i in tma),
        "arrive.expect_tx sites": len(arms),
        "arrive.expect_tx bytes": ",".join(map(str, tx)) or "-",
        "arrive.expect_tx skipped in the peer (leader test)": sum(_leader_gated(lines, i, regs) for i in arms),
        "remote arrivals (mapa + mbarrier.arrive.shared::cluster) to": " ".join(_remote_targets(lines)) or "-",
        "tcgen05.alloc / relinquish / dealloc .cta_group::2": "/".join(str(count(f"tcgen05.{k}.cta_group::2"))
                                                                     for k in ("alloc", "relinquish_alloc_permit",
                                                                               "dealloc")),
        "barrier.cluster.arrive / wait": f"{count('barrier.cluster.arrive')}/{count('barrier.cluster.wait')}",
        "mbarrier.init": count("mbarrier.init"),
        "mbarrier.init arrival counts (distinct)": ",".join(map(str, _init_counts(lines))) or "-",
    }


def _cutlass_ptx(path, persistent=False):
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    sys.path.insert(0, os.path.dirname(path))
    import importlib.util

    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3] + "_2cta", path)
    dg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dg)
    cls = dg.PersistentDenseGemmKernel if persistent else dg.DenseGemmKernel
    gemm = cls(cutlass.Float32, True, (256, 256), (2, 1), False)

    m, n = cute.sym_int32(), cute.sym_int32()
    a = make_fake_tensor(cutlass.Float16, (m, cute.sym_int32(divisibility=8), cute.sym_int32()),
                         (cute.sym_int64(divisibility=8), 1, cute.sym_int64(divisibility=8)), assumed_align=16)
    b = make_fake_tensor(cutlass.Float16, (n, a.shape[1], a.shape[2]),
                         (cute.sym_int64(divisibility=8), 1, cute.sym_int64(divisibility=8)), assumed_align=16)
    c = make_fake_tensor(cutlass.Float16, (m, n, a.shape[2]),
                         (cute.sym_int64(divisibility=8), 1, cute.sym_int64(divisibility=8)), assumed_align=16)
    import _common

    args = (a, b, c, 74, make_fake_stream()) if persistent else (a, b, c, make_fake_stream())
    return cute.compile(gemm, *args, options=_common.ptx_options("sm_100a")).artifacts.PTX


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cutlass", default=None, help="path to CUTLASS's blackwell dense_gemm.py")
    ap.add_argument("--cutlass-persistent", default=None, help="path to its dense_gemm_persistent.py")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "cta_pair_ptx.txt"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    paths, origin = {"": args.cutlass, "persistent": args.cutlass_persistent}, "given paths"
    if args.cutlass is None:
        rev = subprocess.run(["git", "--git-dir", MIRROR, "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        tmp = tempfile.mkdtemp(prefix="cta_pair_ptx_")
        for key, rel in (("", EXAMPLE), ("persistent", PERSISTENT)):
            src = subprocess.run(["git", "--git-dir", MIRROR, "show", f"HEAD:{rel}"], capture_output=True,
                                 text=True, check=True).stdout
            paths[key] = os.path.join(tmp, os.path.basename(rel))
            with open(paths[key], "w") as f:
                f.write(src)
        origin = f"github:NVIDIA/cutlass@{rev[:12]} {os.path.dirname(EXAMPLE)}/"
    import tcgen05_gemm_2cta
    import umma_pairs

    cols = {
        "warpsched tcgen05_gemm_2cta": facts(tcgen05_gemm_2cta.compile_for_cpu().artifacts.PTX),
        "CUTLASS dense_gemm 2cta": facts(_cutlass_ptx(paths[""])),
        "CUTLASS dense_gemm_persistent 2cta": facts(_cutlass_ptx(paths["persistent"], persistent=True)),
        "warpsched umma_pairs split": facts(umma_pairs.compile_for_cpu("split_consumer").artifacts.PTX),
        "warpsched umma_pairs leader_routed": facts(umma_pairs.compile_for_cpu("leader_routed").artifacts.PTX),
    }
    keys = list(next(iter(cols.values())))
    w = max(map(len, keys)) + 2
    out = [f"CTA-pair PTX facts, sm_100a, compiled on the CPU (fake tensors); CUTLASS example: {origin}",
           "config (both GEMMs): fp16 A/B K-major, fp32 acc, fp16 C, MMA 256x256x16 cta_group::2, K tile 64, "
           "cluster (2, 1), 1 acc stage, no TMA store; AB stages: warpsched 4, CUTLASS computed from SMEM",
           "", f"{'fact':{w}s}" + "".join(f"{c:>36s}" for c in cols)]
    for k in keys:
        out.append(f"{k:{w}s}" + "".join(f"{str(v[k]):>36s}" for v in cols.values()))
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
