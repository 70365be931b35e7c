"""The persistent GEMM's host side: argument validation, the compile cache, split-K's workspace,
``gemm()``, and on the CPU the compile and the program (``build``) that the tests and
``warpsched check`` use."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from . import _host
from . import gemm_program
from .gemm_config import DEFAULT_TILES, SCHEDULES, GemmConfigError, check_stream_k
from .gemm_kernel import PersistentGemm


_CACHE = {}
_TORCH_DTYPES = ("bfloat16", "float16")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")


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
        if t.stride(1) != 1:
            raise GemmConfigError(f"{name} must be row-major with unit column stride (got strides {t.stride()}); "
                                  f"pass {name}.contiguous()")
        if (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            raise GemmConfigError(f"{name}: TMA needs a 16-byte aligned base and row stride (row stride "
                                  f"{t.stride(0)} elements); K and N must be multiples of 8 (fp8: K of 16)")
    M, K = a.shape
    N, K2 = b.shape
    if K2 != K or tuple(c.shape) != (M, N):
        raise GemmConfigError(f"shapes a{tuple(a.shape)} b{tuple(b.shape)} c{tuple(c.shape)}: expected a: MxK, "
                              "b: NxK (c = a @ b.T), c: MxN")
    if a.dtype != b.dtype and not fp8:
        raise GemmConfigError(f"a is {a.dtype} but b is {b.dtype}; use one input dtype")


VERDICT_OF = {}  # compile key -> the exhaustive checker's verdict on the program the trace checked
_WORKSPACE = {}
IN_KERNEL = ("serial", "parallel", "atomic")  # split-K reduced inside the kernel (one launch)


def _key(ab_dtype, c_dtype, options):
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return (ab_dtype, c_dtype, tuple(sorted(options.items())))


def cutlass_dtype(torch_dtype):
    name = str(torch_dtype).split(".")[-1]
    if name in FP8_DTYPES:
        return {"float8_e4m3fn": cutlass.Float8E4M3FN, "float8_e5m2": cutlass.Float8E5M2}[name]
    return _host.cutlass_dtype(torch_dtype)


def to_cute(t):
    """A row-major torch tensor as a CuTe tensor with a dynamic row stride (fp8 through a uint8
    view: DLPack has no fp8 type; the element type is set back on the CuTe side)."""
    if _dtype_name(t) in FP8_DTYPES:
        import torch

        from cutlass.cute.runtime import from_dlpack

        m = from_dlpack(t.view(torch.uint8), assumed_align=16)
        m.element_type = cutlass_dtype(t.dtype)
        return m.mark_layout_dynamic(leading_dim=1)
    return _host.to_cute(t, 1)


def compiled(ma, mb, mc, a, c, serial_args=(), **options):
    """The compiled kernel for these dtypes and options (compiled once per key; shapes are dynamic).
    ``serial_args``: the tile workspace and flags of serial split-K (compile-time examples)."""
    from warpsched.verify.verdicts import VERDICTS

    key = _key(a.dtype, c.dtype, options)
    if key not in _CACHE:
        opts = {k: cutlass_dtype(v) if k == "b_dtype" else v for k, v in options.items()}
        kern = PersistentGemm(ab_dtype=cutlass_dtype(a.dtype), c_dtype=cutlass_dtype(c.dtype),
                              **{"max_ctas": max_ctas(options.get("cluster_mn", (1, 1))), **opts})
        _CACHE[key] = cute.compile(kern, ma, mb, mc, cutlass.Int32(1), cutlass.Float32(1.0),
                                   _host.current_stream(), *serial_args, options=_host.ptx_options())
        checked = VERDICTS.get(VERDICTS.looked_up[-1]) if VERDICTS.looked_up else None
        VERDICT_OF[key] = getattr(checked, "verdict", "not checked")
    return _CACHE[key]


def verdict_for(a, c, split_k=1, **options):
    """The checker verdict of the kernel gemm() compiled for these dtypes and options."""
    if split_k == "stream":
        return VERDICT_OF.get(_key(a.dtype, c.dtype, {**options, "stream_k": True}))
    if split_k != 1 and options.get("split_reduce") in IN_KERNEL:
        return VERDICT_OF.get(_key(a.dtype, c.dtype, {**options, "split_k": True}))
    if split_k != 1:
        import torch

        return VERDICT_OF.get(_key(a.dtype, torch.float32, {**options, "split_k": True}))
    return VERDICT_OF.get(_key(a.dtype, c.dtype, options))


def max_ctas(cluster_mn=(1, 1)):
    """The persistent grid bound: every SM, or as many whole clusters as can be resident at once."""
    size = cluster_mn[0] * cluster_mn[1]
    if size == 1:
        return _host.num_sms()
    try:
        from cutlass.utils import HardwareInfo

        return size * HardwareInfo().get_max_active_clusters(size)
    except Exception:  # noqa: BLE001 - an older driver: assume every SM pairs up
        return _host.num_sms() // size * size


def choose_splits(M, N, K, tile_mn, sms, bK=64):
    """split_k="auto": split K only when the output tiles fill less than half the SMs; then as
    many splits as fill the SMs, at most 16 and at most one per 4 K tiles (``bK``: 64, fp8 128)."""
    tiles = -(-M // tile_mn[0]) * -(-N // tile_mn[1])
    k_tiles = -(-K // bK)
    if 2 * tiles > sms:
        return 1
    return max(1, min(16, sms // tiles, k_tiles // 4))


def gemm(a, b, c, schedule="cooperative", split_k="auto", alpha=1.0, split_reduce="host", **tile_options):
    """c = alpha * a @ b.T (a: [M, K], b: [N, K], c: [M, N]; row-major; bf16 / fp16 in and out,
    or fp8 e4m3 / e5m2 in with bf16 / fp16 out and ``alpha`` = scale_a * scale_b).

    ``schedule``: "cooperative", "pingpong" (a ring per math warp group) or "pingpong_shared" (one
    ring both math warp groups release; no cluster). ``tile_options``: tile_mn, raster, group,
    cluster_mn, ab_stages, block_k, max_ctas (see PersistentGemm). ``split_k``: "auto" (split K only
    when the output tiles leave most SMs idle; cooperative without a cluster), 1, or a split
    count, or "stream" (stream-K, deterministic: whole tiles for all but the last 1 + fraction
    waves, whose K iterations are divided evenly among the persistent CTAs; a tile shared by two
    CTAs is handed from one CTA to the other through a workspace tile and a flag, see gemm_streamk).
    ``split_reduce``: "host" (the kernel writes fp32 partial tiles of each K share into a
    workspace and torch sums them into c) or "serial" (the K shares of a tile add up in one fp32
    tile workspace in order, handed on by a per-tile GMEM flag; the last share stores c: one
    kernel), "parallel" (one fp32 slab per share, the last share sums them) or "atomic" (every
    share adds into one zeroed fp32 tile with red.global.add; the last to count on the tile's
    flag stores c and zeroes the tile). Returns a zero-argument relauncher."""
    if schedule not in SCHEDULES:
        raise GemmConfigError(f"schedule={schedule!r}: expected one of {SCHEDULES}")
    check_args(a, b, c)
    tile_options = {k: tuple(v) if isinstance(v, list) else v for k, v in tile_options.items()}
    fp8 = _dtype_name(a) in FP8_DTYPES
    if fp8:
        if b.dtype != a.dtype:
            tile_options["b_dtype"] = b.dtype  # part of the compile key (the MMA and B's SMEM type)
    elif alpha != 1.0:
        raise GemmConfigError(f"alpha={alpha}: only the fp8 kernels scale (bf16 / fp16: scale the inputs)")
    M, K = a.shape
    N = b.shape[0]
    bK = tile_options.get("block_k") or (128 if fp8 else 64)
    if M == 0 or N == 0:
        return lambda: None
    if K == 0:
        c.zero_()
        return c.zero_
    bM = tuple(tile_options.get("tile_mn") or DEFAULT_TILES[schedule])[0]
    if split_k == "auto":
        splittable = schedule == "cooperative" and tuple(tile_options.get("cluster_mn", (1, 1))) == (1, 1)
        split_k = choose_splits(M, N, K, tile_options.get("tile_mn") or DEFAULT_TILES[schedule],
                                _host.num_sms(), bK) if splittable else 1
    if split_k == "stream":
        return _stream_k(a, b, c, alpha, schedule, split_reduce, -(-K // bK), tile_options)
    if not isinstance(split_k, int) or split_k < 1 or split_k > -(-K // bK):
        raise GemmConfigError(f"split_k={split_k!r}: expected 'auto', 'stream' or an int in [1, ceil(K / {bK}) = "
                              f"{-(-K // bK)}]")
    ma, mb = to_cute(a), to_cute(b)
    stream = _host.current_stream()
    scale = cutlass.Float32(float(alpha))
    if split_k == 1:
        mc = to_cute(c)
        f = compiled(ma, mb, mc, a, c, schedule=schedule, **tile_options)
        f(ma, mb, mc, cutlass.Int32(1), scale, stream)
        return lambda: f(ma, mb, mc, cutlass.Int32(1), scale, stream)
    rows = -(-M // bM) * bM
    if split_reduce in IN_KERNEL:
        return _serial(a, b, c, ma, mb, stream, scale, split_k, rows, schedule, split_reduce, tile_options)
    if split_reduce != "host":
        raise GemmConfigError(f"split_reduce={split_reduce!r}: expected 'host', 'serial', 'parallel' or 'atomic'")
    import torch

    wkey = (a.device, split_k, rows, M, N)
    if wkey not in _WORKSPACE:
        _WORKSPACE[wkey] = (torch.empty(split_k * rows, N, device=a.device, dtype=torch.float32),
                            torch.empty(M, N, device=a.device, dtype=torch.float32))
    ws, total = _WORKSPACE[wkey]
    mw = to_cute(ws)
    f = compiled(ma, mb, mw, a, ws, schedule=schedule, split_k=True, **tile_options)

    def run():
        f(ma, mb, mw, cutlass.Int32(split_k), scale, stream)  # fp8: each partial tile already scaled
        torch.sum(ws.view(split_k, rows, N)[:, :M], dim=0, out=total)  # fp32 sum of the partial tiles ...
        c.copy_(total)  # ... rounded once into c

    run()
    return run


def _serial(a, b, c, ma, mb, stream, scale, split_k, rows, schedule, mode, tile_options):
    """In-kernel split-K (``mode`` "serial", "parallel" or "atomic"): one launch; the fp32 tile
    workspace (parallel: one slab per share but the last; atomic: zeroed) and the zeroed flags
    are kept per shape (the kernel leaves the flags, and the atomic workspace, zero again;
    launches that share them must be on one stream)."""
    bM, bN = tuple(tile_options.get("tile_mn") or DEFAULT_TILES[schedule])
    cols = -(-b.shape[0] // bN) * bN
    slabs = split_k - 1 if mode == "parallel" else 1
    return _flagged_launch(a, c, ma, mb, stream, scale, split_k, (mode, a.device, rows, cols, slabs),
                           (slabs * rows, cols), (rows // bM) * (cols // bN), mode == "atomic",
                           schedule=schedule, split_k=True, split_reduce=mode, **tile_options)


def _stream_k(a, b, c, alpha, schedule, split_reduce, k_tiles, tile_options):
    """Stream-K (``split_k="stream"``): one launch over min(tiles, SMs) CTAs. The fp32 workspace
    has one tile per stream-K tile (fewer than 2 x the grid) for a shared tile's partial sum, with
    one zeroed int32 flag each; the kernel leaves the flags zero again (launches sharing them: one
    stream)."""
    check_stream_k(schedule, split_reduce, tile_options.get("cluster_mn", (1, 1)))
    bM, bN = tuple(tile_options.get("tile_mn") or DEFAULT_TILES[schedule])
    ctas = tile_options.get("max_ctas") or max_ctas()
    slots = 2 * ctas
    if slots * k_tiles * ctas >= 2 ** 31:  # the partition's device arithmetic is 32-bit
        raise GemmConfigError(f"split_k='stream': K = {a.shape[1]} ({k_tiles} K tiles) is too long for stream-K's "
                              f"32-bit partition on {ctas} CTAs; use split_k='auto' or 1")
    return _flagged_launch(a, c, to_cute(a), to_cute(b), _host.current_stream(), cutlass.Float32(float(alpha)), 1,
                           ("stream", a.device, bM, bN, slots), (slots * bM, bN), slots, True, schedule=schedule,
                           stream_k=True, **tile_options)


def _flagged_launch(a, c, ma, mb, stream, scale, splits, wkey, ws_shape, flags, zeroed, **options):
    """Compile, launch once and return the relauncher of a kernel that reduces in the kernel through
    an fp32 tile workspace of ``ws_shape`` (``zeroed``: allocated as zeros) and ``flags`` zeroed
    int32 flags, both kept under ``wkey`` (in-kernel split-K and stream-K)."""
    import torch

    if wkey not in _WORKSPACE:
        alloc = torch.zeros if zeroed else torch.empty
        _WORKSPACE[wkey] = (alloc(*ws_shape, device=a.device, dtype=torch.float32),
                            torch.zeros(flags, device=a.device, dtype=torch.int32))
    ws, flag_words = _WORKSPACE[wkey]
    mc, mw, mf = to_cute(c), _host.to_cute(ws, 1), _host.to_cute(flag_words, 0)
    f = compiled(ma, mb, mc, a, c, serial_args=(mw, mf), **options)

    def run():
        f(ma, mb, mc, cutlass.Int32(splits), scale, stream, mw, mf)

    run()
    return run


def fake_operands(ab_dtype, b_dtype, c_dtype, k_align=16):
    """Fake row-major A (M x K), B (N x K), C (M x N) for CPU compiles, A and B of their own types:
    M any, N a multiple of 8, K and the (symbolic) leading strides multiples of ``k_align``."""
    from cutlass.cute.runtime import make_fake_tensor

    M, N, K = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=k_align)

    def rows(dtype, shape):
        return make_fake_tensor(dtype, shape, (cute.sym_int64(divisibility=k_align), 1), assumed_align=16)

    return rows(ab_dtype, (M, K)), rows(b_dtype, (N, K)), rows(c_dtype, (M, N))


def compile_for_cpu(arch="sm_90a", schedule="pingpong", ab_dtype=cutlass.BFloat16, c_dtype=cutlass.BFloat16,
                    **options):
    from cutlass.cute.runtime import make_fake_stream

    kern = PersistentGemm(schedule=schedule, ab_dtype=ab_dtype, c_dtype=c_dtype, **options)
    # split-K: C is the fp32 workspace. K aligned to 8 when A and B share a type (what the other
    # examples' fake operands declare, fp8 too), to 16 for mixed fp8
    a, b, c = fake_operands(ab_dtype, kern.b_dtype, kern.c_dtype, k_align=8 if kern.b_dtype is ab_dtype else 16)
    extra = ()
    if kern.serial or kern.stream_k:  # the fp32 tile workspace and one int32 flag per tile
        from cutlass.cute.runtime import make_fake_tensor

        extra = (make_fake_tensor(cutlass.Float32, (cute.sym_int32(), cute.sym_int32(divisibility=64)),
                                  (cute.sym_int64(divisibility=64), 1), assumed_align=16),
                 make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=16))
    return cute.compile(kern, a, b, c, cutlass.Int32(1), cutlass.Float32(1.0), make_fake_stream(), *extra,
                        options=_host.ptx_options(arch))


# ------------------------------------------------------------------ the program on the CPU
def build(g=None, *, schedule=None, **options):
    """The program ``warpsched check`` and the tests check on the CPU: ``gemm_program.build`` (what
    the kernel runs while it is traced) of ``g``, a PersistentGemm, or of a default one for
    ``schedule`` (pingpong when None). ``options``: gemm_program.build's (k_tiles, units_per_cta,
    turns, verbose) and TaskManager's."""
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
