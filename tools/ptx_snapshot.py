"""The sm_90a PTX of a fixed set of shipped kernel variants, compiled on the CPU (fake tensors), for
refactors that must not change the generated code: dump before, dump after, compare.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/ptx_snapshot.py /tmp/ptx_before      # before the change
    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/ptx_snapshot.py /tmp/ptx_after       # after it
    .venv/bin/python tools/ptx_snapshot.py --compare /tmp/ptx_before /tmp/ptx_after  # exit 1 on a difference

The comparison ignores the kernel's symbol, which CuTe DSL derives from the module path (a moved
module renames it). ``--only NAME ...`` dumps some variants. To dump an older checkout, put its
``src`` first on ``PYTHONPATH``.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _window(b, h, q, kv):
    return (kv <= q) & (q - kv < 256)


def variants():
    import cutlass

    from warpsched.kernels.attention import backward_host as bwd
    from warpsched.kernels.attention import host as att
    from warpsched.kernels.gemm import host as gemm

    coop = dict(schedule="cooperative")
    return {
        "gemm_coop": lambda: gemm.compile_for_cpu(**coop),
        "gemm_pingpong": lambda: gemm.compile_for_cpu(schedule="pingpong"),
        "gemm_pp_shared": lambda: gemm.compile_for_cpu(schedule="pingpong_shared"),
        "gemm_fp8": lambda: gemm.compile_for_cpu(ab_dtype=cutlass.Float8E4M3FN, **coop),
        "gemm_serial": lambda: gemm.compile_for_cpu(split_k=True, split_reduce="serial", **coop),
        "gemm_parallel": lambda: gemm.compile_for_cpu(split_k=True, split_reduce="parallel", **coop),
        "gemm_atomic": lambda: gemm.compile_for_cpu(split_k=True, split_reduce="atomic", **coop),
        "gemm_streamk": lambda: gemm.compile_for_cpu(stream_k=True, **coop),
        "gemm_swiglu": lambda: gemm.compile_for_cpu(activation="swiglu", bias="c", residual=True, **coop),
        "att_128_causal": lambda: att.compile_for_cpu(head_dim=128, causal=True),
        "att_64_full": lambda: att.compile_for_cpu(head_dim=64, causal=False),
        "att_256_causal": lambda: att.compile_for_cpu(head_dim=256, causal=True, **att.tuned_options(256, True)),
        "att_mask": lambda: att.compile_for_cpu(head_dim=128, mask_mod=_window, softcap=30.0),
        "att_overlap": lambda: att.compile_for_cpu(head_dim=128, **dict(att.tuned_options(128, False),
                                                                        unit_overlap=True)),
        "bwd_128_causal": lambda: bwd.compile_for_cpu(head_dim=128, causal=True, shared_ds=True),
        "bwd_64_full": lambda: bwd.compile_for_cpu(head_dim=64, causal=False),
        "bwd_128_default": lambda: bwd.compile_for_cpu(head_dim=128, causal=True, **bwd.default_options(128)),
        "bwd_64_default": lambda: bwd.compile_for_cpu(head_dim=64, causal=False, **bwd.default_options(64, full=True)),
    }


def dump(out: str, only) -> int:
    os.makedirs(out, exist_ok=True)
    table = variants()
    bad = 0
    for name in only or table:
        try:
            ptx = table[name]().artifacts.PTX
        except Exception as e:  # a variant that no longer compiles is a finding, not a crash of the tool
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            bad += 1
            continue
        with open(os.path.join(out, name + ".ptx"), "w") as f:
            f.write(ptx)
        print(f"{name}: {len(ptx.splitlines())} lines", flush=True)
    return 1 if bad else 0


def _normalized(path: str) -> str:
    with open(path) as f:
        return re.sub(r"kernel_cutlass_[A-Za-z0-9_]+", "KERNEL", f.read())


def compare(before: str, after: str) -> int:
    bad = 0
    for name in sorted(f for f in os.listdir(before) if f.endswith(".ptx")):
        other = os.path.join(after, name)
        if not os.path.exists(other):
            print(f"{name}: missing in {after}")
            bad += 1
            continue
        a, b = _normalized(os.path.join(before, name)).splitlines(), _normalized(other).splitlines()
        diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
        print(f"{name}: " + ("identical (kernel symbol aside)" if diff == 0 else f"DIFFERS in {diff} lines "
                             f"({len(a)} vs {len(b)})"))
        bad += diff != 0
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="folder to write NAME.ptx files into")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="dump these variants only")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two dumps")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("give a folder to dump into, or --compare BEFORE AFTER")
    return dump(args.out, args.only)


if __name__ == "__main__":
    sys.exit(main())
