"""The GEMM's fused epilogue (bias, activations, SwiGLU, residual, output scale) and batched mode on
the CPU: variants compiled for sm_90a with fake operands through the TVM-FFI path (the checker proves
each traced program SAFE; the epilogue changes work bodies only, so the program, and its fingerprint,
is the plain GEMM's), their PTX holding the epilogue's instructions, SwiGLU's register pairing checked
on identity tensors, and the argument errors of ``ops.gemm``. The numerics run on the H200:
bench/gemm_epilogue_check.py."""
from __future__ import annotations

import os
import sys

import pytest

from _fake_tensor import FakeTensor as T
from warpsched.kernels.gemm import ops as ops_gemm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def col(k, n, dtype="torch.bfloat16", ptr=4096):
    return T((k, n), dtype, strides=(1, k), ptr=ptr)


@pytest.fixture(scope="module")
def launch():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    from warpsched.kernels import _host
    from warpsched.kernels.gemm import launch as gemm_launch

    mp = pytest.MonkeyPatch()
    mp.setattr(_host, "num_sms", lambda: 132)
    mp.setattr(_host, "ffi_options", lambda arch=None: _host.ptx_options("sm_90a") + " --enable-tvm-ffi")
    mp.setattr(gemm_launch, "max_ctas", lambda cluster_mn=(1, 1): 132)
    yield gemm_launch
    mp.undo()


_TRACED = {}  # compile key -> the fingerprint of the program its trace checked


def _compile(launch, a_dtype="bfloat16", **options):
    """(PTX line counter, verdict, the fingerprint of the traced program) of one TVM-FFI compile."""
    from warpsched.verify.verdicts import VERDICTS

    k = launch.key(a_dtype, "bfloat16", dict(schedule="cooperative", **options))
    before = len(VERDICTS.looked_up)
    f = launch.compiled_ffi(a_dtype, "bfloat16", schedule="cooperative", **options)
    if len(VERDICTS.looked_up) > before:
        _TRACED[k] = VERDICTS.looked_up[-1]
    program = _TRACED.get(k)
    lines = f.artifacts.PTX.splitlines()
    return (lambda pat: sum(pat in ln for ln in lines)), launch.VERDICT_OF[launch.key(a_dtype, "bfloat16", dict(
        schedule="cooperative", **options))], program


@pytest.fixture(scope="module")
def plain_program():
    """The fingerprint of the cooperative 128x256 program ``warpsched check`` builds on the CPU."""
    from warpsched.kernels.gemm import host as gemm_host

    return gemm_host.build(schedule="cooperative", verbose=False, exhaustive_deadlock_race_check=False).fingerprint


def test_bias_gelu_tanh_residual_is_the_plain_program_with_its_loads(launch, plain_program):
    """Cooperative 128x256: a thread holds 128 accumulators of 64 columns (two rows each). The bias
    is one load per column (64), the residual one per element (128), tanh.approx one per element;
    the stores (16 stmatrix, 8 TMA sub-tile stores) are the plain kernel's."""
    plain, v0, _ = _compile(launch)
    epi, v1, prog1 = _compile(launch, bias="c", activation="gelu_tanh", residual=True)
    assert v0 == v1 == "SAFE" and prog1 == plain_program  # the same checked program
    assert plain("ld.global") == 0 and plain("tanh.approx") == 0
    assert epi("ld.global") == 64 + 128 and epi("tanh.approx.f32") == 128
    for pat in ("stmatrix", "cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier.try_wait", "bar.sync"):
        assert epi(pat) == plain(pat), pat


def test_swiglu_stores_half_the_tile(launch, plain_program):
    """SwiGLU: one silu (ex2 and an approximate reciprocal, no IEEE division) per output element, 64 of
    them (half of 128 accumulators); half the stmatrix and TMA stores (4 sub-tiles of 32 columns: a
    128-column output tile); an fp32 bias of the 256 B rows (64 loads: one per column)."""
    plain, _, _ = _compile(launch)
    epi, verdict, prog = _compile(launch, bias="f32", activation="swiglu")
    assert verdict == "SAFE" and prog == plain_program
    assert epi("ex2.approx") == 64 and epi("ld.global") == 64
    assert epi("rcp.approx") == 64 and epi("div.rn.f32") == 0
    assert epi("stmatrix") == plain("stmatrix") // 2
    assert epi("cp.async.bulk.tensor") == 2 + (plain("cp.async.bulk.tensor") - 2) // 2


