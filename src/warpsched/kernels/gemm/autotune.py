"""The GEMM autotuner's pure-Python half: the cache key, the candidate configurations and the
on-disk cache of winners (JSON, one file per op, under a user cache directory).

Like Triton's autotune: the first call for a (shape, dtypes, device) key times each candidate
(``select``: a screen, then interleaved repeats of the close ones, median) and stores the fastest; later calls, in this process or another, reuse it. The cache
directory is ``$WARPSCHED_CACHE_DIR``, else ``$XDG_CACHE_HOME/warpsched``, else
``~/.cache/warpsched``. A corrupt or foreign file is reported with a warning, ignored, and
replaced at the next store; a directory that cannot be written keeps the winners in memory."""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import warnings
from typing import Callable, Dict, List, Optional, Tuple

from ...cachedir import ENV_CACHE_DIR, cache_dir  # noqa: F401  (shared with the verdict cache)
SCHEMA = 1  # bump when a stored configuration would mean something else
CONFIG_KEYS = ("schedule", "tile_mn", "raster", "group", "cluster_mn", "split_k", "split_reduce", "block_k",
               "ab_stages", "pdl", "skip", "epi_n", "swap_ab")


class AutotuneWarning(UserWarning):
    """The autotune cache could not be read or written (tuning goes on without it)."""


def cache_key(M: int, N: int, K: int, a_dtype, b_dtype, out_dtype, device_name: str,
              deterministic: bool = True, majors: str = "", swap: bool = False) -> str:
    """One key per problem: shape, the three dtypes (torch or plain names) and the device name;
    a choice made with ``deterministic=False`` has its own key (it may be a nondeterministic one),
    and so do transposed operands (``majors``: e.g. "a-m", "b-n", "a-m,b-n"; "" for K-major both)
    and a choice among the swap-AB candidates too (``swap``: the winner may be a swapped kernel,
    which a fused epilogue cannot use)."""
    names = [str(d).replace("torch.", "") for d in (a_dtype, b_dtype, out_dtype)]
    return "|".join(["gemm", str(int(M)), str(int(N)), str(int(K)), *names, str(device_name)]
                    + ([] if deterministic else ["nondeterministic"]) + ([majors] if majors else [])
                    + (["swap-ab"] if swap else []))


def normalize(config: Dict) -> Dict:
    """A configuration as gemm() takes it (JSON lists back to tuples); unknown keys rejected."""
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"configuration {config}: unknown keys {unknown}; known: {list(CONFIG_KEYS)}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}


# Swap-AB tiles for M <= 64 (bench/gemm_floor.py --candidates --swap on the H200: 64x32 with a K tile of 128
# the fastest at 16-32 x 4096 x {4096, 14336}, 0.99-1.25x torch.matmul where the plain tiles gave 0.68-0.88x;
# 128x32 at 16 x 14336 x 4096; 128x32 with K split in the kernel at 1 x 4096 x 4096, 12.5 us where the whole
# swapped tiles took 13.1-13.3: its 32 weight-row tiles leave most SMs idle)
SWAP_AB = (dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, swap_ab=True, split_k=1),
           dict(schedule="cooperative", tile_mn=(64, 32), swap_ab=True, split_k=1),
           dict(schedule="cooperative", tile_mn=(128, 32), swap_ab=True, split_k=1),
           dict(schedule="cooperative", tile_mn=(128, 32), swap_ab=True, split_k="auto", split_reduce="parallel"))


# bN of the 128-row "wave-fit" tiles: one wave of narrower tiles where 128x256 tiles leave SMs idle, with B
# multicast over a cluster along M, since without it L2 reads, not the SMs, bound them (docs/gemm.md, "The GEMM
# floor")
WAVE_FIT_BN = (144, 160, 176, 192, 224)
# (cluster, pdl) forms they are tried in: over 4x1 with PDL (1000 x 2056 x 4104, 128x144: 26.9 us with it, 28.0
# without); over 2x1 both (1000 x 3000 x 1736, 128x192: the tuner took PDL, 18.4 us; 18.8-19.4 without)
WAVE_FIT_CLUSTERS = (((4, 1), True), ((2, 2), False), ((2, 1), False), ((2, 1), True))


