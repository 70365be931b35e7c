"""The program a kernel is compiled from is the program that is checked.

TaskManager runs the static checks and the exhaustive checker while CuTe DSL traces the kernel
(sm_90a, fake tensors, no GPU), on the parameters the kernel is compiled with; a rejected kernel
does not compile; the verdict is cached by the program's fingerprint; ``warpsched check`` on the
CPU and the kernel trace check the same program (equal fingerprints)."""
from __future__ import annotations

import functools
import importlib
import os
import sys
import warnings

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)

from warpsched import ValidationError, ValidationWarning, cli, domain_loop, schedule  # noqa: E402
from warpsched.verify.verdicts import VERDICTS  # noqa: E402

GEMM_PATH = os.path.join(ROOT, "examples", "hopper", "wgmma_gemm.py")


def _line_of(marker: str) -> int:
    with open(__file__) as fh:
        return next(i for i, ln in enumerate(fh, 1) if marker in ln and "_line_of" not in ln)


# Two plants in the wgmma_gemm consumer (copies of examples/hopper/wgmma_gemm.py: mma_schedule).
@schedule
def mma_in_loop_release_deleted(smem_ab, gmem_c, k_tiles):
    acc, frag_a, frag_b = smem_ab.init_acc()
    with domain_loop(0, k_tiles, 1) as d:
        smem_ab.wait()  # PLANT-A: nothing releases this stage in the loop
        with d.first_iter():
            smem_ab.mma(acc=acc, frag_a=frag_a, frag_b=frag_b, first=True)
        with d.every(1, start=1):
            smem_ab.mma(acc=acc, frag_a=frag_a, frag_b=frag_b)
            smem_ab.retire(pending=1)
    smem_ab.retire()
    smem_ab.release()
    gmem_c.store(acc=acc)


@schedule
def mma_one_tile_too_many(smem_ab, gmem_c, k_tiles):
    """Brackets are right, so only the exhaustive checker sees it: the consumer waits for
    k_tiles + 1 tiles and the loader loads k_tiles."""
    acc, frag_a, frag_b = smem_ab.init_acc()
    with domain_loop(0, k_tiles + 1, 1) as d:
        smem_ab.wait()  # PLANT-B: the last wait never completes
        with d.first_iter():
            smem_ab.mma(acc=acc, frag_a=frag_a, frag_b=frag_b, first=True)
        with d.every(1, start=1):
            smem_ab.mma(acc=acc, frag_a=frag_a, frag_b=frag_b)
            smem_ab.retire(pending=1)
            smem_ab.release()
    smem_ab.retire()
    smem_ab.release()
    gmem_c.store(acc=acc)


@pytest.fixture
def gemm():
    return importlib.import_module("wgmma_gemm")


def _formatted(findings):
    return [f.format() for f in findings]


def test_the_kernel_trace_runs_the_checker_once_and_recompiles_from_the_cache(gemm, checker_runs):
    gemm.compile_for_cpu()
    assert len(checker_runs) == 1 and (VERDICTS.runs, VERDICTS.hits) == (1, 0)
    traced = VERDICTS.looked_up[-1]
    assert traced in VERDICTS
    gemm.compile_for_cpu()  # traced again (a new TaskManager), verdict from the cache
    assert len(checker_runs) == 1 and (VERDICTS.runs, VERDICTS.hits) == (1, 1)
    assert VERDICTS.looked_up == [traced, traced]
    # the traced program used the kernel's own numbers: the SMEM-derived stage count and a runtime K
    program = checker_runs[0]
    smem_ab = program.tasks[0].dst_resources[0]
    assert smem_ab.pipeline_config.num_stages == gemm.WgmmaGemm().ab_stage == 4
    assert repr(program.tasks[0].schedule.domain_loop.end) == "k_tiles"
    assert program.tasks[0].schedule.domain_loop.end.value is not None  # the DSL value, not None


def test_a_program_outside_a_trace_is_not_cached_by_default(gemm, checker_runs):
    gemm.build(verbose=False)
    gemm.build(verbose=False)
    assert len(checker_runs) == 2 and len(VERDICTS) == 0
    mgr = gemm.build(verbose=False, cache_verdict=True)
    assert len(checker_runs) == 3 and mgr.fingerprint in VERDICTS and not mgr.verdict_cached


