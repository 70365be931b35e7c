"""The GEMM sweep's data, shared by the supervisor (gemm_sweep.py), its child (gemm_sweep_child.py) and
the diagnostics in tools/ that time the same configurations: the shape sets, every named kernel
configuration, the tune sets per shape, and the two record printers the child streams to the supervisor."""
from __future__ import annotations

import argparse
import json

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
    # 197 against 183 us, bench/results/gemm_176_s23_bf16_h200.log, so it is in no tune set)
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
