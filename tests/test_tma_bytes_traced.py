"""The TMA bytes a kernel's copies really deliver, checked while CuTe DSL traces it (sm_90a, fake
tensors, no GPU): a producer work that issues its loads through ``StageInfo.tma_copy`` records each
copy's static byte count, and a bracket whose copies do not deliver what its acquire arms fails
the compilation (examples/hopper/wgmma_gemm.py: 48 KiB of A and B tiles per stage)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)

from warpsched import ValidationError  # noqa: E402
from warpsched.verify.verdicts import VERDICTS  # noqa: E402


@pytest.fixture
def gemm():
    VERDICTS.clear()
    yield importlib.import_module("wgmma_gemm")
    VERDICTS.clear()


def _mutant(module, old, new, tmp_path, *more):
    """Import a copy of ``module`` with ``old`` -> ``new`` (and the ``more`` pairs) replaced, each exactly once."""
    src = open(module.__file__).read()
    for a, b in ((old, new), *more):
        assert src.count(a) == 1, a
        src = src.replace(a, b)
    path = tmp_path / "wgmma_gemm.py"
    path.write_text(src)
    name = f"_tx_mutant_wgmma_gemm_{abs(hash(src))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod, path.read_text().splitlines()


def _line_of(lines, text):
    return next(i + 1 for i, ln in enumerate(lines) if ln == text)


def _compile_rejected(mod, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValidationError) as info:
            mod.compile_for_cpu(**kw)
    return info.value.findings


LOAD_TASK = 'Task(name="LoadTask", src_resources=[gmem_ab], dst_resources=[smem_ab], warp_idx=0, num_warps=1,'


@pytest.mark.parametrize("cluster_mn", [(1, 1), (2, 1)])
def test_the_gemm_copies_deliver_what_its_acquire_arms(gemm, cluster_mn):
    """The correct twin: one producer warp, A and B tiles (multicast in a cluster) = num_bytes."""
    gemm.compile_for_cpu(cluster_mn=cluster_mn)


def test_two_producer_warps_that_each_copy_the_whole_tile_do_not_compile(gemm, tmp_path):
    """The mutation run's documented gap (wgmma_gemm warps+1): a 2-warp producer arms num_bytes / 2
    per warp, but every warp's tma_load copies the whole tile, so 2 x 48 KiB land on a 48 KiB phase.
    The static checks accept it (the copy size lives in the work body); the trace rejects it."""
    mod, lines = _mutant(gemm, LOAD_TASK, LOAD_TASK.replace("num_warps=1", "num_warps=2"), tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mod.build(verbose=False).result.accepted  # the CPU check cannot see the copies
    findings = _compile_rejected(mod)
    assert len(findings) == 1, [f.format() for f in findings]
    f = findings[0]
    assert (f.task, f.resource, f.check) == ("LoadTask", "SmemAB", "pipeline thread counts and bytes")
    assert f.location.line == _line_of(lines, "        smem_ab.tma_load(k=k)")
    assert "each of its 2 warps issues TMA copies of 49152 bytes" in f.message and "98304 bytes land" in f.message
    assert f.expected == "copies of 24576 per warp, 49152 bytes into each CTA's stage (num_bytes=49152)"
    assert f.fix == "one producer warp (num_warps=1), or let each of the 2 warps copy its 1/2 of the stage (24576 bytes)"


def test_a_declared_partial_stage_whose_num_bytes_is_wrong_does_not_compile(gemm, tmp_path):
    """partial_stage=True lets num_bytes be less than a stage statically; the copies still fill it
    whole, so the traced kernel is rejected (on the H200 the tx-count underflows)."""
    old = "num_bytes=g.tile_bytes,"
    mod, lines = _mutant(gemm, old, "num_bytes=g.tile_bytes - 1024, partial_stage=True,", tmp_path)
    findings = _compile_rejected(mod)
    assert len(findings) == 1 and findings[0].resource == "SmemAB"
    assert "49152 bytes land in the CTA's stage, but the acquire arms 48128" in findings[0].message
    assert "completes before the last copies land" in findings[0].message
    assert findings[0].fix.startswith("copy the whole stage (48128 bytes), or num_bytes=49152 (with SMEM allocations")


def test_copies_that_deliver_less_than_armed_do_not_compile(gemm, tmp_path):
    """Only the A tile is loaded: 16 KiB of 48 KiB arrive, the phase never completes (a hang)."""
    old = "for atom, smem, gmem, mode in ((v.tma_a, v.sA, v.gA, 1), (v.tma_b, v.sB, v.gB, 0)):"
    mod, lines = _mutant(gemm, old, old.replace(", (v.tma_b, v.sB, v.gB, 0))", ",)"), tmp_path)
    findings = _compile_rejected(mod)
    assert len(findings) == 1 and "16384 bytes land" in findings[0].message
    assert "never completes (the kernel hangs)" in findings[0].message


def test_skip_validation_reports_the_byte_mismatch_as_a_warning(gemm, tmp_path):
    """skip_validation=True (how tools/planted builds its buggy kernels) turns the traced finding
    into a ValidationWarning, as for every static finding, and the kernel compiles."""
    from warpsched import ValidationWarning

    mod, _ = _mutant(gemm, LOAD_TASK, LOAD_TASK.replace("num_warps=1", "num_warps=2"), tmp_path,
                     ("verbose=False)  # checked here", "verbose=False, skip_validation=True)  # checked here"))
    with pytest.warns(ValidationWarning, match="each of its 2 warps issues TMA copies of 49152 bytes"):
        mod.compile_for_cpu()



def test_copies_outside_a_producer_bracket_are_refused():
    """A copy completes bytes on the stage's barrier; with no acquire of the task open on the resource (a consumer
    work, or a producer work after its commit) no arrive.expect_tx armed the phase for them. (An AUXILIARY
    producer load is already a deadlock to the checker, which delivers bytes only from bracketed works.)"""
    from types import SimpleNamespace

    from warpsched.lower.tx_bytes import TxLedger
    from warpsched.model.source import SourceLoc

    ledger = TxLedger(SimpleNamespace(name="MmaTask"))
    res = SimpleNamespace(name="SmemAB")
    step = SimpleNamespace(method="peek", location=SourceLoc("k.py", 3))
    with pytest.raises(ValidationError) as e:
        ledger.worked(res, step, [(16384, "8192 x 2 B", 128, "L")])
    f = e.value.findings[0]
    assert (f.task, f.resource, f.location.line) == ("MmaTask", "SmemAB", 3)
    assert "outside a producer acquire / commit bracket" in f.message and "1 TMA copy (8192 x 2 B)" in f.message