def test_swiglu_keep_stores_z_by_tma_and_h_from_registers(launch, plain_program):
    """swiglu_keep: C is z (the full tile: the plain kernel's stmatrix and TMA stores), h one silu per pair (64 of
    the 128 accumulators), transposed within each quad (3 butterfly shuffles per value: 48) and stored as 16-byte
    vectors (8 per thread, one per 8 h columns of a row); the same checked program."""
    plain, _, _ = _compile(launch)
    epi, verdict, prog = _compile(launch, bias="f32", activation="swiglu_keep")
    assert verdict == "SAFE" and prog == plain_program
    assert epi("ex2.approx") == 64 and epi("rcp.approx") == 64 and epi("ld.global") == 64
    assert epi("st.global.v4.b32") == 8 and epi("st.global") - plain("st.global") == 8
    assert epi("shfl.sync.bfly") - plain("shfl.sync.bfly") == 48
    for pat in ("stmatrix", "cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier.try_wait", "bar.sync"):
        assert epi(pat) == plain(pat), pat


def test_swiglu_keep_groups_cover_the_fragment_by_quads():
    """h_groups: every register of the half-width fragment in exactly one group of four 8-column chunks of a row,
    and for threads of every warp, lane q of a quad holds thread 0's columns + 2 q in the same registers, on one
    row per group (what the kernel's quad transpose assumes); None where h's tile width is not a multiple of 32."""
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common
    import cutlass
    import cutlass.cute as cute

    from warpsched.kernels.gemm import epilogue as gemm_epilogue
    from warpsched.kernels.gemm.kernel import PersistentGemm

    for schedule, tile in (("cooperative", (128, 256)), ("cooperative", (256, 128)), ("pingpong_shared", (128, 192)),
                           ("cooperative", (64, 64))):
        g = PersistentGemm(schedule=schedule, tile_mn=tile, activation="swiglu_keep")
        found = {}

        @cute.jit
        def trace():
            found["groups"] = gemm_epilogue.h_groups(g)
            for tid in cutlass.range_constexpr(0, 128 * g.wgs_per_mma_task, 7):
                coords = gemm_epilogue.h_coords(g, tid)
                found[tid] = [tuple(coords[j]) for j in range(cute.size(coords))]

        cute.compile(trace, options=_common.ptx_options("sm_90a"))
        groups = found.pop("groups")
        regs = sorted(j for rg, _, _ in groups for pair in rg for j in pair)
        assert regs == list(range(len(found[0]))), (schedule, tile)
        for tid, coords in found.items():
            for rg, r, c in groups:
                row = coords[rg[0][0]][0]
                want = [(row, c + 8 * k + e + 2 * (tid % 4)) for k in range(4) for e in range(2)]
                assert [coords[rg[k][e]] for k in range(4) for e in range(2)] == want, (schedule, tile, tid)
    g = PersistentGemm(schedule="cooperative", tile_mn=(128, 176), epi_n=16, activation="swiglu_keep")
    g.tile_mnk = (128, 176, 64)
    assert gemm_epilogue.h_groups(g) is None


def test_batched_uses_3d_tma_and_the_same_program(launch, plain_program):
    plain, _, _ = _compile(launch)
    bat, verdict, prog = _compile(launch, batched=True, bias="c", residual=True, activation="silu")
    assert verdict == "SAFE" and prog == plain_program
    assert bat("cp.async.bulk.tensor.3d") == plain("cp.async.bulk.tensor") > 0
    assert bat("ex2.approx") == 128 and bat("ld.global") == 64 + 128


def hard_swish(x):
    """A caller's epilogue function: x * relu6(x + 3) / 6, on one fp32 value (CuTe DSL's Float32)."""
    import cutlass
    import cutlass.cute as cute

    f32 = cutlass.Float32
    return x * cute.arch.fmin(cute.arch.fmax(x + f32(3.0), f32(0.0)), f32(6.0)) * f32(1.0 / 6.0)