def test_warpsched_check_and_the_kernel_check_the_same_program(gemm, checker_runs, capsys):
    assert cli.main(["check", GEMM_PATH, "-q"]) == 0
    verdict = capsys.readouterr().out.strip().splitlines()[0]
    assert verdict.startswith("warpsched: ACCEPTED") and "exhaustive checker: SAFE" in verdict
    printed = verdict.rsplit("program ", 1)[1].rstrip(")")
    outcome = cli.run_check(lambda: cli.resolve(cli.load_module(GEMM_PATH), None, GEMM_PATH), GEMM_PATH,
                            verbose=False, manager_options={})
    cpu = outcome.manager.fingerprint
    assert cpu.startswith(printed) and len(printed) == 16
    VERDICTS.clear()
    gemm.compile_for_cpu()
    assert VERDICTS.looked_up == [cpu]  # the one program traced in the kernel is the CLI's program


@pytest.mark.parametrize("cluster", [(2, 1), (2, 2)])
def test_cluster_builds_are_the_cluster_kernels(gemm, checker_runs, cluster):
    gemm.compile_for_cpu(cluster_mn=cluster)
    assert VERDICTS.looked_up == [gemm.build(cluster_mn=cluster, verbose=False).fingerprint]
    assert gemm.build(cluster_mn=(1, 1), verbose=False).fingerprint != VERDICTS.looked_up[0]


def test_a_deadlock_only_the_exhaustive_checker_sees_fails_the_compile(gemm, checker_runs, monkeypatch):
    monkeypatch.setattr(gemm, "mma_schedule", mma_one_tile_too_many)
    with pytest.raises(ValidationError) as cpu:
        gemm.build(verbose=False)  # what `warpsched check` reports
    with pytest.raises(ValidationError) as traced:
        gemm.compile_for_cpu()
    (finding,) = traced.value.findings
    assert finding.check == "exhaustive interleaving" and finding.message.startswith("deadlock")
    assert os.path.realpath(finding.location.file) == os.path.realpath(__file__)
    assert finding.location.line == _line_of("PLANT-B")
    assert "trip counts in this counterexample" in finding.detail and "(k_tiles)" in finding.detail
    assert _formatted(traced.value.findings) == _formatted(cpu.value.findings)
    assert str(traced.value).startswith("warpsched rejected the program traced in this kernel: 1 finding")
    assert f"test_traced_check.py:{finding.location.line}" in str(traced.value)
    # a rejected verdict is cached too: the second compile fails the same way without a search
    assert len(checker_runs) == 2  # the CPU build and the first trace (the CPU one is not cached)
    with pytest.raises(ValidationError) as again:
        gemm.compile_for_cpu()
    assert len(checker_runs) == 2 and VERDICTS.hits == 1
    assert _formatted(again.value.findings) == _formatted(traced.value.findings)


def test_the_in_loop_release_deleted_fails_the_compile(gemm, checker_runs, monkeypatch):
    """The plant of issue 10: the static checks already reject it (before any search)."""
    monkeypatch.setattr(gemm, "mma_schedule", mma_in_loop_release_deleted)
    with pytest.raises(ValidationError) as cpu:
        gemm.build(verbose=False)
    with pytest.raises(ValidationError) as traced:
        gemm.compile_for_cpu()
    (finding,) = traced.value.findings
    assert finding.check == "work bracketing" and "never released" in finding.message
    assert finding.location.line == _line_of("PLANT-A")
    assert _formatted(traced.value.findings) == _formatted(cpu.value.findings)
    assert checker_runs == []


def test_skip_validation_compiles_the_rejected_kernel_with_warnings(gemm, checker_runs, monkeypatch):
    monkeypatch.setattr(gemm, "mma_schedule", mma_one_tile_too_many)
    monkeypatch.setattr(gemm, "build", functools.partial(gemm.build, skip_validation=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ValidationWarning)
        ptx = gemm.compile_for_cpu().artifacts.PTX
    assert "wgmma.mma_async" in ptx
    assert any("deadlock" in str(w.message) for w in caught if issubclass(w.category, ValidationWarning))