def wave_fit(bN: int, cluster_mn=(1, 1), pdl: bool = False) -> Dict:
    """The cooperative 128 x ``bN`` configuration of a wave-fit tile (its epilogue sub-tile divides bN), with B
    multicast over ``cluster_mn`` (one of ``WAVE_FIT_CLUSTERS``) or not, with PDL or not."""
    cfg = dict(schedule="cooperative", split_k=1, tile_mn=(128, bN), epi_n=32 if bN % 32 == 0 else 16)
    if tuple(cluster_mn) != (1, 1):
        cfg["cluster_mn"] = tuple(cluster_mn)
    return dict(cfg, pdl=True) if pdl else cfg


def wave_fit_tiles(M: int, N: int, sms: int, cluster_ctas: Optional[Callable[[Tuple[int, int]], int]] = None
                   ) -> List[Dict]:
    """The wave-fit candidates where 128x256 tiles fill less than one wave of ``sms`` CTAs and 128x128 tiles
    more: for each of ``WAVE_FIT_CLUSTERS`` (over 4x1 with PDL) the narrowest bN of ``WAVE_FIT_BN`` whose
    128-row tiles, in whole clusters, fit one wave (over 4x1 and 2x1 also the next wider one), and the
    narrowest without a cluster (cuBLAS's 128x144 over four CTAs along M at 1000 x 2056: docs/gemm.md,
    "The GEMM floor").
    ``cluster_ctas(cluster)``: the CTAs the device holds at once in such clusters (``gemm.launch.max_ctas``;
    default ``sms`` rounded down to whole clusters). On one H200 whose driver counted 33 clusters of 4, wave-fit
    grids of 32 took two waves' time (docs/gemm.md, "4-CTA clusters"), hence the next wider tile over 4x1 too."""
    rows = -(-M // 128)
    if rows * -(-N // 256) >= sms or rows * -(-N // 128) <= sms:
        return []

    def fits(cm, cn):
        wave = cluster_ctas((cm, cn)) if cluster_ctas else sms // (cm * cn) * (cm * cn)
        return [bN for bN in WAVE_FIT_BN if -(-rows // cm) * cm * (-(-N // bN // cn) * cn) <= wave]
    out = []
    for cluster, pdl in WAVE_FIT_CLUSTERS:
        out += [wave_fit(bN, cluster, pdl) for bN in fits(*cluster)[:1 if cluster == (2, 2) else 2]]
    return out + [wave_fit(bN) for bN in fits(1, 1)[:1]]


# Swapped tiles for 32 < M <= 64 (two 32-token tiles): the weight's tile multicast to both over a 1x2 cluster, one
# L2 read of it, also with PDL (docs/gemm.md, "Why these autotune candidates")
_SWAP_64X32 = dict(schedule="cooperative", tile_mn=(64, 32), block_k=128, swap_ab=True, split_k=1)
SWAP_AB_PAIR = (dict(_SWAP_64X32, cluster_mn=(1, 2)), dict(_SWAP_64X32, cluster_mn=(1, 2), pdl=True))
# Swapped tiles for M <= 32 (one token tile every CTA reads): the token tile multicast to four weight tiles over
# a 4x1 cluster (a quarter of the CTAs read the same L2 lines), with the 9-stage ring or PDL, and PDL alone; and
# 128-row weight tiles over 4x1 with PDL (won 16 x 6144 x 4096 and 1-16 x 14336 x 4096: docs/gemm.md, "The GEMM floor")
SWAP_AB_SHARED = (dict(_SWAP_64X32, cluster_mn=(4, 1)), dict(_SWAP_64X32, cluster_mn=(4, 1), ab_stages=9),
                  dict(_SWAP_64X32, cluster_mn=(4, 1), pdl=True), dict(_SWAP_64X32, pdl=True),
                  dict(schedule="cooperative", tile_mn=(128, 32), swap_ab=True, split_k=1, cluster_mn=(4, 1),
                       pdl=True))


def candidates(M: int, N: int, K: int, fp8: bool = False, deterministic: bool = True,
               swap: bool = False, sms: int = 132,
               cluster_ctas: Optional[Callable[[Tuple[int, int]], int]] = None) -> List[Dict]:
    """The handful of configurations tried for a shape: each won some shape of the H200 sweeps
    (docs/gemm.md, "Why these autotune candidates", has the measurements and their commands).

    - M <= 64 (memory-bound on B: many CTAs streaming it): narrow tiles, split-K where the tiles
      leave SMs idle ("auto"), 64x64 tiles (the fastest at M = 32-64 with N of 3000-4104 in
      bench/gemm_floor.py), 64x32 tiles (cuBLAS's choice there) with a doubled K tile and PDL
      (the next launch's prologue overlaps this one's tail), for bf16 also the 9-stage ring that
      fits, and the ping-pong; the 64-row splits also reduced in the kernel (one launch: the tuner
      charges a host-reduced split its two extra launches, ``EXTRA_LAUNCH_MS``); ``deterministic=False``
      adds the atomic in-kernel split-K (its shares sum in arrival order, so its last bits can differ
      between calls); 16-bit 32 < M <= 64 adds 64x32 tiles over a 1x2 cluster (plain, and swapped with a
      K tile of 128: the weight's tile multicast to the two token tiles). ``swap`` (16-bit, both
      operands K-major, a row-major out and no fused epilogue: what a swapped kernel can run) adds the
      swap-AB tiles (``SWAP_AB``): the weight's rows on WGMMA's M, the tokens on N; for M <= 32 also the
      token tile multicast over a 4x1 cluster (64- and 128-row weight tiles) and PDL (``SWAP_AB_SHARED``), for
      32 < M <= 64 the weight's tile over a 1x2 cluster (``SWAP_AB_PAIR``).
    - M <= 256: the 128x256 / 256x128 / 128x128 / 64x128 / 128x64 tiles, split-K on two of them,
      the ping-pong and 128x224 tiles.
    - Larger: 128x256 and 256x128, the other raster order, a wider raster group, B multicast over a
      2x1 cluster, the ping-pong; few tiles (M * N <= 2048^2) add smaller tiles (64x128 with PDL, for
      16-bit also over a 2x1 cluster),
      many tiles add 128x224 (an even last wave at N = 14336) and CUTLASS's ping-pong with 128x176
      and 128x192 tiles (a warp group's epilogue under the other's mainloop).

    - 16-bit M > 256 with few tiles (M * N <= 2048^2): the wave-fit tiles (``wave_fit_tiles``), 128 rows
      and the narrowest bN of ``WAVE_FIT_BN`` whose tiles fit one wave of ``sms`` SMs, over 4x1 (with PDL), 2x2
      and 2x1 (with and without) clusters (measured on bf16; fp8 keeps the list it was measured with).

    fp8 has the same list but the clustered additions above (its K tile is 128, the doubled one 256).
    Serial in-kernel split-K is not tried, nor the parallel one above M = 64: they never won on device
    time; nor stream-K, slower than the best data-parallel tile on every shape measured, few tiles
    (fewer than SMs: bench/gemm_floor.py) and many (the sweep's). Every candidate's program ships proven
    (``warpsched.kernels.shipped``), so tuning compiles without searching."""
    del K  # the list depends on M and N; split_k="auto" looks at K itself
    coop = dict(schedule="cooperative", split_k=1)
    wide_k = 256 if fp8 else 128  # twice the default K tile (bf16 64, fp8 128)
    if M <= 64:  # memory-bound on B: many CTAs streaming it, K split and reduced in the kernel
        out = [dict(coop, tile_mn=(128, 256), split_k="auto"), dict(coop, tile_mn=(64, 256), split_k="auto"),
               dict(coop, tile_mn=(64, 128)), dict(coop, tile_mn=(64, 128), split_k="auto"),
               # the same splits reduced in the kernel: one launch where torch's sum and copy add two
               # (``EXTRA_LAUNCH_MS``), which an eager model's decode step pays on the host
               dict(coop, tile_mn=(64, 256), split_k="auto", split_reduce="parallel"),
               dict(coop, tile_mn=(64, 128), split_k="auto", split_reduce="parallel"),
               dict(coop, tile_mn=(64, 32)), dict(coop, tile_mn=(64, 32), block_k=wide_k, pdl=True),
               dict(coop, tile_mn=(64, 64)),
               dict(schedule="pingpong", tile_mn=(128, 128), split_k=1)]
        if not fp8:  # a 9th 24 KB stage (all that fits) helped bf16 at K = 4096; fp8's is not measured
            out.insert(-1, dict(coop, tile_mn=(64, 32), block_k=wide_k, ab_stages=9, pdl=True))
        if not deterministic:
            out.append(dict(coop, tile_mn=(64, 128), split_k="auto", split_reduce="atomic"))
        if M > 32 and not fp8:  # two 32-token tiles: the weight's tile multicast to both over a 1x2 cluster
            out.append(dict(coop, tile_mn=(64, 32), cluster_mn=(1, 2)))
        if swap and not fp8:
            out += [dict(c) for c in SWAP_AB]
            out += [dict(c) for c in (SWAP_AB_PAIR if M > 32 else SWAP_AB_SHARED)]
        return out
    if M <= 256:
        return [dict(coop, tile_mn=(128, 256), split_k="auto"), dict(coop, tile_mn=(64, 256), split_k="auto"),
                dict(coop, tile_mn=(128, 128)), dict(coop, tile_mn=(256, 128)),
                dict(coop, tile_mn=(64, 128)), dict(coop, tile_mn=(128, 64)),
                dict(coop, tile_mn=(128, 128), split_k="auto"),
                dict(schedule="pingpong", tile_mn=(128, 128), split_k=1), dict(coop, tile_mn=(128, 224))]
    out = [dict(coop, tile_mn=(128, 256)), dict(coop, tile_mn=(256, 128)), dict(coop, tile_mn=(128, 256), raster="n"),
           dict(coop, tile_mn=(128, 256), group=16), dict(coop, tile_mn=(128, 256), cluster_mn=(2, 1)),
           dict(schedule="pingpong", tile_mn=(128, 128), split_k=1)]
    if M * N <= 2048 * 2048:  # few tiles of 128x256: a smaller tile fills more SMs
        out += [dict(coop, tile_mn=(128, 128)), dict(coop, tile_mn=(128, 64)), dict(coop, tile_mn=(64, 128), pdl=True)]
        if not fp8:  # the clustered forms were measured on 16-bit GEMMs only
            out.append(dict(coop, tile_mn=(64, 128), pdl=True, cluster_mn=(2, 1)))
            out += [c for c in wave_fit_tiles(M, N, sms, cluster_ctas) if c not in out]
    else:  # many tiles: a narrower one can even out the last wave
        out.append(dict(coop, tile_mn=(128, 224)))
        # CUTLASS's ping-pong with cuBLAS's 176-column tile (656 tiles, 4.97 waves at M = 1024,
        # N = 14336) or 192 columns: a warp group's epilogue runs under the other's mainloop
        pp = dict(schedule="pingpong_shared", skip=True, ab_stages=4, split_k=1)
        out += [dict(pp, tile_mn=(128, 176), epi_n=16), dict(pp, tile_mn=(128, 192))]
    return out


# What the tuner adds to a configuration's device time for each launch beyond the GEMM's own (a host-reduced
# split-K: torch's sum of the fp32 shares and the copy into the output): what a model calling it eagerly pays for
# them on the host, where device time alone would pick a plan that is faster only inside a CUDA graph (docs/gemm.md,
# "Why these autotune candidates")
EXTRA_LAUNCH_MS = 0.005


class TuneCache:
    """The winners on disk: {"schema": SCHEMA, "entries": {key: {"config": ..., "ms": ...}}}."""

    def __init__(self, path: Optional[str] = None):
        self.path = path or os.path.join(cache_dir(), "gemm_autotune.json")
        self.memory: Dict[str, Dict] = {}  # entries this process stored (kept if the disk refuses them)

    def load(self) -> Dict[str, Dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return dict(self.memory)
        except (OSError, ValueError) as e:
            warnings.warn(f"autotune cache {self.path} unreadable ({type(e).__name__}: {e}); ignoring it (it is "
                          f"rewritten at the next store; delete it or set {ENV_CACHE_DIR} to move it)",
                          AutotuneWarning, stacklevel=3)
            return dict(self.memory)
        if not (isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("entries"), dict)):
            found = data.get("schema") if isinstance(data, dict) else None
            warnings.warn(f"autotune cache {self.path} has another format (schema {found!r}, expected {SCHEMA}); "
                          "ignoring it", AutotuneWarning, stacklevel=3)
            return dict(self.memory)
        return {**data["entries"], **self.memory}

    def get(self, key: str) -> Optional[Dict]:
        entry = self.load().get(key)
        try:
            usable = isinstance(entry, dict) and isinstance(entry.get("config"), dict)
            return normalize(entry["config"]) if usable else None
        except ValueError:  # a configuration key this version does not know: tune again
            return None

    def put(self, key: str, config: Dict, ms: Optional[float] = None, finalists: Optional[List] = None) -> None:
        """Store ``config`` as ``key``'s winner with its median ``ms``; ``finalists``: [(config, median ms), ...] of
        the candidates timed against it, kept beside it (fastest first) so that a choice can be checked later."""
        entry = {"config": _jsonable(config)}
        if ms is not None and math.isfinite(ms):
            entry["ms"] = ms
        if finalists:
            entry["finalists"] = [[_jsonable(c), round(t, 5)] for c, t in sorted(finalists, key=lambda f: f[1])]
        self.memory[key] = entry
        entries = self.load()
        entries[key] = entry
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".gemm_autotune.", dir=os.path.dirname(self.path) or ".")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"schema": SCHEMA, "entries": entries}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)  # atomic: a reader sees the old file or the new one
        except OSError as e:
            warnings.warn(f"autotune cache {self.path} not written ({e}); the choice is kept for this process",
                          AutotuneWarning, stacklevel=3)


def _jsonable(config: Dict) -> Dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}


