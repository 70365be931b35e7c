"""The persistent GEMM's host side: argument validation, the compile cache, split-K's workspace,
``gemm()``, and on the CPU the compile and the program (``build``) that the tests and
``warpsched check`` use."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .. import _host
from . import program as gemm_program
from .config import MAX_AUTO_STAGES, SCHEDULES, GemmConfigError, check_stream_k, cluster_of, tile_of
from .kernel import PersistentGemm
from .launch import (_CACHE, FP8_DTYPES, VERDICT_OF, GemmPlan, _kernel, compiled, compiled_ffi,  # noqa: F401
                     cutlass_dtype, fake_epilogue, fake_operands, fake_workspace, key, max_ctas, scale_tensors,
                     to_cute, trailing)

_TORCH_DTYPES = ("bfloat16", "float16")


def _dtype_name(t):
    return str(t.dtype).split(".")[-1]


def check_args(a, b, c):
    """Shape / dtype / layout validation with the reason and the fix in the message."""
    fp8 = _dtype_name(a) in FP8_DTYPES
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.dim() != 2:
            raise GemmConfigError(f"{name} has {t.dim()} dimensions; gemm takes 2-D tensors (a: MxK, b: NxK, c: MxN)")
        if not t.is_cuda:
            raise GemmConfigError(f"{name} is on {t.device}; move it to the GPU")
        allowed = FP8_DTYPES if fp8 and name != "c" else _TORCH_DTYPES
        if _dtype_name(t) not in allowed:
            if fp8:
                raise GemmConfigError(f"{name} is {t.dtype}; with fp8 a, b must be torch.float8_e4m3fn or "
                                      "torch.float8_e5m2 and c torch.bfloat16 or torch.float16")
            raise GemmConfigError(f"{name} is {t.dtype}; supported: torch.bfloat16, torch.float16 (or fp8 a and b: "
                                  "torch.float8_e4m3fn, torch.float8_e5m2)")
        # M- / N-major A / B (16-bit), or a column-major C (a swap-AB GEMM writes C^T)
        transposed = (name == "c" or not fp8) and t.stride(0) == 1 and t.stride(1) != 1
        if t.stride(1) != 1 and not transposed:
            also = (" (or column-major: a swap-AB GEMM's C^T)" if name == "c" else
                    "" if fp8 else " (a 16-bit a / b may also be column-major)")
            raise GemmConfigError(f"{name} must be row-major with unit column stride (got strides {t.stride()}); "
                                  f"pass {name}.contiguous(){also}")
        lead = t.stride(1) if transposed else t.stride(0)
        if (lead * t.element_size()) % 16 or t.data_ptr() % 16:
            raise GemmConfigError(f"{name}: TMA needs a 16-byte aligned base and leading stride ({lead} elements); "
                                  "K and N must be multiples of 8 (fp8: K of 16), and M too for a column-major a")
    M, K = a.shape
    N, K2 = b.shape
    if K2 != K or tuple(c.shape) != (M, N):
        raise GemmConfigError(f"shapes a{tuple(a.shape)} b{tuple(b.shape)} c{tuple(c.shape)}: expected a: MxK, "
                              "b: NxK (c = a @ b.T), c: MxN")
    if a.dtype != b.dtype and not fp8:
        raise GemmConfigError(f"a is {a.dtype} but b is {b.dtype}; use one input dtype")
    k_align = 8 if a.dtype == b.dtype else 16  # what the compiled kernels declare (fake_operands)
    if K % k_align or (N % 8 and c.stride(1) == 1):  # a column-major C's N (B's rows) is free
        bad = f"K = {K} is not a multiple of {k_align}" if K % k_align else f"N = {N} is not a multiple of 8"
        raise GemmConfigError(f"shapes a{tuple(a.shape)} b{tuple(b.shape)}: {bad} (TMA moves 16-byte rows: K a "
                              f"multiple of {k_align} for these dtypes, N of 8); pad it with zeros "
                              "(zero K columns of a and b add nothing; zero rows of b give columns to drop)")


IN_KERNEL = ("serial", "parallel", "atomic")  # split-K reduced inside the kernel (one launch)
_WORKSPACE = {}


def verdict_for(a, c, split_k=1, **options):
    """The checker verdict of the kernel gemm() compiled for these dtypes and options."""
    if split_k == "stream":
        return VERDICT_OF.get(key(a.dtype, c.dtype, {**options, "stream_k": True}))
    if split_k != 1 and options.get("split_reduce") in IN_KERNEL:
        return VERDICT_OF.get(key(a.dtype, c.dtype, {**options, "split_k": True}))
    if split_k != 1:
        import torch

        return VERDICT_OF.get(key(a.dtype, torch.float32, {**options, "split_k": True}))
    return VERDICT_OF.get(key(a.dtype, c.dtype, options))


def choose_splits(M, N, K, tile_mn, sms, bK=64):
    """split_k="auto": split K only when the output tiles fill less than half the SMs; then as
    many splits as fill the SMs, at most 16 and at most one per 4 K tiles (``bK``: 64, fp8 128)."""
    tiles = -(-M // tile_mn[0]) * -(-N // tile_mn[1])
    k_tiles = -(-K // bK)
    if 2 * tiles > sms:
        return 1
    return max(1, min(16, sms // tiles, k_tiles // 4))


def plan(a, b, c, schedule="cooperative", split_k="auto", split_reduce="host", device_scale=False,
         **tile_options) -> GemmPlan:
    """The launch plan gemm() runs for these tensors' shapes and dtypes (see gemm()): the split
    count resolved, the kernel compiled, the workspace allocated. Requires M, N, K >= 1.
    ``tile_options`` may hold the fused epilogue's (bias, activation, residual, scale_out:
    PersistentGemm); with one, a K split is reduced in the kernel ('parallel' for 'host')."""
    if schedule not in SCHEDULES:
        raise GemmConfigError(f"schedule={schedule!r}: expected one of {SCHEDULES}")
    tile_options = {k: tuple(v) if isinstance(v, list) else v for k, v in tile_options.items()}
    if "cluster_mn" in tile_options:
        tile_options["cluster_mn"] = cluster_of(tile_options["cluster_mn"])
    fp8 = _dtype_name(a) in FP8_DTYPES
    if fp8 and b.dtype != a.dtype:
        tile_options["b_dtype"] = b.dtype  # part of the compile key (the MMA and B's SMEM type)
    if device_scale:
        tile_options["device_scale"] = True
    if a.stride(1) != 1:  # a transposed operand (check_args allows it for 16-bit types)
        tile_options["a_major"] = "m"
    if b.stride(1) != 1:
        tile_options["b_major"] = "n"
    if c.stride(1) != 1:  # column-major C (check_args allows it): a plain GEMM, K split only in the kernel
        tile_options["c_major"] = "m"
        if split_reduce == "host":
            split_k = 1 if split_k == "auto" else split_k
    M, K = a.shape
    N = b.shape[0]
    bK = tile_options.get("block_k") or (128 if fp8 else 64)
    tile_mn = tile_of(tile_options.get("tile_mn"), schedule)
    bM, bN = tile_mn
    if split_k == "auto":
        splittable = schedule == "cooperative" and tile_options.get("cluster_mn", (1, 1)) == (1, 1)
        split_k = choose_splits(M, N, K, tile_mn, _host.num_sms(), bK) if splittable else 1
    options = dict(schedule=schedule, **tile_options)
    tiles = -(-M // bM) * -(-N // bN)
    if split_k == "stream":
        check_stream_k(schedule, split_reduce, tile_options.get("cluster_mn", (1, 1)))
        # one CTA per K iteration at most (gemm.streamk.ctas_for): fewer tiles than SMs still fill them
        ctas = options["max_ctas"] = resident_ctas(a, c, dict(options, stream_k=True), tiles * -(-K // bK),
                                                   "split_k='stream'")
        slots = 2 * ctas
        if slots * -(-K // bK) * ctas >= 2 ** 31:  # the partition's device arithmetic is 32-bit
            raise GemmConfigError(f"split_k='stream': K = {K} ({-(-K // bK)} K tiles) is too long for stream-K's "
                                  f"32-bit partition on {ctas} CTAs; use split_k='auto' or 1")
        ws, flags = _workspace(("stream", a.device, bM, bN, slots), (slots * bM, bN), slots, True, a.device)
        return GemmPlan(a.dtype, c.dtype, dict(options, stream_k=True), 1, "flags", ws, flags)
    if not isinstance(split_k, int) or split_k < 1 or split_k > -(-K // bK):
        raise GemmConfigError(f"split_k={split_k!r}: expected 'auto', 'stream' or an int in [1, ceil(K / {bK}) = "
                              f"{-(-K // bK)}]")
    k_tiles = -(-K // bK)
    if options.get("k_tiles_min", 1) > k_tiles:
        raise GemmConfigError(f"k_tiles_min={options['k_tiles_min']} with K = {K} ({k_tiles} K tiles of {bK}): the "
                              "kernel is proven for K loops at least that long; lower k_tiles_min or drop it")
    if split_k == 1:
        return GemmPlan(a.dtype, c.dtype, deep_ring(options, a.dtype, c.dtype, k_tiles), 1)
    if split_reduce == "host" and any(tile_options.get(k) for k in ("bias", "activation", "residual", "scale_out")):
        split_reduce = "parallel"  # a fused epilogue needs the summed tile in the kernel (gemm.epilogue)
    rows = -(-M // bM) * bM
    if split_reduce == "serial":  # a share waits for the one before it, maybe in a later CTA
        options["max_ctas"] = resident_ctas(a, c, dict(options, split_k=True, split_reduce="serial"), tiles * split_k,
                                            f"split_k={split_k}, split_reduce='serial'")
    if split_reduce in IN_KERNEL:
        # the shares of a tile reduce in an fp32 tile workspace (parallel: one slab per share but the
        # last; atomic: zeroed), ordered by per-tile flags; the kernel leaves flags (and the atomic
        # workspace) zero again, so launches that share them must be on one stream; the flag count is
        # part of the key: two tiles that pad M x N alike (128x256 and 128x128 at N = 3000) need
        # different counts, and a plan handed the other's shorter flag array would index past its end
        cols = -(-N // bN) * bN
        slabs = split_k - 1 if split_reduce == "parallel" else 1
        n_flags = (rows // bM) * (cols // bN)
        ws, flags = _workspace((split_reduce, a.device, rows, cols, slabs, n_flags), (slabs * rows, cols), n_flags,
                               split_reduce == "atomic", a.device)
        return GemmPlan(a.dtype, c.dtype, dict(options, split_k=True, split_reduce=split_reduce), split_k, "flags",
                        ws, flags)
    if split_reduce != "host":
        raise GemmConfigError(f"split_reduce={split_reduce!r}: expected 'host', 'serial', 'parallel' or 'atomic'")
    import torch

    wkey = (a.device, split_k, rows, M, N)
    if wkey not in _WORKSPACE:
        _WORKSPACE[wkey] = (torch.empty(split_k * rows, N, device=a.device, dtype=torch.float32),
                            torch.empty(M, N, device=a.device, dtype=torch.float32))
    ws, total = _WORKSPACE[wkey]
    return GemmPlan(a.dtype, c.dtype, dict(options, split_k=True), split_k, "host", ws, total=total, rows=rows)


def deep_ring(options, a_dtype, c_dtype, k_tiles):
    """``options`` with ``k_tiles_min`` set when the tile's SMEM holds a ring deeper than the default 8
    stages and K is long enough to fill one: the deepest of 12, 16 and the SMEM fit that K reaches (a
    few depths, so a few compiled kernels per configuration). The kernel then runs that ring, and its
    proof covers K loops at least that long. A configuration that names its depth, or a K of fewer than
    12 tiles (the 8-stage ring holds two thirds of its loop), keeps its options."""
    if not takes_deep_ring(options):
        return options
    depths = deep_ring_depths(_kernel(a_dtype, c_dtype, {**options, "max_ctas": 1}).ring_fit)  # nothing traced
    reached = [d for d in depths if d <= k_tiles]
    return dict(options, k_tiles_min=reached[-1]) if reached else options


def takes_deep_ring(options):
    """Whether a configuration gets a deeper ring for a long K: one K loop per tile (no K split, not
    batched) and no depth of its own."""
    return not ("ab_stages" in options or "k_tiles_min" in options
                or any(options.get(k) for k in ("split_k", "stream_k", "batched")))


def deep_ring_depths(fit):
    """The ring depths deeper than the default that a tile with SMEM for ``fit`` stages runs."""
    return [d for d in DEEP_RING_STEPS if MAX_AUTO_STAGES < d < fit] + ([fit] if fit > MAX_AUTO_STAGES else [])


DEEP_RING_STEPS = (12, 16)


def resident_ctas(a, c, options, units, what):
    """The persistent grid bound of a kernel whose CTAs wait for each other (stream-K, serial
    split-K): the caller's ``max_ctas`` if all of the grid it gives fits on a's device at once
    (``residency.CoResidencyError`` if not), else one CTA per SM as far as that device holds them at
    once. It becomes part of the compile key, so each device gets a grid it holds."""
    from . import residency

    cluster = cluster_of(options.get("cluster_mn", (1, 1)))
    size = cluster[0] * cluster[1]
    kern = _kernel(a.dtype, c.dtype, {**options, "max_ctas": 1})  # resources only: nothing is traced
    occ = residency.device_occupancy(a.device)
    bound = residency.resident_bound(occ, kern.smem_bytes, kern.threads, size,
                                     max_ctas(cluster) // size if size > 1 else None)
    asked = options.get("max_ctas")
    if asked is None:  # one CTA per SM (whole clusters), as the other kernels, if the device holds that
        return min(max_ctas(cluster), bound)
    residency.check_coresident(f"gemm with {what}, max_ctas={asked}", min(asked, units), occ, kern.smem_bytes,
                               kern.threads, bound, f"pass max_ctas <= {bound} (or leave it out: the grid is then "
                               "sized to what the device holds), or split_reduce='parallel' / 'atomic', whose CTAs "
                               "never wait for each other")
    return asked


def _workspace(wkey, ws_shape, flags, zeroed, device):
    """An fp32 tile workspace of ``ws_shape`` (``zeroed``: allocated as zeros) and ``flags`` zeroed
    int32 flags, kept under ``wkey``."""
    import torch

    if wkey not in _WORKSPACE:
        alloc = torch.zeros if zeroed else torch.empty
        _WORKSPACE[wkey] = (alloc(*ws_shape, device=device, dtype=torch.float32),
                            torch.zeros(flags, device=device, dtype=torch.int32))
    return _WORKSPACE[wkey]


def gemm(a, b, c, schedule="cooperative", split_k="auto", alpha=1.0, split_reduce="host", scales=None,
         **tile_options):
    """c = alpha * a @ b.T (a: [M, K], b: [N, K], c: [M, N]; row-major; bf16 / fp16 in and out,
    or fp8 e4m3 / e5m2 in with bf16 / fp16 out and ``alpha`` = scale_a * scale_b).

    ``schedule``: "cooperative", "pingpong" (a ring per math warp group) or "pingpong_shared" (one
    ring both math warp groups release; no cluster). ``tile_options``: tile_mn, raster, group,
    cluster_mn, ab_stages, block_k, max_ctas (see PersistentGemm). ``split_k``: "auto" (split K only
    when the output tiles leave most SMs idle; cooperative without a cluster), 1, or a split
    count, or "stream" (stream-K, deterministic: whole tiles for all but the last 1 + fraction
    waves, whose K iterations are divided evenly among the persistent CTAs; a tile shared by two
    CTAs is handed from one CTA to the other through a workspace tile and a flag, see gemm.streamk).
    ``scales``: fp8 only, (scale_a, scale_b) as one-element fp32 CUDA tensors the kernel reads
    itself (no host sync; ``alpha`` multiplies them).
    ``split_reduce``: "host" (the kernel writes fp32 partial tiles of each K share into a
    workspace and torch sums them into c) or "serial" (the K shares of a tile add up in one fp32
    tile workspace in order, handed on by a per-tile GMEM flag; the last share stores c: one
    kernel), "parallel" (one fp32 slab per share, the last share sums them) or "atomic" (every
    share adds into one zeroed fp32 tile with red.global.add; the last to count on the tile's
    flag stores c and zeroes the tile). Returns a zero-argument relauncher."""
    check_args(a, b, c)
    fp8 = _dtype_name(a) in FP8_DTYPES
    if fp8:
        scales = scale_tensors(scales) if scales is not None else ()
    elif alpha != 1.0 or scales is not None:
        raise GemmConfigError(f"alpha={alpha}, scales: only the fp8 kernels scale (bf16 / fp16: scale the inputs)")
    else:
        scales = ()
    M, K = a.shape
    N = b.shape[0]
    if M == 0 or N == 0:
        return lambda: None
    if K == 0:
        c.zero_()
        return c.zero_
    p = plan(a, b, c, schedule, split_k, split_reduce, device_scale=bool(scales), **tile_options)
    p(a, b, c, alpha, scales)
    return lambda: p(a, b, c, alpha, scales)


def compile_for_cpu(arch="sm_90a", schedule="pingpong", ab_dtype=cutlass.BFloat16, c_dtype=cutlass.BFloat16,
                    **options):
    from cutlass.cute.runtime import make_fake_stream

    kern = PersistentGemm(schedule=schedule, ab_dtype=ab_dtype, c_dtype=c_dtype, **options)
    # split-K: C is the fp32 workspace. K aligned to 8 when A and B share a type (what the other
    # examples' fake operands declare, fp8 too), to 16 for mixed fp8
    a, b, c = fake_operands(ab_dtype, kern.b_dtype, kern.c_dtype, k_align=8 if kern.b_dtype is ab_dtype else 16,
                            a_major=kern.a_major, b_major=kern.b_major, batched=kern.batched,
                            c_cols_free=kern.epi.swiglu, c_major=kern.c_major)
    ws = (None, None)
    if kern.serial or kern.stream_k:  # the fp32 tile workspace and one int32 flag per tile
        ws = fake_workspace(cols_divisibility=64)
    extra = trailing(*ws, None, None, *fake_epilogue(kern))
    return cute.compile(kern, a, b, c, cutlass.Int32(1), cutlass.Float32(1.0), make_fake_stream(), *extra,
                        options=_host.ptx_options(arch))


# ------------------------------------------------------------------ the program on the CPU
def build(g=None, *, schedule=None, **options):
    """The program ``warpsched check`` and the tests check on the CPU: ``gemm_program.build`` (what
    the kernel runs while it is traced) of ``g``, a PersistentGemm, or of a default one for
    ``schedule`` (pingpong when None). ``options``: gemm_program.build's (k_tiles, units_per_cta,
    verbose) and TaskManager's."""
    if g is None:
        g = PersistentGemm(schedule=schedule or "pingpong")
    return gemm_program.build(g, schedule=schedule, **options)


def build_cooperative(verbose=True, **manager_options):
    return build(schedule="cooperative", verbose=verbose, **manager_options)


def build_pingpong(verbose=True, **manager_options):
    return build(schedule="pingpong", verbose=verbose, **manager_options)


def build_pingpong_shared(verbose=True, **manager_options):
    """``warpsched check examples/hopper/gemm_persistent.py:build_pingpong_shared``."""
    return build(schedule="pingpong_shared", verbose=verbose, **manager_options)


def build_split_k(verbose=True, **manager_options):
    return build(PersistentGemm(schedule="cooperative", split_k=True), verbose=verbose, **manager_options)


def build_stream_k(verbose=True, **manager_options):
    """``warpsched check examples/hopper/gemm_persistent.py:build_stream_k``."""
    return build(PersistentGemm(schedule="cooperative", stream_k=True), verbose=verbose, **manager_options)
