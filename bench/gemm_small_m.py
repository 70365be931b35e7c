"""Small-M GEMM on the H200: the split-K reductions side by side (torch-summed slabs, parallel
slabs summed by the last share, atomic red.global.add with a last-arriver store) and the
unsplit small tiles, against torch.matmul / torch._scaled_mm; correctness first.

  python3 bench/gemm_small_m.py 2>&1 | tee bench/results/small_m.log
  ... --shapes 64x4096x4096,64x4096x14336 --dtypes bf16 --rounds 5 --rep-ms 25
  ... --variants split   # run 1: the split-K reductions (default "tiles": narrow N tiles, clusters)
  ... --ncu-target  # one launch of each 64x4096x4096 bf16 split variant between cudaProfilerStart/Stop

Correctness (before any timing, NaN-poisoned C, fp64 reference, rel. Frobenius error < 1e-2):
every variant on every timed shape, then the in-kernel split-K variants on ragged shapes (M = 1,
N not a tile multiple, K not a multiple of the K tile, K < one tile, several units per CTA) with
explicit split counts, each launched three times in a row plus once from a CUDA graph (the
atomic workspace and flags must be left zero by every launch). Timing: ``--rounds`` rounds, the
sides in a balanced order (``_eager.round_order``), each a triton do_bench median over replays of a CUDA graph
of back-to-back launches; the table gives each side's median over the rounds and its ratio to
torch (> 1: faster than torch)."""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import traceback

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

from _eager import round_order  # noqa: E402
from _graphs import capture  # noqa: E402

TOL = 1e-2
E4M3_MAX = 448.0
SHAPES = [(64, 4096, 4096), (64, 4096, 14336), (64, 14336, 4096), (64, 128256, 4096)]
COOP = dict(schedule="cooperative")


def variants(M, N, K, fp8, which="tiles"):
    """(name, gemm() options) timed for a shape. ``which`` "split" (run 1): unsplit 64x128 /
    64x256 and each split-K reduction over 64x128 / 64x256 tiles with the automatic split
    count and its neighbours. "tiles" (run 2, default): narrow N tiles without split-K (more
    CTAs streaming B, as cuBLAS's 64x32 kernel does), alone or in 1x2 clusters multicasting A,
    against the best of run 1."""
    if which == "bw":
        return bw_variants(M, N, K)
    if which == "bw2":  # run 2: the K tile of 256 (bf16; fp8 its 2x, 256) against run 1's winners
        wide = 256
        out = [("64x32", dict(COOP, tile_mn=(64, 32), split_k=1)),
               ("64x32k256", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=wide)),
               ("64x32c12k256", dict(COOP, tile_mn=(64, 32), cluster_mn=(1, 2), split_k=1, block_k=wide)),
               ("64x128", dict(COOP, tile_mn=(64, 128), split_k=1))]
        if fp8:
            out.append(("64x32k512", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=512)))
        else:
            out += [("64x32k128", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128)),
                    ("64x32s9k128", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128, ab_stages=9))]
        return out
    if which == "pdl":  # programmatic dependent launch on the winners of runs 1-2 (not yet timed)
        base = [("64x32k128", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128)),
                ("64x32s9k128", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128, ab_stages=9)),
                ("64x128", dict(COOP, tile_mn=(64, 128), split_k=1))]
        if fp8:
            base = [("64x32k256", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=256)), base[2]]
        return base + [(name + "pdl", dict(opts, pdl=True)) for name, opts in base]
    if which == "tiles":
        out = [("64x128", dict(COOP, tile_mn=(64, 128), split_k=1)),
               ("64x128s", dict(COOP, tile_mn=(64, 128), split_k="auto", split_reduce="host")),
               ("64x128a", dict(COOP, tile_mn=(64, 128), split_k="auto", split_reduce="atomic"))]
        for tile in ((64, 32), (64, 64), (64, 128)):
            for cl in ((1, 1), (1, 2)):
                if tile == (64, 128) and cl == (1, 1):
                    continue
                name = f"{tile[0]}x{tile[1]}" + ("c12" if cl == (1, 2) else "")
                out.append((name, dict(COOP, tile_mn=tile, cluster_mn=cl, split_k=1)))
        out.append(("64x32a2", dict(COOP, tile_mn=(64, 32), split_k=2, split_reduce="atomic")))
        return out
    out = [("64x128", dict(COOP, tile_mn=(64, 128), split_k=1)), ("64x256", dict(COOP, tile_mn=(64, 256), split_k=1))]
    for tile, splits in (((64, 128), ("auto", 2, 8)), ((64, 256), ("auto", 4, 16)), ((128, 128), ("auto",))):
        for s in splits:
            tag = f"{tile[0]}x{tile[1]}"
            for mode, letter in (("host", "s"), ("parallel", "p"), ("atomic", "a")):
                if mode != "atomic" and s != "auto":
                    continue  # the other split counts only for the new reduction
                if tile == (128, 128) and mode != "atomic":
                    continue
                out.append((f"{tag}{letter}{s if s != 'auto' else ''}",
                            dict(COOP, tile_mn=tile, split_k=s, split_reduce=mode)))
    return out


