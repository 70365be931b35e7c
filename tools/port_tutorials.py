"""NVIDIA's TS tutorials, side by side: the reference TS vs the same file ported to warpsched.

    python tools/port_tutorials.py --cutlass /path/to/cutlass [--out FILE] [--only KEY ...]
    python tools/port_tutorials.py --cutlass /path/to/cutlass --gpu      # H200: run the copies

The port is what a user does: every ``from cutlass.experimental.task_scheduling[...] import``
becomes ``from warpsched import`` (nothing else changes; the ported file is written to a
scratch directory at the same relative path, so paths computed from ``__file__`` still work).
Each (tutorial, implementation) pair is compiled in its own interpreter for the tutorial's
architecture (sm_90a for the copies, sm_100a for the GEMMs) with fake tensors, and the
kernel's PTX is counted: mbarrier instructions, TMA copies (cp.async.bulk.tensor) and tcgen05
instructions. With ``--gpu`` the Hopper-runnable copies are also launched with real tensors
and compared with torch.

Only the tutorials that compile against the reference in nvidia-cutlass-dsl 4.8.1 are listed
(the others fail in the DSL front end with the reference itself).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIAL_DIR = "examples/python/CuTeDSL/experimental/task_scheduling/blackwell/tutorial"
MARK = "@@PORT@@"

sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from port_tutorial_args import FLAGS, NEW, OLD, TUTORIALS, fake_args  # noqa: E402
from warpsched.compat import port_imports as port_source  # noqa: E402  (pure Python, imports no DSL)

COPIES = [k for k, v in TUTORIALS.items() if v[1] == "sm_90a"]


def ported_copy(cutlass_root: str, rel: str, scratch: str, port: bool = True, dsl_fix: bool = False) -> str:
    """The tutorial written to ``scratch`` at the same relative path: ported (``port``) or as it
    is, with the DSL 4.8.1 edit (``DSL_481_FIX``) applied first when ``dsl_fix``."""
    src = os.path.join(cutlass_root, TUTORIAL_DIR, rel)
    dst = os.path.join(scratch, TUTORIAL_DIR, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src) as f:
        text = f.read()
    if dsl_fix:
        text = DSL_481_FIX[0].sub(DSL_481_FIX[1], text)
    with open(dst, "w") as f:
        f.write(port_source(text) if port else text)
    return dst


# 04_01 and 05_01 start a descriptor variable as Int64 and assign a Tcgen05SmemDesc (an Int64
# subclass) under a runtime `if`; the 4.8.1 front end refuses that join (TYPE_UNSTABLE_JOIN) in the
# tutorial's own code, whichever TS runs it. --dsl-481-fix starts those variables as
# Tcgen05SmemDesc(0) in both the reference's and the ported copy (4 lines in 05_01, 2 in 04_01).
DSL_481_FIX = (re.compile(r"(desc_[a-z0-9_]*base) = cutlass\.Int64\(0\)"), r"\1 = prims.Tcgen05SmemDesc(0)")


# ---------------------------------------------------------------------------------------- PTX
COUNTS = {"mbarrier": ("mbarrier.",), "expect_tx": ("expect_tx",), "TMA": ("cp.async.bulk.tensor",),
          "tcgen05": ("tcgen05.",)}


def kernel_ptx(ptx: str, kernel_name: str) -> str:
    """The PTX of the entry compiled from ``kernel_name`` (a host function may launch several)."""
    entries = re.split(r"(?m)^(?=\.visible \.entry|\.entry)", ptx)
    chosen = [e for e in entries if re.match(r"\.(visible \.)?entry\s+\S*" + re.escape(kernel_name) + r"_", e)]
    if not chosen:  # names are mangled as <module>_<function>_<hash>: fall back to a substring match
        chosen = [e for e in entries if e.startswith((".entry", ".visible .entry")) and kernel_name in e.split("(")[0]]
    return "\n".join(chosen) if chosen else ptx


def count_ptx(ptx: str) -> dict:
    lines = [ln.strip() for ln in ptx.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("//")]
    return {k: sum(any(p in ln for p in pats) for ln in lines) for k, pats in COUNTS.items()}


# ---------------------------------------------------------------------------------------- child
def _first_line(e: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _stub_torch_if_missing():
    """The tutorials import torch at module level but use it only in their GPU runners; a CPU
    machine without torch gets a placeholder module so the kernels can still be compiled."""
    try:
        import torch  # noqa: F401
    except ImportError:
        import types

        stub = types.ModuleType("torch")
        stub.__getattr__ = lambda name: type(name, (), {})
        sys.modules["torch"] = stub


def _load(path: str, name: str):
    import importlib.util

    _stub_torch_if_missing()

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def force_unroll(impl: str, unroll) -> None:
    """Give ``domain_loop`` calls without ``unroll=`` this default (for a same-unroll comparison:
    the TS docs say 1, the reference 4.8.1 passes None, letting the compiler unroll)."""
    if impl == "reference":
        from cutlass.experimental.task_scheduling import schedule_builder as impl_mod
    else:
        from warpsched.model import schedule as impl_mod
    impl_mod.domain_loop.__wrapped__.__kwdefaults__["unroll"] = unroll


def child(key: str, path: str, impl: str, unroll: str = "default") -> dict:
    rel, arch, kernel_name = TUTORIALS[key]
    os.environ["CUTE_DSL_ARCH"] = arch
    out = {"tutorial": key, "impl": impl, "arch": arch, "unroll": unroll}
    t0 = time.perf_counter()
    try:
        import cutlass.cute as cute

        if unroll != "default":
            force_unroll(impl, None if unroll == "none" else int(unroll))

        mod = _load(path, f"port_{impl}_{key}")
        fn, args = fake_args(key, mod)
        # --keep-ptx writes files into the cwd (run_child starts the child in a scratch directory).
        # With --dump-dir, artifacts.PTX is at times the path of a file already removed.
        compiler = cute.compile[cute.FrontendNext] if os.environ.get("PORT_FRONTEND") == "next" else cute.compile
        compiled = compiler(fn, *args, options=f"--keep-ptx --gpu-arch {arch}")
        text = compiled.artifacts.PTX
        if "\n" not in text:
            raise RuntimeError(f"no PTX text from the compile (got {text[:80]!r})")
        ptx = kernel_ptx(text, kernel_name)
        out.update(ok=True, **count_ptx(ptx))
        if impl == "warpsched":
            out["verdict"] = _warpsched_verdict()
        if os.environ.get("PORT_DUMP_PTX"):  # for reading the two kernels side by side
            os.makedirs(os.environ["PORT_DUMP_PTX"], exist_ok=True)
            with open(os.path.join(os.environ["PORT_DUMP_PTX"], f"{key}.{impl}.unroll-{unroll}.ptx"), "w") as f:
                f.write(ptx)
    except BaseException as e:  # noqa: BLE001 - the table reports it
        out.update(ok=False, error=_first_line(e))
        if impl == "warpsched" and type(e).__name__ == "ValidationError":
            out["verdict"] = "rejected"
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _warpsched_verdict() -> str:
    """The exhaustive checker's verdict on the program the kernel just built (its last lookup)."""
    from warpsched.verify.verdicts import VERDICTS

    if not VERDICTS.looked_up:
        return "no TaskManager"
    result = VERDICTS._entries.get(VERDICTS.looked_up[-1])
    return getattr(result, "verdict", "?") if result is not None else "?"


