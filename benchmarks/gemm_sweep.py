"""GEMM sweep on the H200: the persistent warpsched GEMM against torch.matmul and wgmma_gemm (bf16),
and against torch._scaled_mm (fp8 e4m3, per-tensor scales, bf16 out).

  python3 benchmarks/gemm_sweep.py --budget 230 2>&1 | tee benchmarks/results/gemm_sweep.log
  python3 benchmarks/gemm_sweep.py --quick     # 4 shapes
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
benchmarks/results/gemm_sweep_serial_h200.log, never won, and only ``coop64x128r`` stays for its
correctness checks), picked per shape by ``gemm_autotune.select`` (each timed once, the ones
within 25 % of the best timed twice more in rotated order, the lowest median wins; ``tune_set``). Every side runs on fresh random inputs with a NaN-poisoned output and is
compared with an fp64 reference (relative Frobenius error, any non-finite value fails) on every
shape, plus untimed ragged shapes. warpsched.ops.gemm (autotune with its disk cache under $OUT) is checked on three shapes.
Timing: 3 rounds, the sides in a rotated order each round,
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
LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096))
LLM = [(m, n, k) for m in (64, 256, 1024, 4096, 16384) for n, k in LLM_NK]
VOCAB = [s for s in LLM if s[1] == 128256]
QUICK = [(4096, 4096, 4096), (8192, 8192, 8192), (256, 4096, 14336), (4096, 14336, 4096)]
ALL = SQUARES + [s for s in LLM if s not in SQUARES]  # 4096^3 is in both: 24 shapes
SHAPE_SETS = {"all": ALL, "squares": SQUARES, "llm": LLM, "vocab": VOCAB, "quick": QUICK}


def parse_shapes(text):
    """'all', 'squares,vocab', '4096x4096x4096,64x128256x4096': shape sets and MxNxK items, in order."""
    out = []
    for item in text.split(","):
        item = item.strip()
        shapes = SHAPE_SETS.get(item)
        if shapes is None:
            try:
                m, n, k = (int(x) for x in item.lower().split("x"))
            except ValueError:
                raise argparse.ArgumentTypeError(f"--shapes item {item!r}: a set ({', '.join(SHAPE_SETS)}) or MxNxK")
            shapes = [(m, n, k)]
        out += [s for s in shapes if s not in out]
    return out
RAGGED = [(1, 8, 8), (129, 264, 72), (200, 136, 40), (127, 4104, 4096), (3000, 5000, 1000), (1000, 2056, 4104),
          (3968, 4224, 200)]  # odd tile counts (pingpong recomputes the last tile), several units per CTA, K % 64 != 0
# stream-K on ragged shapes with more tiles than the H200's 132 SMs (so some tiles are shared):
# M = 1, N and K not tile multiples, K < one K tile (every unit a whole tile), M ragged with long K
SK_RAGGED = [(1, 40000, 200), (1000, 14336, 4104), (520, 34008, 40), (3000, 5000, 1000), (4000, 8456, 136)]
FP16 = [(1000, 2056, 4112), (72, 4096, 4104)]  # fp16 correctness after the timed shapes (compiles two more kernels)
FP8_RAGGED = [(1, 16, 16), (129, 264, 80), (200, 136, 48), (3000, 5000, 1008), (1000, 2056, 4112), (72, 4096, 14336)]
OPS_SHAPES = [(64, 4096, 4096), (1000, 2056, 4112), (4096, 4096, 4096)]  # warpsched.ops.gemm, autotuned
TOL = 1e-2  # bf16 output rounding lands near 2e-3

CONFIGS = {
    "coop128x256": dict(schedule="cooperative", tile_mn=(128, 256)),
    "pp128x128": dict(schedule="pingpong", tile_mn=(128, 128)),
    "coop256x128": dict(schedule="cooperative", tile_mn=(256, 128)),
    "coop128x256n": dict(schedule="cooperative", tile_mn=(128, 256), raster="n"),
    "coop128x256g16": dict(schedule="cooperative", tile_mn=(128, 256), group=16),
    "coop128x128": dict(schedule="cooperative", tile_mn=(128, 128)),
    # N = 14336 is 64 tiles of 224: 3.9 waves of 132 CTAs at M = 1024 where 128x256 makes 3.4 (4 whole)
    "coop128x224": dict(schedule="cooperative", tile_mn=(128, 224)),
    "coop128x224c21": dict(schedule="cooperative", tile_mn=(128, 224), cluster_mn=(2, 1)),
    # cuBLAS's choice at 1024 x 14336 x 4096 (ncu: nvjet 176x128 tile, 1x2 cluster): 82 x 8 = 656 tiles,
    # 4.97 waves; 176 columns are 11 epilogue sub-tiles of 16; the 1x2 cluster multicasts A (it lost:
    # 197 against 183 us, benchmarks/results/gemm_176_s23_bf16_h200.log, so it is in no tune set)
    "coop128x176": dict(schedule="cooperative", tile_mn=(128, 176), epi_n=16),
    "coop128x176c12": dict(schedule="cooperative", tile_mn=(128, 176), epi_n=16, cluster_mn=(1, 2)),
    # CUTLASS's ping-pong (pingpong_shared, skip=True) with a 176- or 192-column tile per warp
    # group (176 / 192 accumulator registers a thread): one warp group's epilogue under the
    # other's mainloop; 4 stages (proof 198k states) or 5 (594k)
    "pps128x176": dict(schedule="pingpong_shared", skip=True, tile_mn=(128, 176), ab_stages=4, epi_n=16),
    "pps128x176s5": dict(schedule="pingpong_shared", skip=True, tile_mn=(128, 176), ab_stages=5, epi_n=16),
    "pps128x192": dict(schedule="pingpong_shared", skip=True, tile_mn=(128, 192), ab_stages=4),
    "coop64x256": dict(schedule="cooperative", tile_mn=(64, 256)),
    "coop64x128": dict(schedule="cooperative", tile_mn=(64, 128)),
    # 2x1 clusters: B multicast to the CTA pair along M (a third less L2 -> SMEM traffic per tile)
    "coop128x256c21": dict(schedule="cooperative", tile_mn=(128, 256), cluster_mn=(2, 1)),
    "pp128x128c21": dict(schedule="pingpong", tile_mn=(128, 128), cluster_mn=(2, 1)),
    # split-K (fp32 partial tiles, summed by torch): few output tiles, long K
    "coop128x256s": dict(schedule="cooperative", tile_mn=(128, 256), split_k="auto"),
    "coop64x256s": dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto"),
    # few output tiles: smaller tiles (more CTAs) and split-K over them
    "coop128x64": dict(schedule="cooperative", tile_mn=(128, 64)),
    "coop64x128s": dict(schedule="cooperative", tile_mn=(64, 128), split_k="auto"),
    "coop128x128s": dict(schedule="cooperative", tile_mn=(128, 128), split_k="auto"),
    # serial split-K: the shares add up in the kernel (per-tile GMEM flags), one launch
    "coop128x256r": dict(schedule="cooperative", tile_mn=(128, 256), split_k="auto", split_reduce="serial"),
    "coop64x256r": dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto", split_reduce="serial"),
    "coop64x128r": dict(schedule="cooperative", tile_mn=(64, 128), split_k="auto", split_reduce="serial"),
    "coop128x128r": dict(schedule="cooperative", tile_mn=(128, 128), split_k="auto", split_reduce="serial"),
    # two K shares per tile for many-tile shapes: twice the work units, a smaller last wave
    "coop128x256r2": dict(schedule="cooperative", tile_mn=(128, 256), split_k=2, split_reduce="serial"),
    # parallel split-K: slabs per share, the last share sums them (one wait per tile; not yet timed)
    "coop64x128p": dict(schedule="cooperative", tile_mn=(64, 128), split_k="auto", split_reduce="parallel"),
    "coop64x256p": dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto", split_reduce="parallel"),
    "coop128x128p": dict(schedule="cooperative", tile_mn=(128, 128), split_k="auto", split_reduce="parallel"),
    # atomic split-K: every share red.global.adds into one zeroed fp32 tile, the last to arrive stores C
    "coop64x128a": dict(schedule="cooperative", tile_mn=(64, 128), split_k="auto", split_reduce="atomic"),
    "coop64x256a": dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto", split_reduce="atomic"),
    # narrow N tiles for M <= 64: more CTAs streaming B without a K split; 1x2 clusters multicast A
    "coop64x32": dict(schedule="cooperative", tile_mn=(64, 32)),
    "coop64x32c12": dict(schedule="cooperative", tile_mn=(64, 32), cluster_mn=(1, 2)),
    "coop64x64c12": dict(schedule="cooperative", tile_mn=(64, 64), cluster_mn=(1, 2)),
    # a K tile of 128 / 256 bf16 columns: more bytes per stage and per barrier round trip
    "coop64x32k128": dict(schedule="cooperative", tile_mn=(64, 32), block_k=128),
    "coop64x32k256": dict(schedule="cooperative", tile_mn=(64, 32), block_k=256),
    "coop64x32s9k128": dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, ab_stages=9),
    # programmatic dependent launch: the next launch's prologue overlaps this one's tail (short kernels)
    "coop64x32k128pdl": dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, pdl=True),
    "coop64x32s9k128pdl": dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, ab_stages=9, pdl=True),
    "coop64x128pdl": dict(schedule="cooperative", tile_mn=(64, 128), pdl=True),
    "coop64x32k256pdl": dict(schedule="cooperative", tile_mn=(64, 32), block_k=256, pdl=True),
    # stream-K (split_k="stream"): whole tiles, then the last 1 + fraction waves' K iterations split
    # evenly over the CTAs; a tile shared by two CTAs reduced in the kernel (deterministic)
    "coop128x256sk": dict(schedule="cooperative", tile_mn=(128, 256), split_k="stream"),
    "coop128x256g16sk": dict(schedule="cooperative", tile_mn=(128, 256), group=16, split_k="stream"),
    "coop128x128sk": dict(schedule="cooperative", tile_mn=(128, 128), split_k="stream"),
}
STREAM_K = ("coop128x256sk", "coop128x256g16sk", "coop128x128sk", "f8coop128x256sk")
# fp8 (e4m3 x e4m3, K tile 128): the same kernels with an fp8 MMA and the scale in the epilogue
FP8_CONFIGS = {"f8coop128x256": "coop128x256", "f8pp128x128": "pp128x128", "f8coop256x128": "coop256x128",
               "f8coop128x128": "coop128x128", "f8coop64x128": "coop64x128", "f8coop128x256c21": "coop128x256c21",
               "f8coop128x256s": "coop128x256s", "f8coop64x256s": "coop64x256s", "f8coop128x64": "coop128x64",
               "f8coop64x128s": "coop64x128s", "f8coop128x128s": "coop128x128s", "f8coop128x256r": "coop128x256r",
               "f8coop64x256r": "coop64x256r", "f8coop64x128r": "coop64x128r", "f8coop128x128r": "coop128x128r",
               "f8coop128x256r2": "coop128x256r2", "f8coop64x128p": "coop64x128p", "f8coop64x256p": "coop64x256p",
               "f8coop128x128p": "coop128x128p", "f8coop64x128a": "coop64x128a", "f8coop64x256a": "coop64x256a",
               "f8coop64x32": "coop64x32", "f8coop64x32c12": "coop64x32c12", "f8coop64x64c12": "coop64x64c12",
               "f8coop64x32k256": "coop64x32k256", "f8coop64x32k256pdl": "coop64x32k256pdl",
               "f8coop64x128pdl": "coop64x128pdl", "f8coop128x256sk": "coop128x256sk",
               "f8coop128x224": "coop128x224", "f8coop128x176": "coop128x176", "f8coop128x176c12": "coop128x176c12",
               "f8pps128x176": "pps128x176", "f8pps128x176s5": "pps128x176s5", "f8pps128x192": "pps128x192"}
for _f8, _base in FP8_CONFIGS.items():
    CONFIGS[_f8] = dict(CONFIGS[_base], fp8=True)
for _cfg in CONFIGS.values():
    _cfg.setdefault("split_k", 1)  # gemm() splits K by itself ("auto") unless told not to
FIXED = {"coop": "coop128x256", "pingpong": "pp128x128", "coop_sk": "coop128x256sk"}  # coop_sk: stream-K
SIDES = ["torch", "wgmma_gemm", "coop", "pingpong", "coop_sk", "tuned"]
FP8_SIDES = ["torch_fp8", "coop_fp8", "tuned_fp8"]  # torch._scaled_mm, f8coop128x256, the fastest of FP8_TUNE


def tune_set(M, N, K):
    """Configurations tried for a shape: the defaults, plus small-M tiles or raster variants; with
    few output tiles (small M, or M * N <= 2048^2) also smaller tiles and split-K over them."""
    if M <= 64:  # one serial split-K configuration stays for its correctness checks (it never won)
        return ["coop128x256", "pp128x128", "coop64x256", "coop64x128", "coop64x256s", "coop64x128s",
                "coop64x128r", "coop64x128a", "coop64x32", "coop64x32k128", "coop64x32s9k128", "coop64x32k128pdl",
                "coop64x32s9k128pdl", "coop128x256sk"]
    if M <= 256:
        return ["coop128x256", "pp128x128", "coop128x128", "coop256x128", "coop128x256s", "coop64x256s",
                "coop64x128", "coop128x64", "coop128x128s", "coop64x128p", "coop128x128p", "coop128x256sk", "coop128x224"]
    out = ["coop128x256", "pp128x128", "coop256x128", "coop128x256n", "coop128x256g16", "coop128x128",
           "coop128x256c21", "pp128x128c21", "coop128x256sk", "coop128x256g16sk", "coop128x128sk", "coop128x224",
           "coop128x176", "pps128x176", "pps128x176s5", "pps128x192"]
    return out + (["coop128x64", "coop64x128", "coop64x128pdl", "coop128x128s", "coop128x128p"]
                  if M * N <= 2048 * 2048 else [])


def fp8_tune_set(M, N, K):
    if M <= 64:
        return ["f8coop128x256", "f8coop64x128", "f8coop64x256s", "f8pp128x128", "f8coop64x128s",
                "f8coop64x128r", "f8coop64x128a", "f8coop64x32", "f8coop64x32k256", "f8coop64x32k256pdl"]
    if M <= 256:
        return ["f8coop128x256", "f8coop64x128", "f8coop128x256s", "f8coop64x256s", "f8pp128x128", "f8coop128x64",
                "f8coop128x128s", "f8coop64x128p", "f8coop128x128p", "f8coop128x224"]
    out = ["f8coop128x256", "f8pp128x128", "f8coop256x128", "f8coop128x128", "f8coop128x256c21", "f8coop128x256sk",
           "f8coop128x224", "f8coop128x176", "f8pps128x176", "f8pps128x176s5", "f8pps128x192"]
    return out + (["f8coop128x64", "f8coop64x128pdl", "f8coop128x128s", "f8coop128x128p"]
                  if M * N <= 2048 * 2048 else [])


def emit(kind, **rec):
    rec["kind"] = kind
    print("@@" + json.dumps(rec), flush=True)


def phase(what, limit, cfg=None, shape=None):
    """Tell the supervisor what runs next, on which configuration and shape, and how long it may
    stay silent before it counts as hung."""
    print("@@PHASE " + json.dumps(dict(what=what, limit=limit, cfg=cfg, shape=shape)), flush=True)


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