def select(names: List, time_once: Callable[[object], float], rounds: int = 3, margin: float = 1.25
           ) -> Tuple[Optional[object], Dict[object, object]]:
    """The fastest of ``names`` by the median of interleaved timings, robust to a GPU whose speed
    drifts by 10-20 % between two timings of one kernel: every candidate is timed once (a
    screen: an exception drops it, its message kept), then the finalists (within ``margin`` of
    the best screen timing) are timed ``rounds`` more times in rotated order, so that drift hits
    each of them alike; the winner has the lowest median of its timings. Returns (winner or
    None, {name: [ms, ...] or the error message})."""
    timings: Dict[object, object] = {}
    for name in names:
        try:
            timings[name] = [float(time_once(name))]
        except Exception as e:  # noqa: BLE001 - a configuration that does not fit this shape
            timings[name] = f"{type(e).__name__}: {e}"
    ran = [n for n in names if isinstance(timings[n], list)]
    if not ran:
        return None, timings
    best_screen = min(timings[n][0] for n in ran)
    finalists = [n for n in ran if timings[n][0] <= best_screen * margin]
    if len(finalists) > 1:
        for r in range(rounds):
            for name in finalists[r % len(finalists):] + finalists[:r % len(finalists)]:
                if not isinstance(timings[name], list):
                    continue  # failed in an earlier round
                try:
                    timings[name].append(float(time_once(name)))
                except Exception as e:  # noqa: BLE001 - failed on a repeat: out of the running
                    timings[name] = f"{type(e).__name__}: {e}"
        finalists = [n for n in finalists if isinstance(timings[n], list)]
    if not finalists:
        return None, timings
    return min(finalists, key=lambda n: statistics.median(timings[n])), timings


def autotune(key: str, configs: List[Dict], bench: Callable[[Dict], float],
             cache: TuneCache, rounds: int = 5) -> Tuple[Dict, Dict[int, object]]:
    """The cached winner for ``key``, else ``select`` over the configurations (``bench``: one
    timing in ms; an exception drops that configuration), store the winner with its median time
    and the finalists' (those timed ``rounds`` more times) and return it with every timing
    ({index: [ms, ...] or the error})."""
    hit = cache.get(key)
    if hit is not None:
        return hit, {}
    best, timings = select(list(range(len(configs))), lambda i: bench(configs[i]), rounds=rounds)
    if best is None:
        raise RuntimeError(f"autotune {key}: no configuration ran: " + "; ".join(f"{configs[i]}: {t}"
                                                                                for i, t in timings.items()))
    finalists = [(configs[i], statistics.median(t)) for i, t in timings.items() if isinstance(t, list) and len(t) > 1]
    cache.put(key, configs[best], statistics.median(timings[best]), finalists)
    return normalize(configs[best]), timings
