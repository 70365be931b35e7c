"""warpsched.ops.gemm on the CPU: the import stays pure Python, the argument checks name the fix,
and the autotuner's key, candidate list and on-disk cache (write, reuse, corrupt / foreign /
unwritable files) behave. The kernels themselves run in bench/gemm_sweep.py on the H200."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from _fake_tensor import FakeTensor
from warpsched.kernels.gemm import autotune as tune
from warpsched.kernels.gemm import ops as ops_gemm
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


# What an installed wheel has: the package alone, no examples/ (nor tests/) anywhere near it. The GEMM
# compiles (sm_90a, fake tensors; the checker proves it SAFE) and ops.gemm reaches the package's
# GEMM host (replaced by a recorder: no GPU, no torch here) without reading anything from examples/.
WHEEL_LIKE = """
import os, sys, types
os.environ["CUTE_DSL_ARCH"] = "sm_90a"
site = sys.argv[1]
import warpsched, warpsched.ops
assert warpsched.__file__.startswith(site), warpsched.__file__
from warpsched.kernels.gemm import host as gemm_host
from warpsched.verify.verdicts import VERDICTS
ptx = gemm_host.compile_for_cpu(schedule="cooperative").artifacts.PTX
assert "wgmma.mma_async" in ptx and VERDICTS.get(VERDICTS.looked_up[-1]).verdict == "SAFE"

class T:
    def __init__(self, shape, strides, dtype="torch.bfloat16"):
        self.shape, self._strides, self.dtype, self.is_cuda, self.device = shape, strides, dtype, True, "cuda:0"
    def dim(self): return len(self.shape)
    def stride(self, i=None): return self._strides if i is None else self._strides[i]
    def data_ptr(self): return 4096
    def get_device(self): return 0
    def t(self): return T(self.shape[::-1], self._strides[::-1], self.dtype)

sys.modules["torch"] = types.ModuleType("torch")  # gemm() imports torch before the kernel
sys.modules["torch"].empty = None  # kept with the plan (out is given here)
calls = []
class Plan:  # what gemm_host.plan returns: a launcher (TVM FFI: it checks alignment itself)
    ffi = True
    def launch(self, *args): calls.append(args[3:])

