"""What ptxas makes of the shipped kernel variants, compiled on the CPU: register spills and wgmma serialization
(C7512) per variant, from the report of the ptxas CuTe DSL runs (``warpsched.kernels._host.ptxas_remarks``).
tests/test_ptxas_health.py holds a few of them to zero; this sweeps more of what ``ops.*`` compiles.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/ptxas_report.py [--only NAME ...]

Prints one line per variant (spill store / load bytes, serialized or not) and exits 1 when any variant spills or
is serialized.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def variants():
    from ptx_snapshot import variants as snapshot

    from warpsched.kernels.attention import backward_host as bwd
    from warpsched.kernels.attention import host as att
    from warpsched.kernels.attention import varlen

    table = dict(snapshot())
    for d in (64, 128, 256):
        for causal in (False, True):
            mask = "causal" if causal else "full"
            table[f"att_tuned_{d}_{mask}"] = (lambda d=d, c=causal: att.compile_for_cpu(
                head_dim=d, causal=c, **att.tuned_options(d, c)))
            table[f"bwd_default_{d}_{mask}"] = (lambda d=d, c=causal: bwd.compile_for_cpu(
                head_dim=d, causal=c, **bwd.default_options(d)))
    table["att_tuned_64_causal_long"] = lambda: att.compile_for_cpu(
        head_dim=64, causal=True, **att.tuned_options(64, True, att.LONG_CAUSAL_HD64))
    table["att_tuned_128_full_long"] = lambda: att.compile_for_cpu(
        head_dim=128, causal=False, **att.tuned_options(128, False, None, att.LONG_FULL_HD128))
    table["att_varlen_128_causal"] = lambda: varlen.compile_for_cpu(head_dim=128, causal=True,
                                                                    **varlen.varlen_options(128, True))
    table["att_varlen_64_full_short"] = lambda: varlen.compile_for_cpu(head_dim=64, causal=False,
                                                                       **varlen.varlen_options(64, False, 1))
    for d, causal, top in ((64, True, 4096), (64, False, 4096), (128, True, 4096), (128, False, 4096)):
        # the packed forward's defaults over long sequences (wgs=3 at hd64 full: 160 registers)
        table[f"att_varlen_regs_{d}_{'causal' if causal else 'full'}"] = (
            lambda d=d, c=causal, t=top: varlen.compile_for_cpu(head_dim=d, causal=c, **varlen.varlen_options(d, c, t)))
    for d in (64, 128):
        table[f"bwd_varlen_{d}_causal"] = (lambda d=d: varlen.compile_backward_for_cpu(
            head_dim=d, causal=True, **bwd.default_options(d, varlen=True)))
        table[f"bwd_varlen_live_{d}_causal"] = (lambda d=d: varlen.compile_backward_for_cpu(
            head_dim=d, causal=True, **dict(bwd.default_options(d, varlen=True), live_units=True)))
    table["bwd_deterministic_128"] = lambda: bwd.compile_for_cpu(
        head_dim=128, causal=True, **dict(bwd.default_options(128), deterministic=True))
    table["bwd_128_defer"] = lambda: bwd.compile_for_cpu(head_dim=128, causal=True, **dict(
        bwd.default_options(128), dq_defer=True))
    for name, extra in (("kvds", dict(dkv_in_ds=True)), ("defer", dict(dq_defer=True)),
                        ("es", dict(early_stats=True))):
        table[f"bwd_64_{name}"] = lambda extra=extra: bwd.compile_for_cpu(
            head_dim=64, causal=True, **dict(bwd.default_options(64), **extra))
    return table


def report(compile_fn):
    """(spill stores, spill loads, serialized) of one compile, its stderr captured at the file-descriptor level
    (ptxas's report is printed below Python)."""
    from warpsched.kernels import _host

    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            with _host.ptxas_remarks():
                compile_fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return _host.ptxas_findings(tmp.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="variant names (default: all)")
    args = ap.parse_args()
    table = variants()
    names = args.only or list(table)
    bad = 0
    print("| variant | spill stores | spill loads | wgmma serialized |\n|---|---|---|---|", flush=True)
    for name in names:
        try:
            found = report(table[name])
        except Exception as e:  # a variant that does not compile is reported, the sweep goes on
            print(f"| {name} | - | - | compile failed: {type(e).__name__}: {str(e)[:120]} |", flush=True)
            bad += 1
            continue
        if found is None:
            print(f"| {name} | - | - | no ptxas report |", flush=True)
            bad += 1
            continue
        stores, loads, serialized = found
        bad += bool(stores or loads or serialized)
        print(f"| {name} | {stores} | {loads} | {'YES' if serialized else 'no'} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