# ---------------------------------------------------------------------------------------- GPU
def gpu_child(key: str, path: str, impl: str) -> dict:
    """Launch the tutorial's host function with real tensors and compare with torch."""
    os.environ["CUTE_DSL_ARCH"] = TUTORIALS[key][1]
    out = {"tutorial": key, "impl": impl}
    try:
        import torch
        import cutlass
        import cutlass.cute as cute
        from cutlass.cute.runtime import from_dlpack

        mod = _load(path, f"gpu_{impl}_{key}")
        checks = []
        if key == "01_copy_grid_stride":
            for n in (1, 1000, 1 << 24):
                src = torch.randint(-32768, 32768, (n,), dtype=torch.int16, device="cuda")
                dst = torch.full_like(src, -1)
                ms, md = from_dlpack(src), from_dlpack(dst)
                f = cute.compile(mod.gmem_copy_kernel_host, cutlass.Int32(n), ms, md, cutlass.Int32(256), 8)
                f(cutlass.Int32(n), ms, md, cutlass.Int32(256))
                torch.cuda.synchronize()
                checks.append((f"int16[{n}]", bool(torch.equal(src, dst))))
        elif key == "02_copy_tma":
            for rows, cols in ((256, 512), (1000, 1024), (3, 128)):
                a = torch.randn(rows, cols, device="cuda").to(torch.float16)
                b = torch.full_like(a, float("nan"))
                ma, mb = from_dlpack(a), from_dlpack(b)
                f = cute.compile(mod.tma_copy_kernel_host, (rows, cols), ma, mb, False)
                f((rows, cols), ma, mb, False)
                torch.cuda.synchronize()
                checks.append((f"f16[{rows}x{cols}]", bool(torch.equal(a, b))))
        elif key == "03_copy_persistent_skip_tile":
            for rows, cols, over in ((256, 512, 4), (77, 1024, 0), (1, 128, 9)):
                a = torch.randn(rows, cols, device="cuda").to(torch.float16)
                b = torch.full_like(a, float("nan"))
                ma, mb = from_dlpack(a), from_dlpack(b)
                f = cute.compile(mod.tma_copy_persistent_skip_kernel_host, (rows, cols), ma, mb, cols // 128, over)
                f((rows, cols), ma, mb)
                torch.cuda.synchronize()
                checks.append((f"f16[{rows}x{cols}]+{over}", bool(torch.equal(a, b))))
        elif key == "03_copy_varlen_dynamic_domain":
            gen = torch.Generator().manual_seed(7)
            for n_seg, max_len in ((8, 512), (33, 300), (1, 1)):
                lens = torch.randint(1, max_len + 1, (n_seg,), generator=gen)
                offsets = torch.zeros(n_seg + 1, dtype=torch.int32)
                offsets[1:] = torch.cumsum(lens, 0)
                a = torch.randn(int(offsets[-1]), device="cuda")
                b = torch.full((n_seg, max_len), float("nan"), device="cuda")
                offsets = offsets.cuda()
                # explicit leading dims: a 1x1 segment table has no dimension cutlass can deduce it from
                ma, mb, mo = (from_dlpack(t).mark_layout_dynamic(leading_dim=d) for t, d in ((a, 0), (b, 1), (offsets, 0)))
                import cutlass.utils as utils

                clusters = utils.HardwareInfo().get_max_active_clusters(1)
                f = cute.compile(mod.host_function, ma, mb, mo, n_seg, clusters)
                f(ma, mb, mo, n_seg)
                torch.cuda.synchronize()
                ok = True
                for i in range(n_seg):
                    s, e = int(offsets[i]), int(offsets[i + 1])
                    ok &= bool(torch.equal(b[i, :e - s], a[s:e])) and bool(torch.isnan(b[i, e - s:]).all())
                checks.append((f"f32 {n_seg} segs <= {max_len}", ok))
        else:
            raise KeyError(f"{key} does not run on Hopper")
        out.update(ok=all(c[1] for c in checks), checks=checks)
    except BaseException as e:  # noqa: BLE001
        out.update(ok=False, error=_first_line(e))
    return out


# ---------------------------------------------------------------------------------------- driver
def run_child(mode: str, key: str, path: str, impl: str, timeout: int, unroll: str = "default") -> dict:
    env = dict(os.environ)
    env["CUTE_DSL_ARCH"] = TUTORIALS[key][1]
    env["WARPSCHED_VERDICT_CACHE"] = "0"  # the compile time includes the checks (no stored verdict)
    if impl == "warpsched":
        env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, key, os.path.abspath(path), impl, unroll]
    env["PYTHONPATH"] = os.path.join(ROOT, "tools") + os.pathsep + env.get("PYTHONPATH", "")
    try:  # --keep-ptx writes into the cwd the DSL starts in: a scratch directory
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=tempfile.mkdtemp(prefix="port_ptx_"))
    except subprocess.TimeoutExpired:
        return {"tutorial": key, "impl": impl, "ok": False, "error": f"timeout after {timeout}s"}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
    return {"tutorial": key, "impl": impl, "ok": False, "error": f"crashed rc={p.returncode}: {tail[0][:200]}"}