def bw_variants(M, N, K):
    """``--variants bw``: bytes in flight for the bandwidth-bound small-M shapes: the K tile
    (``k128``: 128 bf16 columns per stage, twice the bytes per barrier round trip at the same
    checked ring depth), a deeper ring (``s12``: 12 stages), A multicast over a 1x2 cluster
    (``c12``), host-summed split-K over wider tiles (deterministic), and the atomic split as
    the nondeterministic reference."""
    def v(tile, k128=False, cl=(1, 1), stages=None, split=1, reduce="host"):
        name = f"{tile[0]}x{tile[1]}" + ("c12" if cl == (1, 2) else "") + (f"s{stages}" if stages else "")
        name += {1: "", "auto": "h" if reduce == "host" else "a"}.get(split, f"h{split}") + ("k128" if k128 else "")
        opts = dict(COOP, tile_mn=tile, cluster_mn=cl, split_k=split, split_reduce=reduce)
        if k128:
            opts["block_k"] = 128
        if stages:
            opts["ab_stages"] = stages
        return name, opts
    if M <= 64:
        out = [v((64, 32)), v((64, 32), True), v((64, 32), cl=(1, 2)), v((64, 32), True, cl=(1, 2)),
               v((64, 32), stages=12), v((64, 128)), v((64, 128), True), v((64, 128), split="auto"),
               v((64, 128), True, split="auto"), v((64, 64), True, split=2)]
        if K > 8192:
            out.append(v((64, 128), split="auto", reduce="atomic"))
        return out
    return [v((64, 128)), v((64, 128), True), v((128, 64)), v((128, 64), True), v((128, 128)), v((128, 128), True)]


RAGGED = [(1, 8, 8), (129, 264, 72), (200, 136, 40), (127, 4104, 4096), (3000, 5000, 1000), (72, 4096, 4104)]
FP8_RAGGED = [(1, 16, 16), (129, 264, 80), (200, 136, 48), (3000, 5000, 1008), (72, 4096, 14336)]
RAGGED_CFGS = [("64x128a2", dict(COOP, tile_mn=(64, 128), split_k=2, split_reduce="atomic")),
               ("64x32", dict(COOP, tile_mn=(64, 32), split_k=1)),
               ("64x32c12", dict(COOP, tile_mn=(64, 32), cluster_mn=(1, 2), split_k=1)),
               ("64x64c12", dict(COOP, tile_mn=(64, 64), cluster_mn=(1, 2), split_k=1))]
# run 1 (bench/results/gemm_small_m_h200_run1.log) checked these (190 checks passed)
RAGGED_CFGS_BW = [("64x32k128", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128)),
                  ("64x32c12k128", dict(COOP, tile_mn=(64, 32), cluster_mn=(1, 2), split_k=1, block_k=128)),
                  ("64x32s12", dict(COOP, tile_mn=(64, 32), split_k=1, ab_stages=12)),
                  ("64x64h2k128", dict(COOP, tile_mn=(64, 64), split_k=2, block_k=128)),
                  ("128x64k128", dict(COOP, tile_mn=(128, 64), split_k=1, block_k=128)),
                  ("128x128k128", dict(COOP, tile_mn=(128, 128), split_k=1, block_k=128))]
RAGGED_CFGS_BW2 = [("64x32k256", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=256)),
                   ("64x32c12k256", dict(COOP, tile_mn=(64, 32), cluster_mn=(1, 2), split_k=1, block_k=256)),
                   ("64x32s9k128", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128, ab_stages=9)),
                   ("64x32k512", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=512))]  # fp8 only
RAGGED_CFGS_PDL = [("64x32k128pdl", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=128, pdl=True)),
                   ("64x32k256pdl", dict(COOP, tile_mn=(64, 32), split_k=1, block_k=256, pdl=True)),
                   ("64x128pdl", dict(COOP, tile_mn=(64, 128), split_k=1, pdl=True)),
                   ("64x128hpdl", dict(COOP, tile_mn=(64, 128), split_k=2, pdl=True)),
                   ("64x128apdl", dict(COOP, tile_mn=(64, 128), split_k=2, split_reduce="atomic", pdl=True))]
