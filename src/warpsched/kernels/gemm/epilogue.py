"""The persistent GEMM's fused epilogue: what the math warp groups compute on the fp32 accumulator
between the mainloop (and, with in-kernel split-K, the reduction of the K shares) and the
registers -> SMEM -> TMA store of ``GmemC.store_tile``.

Order of operations (one element, fp32 throughout, rounded once to the output type)::

    x = alpha * acc            # alpha: the fp8 scales (scale_a * scale_b) times the caller's alpha
    x = x + bias[col]          # bias: per output column (per row of B), output dtype or fp32
    x = act(x)                 # relu, relu2 (relu squared), gelu (erf), gelu_tanh, silu, or your function
    d = x + residual[row, col] # residual: a tensor of the output's shape and dtype
    D = round(d)

``activation="swiglu"``: B holds the gate and up projections interleaved in blocks of 8 rows (8
gate rows, then the same 8 up rows, ...: ``gemm.ops.interleave_gate_up``), so a WGMMA thread holds
each gate column and its up column in its own registers (the accumulator gives a thread two
adjacent columns of every 8-column chunk): no data moves between threads. The output tile is half
as wide as the MMA tile and holds silu(gate + bias_g) * (up + bias_u), then the residual is added.
The bias of a SwiGLU GEMM has B's rows (2 N, interleaved the same way).

``activation="swiglu_keep"``: the same interleaved B, for training: C keeps the pre-activation z = alpha * acc +
bias (the full MMA tile, the plain kernel's TMA stores: what the backward's dz needs) and h = silu(gate) * up,
computed from z in fp32 as "swiglu" computes it, goes to a second tensor H (M, N / 2) straight from the
registers as predicated global stores. One GEMM then replaces a GEMM and the elementwise SwiGLU kernel, which
read z back from memory. No residual (h is the layer's output, z the saved value).

``activation`` may also be a function of one fp32 value, traced into the kernel like attention's
``mask_mod``: the extension point for an epilogue the names above do not cover, e.g. ``lambda x: x *
cute.arch.fmin(cute.arch.fmax(x + 3.0, 0.0), 6.0) / 6.0`` (hard swish). It receives and returns a
CuTe DSL Float32; the compiled kernel is cached per function object.

Bias and residual are read from global memory straight into registers (L2-resident per tile,
indices clamped to the tensor so no load is predicated off), so the epilogue adds no SMEM buffer
and no synchronization: the program the checker proves (the SMEM staging ring and its TMA store)
is the plain GEMM's. Everything here is elementwise Python that runs while the kernel is traced."""
from __future__ import annotations

import math

from .config import GemmConfigError

ACTIVATIONS = (None, "relu", "relu2", "gelu", "gelu_tanh", "silu", "swiglu", "swiglu_keep")
BIAS_KINDS = (None, "c", "f32")  # the output's dtype, or fp32


class EpilogueSpec:
    """The static epilogue configuration of a PersistentGemm (part of the compile key)."""

    def __init__(self, bias=None, activation=None, residual=False, scale_out=False):
        if bias not in BIAS_KINDS:
            raise GemmConfigError(f"bias={bias!r}: expected None, 'c' (the output's dtype) or 'f32'")
        if not (activation in ACTIVATIONS or callable(activation)):
            raise GemmConfigError(f"activation={activation!r}: expected one of {list(ACTIVATIONS)} or a function of "
                                  "one fp32 value (traced into the kernel)")
        self.bias, self.activation, self.residual, self.scale_out = bias, activation, bool(residual), bool(scale_out)
        self.swiglu = activation == "swiglu"
        self.keep = activation == "swiglu_keep"  # C = z (full width), h to the aux tensor
        self.fused = bias is not None or activation is not None or self.residual or self.scale_out

    def describe(self):
        act = getattr(self.activation, "__name__", self.activation)
        parts = ([f"bias {self.bias}"] if self.bias else []) + ([act] if act else []) + (
            ["residual"] if self.residual else []) + (["alpha"] if self.scale_out else [])
        return (" epi " + "+".join(parts)) if parts else ""


