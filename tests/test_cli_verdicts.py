"""`warpsched check` verdicts and exit codes: ACCEPTED 0, REJECTED 1, usage 2, UNPROVEN 3;
coverage counted from what ran; --max-states / --max-seconds; module targets; progress."""
from __future__ import annotations

import importlib
import textwrap

import pytest

from warpsched.cli import main
from warpsched.examples import EXAMPLES
from warpsched.report.verdict import EXIT_ACCEPTED, EXIT_REJECTED, EXIT_UNPROVEN, EXIT_USAGE

from test_cli import GOOD, PREAMBLE, cli, verdict_line

PIPELINE_PREAMBLE = """\
from dataclasses import dataclass
from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskManager, TaskLocalVariable,
                       consumer_work, domain_loop, producer_work, schedule)
from warpsched.examples._groups import thread_group


@dataclass(kw_only=True)
class Gmem(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=val)
    def load(self, stage_info: StageInfo): ...

    @producer_work
    def store(self, stage_info: StageInfo, val=None): ...


@dataclass(kw_only=True)
class Smem(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @producer_work
    def fill(self, stage_info: StageInfo, val=None): ...

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo): ...


@schedule
def load(src, smem):
    with domain_loop(0, 8, 1):
        v = src.load()
        smem.acquire()
        smem.fill(val=v)
        smem.commit()
"""

BUILD = """
def build(verbose=True, **manager_options):
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=thread_group(32),
                                                         consumer_group=thread_group(32))
    src, smem, dst = Gmem(name="src"), Smem(name="smem", pipeline_config=cfg), Gmem(name="dst")
    tasks = [Task(name="Load", src_resources=[src], dst_resources=[smem], warp_idx=0, num_warps=1,
                  schedule=load(src, smem)),
             Task(name="Store", src_resources=[smem], dst_resources=[dst], warp_idx=1, num_warps=1,
                  schedule=store(smem, dst))]
    return TaskManager(tasks=tasks, resource_dependency_graph={smem: [src], dst: [smem]}, verbose=verbose,
                       **manager_options)
"""

SAFE = PIPELINE_PREAMBLE + """
@schedule
def store(smem, dst):
    with domain_loop(0, 8, 1):
        smem.wait()
        v = smem.read()
        dst.store(val=v)
        smem.release()
""" + BUILD

# The store loop steps by 2: half the loader's trip count, so the loader waits for a free stage
# forever. Every static check passes; only the exhaustive checker sees it.
DEADLOCK = SAFE.replace("    with domain_loop(0, 8, 1):\n        smem.wait()",
                        "    with domain_loop(0, 8, 2):\n        smem.wait()")

RETURNS_NONE = GOOD.replace("    return TaskManager(", "    TaskManager(")


@pytest.fixture
def write(tmp_path):
    def _write(text, name="prog.py"):
        p = tmp_path / name
        p.write_text(textwrap.dedent(text))
        return str(p)
    return _write


