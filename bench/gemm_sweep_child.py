"""The child process of bench/gemm_sweep.py: compiles, checks and times every side of every
shape (bf16 against torch.matmul, fp8 against torch._scaled_mm) and streams @@ records to the
supervisor, which restarts it without a configuration that hangs or crashes."""
from __future__ import annotations

import os
import time
import traceback

from _eager import round_order
from _graphs import capture, reps_for
from gemm_sweep_configs import (CONFIGS, FIXED, FP8_RAGGED, FP8_SIDES, FP16, OPS_SHAPES, RAGGED, SIDES, SK_RAGGED, STREAM_K,
                        TOL, emit, fp8_tune_set, phase, tune_set)

E4M3_MAX = 448.0


def select(*args, **kwargs):
    from warpsched.kernels.gemm.autotune import select as pick  # after gemm_sweep put src/ on the path

    return pick(*args, **kwargs)


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
        self.timed = args.shape_list
        self.dtypes = args.dtypes
        self.deadline = args.deadline
        self.rounds = args.rounds
        self.rep_ms = args.rep_ms  # do_bench's measuring window per timing (warmup a quarter of it)
        self.dev = torch.device("cuda")
        self.compiled = set()
        self.no_graph = set()  # sides whose launches could not be captured: timed plainly
        self.alpha = 1.0  # the fp8 launches' scale_a * scale_b (set with the fp8 inputs)
        self.scales = None

    # ---------------------------------------------------------------- launches
    def launcher(self, side, a, b, c):
        torch = self.torch
        if side == "torch":
            bt = b.t()
            return lambda: torch.mm(a, bt, out=c)
        if side == "torch_fp8":  # fast accumulation, as the warpsched fp8 kernels accumulate (no promotion)
            bt, (sa, sb) = b.t(), self.scales
            try:
                torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=c.dtype, use_fast_accum=True, out=c)
                return lambda: torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=c.dtype, use_fast_accum=True,
                                                out=c)
            except (TypeError, RuntimeError):  # no out= overload: copy (timed with it)
                return lambda: c.copy_(torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=c.dtype,
                                                        use_fast_accum=True))
        if side == "wgmma_gemm":
            return lambda: self.wg.gemm(a, b, c)
        cfg = dict(CONFIGS[side])
        if cfg.pop("fp8", False):
            alpha = self.alpha
            return lambda: self.gp.gemm(a, b, c, alpha=alpha, **cfg)
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
        a, b, _, _ = self.inputs(256, 264, 1024, "bf16", reference=False)
        a8, b8, _, _ = self.inputs(256, 264, 2048, "fp8", reference=False)
        c = torch.empty(256, 264, device=self.dev, dtype=torch.bfloat16)
        for name in names:
            if not self.usable(name):
                continue
            phase("compile", 300, name)
            t0 = time.time()
            fp8 = CONFIGS.get(name, {}).get("fp8", False)
            x, y = (a8, b8) if fp8 else (a, b)
            try:
                self.launcher(name, x, y, c)()
                torch.cuda.synchronize()
                verdict, desc = "-", name
                if name in CONFIGS:
                    opts = {k: v for k, v in CONFIGS[name].items() if k not in ("split_k", "fp8")}
                    verdict = self.gp.verdict_for(x, c, split_k=CONFIGS[name]["split_k"], **opts)
                    kw = dict(ab_dtype=self.gp.cutlass_dtype(x.dtype)) if fp8 else {}
                    split = CONFIGS[name]["split_k"]
                    if split == "stream":
                        kw["stream_k"] = True
                    else:
                        kw["split_k"] = split != 1
                    desc = self.gp.PersistentGemm(**kw, **opts).describe()
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
        reps = reps_for(est_ms)
        if name in self.no_graph:
            return self.do_bench(launch, warmup=self.rep_ms // 4, rep=self.rep_ms, return_mode="median"), "plain"
        try:
            g = capture(torch, launch, reps)
            ms = self.do_bench(g.replay, warmup=self.rep_ms // 4, rep=self.rep_ms, return_mode="median") / reps
            del g
            return ms, "graph"
        except Exception as e:  # noqa: BLE001 - capture refused: time plain launches
            print(f"    graph capture of {name} failed ({type(e).__name__}: {str(e)[:120]}); timing plain launches",
                  flush=True)
            self.no_graph.add(name)
            torch.cuda.synchronize()
            return self.do_bench(launch, warmup=self.rep_ms // 4, rep=self.rep_ms, return_mode="median"), "plain"

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
    def inputs(self, M, N, K, dtype="bf16", reference=True, b_fp8=None):
        """bf16: random A, B. fp8: random A, B quantized per tensor (amax -> 448, scales kept in
        self.scales / self.alpha); the reference is the fp64 product of the dequantized inputs."""
        torch = self.torch
        a = torch.randn(M, K, device=self.dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=self.dev, dtype=torch.bfloat16)
        if dtype == "fp8":
            b_type = b_fp8 or torch.float8_e4m3fn
            sa = (a.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
            sb = (b.abs().amax().float() / torch.finfo(b_type).max).clamp(min=1e-12)
            a, b = (a.float() / sa).to(torch.float8_e4m3fn), (b.float() / sb).to(b_type)
            self.scales, self.alpha = (sa, sb), float(sa * sb)
            if not reference:
                return a, b, None, None
            ref = torch.mm(a.double() * sa.double(), (b.double() * sb.double()).t())
            return a, b, ref, ref.norm()
        if not reference:
            return a, b, None, None
        ref = torch.mm(a.double(), b.double().t())
        return a, b, ref, ref.norm()

    @staticmethod
    def applies(name, K):
        """A fixed split count needs that many K tiles (gemm() rejects it otherwise)."""
        split = CONFIGS.get(name, {}).get("split_k", 1)
        bK = 128 if CONFIGS.get(name, {}).get("fp8") else 64
        return not isinstance(split, int) or split <= -(-K // bK)

    def ragged(self):
        torch = self.torch
        names = ["wgmma_gemm"] + [n for n in CONFIGS if n in self.compiled and not CONFIGS[n].get("fp8")]
        for shape in RAGGED:
            if tuple(shape) in self.done:
                continue
            M, N, K = shape
            a, b, ref, rn = self.inputs(M, N, K)
            c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
            for name in names:
                if self.usable(name) and self.applies(name, K):
                    self.check(name, a, b, c, ref, rn, list(shape))
            emit("shape_done", shape=list(shape))
        self.stream_k_ragged()
        if "fp8" not in self.dtypes:
            return
        names = ["torch_fp8"] + [n for n in CONFIGS if n in self.compiled and CONFIGS[n].get("fp8")]
        for shape in FP8_RAGGED:  # fp8 rows are 16-byte aligned when K is a multiple of 16
            key = (shape[0], shape[1], shape[2], 8)
            if key in self.done:
                continue
            M, N, K = shape
            for b_type in (torch.float8_e4m3fn, torch.float8_e5m2):
                a, b, ref, rn = self.inputs(M, N, K, "fp8", b_fp8=b_type)
                c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
                suffix = " e5m2" if b_type == torch.float8_e5m2 else ""
                e5m2 = ["f8coop128x256", "f8pp128x128", "f8coop128x256s", "f8coop64x128r", "f8coop64x128p",
                        "f8coop64x128a", "f8coop128x256sk"]
                for name in names if not suffix else e5m2:
                    scaled_mm_ok = not (name == "torch_fp8" and (M % 16 or N % 16))  # _scaled_mm's rule
                    if self.usable(name) and self.applies(name, K) and scaled_mm_ok:
                        self.check(name, a, b, c, ref, rn, list(shape), label=name + suffix, limit=300)
            emit("shape_done", shape=list(key))

    def stream_k_ragged(self):
        """Stream-K on ragged shapes with shared tiles, each launched twice: right, and the same bits
        (a tile has at most two shares, and (0 + a) + b == (0 + b) + a in fp32)."""
        torch = self.torch
        names = [n for n in STREAM_K if n in self.compiled and not CONFIGS[n].get("fp8")]
        for shape in SK_RAGGED:
            key = tuple(shape) + (0, 0)
            if key in self.done or not names:
                continue
            M, N, K = shape
            a, b, ref, rn = self.inputs(M, N, K)
            c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
            for name in names:
                if self.usable(name) and self.check(name, a, b, c, ref, rn, list(shape)):
                    first = c.clone()
                    c.fill_(float("nan"))
                    self.launcher(name, a, b, c)()
                    torch.cuda.synchronize()
                    same = bool(torch.equal(c, first))
                    emit("check", shape=list(shape), side=name + " (repeat bits)", ok=same, err=None,
                         note="" if same else "a second launch gave other bits")
            emit("shape_done", shape=list(key))

    def shape(self, M, N, K, dtype="bf16"):
        torch = self.torch
        shape = [M, N, K]
        flops = 2.0 * M * N * K
        est_ms = flops / (1e15 if dtype == "fp8" else 5e14) * 1e3
        a, b, ref, rn = self.inputs(M, N, K, dtype)
        c = torch.empty(M, N, device=self.dev, dtype=torch.bfloat16)
        fp8 = dtype == "fp8"
        baselines = ["torch_fp8"] if fp8 else ["torch", "wgmma_gemm"]
        cands = fp8_tune_set(M, N, K) if fp8 else tune_set(M, N, K)
        ok = {}
        for name in baselines + cands:
            ok[name] = self.usable(name) and self.check(name, a, b, c, ref, rn, shape)
        # the tune: what ops.gemm's autotuner does (a screen, then the close ones repeated in
        # rotated order, the lowest median wins), so that one noisy timing does not pick
        def once(name):
            phase("tune", 60, name, shape)
            ms, how = self.graph_time(name, self.launcher(name, a, b, c), est_ms)
            cfg = CONFIGS[name]
            splits = (self.gp.choose_splits(M, N, K, cfg["tile_mn"], torch.cuda.get_device_properties(0)
                                            .multi_processor_count, 128 if fp8 else 64)
                      if cfg.get("split_k") == "auto" else cfg.get("split_k", 1))  # or "stream"
            emit("tune", shape=shape, cfg=name, ms=ms, how=how, splits=splits)
            return ms

        best, _ = select([n for n in cands if ok.get(n)], once, rounds=2)
        if fp8:
            order_sides, sides = FP8_SIDES, {"torch_fp8": "torch_fp8", "coop_fp8": "f8coop128x256", "tuned_fp8": best}
        else:
            order_sides = SIDES
            sides = {"torch": "torch", "wgmma_gemm": "wgmma_gemm", "coop": FIXED["coop"],
                     "pingpong": FIXED["pingpong"], "coop_sk": FIXED["coop_sk"], "tuned": best}
        live = [s for s in order_sides if sides[s] is not None and ok.get(sides[s])]
        # the captured path of every timed warpsched configuration gives the right answer too
        graph_ok = {}
        for s in [s for s in live if sides[s] in CONFIGS]:
            cfg = sides[s]
            if cfg not in graph_ok:
                graph_ok[cfg] = self.graph_check(cfg, self.launcher(cfg, a, b, c), a, b, c, ref, rn, shape)
            if not graph_ok[cfg]:
                live.remove(s)
        for r in range(self.rounds):
            order = round_order(live, r)  # balanced: every side's mean position the same
            for s in order:
                phase("time", 60, sides[s], shape)
                ms, how = self.graph_time(sides[s], self.launcher(sides[s], a, b, c), est_ms)
                emit("time", shape=shape, side=s, cfg=sides[s], round=r, ms=ms, how=how,
                     tflops=flops / ms / 1e9, dtype=dtype)
        del a, b, c, ref
        torch.cuda.empty_cache()

    def ops_check(self):
        """warpsched.ops.gemm on torch layouts (b = w.t()): autotunes once per shape into a disk
        cache (under $OUT), and the second call reuses the cached choice."""
        torch = self.torch
        os.environ.setdefault("WARPSCHED_CACHE_DIR", os.path.join(os.environ.get("OUT", "/tmp"), "autotune_cache"))
        from warpsched import ops
        from warpsched.kernels.gemm import autotune

        cache = autotune.TuneCache()
        for shape in OPS_SHAPES:
            key = (*shape, 0)
            if key in self.done or time.time() > self.deadline:
                continue
            M, N, K = shape
            a, w, ref, rn = self.inputs(M, N, K)
            phase("ops", 300, None, list(shape))
            t0 = time.time()
            try:
                out = ops.gemm(a, w.t(), cache=cache)
                torch.cuda.synchronize()
                first = time.time() - t0
                t0 = time.time()
                out2 = ops.gemm(a, w.t(), cache=cache)
                torch.cuda.synchronize()
                again = time.time() - t0
                err = float((out.double() - ref).norm() / rn)
                same = bool(torch.equal(out, out2))
                k = autotune.cache_key(M, N, K, a.dtype, w.dtype, out.dtype, torch.cuda.get_device_name())
                choice = cache.get(k)
                ok = err < TOL and same and choice is not None and os.path.isfile(cache.path)
                emit("check", shape=list(shape), side="ops.gemm auto", ok=ok, err=err,
                     note=f"tune {first:.1f}s, cached call {again * 1e3:.0f} ms, choice {choice}")
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                emit("check", shape=list(shape), side="ops.gemm auto", ok=False, err=None,
                     note=f"{type(e).__name__}: {str(e)[:200]}")
            emit("shape_done", shape=list(key))

    def run(self):
        torch = self.torch
        print(f"device: {torch.cuda.get_device_name()}, SMs {torch.cuda.get_device_properties(0).multi_processor_count},"
              f" torch {torch.__version__}", flush=True)
        names = ["wgmma_gemm"] + [n for n in CONFIGS if any(n in tune_set(*s) for s in self.timed)
                                  or ("fp8" in self.dtypes and any(n in fp8_tune_set(*s) for s in self.timed))]
        self.compile_all(names)
        self.ragged()
        self.ops_check()
        for shape in self.timed:
            for dtype in self.dtypes:
                key = tuple(shape) + ((8,) if dtype == "fp8" else ())
                if key in self.done:
                    continue
                if time.time() > self.deadline:
                    emit("skipped", shape=list(shape), note=f"{dtype}: time budget spent")
                    continue
                print(f"== {shape[0]}x{shape[1]}x{shape[2]} {dtype}", flush=True)
                self.shape(*shape, dtype=dtype)
                emit("shape_done", shape=list(key))
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
            for name in ("coop128x256", "pp128x128", "coop128x256s", "coop64x128r", "coop64x128p", "coop64x128a",
                         "coop128x256sk"):
                if self.usable(name):
                    self.check(name, a, b, c, ref, ref.norm(), list(shape), label=name + " fp16", limit=300)
            emit("shape_done", shape=list(shape))