# unroll mode -> heading. "default": each library's own default (what a ported program gets);
# "1": both at the TS docs' default (no unrolling); "none": both at the reference 4.8.1's
# effective default (the compiler chooses).
MODES = (("default", "as ported (own defaults)"), ("1", "both unroll=1 (TS docs)"),
         ("none", "both unroll=None (ref. 4.8.1)"))


def _cell(r: dict) -> str:
    if not r.get("ok"):
        return "FAIL"
    return "/".join(str(r.get(k, "?")) for k in COUNTS)


def verdict(ref: dict, ws: dict) -> str:
    if not ws.get("ok"):
        return "PORT FAILS" if ref.get("ok") else "both fail"
    if not ref.get("ok"):
        return "warpsched only"
    fewer = ws["mbarrier"] <= ref["mbarrier"]
    same = all(ws[k] == ref[k] for k in ("expect_tx", "TMA", "tcgen05"))
    if fewer and same:
        return "OK"
    return ", ".join(x for x in ("MORE MBARRIER" if not fewer else "",
                                 "EXPECT_TX/TMA/TCGEN05 DIFFER" if not same else "") if x)


def _reference_result(by_mode) -> str:
    ref = by_mode["default"][0]
    if ref.get("ok"):
        return "compiles"
    err = ref.get("error", "?")
    kind = err.split(":")[0]
    code = re.search(r"error\[([A-Z_]+)\]", err)
    return f"fails ({code.group(1) if code else kind})"


