"""exp2 on the FMA pipe: a polynomial for part of a tile's exponentials, beside MUFU.EX2 for the rest.

Hopper's special-function unit issues 16 ``ex2`` a clock per SM, and an SM's tensor cores finish a head dim
64 forward's two GEMMs for 16 scores a clock too: at head dim 64 the softmax's exponentials keep MUFU as busy
as the WGMMAs keep the tensor cores, and in the backward they are one long dependent run per step (64
``MUFU.EX2`` a thread at head dim 64). ``exp2_poly`` computes 2^x with float adds, FMAs and two integer ops
instead, so a tile can send every ``k``-th column there (``poly_every``) and the two pipes work side by side.

2^x = 2^round(x) * 2^f, f = x - round(x) in [-0.5, 0.5]: round(x) comes from adding 1.5 * 2^23 (the sum's
low mantissa bits hold it as an integer, so no F2I / FRND, which issue at MUFU's rate); 2^f is a minimax
polynomial with p(0) = 1 (relative error 1.0e-4 at degree 3, well under bf16's rounding of P, and 2.8e-6 at
degree 4, used for fp16); 2^round(x) is added to the result's exponent bits by an integer shift and add.
x is clamped to -127 first, where the result is exactly +0.0, so -inf (a masked score) gives 0 as MUFU does;
a NaN gives 0 too (``max.f32`` returns the other operand), where MUFU gives NaN: a NaN input still reaches the
row's other columns.
"""
from __future__ import annotations

import struct

import cutlass
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: x + it, as a float, holds round(x) in its low bits
CLAMP = -127.0  # 2^-127 rounds to +0.0 here (round(x) = -127, f = 0: the exponent bits cancel)
# minimax coefficients of 2^f on [-0.5, 0.5] (relative error), c0 first; float32 values
# c0 is exactly 1: then x = -127 gives +0.0 (p(0) = 1 has the exponent bits that 2^-127 cancels) and every
# x in (-127, -126.5] a non-negative denormal, where c0 < 1 would wrap the bits to a NaN
COEFFS = {3: (1.0, 0.6932829, 0.24221028, 0.05500861),
          4: (1.0, 0.6931242, 0.24024099, 0.05590635, 0.00958282)}
MAX_REL_ERROR = {3: 1.1e-4, 4: 3.0e-6}  # over x in [-126, 64], what tests/test_poly_exp2.py holds each degree to


def refusal(every):
    """Why ``poly_exp2=every`` is not a kernel option (None: it is): 0 or an int k >= 2."""
    if type(every) is not int or every < 0 or every == 1:
        return (f"poly_exp2={every!r}: expected 0 (every exp2 on MUFU) or k >= 2 (every k-th of P's exponentials "
                "by poly_exp2.exp2_poly on the FMA pipe)")
    return None


def degree_for(dtype) -> int:
    """The polynomial degree for P rounded to ``dtype``: 3 for bf16 (8 mantissa bits), 4 for fp16 (11)."""
    return 3 if dtype is cutlass.BFloat16 else 4


def _hex(value: float) -> str:
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]


def ptx(degree: int, after: bool = False) -> str:
    """The inline PTX of ``exp2_poly`` at ``degree`` ($0 = 2^$1); ``after``: x = fma($2, 0, $1) first, a
    dependence on $2 that changes no finite x."""
    c = COEFFS[degree]
    horner = [f"fma.rn.ftz.f32 p, f, {_hex(c[degree])}, {_hex(c[degree - 1])};"]
    horner += [f"fma.rn.ftz.f32 p, p, f, {_hex(c[k])};" for k in range(degree - 2, -1, -1)]
    return "\n".join(["{", ".reg .f32 x, t, r, f, p;", ".reg .b32 ti, pi;",
                      *(["fma.rn.f32 x, $2, 0f00000000, $1;", f"max.ftz.f32 x, x, {_hex(CLAMP)};"] if after
                        else [f"max.ftz.f32 x, $1, {_hex(CLAMP)};"]),
                      f"add.rn.ftz.f32 t, x, {_hex(ROUND_MAGIC)};",
                      f"sub.rn.ftz.f32 r, t, {_hex(ROUND_MAGIC)};",
                      "sub.rn.ftz.f32 f, x, r;", *horner,
                      "mov.b32 ti, t;", "mov.b32 pi, p;", "shl.b32 ti, ti, 23;", "add.s32 pi, pi, ti;",
                      "mov.b32 $0, pi;", "}"])


@dsl_user_op
def exp2_poly(x, degree: int = 3, after=None, *, loc=None, ip=None):
    """2^x on the FMA and integer pipes (no MUFU), at ``degree`` (3 or 4). An inline-PTX statement with side
    effects, as ``register_math.exp2_pinned``: the compiler must not evaluate it twice. ``after``: a value x is
    made to depend on (x + 0 * after: no compiler folds it, since 0 * inf is NaN), so the polynomial starts only
    once ``after`` is ready; after a MUFU result, that interleaves the two pipes' instructions."""
    args = [cutlass.Float32(x).ir_value(loc=loc, ip=ip)]
    if after is not None:
        args.append(cutlass.Float32(after).ir_value(loc=loc, ip=ip))
    return cutlass.Float32(llvm.inline_asm(T.f32(), args, ptx(degree, after is not None),
                                           "=f,f,f" if after is not None else "=f,f", has_side_effects=True,
                                           is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc,
                                           ip=ip))


def polynomial_column(j: int, every: int) -> bool:
    """Whether column ``j`` of a thread's row goes through ``exp2_poly`` when every ``every``-th does (0: none)."""
    return every > 0 and j % every == every - 1


def reference(x, degree: int = 3):
    """The same operations in numpy float32 (an FMA as a float64 product and sum rounded once: exact for
    these operands but for the sum's second rounding), for tests: what ``exp2_poly`` returns for ``x``."""
    import numpy as np

    f32 = np.float32
    x = np.fmax(np.asarray(x, dtype=f32), f32(CLAMP))  # max.f32: a NaN operand gives the other
    t = (x + f32(ROUND_MAGIC)).astype(f32)
    r = (t - f32(ROUND_MAGIC)).astype(f32)
    f = (x - r).astype(f32)
    c = [f32(v) for v in COEFFS[degree]]

    def fma(a, b, d):
        return (a.astype(np.float64) * np.float64(b) + np.float64(d)).astype(f32)
    p = fma(f, c[degree], c[degree - 1])
    for k in range(degree - 2, -1, -1):
        p = (p.astype(np.float64) * f.astype(np.float64) + np.float64(c[k])).astype(f32)
    bits = (p.view(np.uint32).astype(np.uint64) + (t.view(np.uint32).astype(np.uint64) << np.uint64(23)))
    return (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(f32)