RAGGED_CFGS_RUN1 = [("64x128a2", dict(COOP, tile_mn=(64, 128), split_k=2, split_reduce="atomic")),
                    ("64x256a3", dict(COOP, tile_mn=(64, 256), split_k=3, split_reduce="atomic")),
                    ("128x256a2", dict(COOP, tile_mn=(128, 256), split_k=2, split_reduce="atomic")),
                    ("64x128aA", dict(COOP, tile_mn=(64, 128), split_k="auto", split_reduce="atomic"))]


class Bench:
    def __init__(self, args):
        import torch
        import triton.testing

        import gemm_persistent as gp

        self.torch, self.gp, self.do_bench, self.args = torch, gp, triton.testing.do_bench, args
        self.dev = torch.device("cuda")
        self.failures = 0

    def inputs(self, M, N, K, fp8, b_e5m2=False):
        torch = self.torch
        a = torch.randn(M, K, device=self.dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=self.dev, dtype=torch.bfloat16)
        if not fp8:
            ref = torch.mm(a.double(), b.double().t())
            return a, b, ref, 1.0, None
        bt = torch.float8_e5m2 if b_e5m2 else torch.float8_e4m3fn
        sa = (a.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
        sb = (b.abs().amax().float() / torch.finfo(bt).max).clamp(min=1e-12)
        a8, b8 = (a.float() / sa).to(torch.float8_e4m3fn), (b.float() / sb).to(bt)
        ref = torch.mm(a8.double() * sa.double(), (b8.double() * sb.double()).t())
        return a8, b8, ref, float(sa * sb), (sa, sb)

    def launcher(self, name, opts, a, b, c, alpha, scales):
        torch = self.torch
        if name == "torch":
            bt = b.t()
            if scales is None:
                return lambda: torch.mm(a, bt, out=c)
            sa, sb = scales
            return lambda: torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=c.dtype, use_fast_accum=True,
                                            out=c)
        kw = dict(opts, alpha=alpha) if scales is not None else dict(opts)
        return lambda: self.gp.gemm(a, b, c, **kw)

    def check(self, label, launch, c, ref, times=1):
        torch = self.torch
        try:
            for i in range(times):
                c.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                err = float((c.double() - ref).norm() / ref.norm()) if bool(torch.isfinite(c).all()) else math.nan
                if not err < TOL:
                    print(f"  BAD   {label} launch {i}: err={err:.3e}", flush=True)
                    self.failures += 1
                    return False
            print(f"  ok    {label} err={err:.2e}" + (f" ({times} launches)" if times > 1 else ""), flush=True)
            return True
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            print(f"  FAIL  {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            self.failures += 1
            return False

    def graph(self, launch, reps):
        return capture(self.torch, launch, reps)

    def ragged(self):
        torch = self.torch
        print("== ragged shapes: in-kernel split-K, 3 launches in a row + 1 graph replay each", flush=True)
        for fp8, shapes in ((False, RAGGED), (True, FP8_RAGGED)):
            if ("fp8" if fp8 else "bf16") not in self.args.dtypes:
                continue
            for (M, N, K) in shapes:
                for e5m2 in ((False, True) if fp8 else (False,)):
                    a, b, ref, alpha, scales = self.inputs(M, N, K, fp8, e5m2)
                    c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
                    bK = 128 if fp8 else 64
                    cfgs = {"split": RAGGED_CFGS_RUN1, "bw": RAGGED_CFGS_BW, "bw2": RAGGED_CFGS_BW2,
                            "pdl": RAGGED_CFGS_PDL}.get(self.args.variants, RAGGED_CFGS)
                    for name, opts in cfgs:
                        if opts.get("block_k", 256) not in ((256, 512) if fp8 else (64, 128, 256)):
                            continue  # K tiles: bf16 64 (default) .. 256, fp8 128 (default) .. 512
                        s = opts["split_k"]
                        if s != "auto" and s > -(-K // opts.get("block_k", bK)):
                            continue
                        label = f"{'fp8' if fp8 else 'bf16'}{' e5m2' if e5m2 else ''} {M}x{N}x{K} {name}"
                        launch = self.launcher(name, opts, a, b, c, alpha, scales)
                        if self.check(label, launch, c, ref, times=3):
                            self.check(label + " graph", self.graph(launch, 1).replay, c, ref)

    def shape(self, M, N, K, fp8):
        torch = self.torch
        tag = f"{'fp8' if fp8 else 'bf16'} {M}x{N}x{K}"
        print(f"== {tag}", flush=True)
        a, b, ref, alpha, scales = self.inputs(M, N, K, fp8)
        c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
        sides = [("torch", None)] + variants(M, N, K, fp8, self.args.variants)
        live = []
        for name, opts in sides:
            launch = self.launcher(name, opts, a, b, c, alpha, scales)
            if self.check(f"{tag} {name}", launch, c, ref, times=2):
                live.append((name, launch))
        flops = 2.0 * M * N * K
        est_ms = flops / (1e15 if fp8 else 5e14) * 1e3
        reps = max(1, min(200, int(round(1.0 / max(est_ms, 1e-4)))))
        graphs = {}
        for name, launch in live:
            try:
                graphs[name] = self.graph(launch, reps)
            except Exception as e:  # noqa: BLE001
                print(f"  no graph for {name}: {type(e).__name__}: {e}", flush=True)
        names = [n for n, _ in live if n in graphs]
        times = {n: [] for n in names}
        for r in range(self.args.rounds):
            for n in round_order(names, r):
                ms = self.do_bench(graphs[n].replay, warmup=self.args.rep_ms // 4, rep=self.args.rep_ms,
                                   return_mode="median") / reps
                times[n].append(ms)
        med = {n: statistics.median(v) for n, v in times.items()}
        base = med.get("torch")
        print(f"  {'side':12s} {'median us':>10s} {'min':>8s} {'max':>8s} {'TFLOP/s':>8s} {'torch/side':>10s}")
        for n in sorted(med, key=med.get):
            v = times[n]
            print(f"  {n:12s} {med[n] * 1e3:10.2f} {min(v) * 1e3:8.2f} {max(v) * 1e3:8.2f} {flops / med[n] / 1e9:8.0f} "
                  f"{base / med[n] if base else math.nan:10.3f}", flush=True)
        del graphs
        torch.cuda.empty_cache()

    def ncu_target(self):
        """One launch of each 64x4096x4096 bf16 variant (and torch) inside cudaProfilerStart/Stop
        (run under ncu --profile-from-start off)."""
        torch = self.torch
        M, N, K = 64, 4096, 4096
        a, b, ref, alpha, scales = self.inputs(M, N, K, False)
        c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
        chosen = ["torch", "64x128", "64x128s", "64x128p", "64x128a", "64x256a", "64x256a16"]
        table = dict([("torch", None)] + variants(M, N, K, False, "split"))
        if self.args.ncu_variants:  # e.g. torch,64x32k128,64x32c12k128 (from the bw / bw2 sets)
            chosen = self.args.ncu_variants.split(",")
            table.update(variants(M, N, K, False, "bw") + variants(M, N, K, False, "bw2"))
        launches = []
        for name in chosen:
            launch = self.launcher(name, table[name], a, b, c, alpha, scales)
            launch()  # compile, warm
            launches.append((name, launch))
        torch.cuda.synchronize()
        for name, launch in launches:
            print(f"ncu launch: {name}", flush=True)
            torch.cuda.profiler.start()
            for _ in range(self.args.ncu_launches):  # the later ones with warm caches and clocks
                launch()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()

    def run(self):
        torch = self.torch
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
        from warpsched.kernels.gemm import host as gemm_host
        print(f"persistent grid bound: {gemm_host.max_ctas((1, 1))} CTAs, 1x2 clusters "
              f"{gemm_host.max_ctas((1, 2))} CTAs", flush=True)
        if self.args.ncu_target:
            self.ncu_target()
            return
        t0 = time.time()
        if not self.args.no_ragged:
            self.ragged()
        for shape in self.args.shapes:
            for dt in self.args.dtypes:
                if time.time() - t0 > self.args.budget:
                    print(f"SKIPPED {dt} {shape}: budget spent", flush=True)
                    continue
                self.shape(*shape, fp8=dt == "fp8")
        print(f"failures: {self.failures}; wall {time.time() - t0:.0f} s", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    p.add_argument("--dtypes", default="bf16,fp8")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep-ms", type=int, default=25)
    p.add_argument("--budget", type=float, default=150, help="seconds after which no new shape starts")
    p.add_argument("--no-ragged", action="store_true")
    p.add_argument("--variants", choices=("tiles", "split", "bw", "bw2", "pdl"), default="tiles",
                   help="split: run 1's set; bw: K tile 128, deeper rings, clusters (bf16); bw2: K tile 256; pdl: programmatic dependent launch")
    p.add_argument("--ncu-target", action="store_true")
    p.add_argument("--ncu-variants", default="", help="with --ncu-target: names to profile instead of run 1's")
    p.add_argument("--ncu-launches", type=int, default=1, help="with --ncu-target: launches of each")
    args = p.parse_args()
    args.shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    Bench(args).run()


if __name__ == "__main__":
    main()
