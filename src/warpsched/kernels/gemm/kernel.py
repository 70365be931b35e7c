"""The persistent GEMM's CuTe DSL kernel: compile-time configuration (tile, schedule, stages,
rasterization), the static tile scheduler's index arithmetic, and the ``@cute.kernel`` that
builds and runs the warpsched program (gemm.program.build) while it is traced."""
from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401
import cutlass.tensor_utils  # noqa: F401
import cutlass.utils.hopper_helpers as sm90_utils

from .. import _host
from . import epilogue as gemm_epilogue
from .config import (H200_SMS, MAX_AUTO_STAGES, AMajor, BMajor, EpiSync, GemmConfig, GemmConfigError,
                     Raster, Schedule, SplitReduce, check_stream_k, cluster_of, tile_of)
from .program import build
from .streamk import StreamKPlan

EVICT_NORMAL, EVICT_FIRST, EVICT_LAST = 0x1000000000000000, 0x12F0000000000000, 0x14F0000000000000
L2_HINTS = {None: (None, None), "normal": (EVICT_NORMAL, EVICT_NORMAL), "a_last": (EVICT_LAST, EVICT_NORMAL),
            "a_last_b_first": (EVICT_LAST, EVICT_FIRST)}


class PersistentGemm:
    """Compile-time configuration (tile, schedule, rasterization, stages) and the CuTe DSL kernel.

    ``tile_mn``: the output tile one math task computes: cooperative (64 | 128 | 256, 32..256; two
    warp groups from 128 rows), pingpong and pingpong_shared (64 | 128, 64..256 with bM * bN <=
    16384: one warp group holds the whole fp32 accumulator; pingpong: a ring per warp group,
    pingpong_shared: one ring both release, see gemm.program.mma_shared_schedule). ``raster``: "m" (walk ``group`` M tiles down a
    column strip before moving right) or "n". ``max_ctas``: the persistent grid's upper bound
    (the SM count). ``ab_stages``: override the ring depth (per ring). ``skip`` (pingpong_shared):
    the warp group that does not own a tile skips its stages instead of waiting for and releasing
    them (gemm.program.mma_skip_schedule). ``block_k``: the K tile (default 4 WGMMA K steps: 64
    bf16 / fp16, 128 fp8; 128 bf16 halves the barrier round trips per byte of a small tile's
    stage and doubles the bytes in flight at the same checked ring depth; 256 once more; 32 bf16
    gives twice as many half-deep stages in the same SMEM, which lost 5 % at 128x256). ``pdl``:
    launched as a programmatic dependent launch (the load warps wait for the previous grid,
    then let the next one launch; see gemm.program.load_schedule). ``epi_n``: the columns of one epilogue sub-tile (32:
    bN / 32 TMA stores per tile; 64: half as many, twice the bytes each). ``epi_sync``: "pair"
    (two named barriers per sub-tile: the store warp waits for the next buffer after its store)
    or "single" (one: the store warp waits for that buffer before the barrier, one store later;
    needs two epilogue buffers). Both change work bodies only: the checked program is the same.
    ``l2_hint``: the L2 eviction priority of the A / B TMA loads: None (the DSL's default hint
    operand, 0), "normal" (EVICT_NORMAL on both, CUTLASS C++'s default), "a_last" (A EVICT_LAST:
    the raster group's A strip is reused across every N tile it visits) or "a_last_b_first".
    ``bias`` (None, "c": the output's dtype, "f32"), ``activation`` (None, "relu", "relu2", "gelu",
    "gelu_tanh", "silu", "swiglu", "swiglu_keep": C = z and h into ``mAux``), ``residual``, ``scale_out`` (16-bit
    inputs: multiply by alpha):
    the fused epilogue (gemm_epilogue: its order of operations and SwiGLU's interleaved B); work
    bodies only, the checked program is the same. ``batched``: A (M, K, L), B (N, K, L), C (M, N, L)
    (CuTe's L mode): the work tiles of the L products are numbered as one M range of L x tiles_m
    tiles (``batch_coord``), so the scheduler and the program are the 2-D kernel's; without split-K,
    stream-K or clusters."""

    def __init__(self, schedule="pingpong", ab_dtype=cutlass.BFloat16, c_dtype=cutlass.BFloat16,
                 acc_dtype=cutlass.Float32, tile_mn=None, raster="m", group=8, max_ctas=H200_SMS,
                 producer_regs=40, consumer_regs=232, ab_stages=None, split_k=False, cluster_mn=(1, 1),
                 b_dtype=None, split_reduce="host", skip=False, block_k=None, pdl=False, epi_n=32,
                 epi_sync="pair", l2_hint=None, stream_k=False, device_scale=False, a_major="k", b_major="k",
                 bias=None, activation=None, residual=False, scale_out=False, batched=False, gmem_flags=False,
                 k_tiles_min=1, c_major="n"):
        schedule = Schedule.parse(schedule, "schedule")
        cluster_mn = cluster_of(cluster_mn)
        split_reduce = SplitReduce.parse(split_reduce, "split_reduce", "'host': fp32 slabs summed by torch; the "
                                         "others in the kernel, ordered by per-tile GMEM flags")
        if stream_k:
            check_stream_k(schedule, split_reduce, cluster_mn, split_k)
        # stream-K (gemm.streamk): whole tiles, then a range of K iterations cut into units
        self.stream_k = bool(stream_k)
        if not isinstance(k_tiles_min, int) or isinstance(k_tiles_min, bool) or k_tiles_min < 1:
            raise GemmConfigError(f"k_tiles_min={k_tiles_min!r}: expected an int >= 1 (the fewest K tiles a launch has)")
        if k_tiles_min > 1 and (split_k or stream_k or batched):
            raise GemmConfigError(f"k_tiles_min={k_tiles_min} with a K split or batched products: a share's K loop "
                                  "can be shorter than K; leave k_tiles_min at 1")
        self.k_tiles_min = k_tiles_min  # every launch has at least this many K tiles (the host checks)
        self.serial = bool(split_k) and split_reduce != "host"  # reduced in the kernel
        self.split_reduce = split_reduce
        # gmem_flags: serial_fixup's flag chain (serial split-K, stream-K), parallel_fixup's and
        # atomic_fixup's counts through lower/gmem_flags, the GmemFlag protocols gemm.handover proves; the same flag, fence
        # and barrier instructions as the hand-written accesses
        self.gmem_flags = bool(gmem_flags)
        if self.gmem_flags and not (self.stream_k or self.serial):
            raise GemmConfigError(f"gmem_flags=True with split_reduce={split_reduce!r}, split_k={split_k!r}: only "
                                  "the in-kernel split-K reductions (serial, parallel, atomic) and stream-K hand "
                                  "tiles over between CTAs; drop gmem_flags")
        if self.gmem_flags:
            from .handover import require_safe

            # GridResults: SAFE up to their bounds
            self.handover_proof = require_safe("stream" if self.stream_k else split_reduce)
        host_split = bool(split_k) and not self.serial
        c_ok = (cutlass.BFloat16, cutlass.Float16) + ((cutlass.Float32,) if host_split else ())  # fp32 partials
        b_dtype = b_dtype or ab_dtype
        half, fp8 = (cutlass.BFloat16, cutlass.Float16), (cutlass.Float8E4M3FN, cutlass.Float8E5M2)
        # WGMMA: bf16/fp16 with one type for A and B; fp8 with e4m3 or e5m2 on either side (K-major both)
        inputs_ok = (ab_dtype in half and b_dtype is ab_dtype) or (ab_dtype in fp8 and b_dtype in fp8)
        if not inputs_ok or c_dtype not in c_ok:
            raise GemmConfigError(f"dtypes {ab_dtype.__name__} x {b_dtype.__name__} -> {c_dtype.__name__}: A/B and "
                                  "C must be bf16 or fp16 (A/B fp8 e4m3 / e5m2 with C bf16 or fp16)")
        self.b_dtype = b_dtype
        self.epi = gemm_epilogue.EpilogueSpec(bias, activation, residual, scale_out)
        self.batched = bool(batched)
        if self.batched and (split_k or stream_k or cluster_mn != (1, 1)):
            raise GemmConfigError(f"batched=True with split_k={split_k!r}, stream_k={stream_k!r}, cluster_mn="
                                  f"{cluster_mn}: a batched GEMM runs whole tiles of each product, without a "
                                  "K split or a cluster; drop those options")
        # fp8: the epilogue multiplies by alpha = scale_a * scale_b (16-bit: with scale_out, by alpha)
        self.scaled = ab_dtype in fp8 or self.epi.scale_out
        if device_scale and ab_dtype not in fp8:
            raise GemmConfigError("device_scale=True: only the fp8 kernels scale their output")
        # fp8, device_scale: scale_a and scale_b are one-element fp32 tensors the kernel reads itself
        # (no host sync to read them, and a CUDA graph replays whatever values they hold)
        self.device_scale = bool(device_scale)
        if split_k and schedule != "cooperative":
            raise GemmConfigError("split_k=True: only the cooperative schedule splits K (pingpong pairs tiles)")
        self.cluster_mn = cluster_mn
        self.clustered = self.cluster_mn != (1, 1)
        if self.clustered and split_k:
            raise GemmConfigError(f"cluster_mn={cluster_mn} with split_k={split_k}: a cluster runs without split-K; "
                                  "drop one of them")
        if self.clustered and schedule == "pingpong_shared":
            raise GemmConfigError(f"cluster_mn={cluster_mn}: pingpong_shared runs without a cluster (its shared ring's "
                                  "multicast is not built); use pingpong or cooperative for clusters")
        if skip and schedule != "pingpong_shared":
            raise GemmConfigError(f"skip=True with schedule={schedule!r}: only pingpong_shared's one ring has "
                                  "stages a math warp group skips; drop skip or use schedule='pingpong_shared'")
        # pingpong_shared, skip=True: only a tile's owner waits for and releases its stages, the other
        # warp group skips them (gemm.program.mma_skip_schedule)
        self.skip = bool(skip)
        self.pdl = bool(pdl)  # programmatic dependent launch (gemm.program.load_schedule)
        raster = Raster.parse(raster, "raster", "walk the raster group down M or along N")
        if not (isinstance(group, int) and group >= 1):
            raise GemmConfigError(f"group={group!r}: an int >= 1 (the tiles a raster group walks before it turns)")
        self.schedule = schedule
        self.split_k = bool(split_k)
        if host_split:
            c_dtype = cutlass.Float32  # the kernel writes fp32 partial tiles into a workspace; the host sums them
        self.ab_dtype, self.c_dtype, self.acc_dtype = ab_dtype, c_dtype, acc_dtype
        self.tile_mn = tile_of(tile_mn, schedule)
        bM, bN = self.tile_mn
        pingpong = schedule != "cooperative"
        if bM not in (64, 128, 256) or bN not in (32, 64, 128, 144, 160, 176, 192, 224, 256) or (bM == 256 and pingpong):
            raise GemmConfigError(f"{schedule} tile_mn={self.tile_mn}: bM must be 64, 128 (or 256, cooperative "
                                  "only), bN one of 32, 64, 128, 144, 160, 176, 192, 224, 256")
        # ping-pong: two math tasks, each owning one of a unit's two tiles; "pingpong" gives each its
        # own ring (and load warp), "pingpong_shared" one ring both release, loaded in tile order
        self.math_tasks = 2 if pingpong else 1
        self.rings = 2 if schedule == "pingpong" else 1
        self.shared_ring = schedule == "pingpong_shared"
        self.tiles_per_unit = self.rings  # two-ring pingpong: a unit is a pair (one tile per ring)
        # cooperative: two warp groups split the rows once the tile has 128 or more (64 or 128 each)
        self.wgs_per_mma_task = min(2, bM // 64) if schedule == "cooperative" else 1
        # one warp group holds the whole accumulator: bM * bN / 128 fp32 registers a thread; up to
        # 192 fit the math warp groups' 232 without spills (ptxas: 128x176 and 128x192 none, 128x224 7 KB)
        if pingpong and bM * bN > 128 * 192:
            raise GemmConfigError(f"pingpong tile_mn={self.tile_mn}: one warp group holds the whole accumulator, "
                                  "so bM * bN <= 24576 (128x128, 64x256, 128x176, 128x192, ...)")
        self.consumer_wgs = self.math_tasks * self.wgs_per_mma_task
        self.raster, self.group = raster, group
        self.max_ctas = max_ctas
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs
        epi_sync = EpiSync.parse(epi_sync, "epi_sync")
        if epi_n not in (16, 32, 64) or self.tile_mn[1] % epi_n:
            raise GemmConfigError(f"epi_n={epi_n!r} (tile_mn={self.tile_mn}): epi_n is 16, 32 or 64 and divides bN")
        self.epi_n, self.epi_sync = epi_n, epi_sync
        gemm_epilogue.check_kernel(self.epi, host_split, self.tile_mn[1], epi_n, self.batched)
        # the output tile's width: SwiGLU stores silu(gate) * up, half the MMA tile's columns
        self.out_n = self.tile_mn[1] // 2 if self.epi.swiglu else self.tile_mn[1]
        if l2_hint not in L2_HINTS:
            raise GemmConfigError(f"l2_hint={l2_hint!r}: expected one of {list(L2_HINTS)}")
        self.l2_hint = l2_hint
        # (A, B) cache-hint operands of the TMA loads (CUTLASS's CacheHintSm90 values); None: the DSL's default
        self.l2_policy = L2_HINTS[l2_hint]
        self.threads = 128 * (1 + self.consumer_wgs)
        # C row-major (N contiguous, "n") or column-major (M contiguous, "m": a swap-AB GEMM's C^T, whose
        # epilogue writes transposed 8x8 blocks with stmatrix.trans); no fused epilogue, and K shares reduce
        # in the kernel (their fp32 workspace tiles are C-layout free) or not at all
        if c_major not in ("n", "m"):
            raise GemmConfigError(f"c_major={c_major!r}: expected 'n' (row-major C) or 'm' (column-major C)")
        if c_major == "m" and ((split_k and not self.serial) or stream_k or batched or self.epi.fused):
            raise GemmConfigError(f"c_major='m' with split_k={split_k!r} (split_reduce={split_reduce!r}), stream_k={stream_k!r}, batched={batched!r}, "
                                  f"fused epilogue: {self.epi.describe().replace(' epi ', '') or 'none'}: a column-major C is written by "
                                  "a plain GEMM whose K shares (if any) reduce in the kernel; drop the split or reduce it "
                                  "in the kernel (split_reduce='parallel', 'serial' or 'atomic'), and drop the epilogue")
        self.c_major = c_major
        self.layout = cutlass.tensor_utils.LayoutEnum.COL_MAJOR if c_major == "m" else \
            cutlass.tensor_utils.LayoutEnum.ROW_MAJOR  # C's layout (A and B have a_layout / b_layout)
        # A (M, K) and B (N, K): K-major (the default, and all fp8 takes), or M- / N-major for 16-bit
        # types (a transposed operand, as a backward pass has: WGMMA reads either from SMEM)
        a_major = AMajor.parse(a_major, "a_major", "A row-major (k) or column-major (m)")
        b_major = BMajor.parse(b_major, "b_major", "B stored (N, K) row-major (k) or (K, N) row-major (n)")
        if self.scaled and (a_major, b_major) != ("k", "k"):
            raise GemmConfigError(f"a_major={a_major!r}, b_major={b_major!r} ({ab_dtype.__name__}): A is 'k' (row-major "
                                  "(M, K)) or 'm', B 'k' (column-major (K, N)) or 'n'; fp8 operands are K-major only "
                                  "(pass a.contiguous() / b.t().contiguous().t())")
        self.a_major, self.b_major = a_major, b_major
        major = {"k": cutlass.tensor_utils.LayoutEnum.ROW_MAJOR, "m": cutlass.tensor_utils.LayoutEnum.COL_MAJOR,
                 "n": cutlass.tensor_utils.LayoutEnum.COL_MAJOR}
        self.a_layout, self.b_layout = major[a_major], major[b_major]
        self.smem_capacity = cutlass.memory.get_smem_capacity_in_bytes("sm_90")
        self.num_units = None  # runtime, set while tracing
        self._plan(ab_stages, block_k)

    def _plan(self, ab_stages, block_k=None):
        """Tile shape, stage counts and SMEM sizes in plain Python (the CPU check and the traced
        kernel use the same numbers)."""
        mma_k = 256 // self.ab_dtype.width  # a WGMMA instruction reads 32 bytes of K
        bM, bN = self.tile_mn
        if block_k is not None and block_k not in (mma_k * 2, mma_k * 4, mma_k * 8, mma_k * 16):
            raise GemmConfigError(f"block_k={block_k!r} for {self.ab_dtype.__name__}: the K tile is {mma_k * 4} "
                                  f"(default), {mma_k * 2}, {mma_k * 8} or {mma_k * 16} "
                                  f"(4, 2, 8 or 16 WGMMA K steps of {mma_k})")
        self.tile_mnk = (bM, bN, block_k or mma_k * 4)
        bK = self.tile_mnk[2]
        # a sub-tile spans every row of the tile (one TMA store per epi_n columns)
        self.epi_tile = (bM, self.epi_n)
        n_epi = self.out_n // self.epi_n
        sub_bytes = bM * self.epi_n * self.c_dtype.width // 8
        fits = [s for s in (4, 2, 1) if s * sub_bytes * self.math_tasks <= 32768]
        self.epi_stage = next(s for s in fits if n_epi % s == 0)
        if self.epi_stage == 1 and self.epi_sync == "pair" and n_epi > 1:
            # bN = 224: 7 sub-tiles, which only 1 buffer divides; with more, store_tile drains the
            # in-flight stores after a tile's last sub-tile so the next tile starts at buffer 0
            self.epi_stage = fits[0]
        self.epi_drain = n_epi % self.epi_stage != 0
        if self.epi_sync == "single" and self.epi_stage < 2:
            raise GemmConfigError(f"epi_sync='single' with tile_mn={self.tile_mn}, epi_n={self.epi_n}: one epilogue "
                                  "buffer (the store warp would wait for a store it has not issued); use "
                                  "epi_sync='pair' or epi_n=32")
        epi_bytes = sub_bytes * self.epi_stage * self.math_tasks
        self.tile_bytes = (bM * self.ab_dtype.width + bN * self.b_dtype.width) * bK // 8
        fit = (self.smem_capacity - 1024 - epi_bytes) // (self.tile_bytes * self.rings)
        # the automatic depth: MAX_AUTO_STAGES for any K, or as deep as SMEM holds when the K loop is declared
        # at least that long (k_tiles_min: the program's trip count, which keeps the proof small)
        self.ring_fit = fit
        if ab_stages is not None and (not isinstance(ab_stages, int) or isinstance(ab_stages, bool)):
            raise GemmConfigError(f"ab_stages={ab_stages!r}: expected an int (the ring's stages), or None for the "
                                  "depth SMEM and K allow")
        self.ab_stage = ab_stages or min(fit, max(MAX_AUTO_STAGES, self.k_tiles_min))
        if not 2 <= self.ab_stage <= fit:
            raise GemmConfigError(f"{self.schedule} tile {self.tile_mn}: {self.ab_stage} stages per ring "
                                  f"(fit: {fit}); need 2 <= stages <= {fit}")
        self.a_elems, self.b_elems = bM * bK * self.ab_stage, bN * bK * self.ab_stage
        self.c_elems = self.epi_tile[0] * self.epi_tile[1] * self.epi_stage
        self.smem_bytes = self.tile_bytes * self.ab_stage * self.rings + epi_bytes + 1024  # what _plan fits
        self.config = GemmConfig(
            ab_dtype=self.ab_dtype.__name__, b_dtype=self.b_dtype.__name__, c_dtype=self.c_dtype.__name__,
            schedule=self.schedule, tile_mnk=tuple(self.tile_mnk), ab_stages=self.ab_stage, rings=self.rings,
            k_tiles_min=self.k_tiles_min, raster=self.raster, group=self.group, cluster_mn=self.cluster_mn,
            split_k=self.split_k, split_reduce=self.split_reduce, stream_k=self.stream_k, epi_n=self.epi_n,
            epi_sync=self.epi_sync, epi_stages=self.epi_stage, a_major=self.a_major, b_major=self.b_major,
            epilogue=self.epi.describe().strip(), pdl=self.pdl, skip=self.skip, batched=self.batched,
            device_scale=self.device_scale, gmem_flags=self.gmem_flags, l2_hint=self.l2_hint)

    def describe(self):
        return (f"{self.schedule} {self.tile_mn[0]}x{self.tile_mn[1]}x{self.tile_mnk[2]} raster {self.raster}"
                f"{self.group} stages {self.ab_stage}x{self.rings} epi {self.epi_stage}"
                + (f" {self.ab_dtype.__name__}x{self.b_dtype.__name__} scaled" if self.scaled else "")
                + (f" split-K {self.split_reduce}" if self.serial else " split-K fp32" if self.split_k else "")
                + (" stream-K" if self.stream_k else "") + (" gmem-flags" if self.gmem_flags else "")
                + (f" cluster {self.cluster_mn[0]}x{self.cluster_mn[1]}" if self.clustered else "")
                + (" skip" if self.skip else "") + (" pdl" if self.pdl else "")
                + (f" epi_n {self.epi_n}" if self.epi_n != 32 else "")
                + (f" epi_sync {self.epi_sync}" if self.epi_sync != "pair" else "")
                + (f" l2 {self.l2_hint}" if self.l2_hint else "")
                + (f" A {self.a_major}-major" if self.a_major != "k" else "")
                + (f" B {self.b_major}-major" if self.b_major != "k" else "") + self.epi.describe()
                + (" batched" if self.batched else ""))

    def epilogue_copy(self, tiled_mma):
        """Registers -> SMEM (stmatrix) tiled copy shaped by the MMA's accumulator layout."""
        r2s = sm90_utils.sm90_get_smem_store_op(self.layout, elem_ty_d=self.c_dtype, elem_ty_acc=self.acc_dtype)
        atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.layout.is_m_major_c(), 4), self.c_dtype)
        return cute.make_tiled_copy_S(r2s, cute.make_tiled_copy_C_atom(atom, tiled_mma))

    def _make_tiled_mma(self, tile_n=None):
        """The tile's MMA; ``tile_n``: another width with the same per-thread layout (SwiGLU's output)."""
        return sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype, self.b_dtype, self.a_layout.sm90_mma_major_mode(), self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype, (self.wgs_per_mma_task, 1, 1), tiler_mn=(64, tile_n or self.tile_mn[1]))

    def _setup(self):
        self.tiled_mma = self._make_tiled_mma()
        assert self.tile_mnk[2] % cute.size(self.tiled_mma.shape_mnk, mode=[2]) == 0, "WGMMA K differs from _plan"
        self.a_staged = sm90_utils.make_smem_layout_a(self.a_layout, self.tile_mnk, self.ab_dtype, self.ab_stage)
        self.b_staged = sm90_utils.make_smem_layout_b(self.b_layout, self.tile_mnk, self.b_dtype, self.ab_stage)
        self.c_staged = sm90_utils.make_smem_layout_epi(self.c_dtype, self.layout, self.epi_tile, self.epi_stage)
        for staged, elems in ((self.a_staged, self.a_elems), (self.b_staged, self.b_elems),
                              (self.c_staged, self.c_elems)):
            assert cute.cosize(staged) == elems, "an SMEM layout's size differs from _plan"

    # -------------------------------------------------------------- tile scheduling (device)
    def grid_setup(self, tiles_m, tiles_n, splits=1):
        """Work decomposition (device values in the kernel, ints in tests): clusters of cm x cn
        tiles, ``splits`` K shares of each, ``tiles_per_unit`` items per unit, one unit per CTA of a cluster."""
        cm, cn = self.cluster_mn
        self.tiles_m, self.tiles_n, self.splits = tiles_m, tiles_n, splits
        self.ctiles_m = (tiles_m + cm - 1) // cm if cm > 1 else tiles_m
        self.ctiles_n = (tiles_n + cn - 1) // cn if cn > 1 else tiles_n
        self.num_ctiles = self.ctiles_m * self.ctiles_n
        self.num_items = self.num_ctiles * splits if self.split_k else self.num_ctiles
        self.num_units = (self.num_items + self.tiles_per_unit - 1) // self.tiles_per_unit * (cm * cn)

    def unit_tile(self, unit, which=0):
        """(m, n, split) of a work unit. Unit u is CTA u % (cm * cn) of the cluster's item
        u // (cm * cn) (cooperative) or of its items 2 * that + which (pingpong); item v is
        cluster tile v % cluster tiles of K share v // cluster tiles (split-K; else share 0);
        cluster tiles are rasterized in groups: ``group`` of them along the raster's minor
        dimension share one strip of the other operand in L2. A CTA's rank in its cluster is
        blockIdx.x % (cm * cn): the grid and its stride are multiples of the cluster size."""
        cm, cn = self.cluster_mn
        csize = cm * cn
        v, rank = (unit // csize, unit % csize) if csize > 1 else (unit, 0)
        if self.tiles_per_unit > 1:
            # an odd item count: the last unit's second warp group recomputes the last tile (the
            # same bytes are stored twice) rather than skip it, so every unit runs both mainloops
            v = cutlass.min(v * 2 + which, self.num_items - 1)
        t, split = v, 0
        if self.stream_k:
            t = self.sk_unit(unit)[0]
        if self.split_k:
            t, split = v % self.num_ctiles, v // self.num_ctiles
        m, n = self._raster(t)
        if csize > 1:  # past the edge when the tile count is not a multiple: TMA zero-fills and clips
            m, n = m * cm + rank % cm, n * cn + rank // cm
        return m, n, split

    def sk_unit(self, unit):
        """Stream-K: (tile, first K tile, K tiles, workspace slot) of this CTA's unit (the static
        queue hands CTA b the indices b, b + grid, ...: unit j is index b + j * grid)."""
        return self.sk_plan.unit(self.sk_cta, (unit - self.sk_cta) // self.sk_plan.ctas)

    def unit_k(self, unit):
        """(first K tile, K tiles) of a work unit: every K tile, a split's share, or stream-K's range."""
        if self.stream_k:
            return self.sk_unit(unit)[1:3]
        return self.k_range(self.unit_tile(unit)[2])

    def k_range(self, split):
        """(first K tile, K tiles) of a split: an even share of k_tiles (every share >= 1 while
        splits <= k_tiles, which the host ensures)."""
        if not self.split_k:
            return 0, self.k_tiles
        first = split * self.k_tiles // self.splits
        return first, (split + 1) * self.k_tiles // self.splits - first

    def _raster(self, t):
        major, minor = (self.ctiles_n, self.ctiles_m) if self.raster == "m" else (self.ctiles_m, self.ctiles_n)
        per_group = self.group * major
        first = (t // per_group) * self.group
        size = cutlass.min(minor - first, self.group)
        a = first + (t % per_group) % size
        b = (t % per_group) // size
        return (a, b) if self.raster == "m" else (b, a)

    def _tiles_m(self, mC, splits):
        bM = self.tile_mnk[0]
        if self.split_k and not self.serial:  # the workspace has splits x tiles_m x bM rows
            return cute.size(mC, mode=[0]) // (splits * bM)
        if self.batched:  # the L products' M tiles, one after another
            return cute.ceil_div(cute.size(mC, mode=[0]), bM) * cute.size(mC, mode=[2])
        return cute.ceil_div(cute.size(mC, mode=[0]), bM)

    def batch_coord(self, m):
        """(M tile within its product, product index) of a work tile's M coordinate (batched: one
        M range of L x tiles_m tiles; else (m, 0))."""
        if cutlass.const_expr(self.batched):
            return m % self.tiles_m_one, m // self.tiles_m_one
        return m, 0

    def batch_slice(self, t, l):
        """Product ``l`` of an (X, Y, L) tensor as an (X, Y) one; the tensor itself unless batched."""
        if cutlass.const_expr(self.batched):
            return t[(None, None, l)]
        return t

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, splits: cutlass.Int32,
                 alpha: cutlass.Float32, stream, mW: Optional[cute.Tensor] = None,
                 mF: Optional[cute.Tensor] = None, mScaleA: Optional[cute.Tensor] = None,
                 mScaleB: Optional[cute.Tensor] = None, mBias: Optional[cute.Tensor] = None,
                 mRes: Optional[cute.Tensor] = None, mAux: Optional[cute.Tensor] = None):
        """``mC``: C, or with host-reduced split-K the fp32 workspace of ``splits`` x ceil(M / bM) * bM
        rows. ``alpha``: the fp8 kernels' output scale (scale_a * scale_b); unused otherwise.
        In-kernel split-K: ``mW`` one fp32 tile per output tile (tile-padded M x N; parallel:
        ``splits - 1`` such slabs, stacked along M), ``mF`` one int32 flag per output tile, zero
        before the launch (the kernel leaves them zero). ``mScaleA`` / ``mScaleB`` (``device_scale``):
        one-element fp32 tensors; the output scale is alpha * scale_a[0] * scale_b[0]. ``mBias`` (N,) /
        ``mRes`` (M, N): the fused epilogue's bias and residual (gemm_epilogue); ``mAux`` (M, N / 2): swiglu_keep's h."""
        self._setup()
        bM, bN, bK = self.tile_mnk
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        cm, cn = self.cluster_mn
        a_op = g2s if cn == 1 else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()  # A shared along N
        b_op = g2s if cm == 1 else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()  # B shared along M
        tma_a, tA = cute.nvgpu.cpasync.make_tiled_tma_atom(a_op, mA, cute.slice_(self.a_staged, (None, None, 0)),
                                                           (bM, bK), num_multicast=cn)
        tma_b, tB = cute.nvgpu.cpasync.make_tiled_tma_atom(b_op, mB, cute.slice_(self.b_staged, (None, None, 0)),
                                                           (bN, bK), num_multicast=cm)
        tma_c, tC = cute.nvgpu.cpasync.make_tiled_tma_atom(cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mC,
                                                           cute.slice_(self.c_staged, (None, None, 0)), self.epi_tile)
        self.grid_setup(self._tiles_m(mC, splits), cute.ceil_div(cute.size(mC, mode=[1]), self.out_n), splits)
        units = self.num_units
        if cutlass.const_expr(self.stream_k):  # gemm.streamk.ctas_for: one CTA per K iteration at most
            units = self.num_units * cute.ceil_div(cute.size(mA, mode=[1]), bK)
        grid = cutlass.min(units, self.max_ctas // (cm * cn) * (cm * cn))  # whole clusters
        kern = self.kernel(tma_a, tA, tma_b, tB, tma_c, tC, self.tiled_mma, self.a_staged, self.b_staged,
                           self.c_staged, splits, alpha, mW, mF, mScaleA, mScaleB, mBias, mRes, mAux)
        if cutlass.const_expr(cm * cn > 1):
            kern.launch(grid=[grid, 1, 1], block=[self.threads, 1, 1], cluster=[cm * cn, 1, 1], min_blocks_per_mp=1,
                        stream=stream, use_pdl=self.pdl)
        else:
            kern.launch(grid=[grid, 1, 1], block=[self.threads, 1, 1], min_blocks_per_mp=1, stream=stream,
                        use_pdl=self.pdl)

    def smem_a(self, ring):
        return self._view(self.alloc_a[ring], self.a_staged_k)

    def smem_b(self, ring):
        return self._view(self.alloc_b[ring], self.b_staged_k)

    def smem_c(self, which):
        return self._view(self.alloc_c[which], self.c_staged_k)

    def _view(self, alloc, composed):
        ptr = cute.recast_ptr(self.allocator.get(alloc), composed.inner, dtype=alloc.dtype)
        return cute.make_tensor(ptr, composed.outer)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma, a_staged: cute.ComposedLayout,
               b_staged: cute.ComposedLayout, c_staged: cute.ComposedLayout, splits: cutlass.Int32,
               alpha: cutlass.Float32, mW: Optional[cute.Tensor], mF: Optional[cute.Tensor],
               mScaleA: Optional[cute.Tensor], mScaleB: Optional[cute.Tensor], mBias: Optional[cute.Tensor],
               mRes: Optional[cute.Tensor], mAux: Optional[cute.Tensor]):
        bM, bN, bK = self.tile_mnk
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)
        self.grid_setup(self._tiles_m(mC, splits), cute.ceil_div(cute.size(mC, mode=[1]), self.out_n),
                        splits if cutlass.const_expr(self.split_k) else 1)
        self.k_tiles = cute.ceil_div(cute.size(mA, mode=[1]), bK)
        self.tiles_m_one = cute.ceil_div(cute.size(mC, mode=[0]), bM)  # per product (batched)
        if cutlass.const_expr(self.clustered):
            cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
            self.cluster_coord = cta_layout_mnk.get_flat_coord(rank)
            self.a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, self.cluster_coord, mode=1)
            self.b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, self.cluster_coord, mode=0)
        bid, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        self.mA, self.mB, self.mC = mA, mB, mC
        self.alpha = alpha
        if cutlass.const_expr(self.device_scale):
            self.alpha = alpha * mScaleA[0] * mScaleB[0]
        self.mW, self.mF = mW, mF
        self.mBias, self.mRes, self.mAux = mBias, mRes, mAux
        self.tma_a, self.tma_b, self.tma_c, self.tiled_mma = tma_a, tma_b, tma_c, tiled_mma
        # the mainloop's two MMA objects have a fixed ACCUMULATE field; the epilogue gets its own copy
        self.epi_tiled_mma = self._make_tiled_mma()
        # the fragment the epilogue stores: the accumulator's layout, or SwiGLU's half-width one
        self.out_mma = self._make_tiled_mma(self.out_n) if cutlass.const_expr(self.epi.swiglu) else self.epi_tiled_mma
        self.swiglu_pairs = gemm_epilogue.swiglu_pairs(self) if cutlass.const_expr(self.epi.swiglu or self.epi.keep) \
            else None
        self.mma_overwrite = self._make_tiled_mma()
        self.mma_overwrite.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        self.a_staged_k, self.b_staged_k, self.c_staged_k = a_staged, b_staged, c_staged
        units_here = (self.num_units - bid + grid - 1) // grid  # >= 1: the grid never exceeds the units
        if cutlass.const_expr(self.stream_k):
            self.sk_plan = StreamKPlan(self.num_ctiles, self.k_tiles, grid, cutlass.min, cutlass.max)
            self.sk_cta = bid
            units_here = self.sk_plan.units(bid)  # >= 1 (gemm.streamk)
            # the static queue visits bid, bid + grid, ... below num_units: exactly this CTA's units
            self.num_units = bid + units_here * grid
        mgr = build(self, k_tiles=self.k_tiles, units_per_cta=units_here, verbose=False)  # checked while tracing
        self.checked = _host.checked(mgr)  # the verdict its compile reports (gemm.launch.VERDICT_OF)
        mgr.setup_resources_and_tasks()
        mgr.run()