def run(capsys, *args):
    rc = main(["check", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# ------------------------------------------------------------------ one test per verdict
def test_accepted_is_exit_0_and_says_what_was_proven(write, capsys):
    rc, out, err = run(capsys, write(SAFE), "-q")
    assert rc == EXIT_ACCEPTED == 0, out + err
    line = verdict_line(out)
    assert line.startswith("warpsched: ACCEPTED") and "exhaustive checker: SAFE" in line
    assert "exhaustive checker: SAFE, " in out and " states in " in out
    assert "loop lengths proven: domain end (compile-time) [Load, Store]: exactly 8" in out


def test_unsafe_is_rejected_with_exit_1_and_the_counterexample(write, capsys):
    path = write(DEADLOCK)
    rc, out, err = run(capsys, path, "-q")
    assert rc == EXIT_REJECTED == 1, out + err
    line = verdict_line(out)
    assert line.startswith("warpsched: REJECTED") and "exhaustive checker: UNSAFE" in line
    acquire = [i for i, ln in enumerate(DEADLOCK.splitlines(), 1) if ln.strip() == "smem.acquire()"][0]
    assert f"prog.py:{acquire}: error [exhaustive interleaving] deadlock: Load blocked in ProducerAcquire" in out
    assert "Traceback" not in out + err


def test_static_error_is_rejected_with_exit_1(write, capsys):
    rc, out, err = run(capsys, write(DEADLOCK.replace("        smem.release()\n", "")), "-q")
    assert rc == EXIT_REJECTED
    assert "exhaustive checker: not run (static errors first)" in verdict_line(out)


def test_incomplete_search_is_unproven_exit_3(write, capsys):
    rc, out, err = run(capsys, write(SAFE), "-q", "--max-states", "3")
    assert rc == EXIT_UNPROVEN == 3, out + err
    line = verdict_line(out)
    assert line.startswith("warpsched: UNPROVEN") and "exhaustive checker: INCOMPLETE" in line
    assert "(hit max_states=3)" in out and "NOT proven safe" in out


def test_max_seconds_stops_the_search_unproven(write, capsys):
    rc, out, err = run(capsys, write(SAFE), "-q", "--max-seconds", "0.000001")
    assert rc == EXIT_UNPROVEN, out + err
    assert "ran past max_seconds=1e-06" in out


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_an_incomplete_search_never_exits_0(name, capsys):
    """Every bundled example, its search cut after one state: UNPROVEN, exit 3, never 0."""
    rc, out, err = run(capsys, "--example", name, "-q", "--max-states", "1")
    assert rc == EXIT_UNPROVEN, out + err
    assert verdict_line(out).startswith(f"warpsched: UNPROVEN example {name}")


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_bundled_example_completes_within_the_default_cap(name, capsys):
    rc, out, err = run(capsys, "--example", name, "-q")
    assert rc == EXIT_ACCEPTED, out + err
    assert "exhaustive checker: SAFE" in verdict_line(out)


def test_usage_error_exit_2_for_bad_limits(write):
    rc, out, err = cli("check", write(GOOD), "--max-states", "0")
    assert rc == EXIT_USAGE == 2 and "must be > 0" in err
    rc, out, err = cli("check", write(GOOD), "--max-seconds", "soon")
    assert rc == EXIT_USAGE and "is not a number" in err


def test_help_documents_every_verdict_and_exit_code():
    rc, out, err = cli("check", "--help")
    assert rc == 0
    for text in ("0  ACCEPTED", "1  REJECTED", "2  usage error", "3  UNPROVEN", "--max-states", "--max-seconds",
                 "never exit 0", "MODULE[:NAME]", "progress line on stderr"):
        assert text in out, text


# ------------------------------------------------------------------ coverage
def test_coverage_counts_the_families_that_applied(write, capsys):
    rc, out, err = run(capsys, write(GOOD), "-q")  # no pipeline, no groups, no PDL, no work tiles
    assert rc == 0
    assert "static check families: 3/8 applied" in verdict_line(out)
    assert ("not applicable: persistent work tiles (no work_tile_loop or WorkQueue), pipelines and interleaving "
            "(no resource with a pipeline_config)") in out
    rc, out, err = run(capsys, write(SAFE, "safe.py"), "-q")
    assert "static check families: 5/8 applied" in verdict_line(out)
    assert "pipelines and interleaving" not in out.split("not applicable:", 1)[1]


def test_coverage_names_a_skipped_family(write, capsys):
    prog = SAFE.replace("verbose=verbose,\n", "verbose=verbose, assume_pdl_wait_completed=True,\n")
    rc, out, err = run(capsys, write(prog), "-q")
    assert rc == 0, out + err
    assert "skipped: PDL ordering (assume_pdl_wait_completed=True)" in out


# ------------------------------------------------------------------ what is checked
def test_build_returning_none_is_a_usage_error(write, capsys):
    rc, out, err = run(capsys, write(RETURNS_NONE), "-q")
    assert rc == EXIT_USAGE, out + err
    assert "build() returned NoneType, not a TaskManager" in err
    assert "it built 1 TaskManager(s) without returning one" in err and "return TaskManager(...)" in err
    assert "Traceback" not in err


def test_module_target_with_relative_imports(tmp_path):
    pkg = tmp_path / "mykernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text(textwrap.dedent(PREAMBLE))
    (pkg / "copy_kernel.py").write_text(textwrap.dedent(GOOD.replace(PREAMBLE, "from .common import *  # noqa\n"
                                                                     "from warpsched import Task, TaskManager\n")))
    rc, out, err = cli("check", "mykernels.copy_kernel:build", "-q", cwd=str(tmp_path))
    assert rc == 0, out + err
    assert verdict_line(out).startswith("warpsched: ACCEPTED mykernels.copy_kernel:build: 1 task")
    rc, out, err = cli("check", str(pkg / "copy_kernel.py"), "-q")  # as a file of the package: imported as
    assert rc == 0, out + err  # mykernels.copy_kernel, so its relative import works from any cwd
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "copy_kernel.py").write_text((pkg / "copy_kernel.py").read_text())  # no package around it
    rc, out, err = cli("check", str(loose / "copy_kernel.py"), "-q")
    assert rc == EXIT_USAGE and "ImportError" in err and "Internal error" not in err
    rc, out, err = cli("check", "mykernels.nope", cwd=str(tmp_path))
    assert rc == EXIT_USAGE and "no such file or module: mykernels.nope" in err


def test_progress_on_stderr_even_with_quiet(write, capsys, monkeypatch):
    explore = importlib.import_module("warpsched.verify.checker.explore")
    monkeypatch.setattr(explore, "PROGRESS_EVERY", 0.0)  # a line at once, as a long search would print
    rc, out, err = run(capsys, write(SAFE), "-q")
    assert rc == 0
    assert "exhaustive checker:" in err and "states explored" in err and "states/s" in err
    assert "states/s" not in out
