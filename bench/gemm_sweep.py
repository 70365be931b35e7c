"""GEMM sweep on the H200: the persistent warpsched GEMM against torch.matmul and wgmma_gemm (bf16),
and against torch._scaled_mm (fp8 e4m3, per-tensor scales, bf16 out).

  python3 bench/gemm_sweep.py --budget 230 2>&1 | tee bench/results/gemm_sweep.log
  python3 bench/gemm_sweep.py --quick     # 4 shapes
  ... --shapes squares,vocab        # shape sets (all, squares, llm, vocab, quick) or MxNxK items
  ... --dtypes bf16                 # bf16 only (default bf16,fp8)

Shapes (C[M, N] = A[M, K] @ B[N, K]^T, fp32 accumulate, bf16 out): squares 1024..16384 and M in
{64, 256, 1024, 4096, 16384} x (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)}
(the last: an LLM vocabulary projection, set "vocab"). fp8: A e4m3 and B e4m3 with per-tensor
scales, against torch._scaled_mm on the same quantized inputs (``tuned`` among ``FP8_TUNE``);
e4m3 x e5m2 is checked for correctness (untimed).
Sides: torch.matmul (torch.mm into a preallocated C), wgmma_gemm.gemm (non-persistent), the
persistent kernel's two schedules at their default tiles (``coop`` 128x256, ``pingpong``
128x128 per warp group, no split-K, no cluster), ``coop_sk`` (cooperative 128x256 with
stream-K, ``split_k="stream"``: the last 1 + fraction waves' K iterations spread evenly over the
CTAs; also in the tune sets as ``sk`` configurations, and checked on ``SK_RAGGED`` shapes with a
bit-for-bit repeat) and ``tuned``: the fastest of a handful of
configurations (tiles, raster order / group, 2x1 clusters with B multicast for large shapes,
split-K with split_k="auto" for few-tile shapes, reduced by torch (``s``), in the kernel by the
last share (``p``, parallel split-K) or by red.global.add into one zeroed fp32 tile whose last
arriving share stores C (``a``, atomic split-K); the serial
in-kernel split-K configurations (``r``, ``r2``) were timed in
bench/results/gemm_sweep_serial_h200.log, never won, and only ``coop64x128r`` stays for its
correctness checks), picked per shape by ``gemm_autotune.select`` (each timed once, the ones
within 25 % of the best timed twice more in rotated order, the lowest median wins; ``tune_set``). Every side runs on fresh random inputs with a NaN-poisoned output and is
compared with an fp64 reference (relative Frobenius error, any non-finite value fails) on every
shape, plus untimed ragged shapes. warpsched.ops.gemm (autotune with its disk cache under $OUT) is checked on three shapes.
Timing: 3 rounds, the sides in a balanced order (``_eager.round_order``),
each a triton do_bench median over CUDA-graph replays of back-to-back launches (host launch cost
out of the numbers for every side alike); the table reports each side's median of the rounds.

A supervisor process runs the sweep in a child and restarts it (without the configuration at
fault, keeping finished shapes) if the child hangs or dies, so one bad kernel cannot take the
run down. Results stream as they come; the final table is printed last (and written to $OUT).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import selectors
import signal
import statistics
import subprocess
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

from gemm_sweep_configs import CONFIGS, FIXED, QUICK, SHAPE_SETS, TOL, emit, parse_shapes, phase  # noqa: E402


# ======================================================================================== child
class SelfTestChild:
    """``--selftest`` (CPU, no torch): fake records through the real supervisor, with one hang (the
    pingpong configuration, until it is excluded) and one crash, to exercise restarts and the table."""

    def __init__(self, args):
        self.args, self.done = args, set(tuple(s) for s in args.done)

    def run(self):
        import random

        rnd = random.Random(len(self.done))
        for name in ["wgmma_gemm"] + list(CONFIGS):
            phase("compile", 5, name)
            emit("compile", cfg=name, ok=True, seconds=0.1, verdict="SAFE", desc=name)
        for shape in QUICK:
            if shape in self.done:
                continue
            if time.time() > self.args.deadline:
                emit("skipped", shape=list(shape), note="time budget spent")
                continue
            fl = 2.0 * shape[0] * shape[1] * shape[2]
            sides = {"torch": "torch", "wgmma_gemm": "wgmma_gemm", "coop": FIXED["coop"],
                     "pingpong": FIXED["pingpong"], "coop_sk": FIXED["coop_sk"], "tuned": "coop256x128"}
            for s, cfg in sides.items():
                if cfg in self.args.exclude:
                    continue
                phase("check", 2, cfg, list(shape))
                if cfg == "pp128x128":
                    time.sleep(30)  # a hung kernel: the supervisor kills us after 2 s of silence
                if cfg == "coop256x128" and shape == QUICK[1]:
                    os._exit(3)  # a crash: the supervisor skips the configuration
                emit("check", shape=list(shape), side=cfg, ok=True, err=2e-3)
            for r in range(self.args.rounds):
                for s, cfg in sides.items():
                    if cfg not in self.args.exclude:
                        ms = fl / 6.5e11 * (1 + 0.05 * rnd.random())
                        emit("time", shape=list(shape), side=s, cfg=cfg, round=r, ms=ms, how="graph",
                             tflops=fl / ms / 1e9)
                if "fp8" in self.args.dtypes:
                    for s, cfg in (("torch_fp8", "torch_fp8"), ("coop_fp8", "f8coop128x256"),
                                   ("tuned_fp8", "f8pp128x128")):
                        ms = fl / 1.2e12 * (1 + 0.05 * rnd.random())
                        emit("time", shape=list(shape), side=s, cfg=cfg, round=r, ms=ms, how="graph",
                             tflops=fl / ms / 1e9, dtype="fp8")
            emit("shape_done", shape=list(shape))
        phase("finished", 5)


# ======================================================================================== supervisor
def supervise(args):
    results, pending = [], []  # pending: records of the shape in progress (dropped if the child dies in it)
    exclude, done = set(), set()
    restarts = 0
    t_start = time.time()
    deadline = t_start + args.budget
    while True:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rounds", str(args.rounds),
               "--shapes", args.shapes_text, "--dtypes", ",".join(args.dtypes), "--deadline", str(deadline),
               "--rep-ms", str(args.rep_ms)]
        cmd += ["--selftest"] if args.selftest else []
        for x in sorted(exclude):
            cmd += ["--exclude", x]
        for d in sorted(done):
            cmd += ["--done", ",".join(map(str, d))]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        fd = proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        limit, current, last = 600, dict(what="start", cfg=None, shape=None), time.time()
        finished = hung = False
        partial, lines, eof = b"", [], False
        while True:
            if not lines:
                if eof:
                    break
                if not sel.select(timeout=2):
                    if time.time() - last > limit or time.time() > deadline + 90:
                        hung = True
                        break
                    continue
                chunk = os.read(fd, 1 << 16)  # raw reads: a buffered reader would hide lines from select()
                if not chunk:
                    eof = True
                    lines = [partial.decode(errors="replace")] if partial else []
                    partial = b""
                    continue
                last = time.time()
                parts = (partial + chunk).split(b"\n")
                partial = parts.pop()
                lines = [x.decode(errors="replace") for x in parts]
                continue
            line = lines.pop(0)
            if line.startswith("@@PHASE "):
                current = json.loads(line[len("@@PHASE "):])
                limit = current["limit"]
                finished = current["what"] == "finished"
                continue
            if line.startswith("@@"):
                rec = json.loads(line[2:])
                if rec["kind"] in ("check", "tune", "time"):
                    pending.append(rec)
                else:
                    results.append(rec)
                if rec["kind"] == "shape_done":
                    done.add(tuple(rec["shape"]))
                    results += pending
                    pending = []
                print(render_record(rec), flush=True)
                continue
            print("  | " + line, flush=True)
        if hung:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = proc.returncode
        if finished and not hung:
            break
        during = f"{current['what']} {current['cfg'] or ''} {current['shape'] or ''}".strip()
        cfg, shape = current["cfg"], current["shape"]
        if cfg in CONFIGS or cfg == "wgmma_gemm":
            action = f"excluding {cfg}"
            exclude.add(cfg)
        elif shape is not None:
            action = f"skipping shape {shape}"
            done.add(tuple(shape))
            done.add(tuple(shape[:3]) + (8,))  # and its fp8 run
        else:
            action = "nothing to exclude"
        print(f"!! child {'hung' if hung else f'exited rc={rc}'} during '{during}' "
              f"({time.time() - last:.0f}s silent); {action}; restarting", flush=True)
        results.append(dict(kind="fault", during=during, hung=hung, rc=rc))
        results += [r for r in pending if r["kind"] == "check" and not r["ok"]]  # keep the evidence
        pending = []
        restarts += 1
        if time.time() > deadline:
            print("!! time budget spent: no restart", flush=True)
            break
        if restarts > 4 or action == "nothing to exclude":
            print("!! giving up", flush=True)
            break
    report(results, time.time() - t_start)


def render_record(rec):
    k = rec["kind"]
    if k == "compile":
        if rec["ok"]:
            return f"  compiled {rec['cfg']:15s} {rec['seconds']:6.1f}s  checker {rec['verdict']:8s} {rec['desc']}"
        return f"  COMPILE FAILED {rec['cfg']}: {rec.get('note')}"
    if k == "check":
        err = "  n/a   " if rec["err"] is None else f"{rec['err']:.2e}"
        return f"  check {'x'.join(map(str, rec['shape'])):18s} {rec['side']:22s} {'OK ' if rec['ok'] else 'BAD'} err={err} {rec.get('note', '')}"
    if k == "tune":
        return (f"  tune  {'x'.join(map(str, rec['shape'])):18s} {rec['cfg']:15s} {rec['ms'] * 1e3:9.1f} us "
                f"({rec['how']}{', split_k ' + str(rec['splits']) if rec.get('splits', 1) != 1 else ''})")
    if k == "time":
        return (f"  time  {'x'.join(map(str, rec['shape'])):18s} r{rec['round']} {rec['side']:10s} {rec['cfg']:15s} "
                f"{rec['ms'] * 1e3:9.1f} us {rec['tflops']:7.1f} TFLOP/s ({rec['how']})")
    return "  " + json.dumps(rec)


def report(results, seconds):
    times, bad, tuned_cfg = {}, {}, {}
    for r in results:
        if r["kind"] == "time":
            times.setdefault(tuple(r["shape"]), {}).setdefault(r["side"], []).append(r["ms"])
            if r["side"] in ("tuned", "tuned_fp8"):
                tuned_cfg[(tuple(r["shape"]), r["side"])] = r["cfg"]
        if r["kind"] == "check" and not r["ok"]:
            bad.setdefault(tuple(r["shape"]), []).append(r["side"])
    checks = [r for r in results if r["kind"] == "check"]
    lines = ["", f"== correctness: {sum(r['ok'] for r in checks)}/{len(checks)} checks passed "
             f"(fresh random inputs, NaN-poisoned C, rel. Frobenius error vs fp64 < {TOL}; fp8: vs the fp64 "
             "product of the dequantized inputs)"]
    for shape, sides in bad.items():
        lines.append(f"   FAILED {'x'.join(map(str, shape))}: {', '.join(sides)}")
    worst = {}
    for r in checks:
        if r["ok"] and r["err"] is not None:
            kind = "fp8" if ("f8" in r["side"] or "fp8" in r["side"]) else "bf16/fp16"
            worst[kind] = max(worst.get(kind, 0.0), r["err"])
    lines.append("   largest error of a passing check: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    seen_compile = set()
    for r in results:
        if r["kind"] == "skipped":
            lines.append(f"   SKIPPED {'x'.join(map(str, r['shape']))}: {r['note']}")
        if r["kind"] == "compile" and r["cfg"] not in seen_compile:
            seen_compile.add(r["cfg"])
            lines.append(f"   {r['cfg']}: " + (f"compiled in {r['seconds']}s, checker {r['verdict']} ({r['desc']})"
                                               if r["ok"] else f"COMPILE FAILED {r.get('note')}"))
        if r["kind"] == "fault":
            lines.append(f"   FAULT during {r['during']} (hung={r['hung']}, rc={r['rc']})")
    rounds = max((len(v) for t in times.values() for v in t.values()), default=0)
    lines += table(times, tuned_cfg, "bf16", "torch", ["wgmma_gemm", "coop", "pingpong", "coop_sk", "tuned"], rounds)
    lines += table(times, tuned_cfg, "fp8", "torch_fp8", ["coop_fp8", "tuned_fp8"], rounds)
    lines += ["", f"sweep wall time {seconds:.0f} s"]
    text = "\n".join(lines)
    print(text, flush=True)
    out = os.environ.get("OUT")
    if out and os.path.isdir(out):
        with open(os.path.join(out, "gemm_sweep_results.json"), "w") as f:
            json.dump(results, f)
        with open(os.path.join(out, "gemm_sweep_table.md"), "w") as f:
            f.write(text + "\n")


def table(times, tuned_cfg, dtype, base, sides, rounds):
    """One markdown table: the baseline's TFLOP/s, each side's TFLOP/s and its ratio, geomeans."""
    rows = [(shape, t) for shape, t in times.items() if base in t]
    if not rows:
        return []
    name = "torch.matmul" if base == "torch" else "torch._scaled_mm (use_fast_accum=True)"
    hdr = f"| M x N x K | {base} TFLOP/s | " + " | ".join(sides) + " | " + " | ".join(f"{s}/{base}" for s in sides) + " |"
    lines = ["", f"== {dtype} GEMM, TFLOP/s from the median of {rounds} rounds (ratios > 1: faster than {name})", hdr,
             "|" + "---|" * (2 + 2 * len(sides))]
    ratios = {s: [] for s in sides}
    for shape, t in rows:
        M, N, K = shape
        fl = 2.0 * M * N * K
        med = {s: statistics.median(v) for s, v in t.items()}

        def tf(s):
            return f"{fl / med[s] / 1e9:.0f}" if s in med else "-"

        row = [f"{M}x{N}x{K}", tf(base)]
        row += [tf(s) + (f" ({tuned_cfg.get((shape, s), '-')})" if s.startswith("tuned") else "") for s in sides]
        for s in sides:
            if s in med:
                x = med[base] / med[s]
                ratios[s].append(x)
                row.append(f"{x:.3f}")
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
    gm = [f"{s} {math.exp(sum(map(math.log, v)) / len(v)):.3f} (min {min(v):.3f}, n={len(v)})"
          for s, v in ratios.items() if v]
    lines += ["", f"{dtype} geomean vs {name}: " + "; ".join(gm)]
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="4 timed shapes (same as --shapes quick)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep-ms", type=int, default=100, help="do_bench window per timing in ms (warmup: a quarter)")
    p.add_argument("--shapes", default="all", help="timed shapes: comma-separated sets (" + ", ".join(SHAPE_SETS)
                   + ") or MxNxK items (default all: 24 shapes)")
    p.add_argument("--subset", choices=("all", "squares", "llm", "vocab"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtypes", default="bf16,fp8", help="bf16, fp8 or both (default bf16,fp8)")
    p.add_argument("--budget", type=float, default=420, help="seconds after which no new shape is started "
                   "(the table is printed with what finished)")
    p.add_argument("--deadline", type=float, default=math.inf, help=argparse.SUPPRESS)
    p.add_argument("--selftest", action="store_true", help="CPU only: fake results through the supervisor "
                   "(a hang and a crash included) to check restarts and the table")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--exclude", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--done", action="append", default=[], type=lambda s: [int(x) for x in s.split(",")],
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    args.shapes_text = "quick" if args.quick else args.subset or args.shapes
    try:
        args.shape_list = parse_shapes(args.shapes_text)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not args.dtypes or set(args.dtypes) - {"bf16", "fp8"}:
        p.error(f"--dtypes {args.dtypes}: bf16, fp8 or bf16,fp8")
    if args.child and args.selftest:
        SelfTestChild(args).run()
    elif args.child:
        from gemm_sweep_child import Child

        Child(args).run()
    else:
        supervise(args)


if __name__ == "__main__":
    main()