def test_an_epilogue_function_is_traced_into_the_plain_program(launch, plain_program):
    """The epilogue's extension point: a function instead of an activation name, applied to each of the
    thread's 128 accumulators before the store; the program (and its proof) and the stores are the plain
    kernel's."""
    plain, _, _ = _compile(launch)
    epi, verdict, prog = _compile(launch, activation=hard_swish, bias="f32")
    assert verdict == "SAFE" and prog == plain_program
    assert epi("max.f32") - plain("max.f32") >= 128 and epi("min.f32") - plain("min.f32") >= 128
    for pat in ("stmatrix", "cp.async.bulk.tensor", "wgmma.mma_async", "mbarrier.try_wait", "bar.sync"):
        assert epi(pat) == plain(pat), pat


def test_an_epilogue_function_must_be_callable():
    from warpsched.kernels.gemm.epilogue import EpilogueSpec

    assert "hard_swish" in EpilogueSpec(activation=hard_swish).describe()
    with pytest.raises(ValueError, match="or a function of one fp32 value"):
        EpilogueSpec(activation="hardswish")


def test_swiglu_pairs_match_gate_and_up_coordinates():
    """For every register of SwiGLU's half-width fragment (output column c), the two accumulator
    registers it combines hold gate column 16 * (c // 8) + c % 8 and up column that + 8 of the same
    row, for threads of both warp groups (identity tensors, static thread indices)."""
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
    import _common
    import cutlass
    import cutlass.cute as cute

    from warpsched.kernels.gemm import epilogue as gemm_epilogue
    from warpsched.kernels.gemm.kernel import PersistentGemm

    checked = []
    for schedule, tile in (("cooperative", (128, 256)), ("pingpong", (128, 128)), ("cooperative", (64, 64))):
        g = PersistentGemm(schedule=schedule, tile_mn=tile, activation="swiglu", epi_n=16)
        bM, bN, _ = g.tile_mnk
        seen = []

        @cute.jit
        def trace():
            pairs = gemm_epilogue.swiglu_pairs(g)
            full_mma, half_mma = g._make_tiled_mma(), g._make_tiled_mma(g.out_n)
            for tid in cutlass.range_constexpr(0, 128 * g.wgs_per_mma_task, 13):
                full = full_mma.get_slice(tid).partition_C(cute.make_identity_tensor((bM, bN)))
                half = half_mma.get_slice(tid).partition_C(cute.make_identity_tensor((bM, g.out_n)))
                for j in cutlass.range_constexpr(len(pairs)):
                    seen.append((tuple(half[j]), tuple(full[pairs[j][0]]), tuple(full[pairs[j][1]])))

        cute.compile(trace, options=_common.ptx_options("sm_90a"))
        wrong = [(h, gt, up) for h, gt, up in seen
                 if gt != (h[0], 16 * (h[1] // 8) + h[1] % 8) or up != (gt[0], gt[1] + 8)]
        assert seen and not wrong, wrong[:4]
        checked.append(len(seen))
    assert len(checked) == 3


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    dict(activation="relu"), dict(activation="relu2", bias="f32"), dict(activation="gelu"),
    dict(activation="silu", scale_out=True), dict(residual=True),
    dict(split_k=True, split_reduce="parallel", bias="c", activation="gelu_tanh"),
    dict(stream_k=True, residual=True, activation="relu"),
])
def test_every_epilogue_variant_compiles_safe(launch, options):
    count, verdict, _ = _compile(launch, **options)
    assert verdict == "SAFE"
    act = options.get("activation")
    if act in ("silu", "gelu"):
        assert count("ex2.approx") > 0
    if act in ("relu", "relu2"):
        assert count("max.f32") > 0


@pytest.mark.slow
def test_fp8_epilogue_with_device_scales(launch):
    count, verdict, _ = _compile(launch, "float8_e4m3fn", device_scale=True, bias="c", residual=True,
                                 activation="gelu")
    assert verdict == "SAFE" and count("ld.global") == 2 + 64 + 128  # the two scales, bias, residual


@pytest.mark.slow
def test_pingpong_swiglu_compiles_safe(launch):
    from warpsched.verify.verdicts import VERDICTS

    f = launch.compiled_ffi("bfloat16", "bfloat16", schedule="pingpong", tile_mn=(128, 128), activation="swiglu",
                            residual=True)
    assert VERDICTS.looked_up and "ex2.approx" in f.artifacts.PTX


@pytest.mark.slow
def test_pingpong_shared_swiglu_keep_compiles_safe(launch):
    """The configuration the tuner picks for a prefill gate / up GEMM, with the option."""
    f = launch.compiled_ffi("bfloat16", "bfloat16", schedule="pingpong_shared", tile_mn=(128, 192),
                            activation="swiglu_keep")
    assert launch.VERDICT_OF[launch.key("bfloat16", "bfloat16", dict(
        schedule="pingpong_shared", tile_mn=(128, 192), activation="swiglu_keep"))] == "SAFE"
    assert "ex2.approx" in f.artifacts.PTX


# ------------------------------------------------------------------------ configuration errors
def test_kernel_refuses_what_the_epilogue_cannot_do():
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from warpsched.kernels.gemm.config import GemmConfigError
    from warpsched.kernels.gemm.kernel import PersistentGemm

    with pytest.raises(GemmConfigError, match="split_reduce='serial', 'parallel'"):
        PersistentGemm(schedule="cooperative", split_k=True, bias="c")
    with pytest.raises(GemmConfigError, match="use epi_n=16"):
        PersistentGemm(schedule="cooperative", tile_mn=(128, 224), activation="swiglu")
    with pytest.raises(GemmConfigError, match="without a K split or a cluster"):
        PersistentGemm(schedule="cooperative", batched=True, split_k=True)
    with pytest.raises(GemmConfigError, match="swiglu_keep.*drop the residual"):
        PersistentGemm(schedule="cooperative", activation="swiglu_keep", residual=True)
    with pytest.raises(GemmConfigError, match="activation='tanh'"):
        PersistentGemm(schedule="cooperative", activation="tanh")
    g = PersistentGemm(schedule="cooperative", tile_mn=(128, 224), activation="swiglu", epi_n=16)
    assert g.out_n == 112 and g.describe().endswith("epi swiglu")
    assert ops_gemm._epilogue_config(dict(schedule="pingpong_shared", tile_mn=(128, 176), epi_n=16, split_k=1)) == {
        "split_k": 1}  # 88 columns: no sub-tile width divides them, the default tile
    assert ops_gemm._epilogue_config(dict(tile_mn=(128, 224), split_k=1)) == dict(tile_mn=(128, 224), split_k=1,
                                                                                  epi_n=16)


# ----------------------------------------------------------------------------- ops.gemm errors
R = dict(ptr=8192)  # a residual elsewhere than out


@pytest.mark.parametrize("kw,needle", [
    (dict(activation="tanh"), r"activation='tanh': expected one of"),
    (dict(bias=T((128,))), r"bias \(128,\): expected \(256,\)"),
    (dict(bias=T((256,), "torch.float16")), r"bias.to\(torch.bfloat16\)"),
    (dict(bias=T((256,), strides=(2,))), r"bias.cuda\(\).contiguous\(\)"),
    (dict(residual=T((64, 128), **R)), r"residual \(64, 128\): expected the output's shape \(64, 256\)"),
    (dict(residual=T((64, 256), "torch.float16", **R)), r"residual.to\(torch.bfloat16\)"),
    (dict(residual=T((64, 256), strides=(1, 64), **R)), r"residual.cuda\(\).contiguous\(\)"),
    (dict(residual=T((64, 256)), out=T((64, 256))), "residual is out's memory"),
    (dict(activation="swiglu", out=T((64, 256))), r"expected \(M, N\) = \(64, 128\) \(swiglu"),
    (dict(activation="swiglu", bias=T((128,))), r"expected \(256,\).*interleave_gate_up"),
    (dict(scale_a=2.0), "fp8 inputs only"),
])
def test_epilogue_argument_errors_name_the_fix(kw, needle):
    out = kw.pop("out", None)
    with pytest.raises(ops_gemm.GemmArgumentError, match=needle):
        ops_gemm.gemm(T((64, 128)), col(128, 256), out, config="default", **kw)


def test_swiglu_needs_whole_gate_up_blocks():
    with pytest.raises(ops_gemm.GemmArgumentError, match="multiple of 16"):
        ops_gemm.gemm(T((64, 128)), col(128, 264), activation="swiglu", config="default")


def test_leading_dims_residual_must_match():
    with pytest.raises(ops_gemm.GemmArgumentError, match=r"residual \(2, 4, 256\): expected the output's shape"):
        ops_gemm.gemm(T((2, 8, 128)), col(128, 256), residual=T((2, 4, 256), **R), config="default")


@pytest.mark.parametrize("a,b,kw,needle", [
    (T((2, 64, 128)), T((3, 128, 256), strides=(32768, 1, 128)), {}, "one batch size L"),
    (T((2, 64, 128)), T((2, 128, 256)), {}, r"K-major products .*b.transpose\(1, 2\)"),
    (T((2, 64, 128), strides=(8192, 1, 64)), T((2, 128, 256), strides=(32768, 1, 128)), {}, "K-major products"),
    (T((2, 64, 128)), T((2, 128, 256), strides=(32768, 1, 128)), dict(residual=T((2, 64, 255), **R)),
     r"expected the output's shape \(2, 64, 256\)"),
    (T((2, 64, 128)), T((2, 128, 256), strides=(32768, 1, 128)), dict(bias=T((255,))), r"expected \(256,\)"),
    (T((2, 64, 128)), T((2, 128, 256), strides=(32764, 1, 128)), {}, "16-byte aligned"),
    (T((2, 64, 128)), T((2, 128, 256), strides=(32768, 1, 128)), dict(config={"split_k": 2}),
     "drop split_k and cluster_mn"),
])
def test_batched_argument_errors_name_the_fix(a, b, kw, needle):
    from warpsched.kernels.gemm.batched import gemm_batched  # what warpsched.ops.gemm calls for 3-D a and b

    kw.setdefault("config", "default")
    with pytest.raises(ops_gemm.GemmArgumentError, match=needle):
        gemm_batched(a, b, **kw)


@pytest.mark.parametrize("cluster", [(3, 1), "2x1", None])
def test_batched_odd_cluster_is_named_as_a_config_error(cluster):
    from warpsched.kernels.gemm.batched import gemm_batched
    from warpsched.kernels.gemm.config import GemmConfigError

    with pytest.raises(GemmConfigError, match="clusters are"):
        gemm_batched(T((2, 64, 128)), T((2, 128, 256), strides=(32768, 1, 128)), config={"cluster_mn": cluster})


def test_the_2d_entry_point_sends_batched_operands_to_ops_gemm():
    with pytest.raises(ops_gemm.GemmArgumentError, match="call warpsched.ops.gemm"):
        ops_gemm.gemm(T((2, 64, 128)), T((2, 128, 256), strides=(32768, 1, 128)), config="default")


def test_a_batched_b_needs_a_batched_a():
    with pytest.raises(ops_gemm.GemmArgumentError, match="takes a batched a"):
        ops_gemm.gemm(T((64, 128)), T((2, 128, 256), strides=(32768, 1, 128)), config="default")


def test_batched_runs_whole_tiles_of_the_2d_candidates():
    """A batched GEMM tunes the 2-D candidates without their K split or cluster (whole tiles: the L
    products give it L times the tiles); its kernel options add the L mode and the epilogue."""
    from warpsched.kernels.gemm import batched as gb

    for M, N, K in ((64, 4096, 4096), (512, 512, 512), (4096, 4096, 4096)):
        cands = gb._candidates(M, N, K, False)
        assert cands and all("split_k" not in c and "split_reduce" not in c for c in cands)
        assert all(tuple(c.get("cluster_mn", (1, 1))) == (1, 1) for c in cands)
        assert len({repr(sorted(c.items())) for c in cands}) == len(cands)
    opts = gb._options(dict(schedule="pingpong", tile_mn=(128, 128), split_k="auto"), {"bias": "c"}, True)
    assert opts == dict(schedule="pingpong", tile_mn=(128, 128), batched=True, bias="c", device_scale=True)
    swiglu = gb._options(dict(tile_mn=(128, 176), epi_n=16), {"activation": "swiglu"}, False)
    assert swiglu == dict(schedule="cooperative", batched=True, activation="swiglu")  # 88 columns: default tile