def _ws_result(by_mode) -> str:
    ws = by_mode["default"][1]
    if ws.get("ok"):
        return ws.get("verdict", "?")
    return "rejected" if ws.get("verdict") == "rejected" else "FAILS"


def table(rows) -> str:
    """rows: key -> {mode: (ref, ws)}; a Markdown table (docs/porting.md) and the errors below it."""
    head = ("| configuration | CLI | arch | reference 4.8.1 | warpsched | unroll=1: ref | unroll=1: ws | "
            "unroll=None: ref | unroll=None: ws | as ported: ws | compile s (ref / ws) | same unroll |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    notes = []
    for key, by_mode in rows.items():
        ref, ws = by_mode["default"]
        v1, vn = verdict(*by_mode["1"]), verdict(*by_mode["none"])
        secs = f"{ref.get('seconds', '?')} / {ws.get('seconds', '?')}"
        out.append(f"| {key} | {FLAGS.get(key, '')} | {TUTORIALS[key][1]} | {_reference_result(by_mode)} | "
                   f"{_ws_result(by_mode)} | {_cell(by_mode['1'][0])} | {_cell(by_mode['1'][1])} | "
                   f"{_cell(by_mode['none'][0])} | {_cell(by_mode['none'][1])} | {_cell(ws)} | {secs} | "
                   f"{v1 if v1 == vn else f'{v1} / {vn}'} |")
        seen = set()
        for m, _ in MODES:
            for r in by_mode[m]:
                if not r.get("ok") and (r["impl"], r.get("error")) not in seen:
                    seen.add((r["impl"], r.get("error")))
                    notes.append(f"- {key} [{r['impl']}, unroll {m}]: {r.get('error')}")
    legend = ("Counts: mbarrier / expect_tx / TMA (cp.async.bulk.tensor) / tcgen05 lines of the TS kernel's PTX. "
              "'as ported': each library's own default unroll (a port keeps the reference's, None). "
              "'same unroll': warpsched emits no more mbarrier lines and the same expect_tx / TMA / tcgen05 "
              "lines as the reference at unroll=1 and at unroll=None ('warpsched only' where the reference "
              "does not compile). Compile seconds: the as-ported child, fresh interpreter, checks included "
              "(no stored verdict).")
    return "\n".join(out + ["", legend] + ([""] + notes if notes else []))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cutlass", help="root of a CUTLASS checkout (holds examples/python/CuTeDSL/...)")
    ap.add_argument("--only", nargs="*", help="tutorial keys (default: all)")
    ap.add_argument("--gpu", action="store_true", help="run the Hopper copies on the GPU (correctness vs torch)")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--dump-ptx", metavar="DIR", help="write each counted kernel's PTX to DIR")
    ap.add_argument("--json", metavar="FILE", help="also write the raw child results to FILE")
    ap.add_argument("--from-json", metavar="FILE", help="render the table from a --json file (no compiles)")
    ap.add_argument("--dsl-481-fix", action="store_true",
                    help="apply the tutorials' DSL 4.8.1 type fix (DSL_481_FIX) to both copies")
    ap.add_argument("--frontend", choices=("classic", "next"), default="classic",
                    help="compile with CuTe DSL's default front end or with cute.compile[cute.FrontendNext] "
                         "(what the later tutorials' own runners call)")
    ap.add_argument("--set", choices=("old", "new", "all"), default="all",
                    help="the 6 tutorials 4.8.1 ships, the 10 configurations added since, or all 16")
    ap.add_argument("--child", nargs=5, metavar=("MODE", "KEY", "PATH", "IMPL", "UNROLL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, key, path, impl, unroll = args.child
        res = child(key, path, impl, unroll) if mode == "compile" else gpu_child(key, path, impl)
        print(MARK + json.dumps(res), flush=True)
        return 0
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)
        print(table(rows))
        return 0
    if not args.cutlass:
        ap.error("--cutlass PATH is required")
    os.environ["PORT_FRONTEND"] = args.frontend  # the children inherit it
    keys = args.only or (COPIES if args.gpu else {"old": OLD, "new": NEW, "all": list(TUTORIALS)}[args.set])
    scratch = tempfile.mkdtemp(prefix="warpsched_port_")
    if args.dump_ptx:
        os.environ["PORT_DUMP_PTX"] = os.path.abspath(args.dump_ptx)
    lines = []
    if args.gpu:
        for key in keys:
            rel = TUTORIALS[key][0]
            orig = os.path.join(args.cutlass, TUTORIAL_DIR, rel)
            for impl, path in (("reference", orig), ("warpsched", ported_copy(args.cutlass, rel, scratch))):
                r = run_child("gpu", key, path, impl, args.timeout)
                line = (f"{key:32s} {impl:9s} {'CORRECT' if r.get('ok') else 'WRONG/FAILED'} "
                        + " ".join(f"{n}:{'ok' if c else 'BAD'}" for n, c in r.get("checks", []))
                        + (f"  {r['error']}" if r.get("error") else ""))
                print(line, flush=True)
                lines.append(line)
    else:
        rows = {}
        for key in keys:
            rel = TUTORIALS[key][0]
            orig = os.path.join(args.cutlass, TUTORIAL_DIR, rel)
            if args.dsl_481_fix:
                orig = ported_copy(args.cutlass, rel, scratch + "_reference", port=False, dsl_fix=True)
            ported = ported_copy(args.cutlass, rel, scratch, dsl_fix=args.dsl_481_fix)
            rows[key] = {}
            for mode, _ in MODES:
                ref = run_child("compile", key, orig, "reference", args.timeout, mode)
                ws = run_child("compile", key, ported, "warpsched", args.timeout, mode)
                rows[key][mode] = (ref, ws)
                print(f"  {key} unroll={mode}: reference {_cell(ref)}, warpsched {_cell(ws)} "
                      f"({ws.get('verdict', '')})", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        lines = [table(rows)]
        print()
        print(lines[0])
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
