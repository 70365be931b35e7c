"""What ptxas makes of the shipped kernels, compiled on the CPU: no register spills, and no wgmma serialized
(ptxas's C7512: when a wgmma may be in flight across a branch, or its registers do not fit, ptxas waits after
every wgmma of the kernel, which has cost these kernels up to half their speed). Read from the report of the
ptxas CuTe DSL runs (``_host.ptxas_remarks``). The ``dq_defer`` backward (head dim 64's default for plain
non-causal calls, opt-in elsewhere) is held to its known 48 bytes."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
from warpsched.kernels import _host  # noqa: E402
from warpsched.kernels.attention import backward_host as bh  # noqa: E402
from warpsched.kernels.attention import host as fh  # noqa: E402
from warpsched.kernels.attention import varlen  # noqa: E402
from warpsched.kernels.gemm import host as gh  # noqa: E402

CASES = {
    "backward hd64 causal": lambda: bh.compile_for_cpu(head_dim=64, causal=True, **bh.default_options(64)),
    "backward hd128 causal": lambda: bh.compile_for_cpu(head_dim=128, causal=True, **bh.default_options(128)),
    "backward hd256 causal": lambda: bh.compile_for_cpu(head_dim=256, causal=True, **bh.default_options(256)),
    "forward hd128 causal": lambda: fh.compile_for_cpu(head_dim=128, causal=True, **fh.tuned_options(128, True)),
    "forward hd64 full": lambda: fh.compile_for_cpu(head_dim=64, causal=False, **fh.tuned_options(64, False)),
    "gemm pingpong": lambda: gh.compile_for_cpu(),
    "gemm cooperative swiglu + bias + residual": lambda: gh.compile_for_cpu(
        schedule="cooperative", activation="swiglu", bias="c", residual=True),
    "forward hd64 causal long": lambda: fh.compile_for_cpu(
        head_dim=64, causal=True, **fh.tuned_options(64, True, fh.LONG_CAUSAL_HD64)),
    "forward hd128 full long": lambda: fh.compile_for_cpu(
        head_dim=128, causal=False, **fh.tuned_options(128, False, None, fh.LONG_FULL_HD128)),
    "forward varlen hd128 causal": lambda: varlen.compile_for_cpu(head_dim=128, causal=True),
    # the unit queue the load warp fetches: at 24 load-warp registers it spilled 72 bytes
    "forward varlen hd128 causal queued": lambda: varlen.compile_for_cpu(
        head_dim=128, causal=True, **varlen.queued_varlen_options(128, True)),
    "backward hd128 deterministic": lambda: bh.compile_for_cpu(
        head_dim=128, causal=True, **dict(bh.default_options(128), deterministic=True)),
    "backward hd64 dkv_in_ds": lambda: bh.compile_for_cpu(
        head_dim=64, causal=True, **dict(bh.default_options(64), dkv_in_ds=True)),
}
QUICK = ("backward hd64 causal", "backward hd128 causal")


def _report(capfd, compile_fn):
    capfd.readouterr()
    with _host.ptxas_remarks():
        compile_fn()
    out, err = capfd.readouterr()
    found = _host.ptxas_findings(out + err)
    assert found is not None, "no ptxas report in the compile's output:\n" + (out + err)[-2000:]
    return found


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow) for n in CASES])
def test_shipped_kernels_do_not_spill_or_serialize(name, capfd):
    stores, loads, serialized = _report(capfd, CASES[name])
    assert not serialized, f"{name}: ptxas serialized every wgmma (C7512)"
    assert (stores, loads) == (0, 0), f"{name}: {stores} bytes of spill stores, {loads} of spill loads"


def test_dq_defer_keeps_its_wgmma_async(capfd):
    """The deferred dQ GEMM is issued with no branch around it (backward_schedules.grad_schedule_deferred): a
    guarded issue made ptxas serialize every wgmma. At head dim 64 its dQ accumulator beside dS costs 48 bytes of
    spills; at head dim 128 nothing."""
    stores, loads, serialized = _report(capfd, lambda: bh.compile_for_cpu(
        head_dim=64, causal=True, **dict(bh.default_options(64), dq_defer=True)))
    assert not serialized
    assert stores <= 48 and loads <= 48, (stores, loads)
    # what a plain non-causal head dim 64 call runs (default_options(64, full=True))
    stores, loads, serialized = _report(capfd, lambda: bh.compile_for_cpu(
        head_dim=64, causal=False, **bh.default_options(64, full=True)))
    assert not serialized
    assert stores <= 48 and loads <= 48, (stores, loads)
    options = dict(bh.default_options(128), dq_defer=True)  # with overlap_dq: dQ staged under the dK GEMM
    assert _report(capfd, lambda: bh.compile_for_cpu(head_dim=128, causal=True, **options)) == (0, 0, False)


def test_the_report_reader():
    assert _host.ptxas_findings("no report") is None
    text = ("ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are\n      serialized\n"
            "ptxas         .     24 bytes stack frame, 48 bytes spill stores, 40 bytes spill loads")
    assert _host.ptxas_findings(text) == (48, 40, True)
    assert _host.ptxas_findings("0 bytes spill stores, 0 bytes spill loads") == (0, 0, False)
