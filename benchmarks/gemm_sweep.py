"""bf16 GEMM sweep on the H200: the persistent warpsched GEMM against torch.matmul and wgmma_gemm.

  source .devcarry/prelude.sh && python3 benchmarks/gemm_sweep.py 2>&1 | tee $OUT/gemm_sweep.log
  source .devcarry/prelude.sh && python3 benchmarks/gemm_sweep.py --quick     # 4 shapes

Shapes (C[M, N] = A[M, K] @ B[N, K]^T, bf16 in / fp32 accumulate / bf16 out): squares 1024..16384
and M in {64, 256, 1024, 4096, 16384} x (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336)}.
Sides: torch.matmul (torch.mm into a preallocated C), wgmma_gemm.gemm (non-persistent), the
persistent kernel's two schedules at their default tiles (``coop`` 128x256, ``pingpong``
128x128 per warp group, no split-K, no cluster) and ``tuned``: the fastest of a handful of
configurations (tiles, raster order / group, 2x1 clusters with B multicast for large shapes,
split-K with split_k="auto" for M <= 256), each timed once per shape (``tune_set``). Every side runs on fresh random inputs with a NaN-poisoned output and is
compared with an fp64 reference (relative Frobenius error, any non-finite value fails) on every
shape, plus untimed ragged shapes. Timing: 3 rounds, the sides in a rotated order each round,
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
import traceback

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

SQUARES = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)]
LLM = [(m, n, k) for m in (64, 256, 1024, 4096, 16384) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
QUICK = [(4096, 4096, 4096), (8192, 8192, 8192), (256, 4096, 14336), (4096, 14336, 4096)]
RAGGED = [(1, 8, 8), (129, 264, 72), (200, 136, 40), (127, 4104, 4096), (3000, 5000, 1000), (1000, 2056, 4104),
          (3968, 4224, 200)]  # odd tile counts (pingpong recomputes the last tile), several units per CTA, K % 64 != 0
FP16 = [(1000, 2056, 4112), (72, 4096, 4104)]  # fp16 correctness after the timed shapes (compiles two more kernels)
TOL = 1e-2  # bf16 output rounding lands near 2e-3

CONFIGS = {
    "coop128x256": dict(schedule="cooperative", tile_mn=(128, 256)),
    "pp128x128": dict(schedule="pingpong", tile_mn=(128, 128)),
    "coop256x128": dict(schedule="cooperative", tile_mn=(256, 128)),
    "coop128x256n": dict(schedule="cooperative", tile_mn=(128, 256), raster="n"),
    "coop128x256g16": dict(schedule="cooperative", tile_mn=(128, 256), group=16),
    "coop128x128": dict(schedule="cooperative", tile_mn=(128, 128)),
    "coop64x256": dict(schedule="cooperative", tile_mn=(64, 256)),
    "coop64x128": dict(schedule="cooperative", tile_mn=(64, 128)),
    # 2x1 clusters: B multicast to the CTA pair along M (a third less L2 -> SMEM traffic per tile)
    "coop128x256c21": dict(schedule="cooperative", tile_mn=(128, 256), cluster_mn=(2, 1)),
    "pp128x128c21": dict(schedule="pingpong", tile_mn=(128, 128), cluster_mn=(2, 1)),
    # split-K (fp32 partial tiles, summed by torch): few output tiles, long K
    "coop128x256s": dict(schedule="cooperative", tile_mn=(128, 256), split_k="auto"),
    "coop64x256s": dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto"),
}
for _cfg in CONFIGS.values():
    _cfg.setdefault("split_k", 1)  # gemm() splits K by itself ("auto") unless told not to
FIXED = {"coop": "coop128x256", "pingpong": "pp128x128"}  # the two schedules at their default tiles
SIDES = ["torch", "wgmma_gemm", "coop", "pingpong", "tuned"]


def tune_set(M, N, K):
    """Configurations tried for a shape: the defaults, plus small-M tiles or raster variants."""
    if M <= 64:
        return ["coop128x256", "pp128x128", "coop64x256", "coop64x128", "coop128x256s", "coop64x256s"]
    if M <= 256:
        return ["coop128x256", "pp128x128", "coop128x128", "coop256x128", "coop128x256s", "coop64x256s"]
    return ["coop128x256", "pp128x128", "coop256x128", "coop128x256n", "coop128x256g16", "coop128x128",
            "coop128x256c21", "pp128x128c21"]


def emit(kind, **rec):
    rec["kind"] = kind
    print("@@" + json.dumps(rec), flush=True)


def phase(what, limit, cfg=None, shape=None):
    """Tell the supervisor what runs next, on which configuration and shape, and how long it may
    stay silent before it counts as hung."""
    print("@@PHASE " + json.dumps(dict(what=what, limit=limit, cfg=cfg, shape=shape)), flush=True)


# ======================================================================================== child
class Child:
    def __init__(self, args):
        import torch
        import triton.testing

        self.torch, self.do_bench = torch, triton.testing.do_bench
        import gemm_persistent as gp

        self.gp = gp
        try:
            import wgmma_gemm

            self.wg = wgmma_gemm
        except Exception as e:  # noqa: BLE001 - the baseline is optional; report and continue
            print(f"wgmma_gemm unavailable: {type(e).__name__}: {e}", flush=True)
            self.wg = None
        self.bad = set(args.exclude)  # configurations (or sides) that failed: not used again
        self.done = set(tuple(s) for s in args.done)
        self.timed = QUICK if args.quick else {"all": SQUARES + LLM, "squares": SQUARES, "llm": LLM}[args.subset]
        self.deadline = args.deadline
        self.rounds = args.rounds
        self.dev = torch.device("cuda")
        self.compiled = set()
        self.no_graph = set()  # sides whose launches could not be captured: timed plainly

    # ---------------------------------------------------------------- launches
    def launcher(self, side, a, b, c):
        torch = self.torch
        if side == "torch":
            bt = b.t()
            return lambda: torch.mm(a, bt, out=c)
        if side == "wgmma_gemm":
            return lambda: self.wg.gemm(a, b, c)
        cfg = CONFIGS[side]
        return lambda: self.gp.gemm(a, b, c, **cfg)

    def usable(self, side):
        if side in self.bad:
            return False
        return self.wg is not None if side == "wgmma_gemm" else True

    def check(self, side, a, b, c, ref, ref_norm, shape, launch=None, label=None, limit=60):
        """Poison C, run once, compare with the fp64 reference (False on a wrong or failed run)."""
        torch = self.torch
        phase("check", limit, side, shape)  # limit: a first call may compile (fp16)
        side_label = label or side
        c.fill_(float("nan"))
        try:
            (launch or self.launcher(side, a, b, c))()
            torch.cuda.synchronize()
            finite = bool(torch.isfinite(c).all())
            err = float((c.double() - ref).norm() / ref_norm) if finite else float("nan")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            emit("check", shape=shape, side=side_label, ok=False, err=None, note=f"{type(e).__name__}: {str(e)[:160]}")
            return False
        ok = finite and err < TOL
        emit("check", shape=shape, side=side_label, ok=ok, err=err, note="" if finite else "non-finite output")
        return ok

    def compile_all(self, names):
        torch = self.torch
        # K = 1024: long enough that split_k="auto" splits (so the split kernels compile here too)
        a = torch.randn(256, 1024, device=self.dev, dtype=torch.bfloat16)
        b = torch.randn(264, 1024, device=self.dev, dtype=torch.bfloat16)
        c = torch.empty(256, 264, device=self.dev, dtype=torch.bfloat16)
        for name in names:
            if not self.usable(name):
                continue
            phase("compile", 300, name)
            t0 = time.time()
            try:
                self.launcher(name, a, b, c)()
                torch.cuda.synchronize()
                verdict = self.gp.verdict_for(a, c, **CONFIGS[name]) if name in CONFIGS else "-"
                desc = name
                if name in CONFIGS:
                    opts = {k: v for k, v in CONFIGS[name].items() if k != "split_k"}  # "auto": a host choice
                    desc = self.gp.PersistentGemm(split_k=CONFIGS[name]["split_k"] != 1, **opts).describe()
                emit("compile", cfg=name, ok=True, seconds=round(time.time() - t0, 1), verdict=verdict, desc=desc)
                self.compiled.add(name)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                self.bad.add(name)
                emit("compile", cfg=name, ok=False, seconds=round(time.time() - t0, 1),
                     note=f"{type(e).__name__}: {str(e)[:300]}")

    # ---------------------------------------------------------------- timing
    def graph_time(self, name, launch, est_ms):
        """Median ms per launch: do_bench over replays of a CUDA graph of ``reps`` launches."""
        torch = self.torch
        reps = max(1, min(200, int(round(1.0 / max(est_ms, 1e-4)))))  # about a millisecond per replay
        if name in self.no_graph:
            return self.do_bench(launch, warmup=25, rep=100, return_mode="median"), "plain"
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                launch()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(reps):
                    launch()
            torch.cuda.synchronize()
            ms = self.do_bench(g.replay, warmup=25, rep=100, return_mode="median") / reps
            del g
            return ms, "graph"
        except Exception as e:  # noqa: BLE001 - capture refused: time plain launches
            print(f"    graph capture of {name} failed ({type(e).__name__}: {str(e)[:120]}); timing plain launches",
                  flush=True)
            self.no_graph.add(name)
            torch.cuda.synchronize()
            return self.do_bench(launch, warmup=25, rep=100, return_mode="median"), "plain"

    def graph_check(self, name, launch, a, b, c, ref, ref_norm, shape):
        """The output of a captured launch is right too (the graph path is what gets timed)."""
        torch = self.torch
        if name in self.no_graph:
            return True
        phase("capture", 60, name, shape)
        torch.cuda.synchronize()
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                launch()
        except Exception as e:  # noqa: BLE001 - timed plainly instead (graph_time)
            print(f"    graph capture of {name} failed ({type(e).__name__}: {str(e)[:120]})", flush=True)
            self.no_graph.add(name)
            torch.cuda.synchronize()
            return True
        return self.check(name, a, b, c, ref, ref_norm, shape, launch=g.replay, label=name + " (graph)")

    # ---------------------------------------------------------------- one shape
    def inputs(self, M, N, K):
        torch = self.torch
        a = torch.randn(M, K, device=self.dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=self.dev, dtype=torch.bfloat16)
        ref = torch.mm(a.double(), b.double().t())
        return a, b, ref, ref.norm()

    def ragged(self):
        torch = self.torch
        names = ["wgmma_gemm"] + [n for n in CONFIGS if n in self.compiled]
        for shape in RAGGED:
            if tuple(shape) in self.done:
                continue
            M, N, K = shape
            a, b, ref, rn = self.inputs(M, N, K)
            c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
            for name in names:
                if self.usable(name):
                    self.check(name, a, b, c, ref, rn, list(shape))
            emit("shape_done", shape=list(shape))

    def shape(self, M, N, K):
        torch = self.torch
        shape = [M, N, K]
        flops = 2.0 * M * N * K
        est_ms = flops / 5e14 * 1e3
        a, b, ref, rn = self.inputs(M, N, K)
        c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
        # correctness of every candidate on this shape
        ok = {}
        for name in ["torch", "wgmma_gemm"] + tune_set(M, N, K):
            ok[name] = self.usable(name) and self.check(name, a, b, c, ref, rn, shape)
        # the tune: each correct configuration timed once
        best, best_ms = None, math.inf
        for name in tune_set(M, N, K):
            if not ok.get(name):
                continue
            phase("tune", 60, name, shape)
            ms, how = self.graph_time(name, self.launcher(name, a, b, c), est_ms)
            cfg = CONFIGS[name]
            splits = (self.gp.choose_splits(M, N, K, cfg["tile_mn"], torch.cuda.get_device_properties(0)
                                            .multi_processor_count) if cfg.get("split_k") == "auto" else 1)
            emit("tune", shape=shape, cfg=name, ms=ms, how=how, splits=splits)
            if ms < best_ms:
                best, best_ms = name, ms
        sides = {"torch": "torch", "wgmma_gemm": "wgmma_gemm", "coop": FIXED["coop"], "pingpong": FIXED["pingpong"],
                 "tuned": best}
        live = [s for s in SIDES if sides[s] is not None and ok.get(sides[s])]
        # the captured path of every timed warpsched configuration gives the right answer too
        graph_ok = {}
        for s in [s for s in live if s in ("coop", "pingpong", "tuned")]:
            cfg = sides[s]
            if cfg not in graph_ok:
                graph_ok[cfg] = self.graph_check(cfg, self.launcher(cfg, a, b, c), a, b, c, ref, rn, shape)
            if not graph_ok[cfg]:
                live.remove(s)
        for r in range(self.rounds):
            order = live[r % len(live):] + live[:r % len(live)]  # rotate: no side always goes first
            for s in order:
                phase("time", 60, sides[s], shape)
                ms, how = self.graph_time(sides[s], self.launcher(sides[s], a, b, c), est_ms)
                emit("time", shape=shape, side=s, cfg=sides[s], round=r, ms=ms, how=how,
                     tflops=flops / ms / 1e9)
        del a, b, c, ref
        torch.cuda.empty_cache()
        emit("shape_done", shape=shape)

    def run(self):
        torch = self.torch
        print(f"device: {torch.cuda.get_device_name()}, SMs {torch.cuda.get_device_properties(0).multi_processor_count},"
              f" torch {torch.__version__}", flush=True)
        names = ["wgmma_gemm"] + [n for n in CONFIGS if any(n in tune_set(*s) for s in self.timed)]
        self.compile_all(names)
        self.ragged()
        for shape in self.timed:
            if tuple(shape) in self.done:
                continue
            if time.time() > self.deadline:
                emit("skipped", shape=list(shape), note="time budget spent")
                continue
            print(f"== {shape[0]}x{shape[1]}x{shape[2]}", flush=True)
            self.shape(*shape)
        self.fp16()
        phase("finished", 30)

    def fp16(self):
        """fp16 in / fp16 out through both default schedules (and split-K), untimed."""
        torch = self.torch
        for shape in FP16:
            if tuple(shape) in self.done or time.time() > self.deadline:
                continue
            M, N, K = shape
            a = torch.randn(M, K, device=self.dev, dtype=torch.float16)
            b = torch.randn(N, K, device=self.dev, dtype=torch.float16)
            ref = torch.mm(a.double(), b.double().t())
            c = torch.empty(M, N, device=self.dev, dtype=torch.float16)
            for name in ("coop128x256", "pp128x128", "coop128x256s"):
                if self.usable(name):
                    self.check(name, a, b, c, ref, ref.norm(), list(shape), label=name + " fp16", limit=300)
            emit("shape_done", shape=list(shape))


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
                     "pingpong": FIXED["pingpong"], "tuned": "coop256x128"}
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
               "--subset", args.subset, "--deadline", str(deadline)]
        cmd += ["--quick"] if args.quick else []
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
                f"({rec['how']}{', split_k ' + str(rec['splits']) if rec.get('splits', 1) > 1 else ''})")
    if k == "time":
        return (f"  time  {'x'.join(map(str, rec['shape'])):18s} r{rec['round']} {rec['side']:10s} {rec['cfg']:15s} "
                f"{rec['ms'] * 1e3:9.1f} us {rec['tflops']:7.1f} TFLOP/s ({rec['how']})")
    return "  " + json.dumps(rec)


def report(results, seconds):
    times, bad, tuned_cfg = {}, {}, {}
    for r in results:
        if r["kind"] == "time":
            times.setdefault(tuple(r["shape"]), {}).setdefault(r["side"], []).append(r["ms"])
            if r["side"] == "tuned":
                tuned_cfg[tuple(r["shape"])] = r["cfg"]
        if r["kind"] == "check" and not r["ok"]:
            bad.setdefault(tuple(r["shape"]), []).append(r["side"])
    checks = [r for r in results if r["kind"] == "check"]
    lines = ["", f"== correctness: {sum(r['ok'] for r in checks)}/{len(checks)} checks passed "
             f"(fresh random inputs, NaN-poisoned C, rel. Frobenius error vs fp64 < {TOL})"]
    for shape, sides in bad.items():
        lines.append(f"   FAILED {'x'.join(map(str, shape))}: {', '.join(sides)}")
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
    hdr = ("| M x N x K | torch TFLOP/s | wgmma_gemm | coop | pingpong | tuned (config) | "
           "wgmma/torch | coop/torch | pingpong/torch | tuned/torch |")
    lines += ["", f"== bf16 GEMM, TFLOP/s from the median of {max((len(v) for t in times.values() for v in t.values()), default=0)}"
              " rounds (ratios > 1: faster than torch.matmul)", hdr, "|" + "---|" * 10]
    ratios = {s: [] for s in SIDES if s != "torch"}
    for shape, t in times.items():
        M, N, K = shape
        fl = 2.0 * M * N * K
        med = {s: statistics.median(v) for s, v in t.items()}

        def tf(s):
            return f"{fl / med[s] / 1e9:.0f}" if s in med else "-"

        row = [f"{M}x{N}x{K}", tf("torch"), tf("wgmma_gemm"), tf("coop"), tf("pingpong"),
               f"{tf('tuned')} ({tuned_cfg.get(shape, '-')})"]
        for s in ("wgmma_gemm", "coop", "pingpong", "tuned"):
            if s in med and "torch" in med:
                x = med["torch"] / med[s]
                ratios[s].append(x)
                row.append(f"{x:.3f}")
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
    gm = []
    for s in ("wgmma_gemm", "coop", "pingpong", "tuned"):
        v = ratios[s]
        if v:
            gm.append(f"{s} {math.exp(sum(map(math.log, v)) / len(v)):.3f} (min {min(v):.3f}, n={len(v)})")
    lines += ["", "geomean vs torch.matmul: " + "; ".join(gm), f"sweep wall time {seconds:.0f} s"]
    text = "\n".join(lines)
    print(text, flush=True)
    out = os.environ.get("OUT")
    if out and os.path.isdir(out):
        with open(os.path.join(out, "gemm_sweep_results.json"), "w") as f:
            json.dump(results, f)
        with open(os.path.join(out, "gemm_sweep_table.md"), "w") as f:
            f.write(text + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="4 timed shapes instead of 20")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--subset", choices=("all", "squares", "llm"), default="all", help="timed shapes (default all)")
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
    if args.child:
        (SelfTestChild if args.selftest else Child)(args).run()
    else:
        supervise(args)


if __name__ == "__main__":
    main()