gemm_host.plan = lambda a, b, c, **kw: calls.append((b.shape, c.shape, kw)) or Plan()
a, b, out = T((64, 128), (128, 1)), T((128, 256), (1, 128)), T((64, 256), (256, 1))
assert warpsched.ops.gemm(a, b, out, config="default") is out
assert warpsched.ops.gemm(a, b, out, config="default") is out  # the second call only launches
assert calls == [((256, 128), (64, 256), {"device_scale": False}), (1.0, (), None, None), (1.0, (), None, None)], calls
loaded = [m for m, mod in list(sys.modules.items()) if "examples" in (getattr(mod, "__file__", None) or "")]
assert not loaded and "_common" not in sys.modules and "gemm_persistent" not in sys.modules, loaded
print("ok", gemm_host.__file__)
"""


def test_gemm_runs_from_the_package_alone(tmp_path):
    pytest.importorskip("cutlass")
    site = tmp_path / "site"
    shutil.copytree(os.path.join(SRC, "warpsched"), site / "warpsched", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-c", WHEEL_LIKE, str(site)], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", str(site / "warpsched" / "kernels" / "gemm" / "host.py")]


def test_import_is_pure_python():
    code = ("import sys, warpsched, warpsched.ops, warpsched.kernels.gemm.autotune, warpsched.kernels.gemm.ops; "
            "bad = [m for m in ('torch', 'cutlass', 'gemm_persistent', 'warpsched.kernels.gemm.host') if m in sys.modules]; "
            "assert not bad, bad; print(warpsched.ops.gemm.__name__)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "gemm"


T = FakeTensor  # what the checks read of a torch tensor


def col(k, n, dtype="torch.bfloat16"):
    """(K, N) column-major: w.t() of a row-major (N, K) weight."""
    return T((k, n), dtype, strides=(1, k))


def test_accepts_torch_scaled_mm_layouts():
    assert ops_gemm.check(T((64, 128)), col(128, 256)) == (64, 256, 128, "bfloat16")
    e4, e5 = "torch.float8_e4m3fn", "torch.float8_e5m2"
    assert ops_gemm.check(T((64, 128), e4), col(128, 256, e5)) == (64, 256, 128, "bfloat16")
    assert ops_gemm.check(T((64, 128), e4), col(128, 256, e4), out_dtype="torch.float16")[3] == "float16"
    assert ops_gemm.check(T((64, 128), "torch.float16"), col(128, 256, "torch.float16"), T((64, 256), "torch.float16"))


@pytest.mark.parametrize("a,b,out,kw,needle", [
    (T((64, 128), "torch.float8_e4m3fn"), T((128, 256), "torch.float8_e4m3fn"), None, {}, "fp8 is K-major only"),
    (T((64, 128), "torch.float8_e4m3fn", strides=(1, 64)), col(128, 256, "torch.float8_e4m3fn"), None, {},
     r"a must be row-major \(K contiguous\) \(fp8 is K-major only\)"),
    (T((64, 128), strides=(256, 2)), col(128, 256), None, {}, "a must be row-major"),
    (T((64, 128)), T((128, 256), strides=(512, 2)), None, {}, "b must be column-major"),
    (T((64, 128)), col(64, 256), None, {}, "pass w.t()"),
    (T((64, 128), cuda=False), col(128, 256), None, {}, "move it to the GPU"),
    (T((64, 128), "torch.float32"), col(128, 256), None, {}, "supported: torch.bfloat16"),
    (T((64, 128)), col(128, 256, "torch.float16"), None, {}, "b must be torch.bfloat16"),
    (T((64, 128), "torch.float8_e4m3fn"), col(128, 256), None, {}, "or another fp8 type"),
    (T((64, 100)), col(100, 256), None, {}, "multiple of 8"),
    (T((64, 120), "torch.float8_e4m3fn"), col(120, 256, "torch.float8_e4m3fn"), None, {}, "multiple of 16"),
    (T((64, 128)), col(128, 256), T((64, 255)), {}, r"expected \(M, N\)"),
    (T((64, 128)), col(128, 250), None, {}, "N a multiple of 8"),
    (T((64, 128)), col(128, 256), None, {"out_dtype": "torch.float16"}, "bfloat16 inputs write bfloat16"),
    (T((64, 128), "torch.float8_e4m3fn"), col(128, 256, "torch.float8_e4m3fn"), None, {"out_dtype": "torch.float32"},
     "fp8 inputs write"),
    (T((2, 4, 128)), col(128, 256), None, {}, "2-D"),
])
def test_argument_errors_name_the_fix(a, b, out, kw, needle):
    with pytest.raises(ops_gemm.GemmArgumentError, match=needle):
        ops_gemm.check(a, b, out, **kw)


def test_scales_are_for_fp8_only():
    with pytest.raises(ops_gemm.GemmArgumentError, match="fp8 inputs only"):
        ops_gemm.gemm(T((64, 128)), col(128, 256), scale_a=2.0)


# ------------------------------------------------------------------------------ autotune
def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv(tune.ENV_CACHE_DIR, str(tmp_path / "c"))
    assert tune.cache_dir() == str(tmp_path / "c")
    assert tune.TuneCache().path == str(tmp_path / "c" / "gemm_autotune.json")
    monkeypatch.delenv(tune.ENV_CACHE_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert tune.cache_dir() == str(tmp_path / "x" / "warpsched")


def test_key_separates_shape_dtypes_and_device():
    k = tune.cache_key(64, 4096, 4096, "torch.bfloat16", "torch.bfloat16", "torch.bfloat16", "NVIDIA H200")
    assert k == "gemm|64|4096|4096|bfloat16|bfloat16|bfloat16|NVIDIA H200"
    others = {tune.cache_key(65, 4096, 4096, "bfloat16", "bfloat16", "bfloat16", "NVIDIA H200"),
              tune.cache_key(64, 4096, 4096, "float8_e4m3fn", "float8_e5m2", "bfloat16", "NVIDIA H200"),
              tune.cache_key(64, 4096, 4096, "bfloat16", "bfloat16", "bfloat16", "NVIDIA H100"),
              tune.cache_key(64, 4096, 4096, "bfloat16", "bfloat16", "bfloat16", "NVIDIA H200", deterministic=False)}
    assert k not in others and len(others) == 4


def test_nondeterministic_kernels_only_when_asked():
    """The atomic split-K adds fp32 partials in arrival order (bits vary between calls): the default
    candidates never include it; deterministic=False adds it for small M."""
    for M in (1, 64, 256, 4096):
        assert all(c.get("split_reduce") != "atomic" for c in tune.candidates(M, 4096, 14336))
    assert any(c.get("split_reduce") == "atomic" for c in tune.candidates(64, 4096, 14336, deterministic=False))
    assert any(c["tile_mn"] == (64, 32) for c in tune.candidates(64, 4096, 4096))  # cuBLAS's small-M tile


def test_wide_k_tiles_are_candidates_for_small_m():
    """64x32 tiles with twice the default K tile (more bytes per stage; bf16 also 9 stages), launched
    with PDL: the fastest deterministic configuration of 64 x 4096 x {4096, 14336} on the H200
    (gemm_bw_run1_h200.log, gemm_pdl_h200.log); 64x128 tiles with PDL for 1024^3."""
    for fp8, k in ((False, 128), (True, 256)):
        small = [(c.get("block_k"), c.get("ab_stages"), c.get("pdl", False))
                 for c in tune.candidates(64, 4096, 14336, fp8) if c["tile_mn"] == (64, 32)
                 and c.get("cluster_mn", (1, 1)) == (1, 1)]
        want = [(None, None, False), (k, None, True)] + ([] if fp8 else [(k, 9, True)])
        assert sorted(small, key=str) == sorted(want, key=str)
        # two 32-token tiles (M > 32): 64x32 over a 1x2 cluster too (the weight's tile multicast to both;
        # 64 x 4104 x 2056: 8.5 us against 9.2 for the best tile without, bench/gemm_floor.py); not for M <= 32
        # nor fp8 (measured on bf16 only)
        clustered = [c for c in tune.candidates(64, 4096, 4096, fp8) if c.get("cluster_mn", (1, 1)) != (1, 1)]
        want = [] if fp8 else [dict(schedule="cooperative", split_k=1, tile_mn=(64, 32), cluster_mn=(1, 2))]
        assert clustered == want
        # one token tile (M <= 32): the swapped token tile multicast to four weight tiles (bf16 only)
        clustered = [c for c in tune.candidates(32, 4096, 4096, fp8, swap=True) if c.get("cluster_mn", (1, 1)) != (1, 1)]
        assert clustered == ([] if fp8 else [c for c in tune.SWAP_AB_SHARED if "cluster_mn" in c])
    swapped = [c for c in tune.candidates(64, 4096, 4096, swap=True) if c.get("swap_ab")]
    assert all(c in swapped for c in tune.SWAP_AB_PAIR)
    assert dict(schedule="cooperative", split_k=1, tile_mn=(64, 128), pdl=True) in tune.candidates(1024, 1024, 1024)
    # PDL lost with 64x128 tiles at 64 x 14336 x 4096 (gemm_pdl_h200.log): small M keeps them without
    assert dict(schedule="cooperative", split_k=1, tile_mn=(64, 128)) in tune.candidates(64, 14336, 4096)


def test_wide_pingpong_is_a_candidate_where_tiles_are_many():
    """CUTLASS's ping-pong (pingpong_shared, skip=True) with cuBLAS's 128x176 tile: 0.996x torch.matmul
    at 1024 x 14336 x 4096 against 0.935x for cooperative 128x224 in one H200 run
    (bench/results/gemm_pp176_s24_h200.log); 128x192 won the N = 128256 shapes in the full
    sweep (gemm_sweep_s24_h200.log); skip and epi_n are configuration keys."""
    wide = dict(schedule="pingpong_shared", skip=True, tile_mn=(128, 176), ab_stages=4, epi_n=16, split_k=1)
    wider = dict(schedule="pingpong_shared", skip=True, tile_mn=(128, 192), ab_stages=4, split_k=1)
    for fp8 in (False, True):
        for cfg in (wide, wider):
            assert cfg in tune.candidates(1024, 14336, 4096, fp8) and cfg in tune.candidates(16384, 4096, 14336, fp8)
            assert cfg not in tune.candidates(256, 14336, 4096, fp8) and cfg not in tune.candidates(1024, 1024, 1024, fp8)
    assert tune.normalize(dict(wide, tile_mn=[128, 176])) == wide


@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (64, 4096, 14336), (256, 128256, 4096), (1024, 1024, 1024),
                                   (16384, 4096, 14336)])
def test_candidates_are_a_handful_of_valid_configurations(M, N, K):
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # in case this test imports cutlass first
    from warpsched.kernels.gemm.kernel import PersistentGemm

    cands = tune.candidates(M, N, K)
    # small M: two splits also reduced in the kernel, 64x32 over a 1x2 cluster at M > 32; few tiles: 64x128 over
    # a 2x1 cluster and the wave-fit tiles (none at 1024 x 1024)
    assert 3 <= len(cands) <= (12 if M <= 64 else 10)
    assert len({json.dumps(c, sort_keys=True) for c in cands}) == len(cands)  # no configuration twice
    for c in cands:
        opts = {k: v for k, v in tune.normalize(c).items() if k != "split_k"}
        if c["split_k"] == "stream":
            PersistentGemm(stream_k=True, **opts)
        else:
            PersistentGemm(split_k=c["split_k"] != 1 and opts.get("cluster_mn", (1, 1)) == (1, 1), **opts)
    if M <= 256:
        assert any(c["split_k"] == "auto" for c in cands)  # few tiles: split-K is tried


def test_autotune_times_once_then_reuses_the_disk_cache(tmp_path):
    path = str(tmp_path / "sub" / "gemm_autotune.json")
    cands = [dict(schedule="cooperative", tile_mn=(128, 256), split_k=1),
             dict(schedule="pingpong", tile_mn=(128, 128), split_k=1),
             dict(schedule="cooperative", tile_mn=(64, 128), split_k="auto")]
    calls = []

    def bench(cfg):
        calls.append(cfg)
        if cfg["tile_mn"] == (64, 128):
            raise ValueError("does not fit")  # a failing candidate is dropped, not fatal
        return {(128, 256): 2.0, (128, 128): 1.5}[cfg["tile_mn"]]

    best, timings = tune.autotune("k1", cands, bench, tune.TuneCache(path))
    assert best == cands[1] and len(calls) == 3  # 2.0 is not within 25 % of 1.5: no repeats
    assert timings[0] == [2.0] and "does not fit" in timings[2]
    on_disk = json.load(open(path))
    assert on_disk["schema"] == tune.SCHEMA and on_disk["entries"]["k1"] == {
        "config": {"schedule": "pingpong", "tile_mn": [128, 128], "split_k": 1}, "ms": 1.5}
    again, timings = tune.autotune("k1", cands, bench, tune.TuneCache(path))  # a new process: read from disk
    assert again == cands[1] and again["tile_mn"] == (128, 128) and timings == {} and len(calls) == 3
    tune.autotune("k2", cands[:1], bench, tune.TuneCache(path))
    assert set(json.load(open(path))["entries"]) == {"k1", "k2"}  # stores merge


def test_autotune_keeps_the_finalists_timings_beside_the_winner(tmp_path):
    """The candidates timed against the winner (within the screen's margin) are stored with their medians,
    fastest first, so that a choice can be checked from the cache file; one screened out is not."""
    path = str(tmp_path / "gemm_autotune.json")
    cands = [dict(schedule="cooperative", tile_mn=(64, 32), split_k=1),
             dict(schedule="cooperative", tile_mn=(128, 32), split_k=1, cluster_mn=(4, 1), pdl=True),
             dict(schedule="cooperative", tile_mn=(128, 256), split_k=1)]
    ms = {(64, 32): [1.10, 1.05, 1.07, 1.06, 1.08, 1.09], (128, 32): [1.00, 0.98, 0.99, 1.01, 0.97, 1.02],
          (128, 256): [3.0]}

    def bench(cfg):
        return ms[cfg["tile_mn"]].pop(0)

    best, timings = tune.autotune("k", cands, bench, tune.TuneCache(path))
    assert best == cands[1] and len(timings[0]) == 6 and timings[2] == [3.0]  # the screen and 5 rounds
    entry = json.load(open(path))["entries"]["k"]
    assert entry["ms"] == 0.995 and entry["config"]["cluster_mn"] == [4, 1]
    assert entry["finalists"] == [[{"schedule": "cooperative", "tile_mn": [128, 32], "split_k": 1,
                                    "cluster_mn": [4, 1], "pdl": True}, 0.995],
                                  [{"schedule": "cooperative", "tile_mn": [64, 32], "split_k": 1}, 1.075]]
    assert tune.TuneCache(path).get("k") == cands[1]  # the extra field does not change what a lookup returns


def test_select_is_not_fooled_by_one_noisy_timing():
    """A GPU that drifts: "a" (really 1.00 ms) is timed 1.15 once, "b" (really 1.10) 0.95 once. A
    single timing each picks b; the screen keeps both (within 25 %), the interleaved repeats and
    the median pick a. "c" (2.0) is screened out and timed once; a repeat that fails drops "d"."""
    noise = {"a": [1.15, 1.00, 1.01, 0.99], "b": [0.95, 1.10, 1.12, 1.09], "c": [2.0], "d": [1.0]}
    order = []

    def time_once(name):
        order.append(name)
        if name == "d" and order.count("d") > 1:
            raise RuntimeError("launch failed")
        return noise[name][order.count(name) - 1]

    best, timings = tune.select(["a", "b", "c", "d"], time_once, rounds=3)
    assert best == "a" and timings["a"] == [1.15, 1.00, 1.01, 0.99] and timings["c"] == [2.0]
    assert "launch failed" in timings["d"]
    assert order == ["a", "b", "c", "d", "a", "b", "d", "b", "a", "a", "b"]  # rotated rounds, d dropped
    assert tune.select(["x"], lambda n: 1 / 0) == (None, {"x": "ZeroDivisionError: division by zero"})


@pytest.mark.parametrize("content", ["{not json", json.dumps({"schema": 999, "entries": {}}), json.dumps([1, 2]),
                                     json.dumps({"schema": tune.SCHEMA, "entries": {"k": {"config": {"bogus": 1}}}})])
def test_corrupt_or_foreign_cache_is_ignored_and_replaced(tmp_path, content):
    path = tmp_path / "gemm_autotune.json"
    path.write_text(content)
    cache = tune.TuneCache(str(path))
    with pytest.warns(tune.AutotuneWarning) if "bogus" not in content else _no_warning():
        assert cache.get("k") is None
    with pytest.warns(tune.AutotuneWarning) if "bogus" not in content else _no_warning():
        best, _ = tune.autotune("k", [dict(schedule="cooperative", split_k=1)], lambda c: 1.0, cache)
    assert best == {"schedule": "cooperative", "split_k": 1}
    assert tune.TuneCache(str(path)).get("k") == best  # rewritten in the current format


def test_unwritable_cache_keeps_the_choice_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = tune.TuneCache(str(blocker / "gemm_autotune.json"))  # its directory is a file
    with pytest.warns(tune.AutotuneWarning, match="not written"):
        tune.autotune("k", [dict(schedule="cooperative", split_k=1)], lambda c: 1.0, cache)
    assert cache.get("k") == {"schedule": "cooperative", "split_k": 1}


def test_no_configuration_runs():
    with pytest.raises(RuntimeError, match="no configuration ran"):
        tune.autotune("k", [dict(schedule="cooperative", split_k=1)], lambda c: 1 / 0, tune.TuneCache("/nonexistent/x"))


class _no_warning:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("error", tune.AutotuneWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)
        return False


def test_leading_dims_are_rows_of_a_view(monkeypatch):
    """(..., K) activations: gemm runs on the (rows, K) view and returns (..., N); no copy is made."""
    orig, seen = ops_gemm.gemm, []

    def inner(a, b, out, *rest):  # the 2-D launch path gemm hands the view to
        seen.append((a.shape, a.stride(), out))
        return T((a.shape[0], b.shape[1]))

    monkeypatch.setattr(ops_gemm, "_gemm_2d", inner)
    res = orig(T((2, 8, 128)), col(128, 256))
    assert seen == [((16, 128), (128, 1), None)] and res.shape == (2, 8, 256)
    with pytest.raises(ops_gemm.GemmArgumentError, match=r"cannot be viewed as \(rows, 128\) without a copy"):
        orig(T((2, 8, 128), strides=(128, 256, 1)), col(128, 256))
    with pytest.raises(ops_gemm.GemmArgumentError, match="expected"):
        orig(T((2, 8, 128)), col(128, 256), T((2, 4, 256)))


def test_a_batched_b_needs_a_batched_a():
    """(L, M, K) x (L, K, N) runs batched (tests/test_gemm_epilogue.py); a batched b against a 2-D a is refused."""
    with pytest.raises(ops_gemm.GemmArgumentError, match="takes a batched a"):
        ops_gemm.check(T((8, 128)), T((2, 128, 256), strides=(32768, 1, 128)))


def test_transposed_16_bit_operands_are_accepted():
    """A backward pass's operands: a column-major (dY^T) and b row-major (W, X); alignment is checked
    on their leading (non-unit) stride."""
    assert ops_gemm.check(T((64, 128), strides=(1, 64)), col(128, 256)) == (64, 256, 128, "bfloat16")
    assert ops_gemm.check(T((64, 128)), T((128, 256))) == (64, 256, 128, "bfloat16")
    assert ops_gemm.check(T((64, 128), strides=(1, 64)), T((128, 256))) == (64, 256, 128, "bfloat16")
    with pytest.raises(ops_gemm.GemmArgumentError, match="16-byte aligned"):
        ops_gemm.check(T((60, 128), strides=(1, 60)), col(128, 256))  # M = 60: its columns are not 16-byte aligned


# ------------------------------------------------------------- shapes no compiled kernel takes
@pytest.mark.parametrize("a,b,out,needle", [
    # dW = dY^T X over 300 tokens (gemm_epilogue_check_s26.log): the strides are aligned, K is not
    (T((1024, 300), strides=(1, 1024)), T((300, 512)), None, r"K = 300 .*not a multiple of 8.*pad K to a multiple of "
     r"8 \(304\) with zeros"),
    (T((64, 24), "torch.float8_e4m3fn", strides=(32, 1)), T((24, 256), "torch.float8_e5m2", strides=(1, 32)), None,
     r"K = 24 .*not a multiple of 16.*float8_e4m3fn x float8_e5m2"),  # a mixed fp8 pair: K of 16 (rows padded)
    (T((64, 128)), col(128, 250), T((64, 250), strides=(256, 1)), r"N = 250 .*not a multiple of 8.*pad b with zero "
     "columns to 256"),  # an out with padded rows passed before; the kernel declares N a multiple of 8
    (T((60, 128), strides=(1, 60)), col(128, 256), None, r"stride of 60 elements \(M = 60 for a contiguous "
     r"column-major a\) is not a multiple of 8 for bfloat16; pad M"),
    (T((64, 128)), T((128, 250), strides=(250, 1)), None, r"N = 250"),
    (T((64, 128)), T((128, 256), strides=(260, 1)), None, r"b's stride of 260 elements \(N = 256 for a contiguous "
     r"row-major b\)"),
    (T((64, 128), ptr=4104), col(128, 256), None, r"a: its base address \(0x1008\) is not 16-byte aligned"),
])
def test_unaligned_shapes_are_named_before_tuning(a, b, out, needle):
    with pytest.raises(ops_gemm.GemmArgumentError, match=needle):
        ops_gemm.check(a, b, out)


def test_aligned_twins_pass():
    """The accepted twins of the refusals above: K padded to 304; a same-type fp8 pair with K = 24
    (the kernel declares K of 8 when A and B share a type; the rows are padded to 32 bytes); M = 64."""
    assert ops_gemm.check(T((1024, 304), strides=(1, 1024)), T((304, 512))) == (1024, 512, 304, "bfloat16")
    e4 = "torch.float8_e4m3fn"
    assert ops_gemm.check(T((64, 24), e4, strides=(32, 1)), T((24, 256), e4, strides=(1, 32)))[:3] == (64, 256, 24)
    assert ops_gemm.check(T((64, 128), strides=(1, 64)), col(128, 256))[:3] == (64, 256, 128)


def test_gemm_refuses_before_the_tuner(monkeypatch):
    """ops.gemm raises the argument error itself: the tuner (which would fail every candidate alike
    and report 'no configuration ran') is never reached."""
    monkeypatch.setattr(tune, "autotune", lambda *a, **k: pytest.fail("autotune reached"))
    with pytest.raises(ops_gemm.GemmArgumentError, match="K = 300"):
        ops_gemm.gemm(T((1024, 300), strides=(1, 1024)), T((300, 512)))


def test_host_check_args_names_k_and_n():
    """gemm_host.check_args (c = a @ b.T, b (N, K)) holds the same rule for its direct callers."""
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from warpsched.kernels.gemm import host as gp

    with pytest.raises(gp.GemmConfigError, match="K = 300 is not a multiple of 8"):
        gp.check_args(T((1024, 300), strides=(1, 1024)), T((512, 300), strides=(1, 512)), T((1024, 512)))
    with pytest.raises(gp.GemmConfigError, match="N = 20 is not a multiple of 8"):
        gp.check_args(T((64, 128)), T((20, 128)), T((64, 20), strides=(24, 1)))
    gp.check_args(T((1024, 304), strides=(1, 1024)), T((512, 304), strides=(1, 512)), T((1024, 512)))


def test_the_tuner_charges_a_host_reduced_split_its_two_launches():
    """A K split that torch reduces costs an eager model two more launches (the sum and the copy): the tuner adds
    ``EXTRA_LAUNCH_MS`` for each to its device time; one reduced in the kernel, a swapped one and whole tiles are
    one launch. The plan decides: split_k="auto" that resolves to one share is one launch."""
    from warpsched.kernels.gemm import ops as gops

    made = []

    class Host:
        @staticmethod
        def plan(a, bt, out, device_scale=False, **opts):
            made.append(opts)
            split = opts.get("split_k", "auto") != 1 and opts.get("split_reduce", "host") == "host"
            return types.SimpleNamespace(target="host" if split else "c")
    a = bt = out = object()
    assert gops._extra_launches(Host, a, bt, out, (), dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto")) == 2
    assert gops._extra_launches(Host, a, bt, out, (), dict(schedule="cooperative", tile_mn=(64, 256), split_k="auto",
                                                           split_reduce="parallel")) == 0
    assert gops._extra_launches(Host, a, bt, out, (), dict(schedule="cooperative", tile_mn=(64, 32), split_k=1)) == 0
    assert gops._extra_launches(Host, a, bt, out, (), dict(tune.SWAP_AB[-1])) == 0  # swapped: no plan asked
    assert len(made) == 3 and 0 < tune.EXTRA_LAUNCH_MS < 0.05
    assert {(c.get("split_reduce"), c["tile_mn"]) for c in tune.candidates(16, 4096, 14336) if c["split_k"] == "auto"} \
        >= {("parallel", (64, 256)), ("parallel", (64, 128)), (None, (64, 256)), (None, (64, 128))}


@pytest.mark.parametrize("junk", [None, 3, "b", [1, 2], object()])
def test_an_operand_that_is_not_a_tensor_is_named(junk):
    """ops.gemm and gemm.ops.linear read shapes and strides for their plan lookups first: whatever is not a tensor
    gets a GemmArgumentError naming it, not an AttributeError from inside."""
    from _fake_tensor import FakeTensor
    from warpsched import ops
    from warpsched.kernels.gemm import ops as gops

    w = FakeTensor((64, 64))
    for call, name in ((lambda: ops.gemm(junk, w), "a"), (lambda: ops.gemm(w, junk), "b"),
                       (lambda: ops.gemm(FakeTensor((2, 8, 64)), junk), "b"),
                       (lambda: gops.linear(junk, w), "x"), (lambda: gops.linear(FakeTensor((8, 64)), junk), "weight")):
        kind = type(junk).__name__
        with pytest.raises(gops.GemmArgumentError, match=f"^{name} is an? {kind}; pass a torch.Tensor"):
            call()
    if junk is not None:  # out, bias and residual may be None, nothing else but a tensor
        for call, name in ((lambda: ops.gemm(w, w, junk), "out"), (lambda: ops.gemm(w, w, bias=junk), "bias"),
                           (lambda: ops.gemm(w, w, residual=junk), "residual")):
            kind = type(junk).__name__
            with pytest.raises(gops.GemmArgumentError, match=f"^{name} is an? {kind}; pass a torch.Tensor or None"):
                call()


def test_wave_fit_tiles_fill_one_wave_where_128x256_leaves_sms_idle():
    # 1000 x 2056 on 132 SMs: 72 tiles of 128x256, 136 of 128x128; 128x144 gives 8 x 15 = 120 (cuBLAS's count,
    # over its 4x1 cluster), 16 x 8 = 128 in 2x2 clusters, 128x160 8 x 13 = 104: over a 4x1, a 2x2 and a 2x1
    # cluster (B multicast; over 4x1 and 2x1 the next width too), and the narrowest without one
    fits = tune.wave_fit_tiles(1000, 2056, 132)
    assert [(c["tile_mn"], c.get("cluster_mn", (1, 1))) for c in fits] == [
        ((128, 144), (4, 1)), ((128, 160), (4, 1)), ((128, 144), (2, 2)), ((128, 144), (2, 1)), ((128, 160), (2, 1)),
        ((128, 144), (2, 1)), ((128, 160), (2, 1)), ((128, 144), (1, 1))]
    assert fits[0]["epi_n"] == 16 and fits[1]["epi_n"] == 32  # 144 columns: 9 sub-tiles of 16
    assert tune.wave_fit_tiles(1000, 3000, 132)[0] == dict(schedule="cooperative", split_k=1, tile_mn=(128, 192),
                                                           epi_n=32, cluster_mn=(4, 1), pdl=True)
    assert [c.get("pdl", False) for c in fits] == [True, True, False, False, False, True, True, False]  # 4x1: PDL
    # a device that holds 120 CTAs in 4-CTA clusters: 1000 x 3000 over 4x1 then takes 128x224 (8 x 14 = 112
    # CTAs), where 128x192 (128) would run two waves
    h200 = tune.wave_fit_tiles(1000, 3000, 132, lambda c: 120 if c[0] * c[1] == 4 else 132)
    assert [(c["tile_mn"][1], c.get("cluster_mn", (1, 1))) for c in h200] == [
        (224, (4, 1)), (224, (2, 2)), (192, (2, 1)), (224, (2, 1)), (192, (2, 1)), (224, (2, 1)), (192, (1, 1))]
    assert tune.candidates(1000, 3000, 1736, cluster_ctas=lambda c: 120 if c[0] * c[1] == 4 else 132)[-7:] == h200
    # by a count of 33 clusters of 4 128x192 fits; 32 clusters took two waves' time on such a machine, so 224 too
    assert [c["tile_mn"][1] for c in tune.wave_fit_tiles(1000, 3000, 132)[:2]] == [192, 224]
    # whole clusters: 600 rows are 5 tiles, 8 in 4x1 clusters, where no width fits (224: 8 x 17 = 136 tiles); 6 in
    # 2x2 and 2x1 clusters (176: 6 x 22 = 132); without a cluster 144 fits (5 x 26 = 130)
    assert [(c["tile_mn"][1], c.get("cluster_mn", (1, 1))) for c in tune.wave_fit_tiles(600, 3700, 132)] == [
        (176, (2, 2)), (176, (2, 1)), (192, (2, 1)), (176, (2, 1)), (192, (2, 1)), (144, (1, 1))]
    # 128x256 already fills the SMs, or 128x128 fits in one wave: nothing to add
    assert tune.wave_fit_tiles(1000, 4096, 132) == [] and tune.wave_fit_tiles(512, 4096, 132) == []
    # a smaller GPU fits fewer tiles: the narrowest bN that still fits one wave
    assert tune.wave_fit_tiles(1000, 2056, 114)[0]["tile_mn"] == (128, 160)
    cands = tune.candidates(1000, 2056, 4104, sms=132)
    assert all(c in cands for c in fits)
    assert not any(c.get("tile_mn") == (128, 144) for c in tune.candidates(1000, 2056, 4104, sms=200))


def test_clustered_additions_are_for_16_bit_only():
    """The wave-fit and clustered small tiles were measured on bf16 (bench/gemm_floor.py); fp8 keeps its list."""
    for M, N in [(1000, 2056), (1000, 1000), (64, 4104)]:
        bf16 = tune.candidates(M, N, 4096, swap=True)
        fp8 = tune.candidates(M, N, 4096, fp8=True, swap=True)
        assert any(c.get("cluster_mn", (1, 1)) != (1, 1) for c in bf16)
        assert not any(c.get("cluster_mn", (1, 1)) != (1, 1) for c in fp8 if M <= 64)
        assert not any(c.get("tile_mn", (0, 0))[1] in tune.WAVE_FIT_BN or c.get("pdl") and c.get("cluster_mn")
                       for c in fp8)