def check_kernel(spec, host_split, tile_n, epi_n, batched=False):
    """The combinations a fused epilogue cannot run in (GemmConfigError naming the fix)."""
    if spec.keep and (spec.residual or batched or tile_n % 16):
        raise GemmConfigError(f"activation='swiglu_keep' with residual={spec.residual}, batched={batched}, "
                              f"tile_mn[1]={tile_n}: it stores z and h of one 2-D product whose tile holds whole "
                              "16-column gate / up blocks; drop the residual and the batch, or use 'swiglu'")
    if spec.fused and host_split:
        raise GemmConfigError("a fused epilogue with split_reduce='host': the kernel writes fp32 partial tiles that "
                              "torch sums, so there is no tile to finish; use split_reduce='serial', 'parallel' or "
                              "'atomic' (reduced in the kernel) or split_k=1")
    if spec.swiglu and ((tile_n // 2) % epi_n or tile_n % 16):
        raise GemmConfigError(f"activation='swiglu' with tile_mn[1]={tile_n}, epi_n={epi_n}: the output tile is "
                              f"{tile_n // 2} columns wide, which epi_n must divide; use epi_n=16 or a tile with "
                              "bN / 2 a multiple of 32")


# ----------------------------------------------------------------------------- device math
def _act(name, x):
    import cutlass
    import cutlass.cute as cute

    f32 = cutlass.Float32
    if callable(name):  # the caller's epilogue function
        return f32(name(x))
    if name == "relu":
        return cute.arch.fmax(x, f32(0.0))
    if name == "relu2":
        r = cute.arch.fmax(x, f32(0.0))
        return r * r
    if name == "silu":  # x * sigmoid(x): the reciprocal approximated (MUFU.RCP, ~1 ulp) like the exp, not an
        # IEEE division (div.rn.f32: a Newton step, a range check and a slow-path call per element)
        return x * cute.arch.rcp_approx(f32(1.0) + cute.math.exp(-x, fastmath=True))
    if name == "gelu_tanh":
        inner = f32(math.sqrt(2.0 / math.pi)) * (x + f32(0.044715) * x * x * x)
        return f32(0.5) * x * (f32(1.0) + cute.math.tanh(inner, approx=True))
    if name == "gelu":
        return f32(0.5) * x * (f32(1.0) + cute.math.erf(x * f32(1.0 / math.sqrt(2.0))))
    raise GemmConfigError(f"activation {name!r}")


def swiglu_pairs(g):
    """For each register of the half-width (output) fragment, the registers of the full accumulator
    that hold its gate and up columns (trace-time ints, from identity tensors of one thread: every
    thread's coordinates are its own base plus the same per-register offsets, for both fragments).
    Output column c is gate column 16 * (c // 8) + c % 8 and up column that + 8 of the MMA tile."""
    import cutlass.cute as cute

    bM, bN, _ = g.tile_mnk
    full = g._make_tiled_mma().get_slice(0).partition_C(cute.make_identity_tensor((bM, bN)))
    half = h_coords(g, 0)
    where = {tuple(full[i]): i for i in range(cute.size(full))}
    pairs = []
    for j in range(cute.size(half)):
        r, c = half[j]
        gate = 16 * (c // 8) + c % 8
        pairs.append((where[(r, gate)], where[(r, gate + 8)]))
    return pairs


def apply(g, acc, frag, m, n, thread, l=0):
    """acc -> the values to store, in ``frag`` (``acc`` itself, or the half-width fragment of a
    SwiGLU GEMM). ``m``, ``n``: the output tile (of product ``l`` when batched: the residual is
    (M, N, L) then, the bias shared); ``thread``: the thread's index in the tile's warp groups (what
    the MMA was sliced with)."""
    import cutlass
    import cutlass.cute as cute

    spec, f32 = g.epi, cutlass.Float32
    bM, bN, _ = g.tile_mnk
    if spec.bias is not None:
        cols = g.epi_tiled_mma.get_slice(thread).partition_C(cute.make_identity_tensor((bM, bN)))
        last = cute.size(g.mBias, mode=[0]) - 1
        col0 = n * bN
    post = spec.activation if not (spec.swiglu or spec.keep) else None
    for i in range(cute.size(acc)):
        x = acc[i]
        if g.scaled:
            x = x * g.alpha
        if spec.bias is not None:
            x = x + g.mBias[cutlass.min(col0 + cols[i][1], last)].to(f32)
        if post is not None:
            x = _act(post, x)
        acc[i] = x
    if spec.swiglu:
        for j, (ig, iu) in enumerate(g.swiglu_pairs):
            frag[j] = _act("silu", acc[ig]) * acc[iu]
    if spec.residual:
        out_n = g.out_n
        coords = g.out_mma.get_slice(thread).partition_C(cute.make_identity_tensor((bM, out_n)))
        rows, ncols = cute.size(g.mRes, mode=[0]) - 1, cute.size(g.mRes, mode=[1]) - 1
        r0, c0 = m * bM, n * out_n
        for i in range(cute.size(frag)):
            r, c = coords[i]
            at = (cutlass.min(r0 + r, rows), cutlass.min(c0 + c, ncols)) + ((l,) if g.batched else ())
            frag[i] = frag[i] + g.mRes[at].to(f32)


def h_coords(g, thread):
    """The (row, column) in the tile's half-width block (bM x bN / 2: SwiGLU's h) of each register of a thread's
    half-width fragment (the order of ``g.swiglu_pairs``)."""
    import cutlass.cute as cute

    bM, bN, _ = g.tile_mnk
    return g._make_tiled_mma(bN // 2).get_slice(thread).partition_C(cute.make_identity_tensor((bM, bN // 2)))


def h_value(g, acc, j):
    """swiglu_keep: h of the half-width register ``j``: silu(gate) * up of z, in fp32."""
    ig, iu = g.swiglu_pairs[j]
    return _act("silu", acc[ig]) * acc[iu]


def h_groups(g):
    """swiglu_keep's 16-byte stores: the half-width fragment's registers in groups a quad of threads (lanes 4 i ..
    4 i + 3, one row) transposes so that lane q holds 8 consecutive h columns (trace-time ints, from thread 0's
    coordinates: every thread's are its base plus the same offsets; lane q's columns are thread 0's + 2 q). Each
    group: ``(regs, row, col)`` with ``regs[k]`` the registers of columns col + 8 k, col + 8 k + 1 (k = 0..3) in
    thread 0. None where the tile's h width is not a multiple of 32 (four 8-column chunks a row): scalar stores."""
    import cutlass.cute as cute

    if (g.tile_mnk[1] // 2) % 32:
        return None
    coords = h_coords(g, 0)
    where = {tuple(coords[j]): j for j in range(cute.size(coords))}
    groups = []
    for (r, c), j in sorted(where.items()):
        if c % 32 == 0:
            regs = [(where[(r, c + 8 * k)], where[(r, c + 8 * k + 1)]) for k in range(4)]
            groups.append((regs, r, c))
    assert 8 * len(groups) == len(where), "the accumulator layout is not the quad layout h_groups expects"
    return groups
