"""`warpsched check`: exit codes, report shape, options, HTML report, bundled examples."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from warpsched.cli import main, split_target
from warpsched.examples import EXAMPLES
from warpsched.report.verdict import EXIT_ACCEPTED, EXIT_REJECTED, EXIT_UNPROVEN, EXIT_USAGE

PREAMBLE = """\
from dataclasses import dataclass
from warpsched import (MemoryResource, Task, TaskManager, TaskLocalVariable, consumer_work, domain_loop,
                       producer_work, schedule)

@dataclass(kw_only=True)
class Src(MemoryResource):
    val: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=val)
    def load(self, stage_info): ...

@dataclass(kw_only=True)
class Dst(MemoryResource):
    @producer_work
    def store(self, stage_info, val): ...

@schedule
def copy(src, dst):
    with domain_loop(0, 8, 1):
        v = src.load()
        dst.store(val=v)
"""

GOOD = PREAMBLE + """
def build(verbose=True, **manager_options):
    src, dst = Src(name="src"), Dst(name="dst")
    task = Task(name="CopyTask", src_resources=[src], dst_resources=[dst], warp_idx=0, num_warps=1,
                schedule=copy(src, dst))
    return TaskManager(tasks=[task], resource_dependency_graph={dst: [src]}, verbose=verbose, **manager_options)
"""

TWO_LOOPS = PREAMBLE + """
@schedule
def bad(src, dst):
    with domain_loop(0, 8, 1):
        v = src.load()
    with domain_loop(0, 8, 1):
        dst.store(val=v)

def build(verbose=True, **manager_options):
    src, dst = Src(name="src"), Dst(name="dst")
    task = Task(name="BadTask", src_resources=[src], dst_resources=[dst], schedule=bad(src, dst))
    return TaskManager(tasks=[task], resource_dependency_graph={dst: [src]}, verbose=verbose, **manager_options)
"""

MISSING_GRAPH = PREAMBLE + """
def build(verbose=True, **manager_options):
    src, dst = Src(name="src"), Dst(name="dst")
    task = Task(name="CopyTask", src_resources=[src], dst_resources=[dst], schedule=copy(src, dst))
    return TaskManager(tasks=[task], resource_dependency_graph={}, verbose=verbose, **manager_options)
"""

RAISES = PREAMBLE + """
def helper(n):
    return 10 // n

def build():
    return helper(0)
"""

MODULE_LEVEL = GOOD + """
task_manager = build(verbose=False)
del build
"""

VERBOSE_ONLY = GOOD.replace("def build(verbose=True, **manager_options):", "def make_task_manager(verbose=True):") \
    .replace(", **manager_options)", ")")


@pytest.fixture
def write(tmp_path):
    def _write(text, name="prog.py"):
        p = tmp_path / name
        p.write_text(textwrap.dedent(text))
        return str(p)
    return _write


def cli(*args, cwd=None):
    """Run the real command (python -m warpsched) and return (rc, stdout, stderr)."""
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")  # this checkout, also from another cwd
    proc = subprocess.run([sys.executable, "-m", "warpsched", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def verdict_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith("warpsched: ") and not ln.startswith("warpsched: wrote")]
    assert len(lines) == 1, out
    return lines[0]


# ------------------------------------------------------------------ exit codes
def test_accepted_exits_0_with_printout_and_verdict(write):
    rc, out, err = cli("check", write(GOOD))
    assert rc == 0, out + err
    assert "CopyTask[0:1)" in out and "Reg budget:" in out
    assert verdict_line(out).startswith("warpsched: ACCEPTED")
    assert "Traceback" not in out + err


def test_capture_error_is_rejected_with_exit_1_and_no_traceback(write):
    path = write(TWO_LOOPS)
    rc, out, err = cli("check", path)
    assert rc == 1, out + err
    assert "Traceback" not in out + err
    assert "REJECTED" in out and "malformed schedule" in out
    line = [i for i, ln in enumerate(TWO_LOOPS.splitlines(), 1) if ln.strip() == "with domain_loop(0, 8, 1):"][-1]
    assert f"prog.py:{line}: error [schedule capture]" in out  # the verdict lists file:line


def test_missing_graph_entry_is_rejected(write):
    pytest.importorskip("warpsched.verify.checks_structure")
    rc, out, err = cli("check", write(MISSING_GRAPH), "--no-checker")
    assert rc == 1, out + err
    assert "Traceback" not in out + err and "REJECTED" in out
    assert "CopyTask[0:1)" in out  # the printout still shows what was verified


def test_usage_errors_exit_2(write, tmp_path):
    rc, out, err = cli("check", str(tmp_path / "missing.py"))
    assert rc == 2 and "no such file" in err
    good = write(GOOD)
    rc, out, err = cli("check", good + ":nope")
    assert rc == 2 and "no attribute 'nope'" in err and "build" in err
    rc, out, err = cli("check")
    assert rc == 2 and "nothing to check" in err
    rc, out, err = cli("check", "--example", "no_such_example")
    assert rc == 2 and "unknown example" in err and "gemm" in err


def test_user_exception_exits_2_with_only_user_frames(write):
    path = write(RAISES)
    rc, out, err = cli("check", path)
    assert rc == 2
    assert "ZeroDivisionError" in err and f'File "{path}"' in err and "in helper" in err
    assert "cli.py" not in err and "importlib" not in err and "warpsched/" not in err


def test_interrupt_exits_130_with_one_line(write):
    """Ctrl-C while the user's build() or the search runs: exit 130 and one line, no warpsched traceback."""
    rc, out, err = cli("check", write("def build():\n    raise KeyboardInterrupt\n"))
    assert rc == 130
    assert "interrupted (Ctrl-C)" in err and "nothing is proven" in err and "Traceback" not in err


# ------------------------------------------------------------------ options
def test_quiet_prints_only_verdict_and_findings(write):
    rc, out, err = cli("check", write(GOOD), "--quiet")
    assert rc == 0 and out.strip().startswith("warpsched: ACCEPTED") and "Full (" not in out
    rc, out, err = cli("check", write(TWO_LOOPS, "bad.py"), "-q")
    assert rc == 1
    lines = out.strip().splitlines()
    assert lines[0].startswith("warpsched: REJECTED") and "bad.py:" in lines[1] and "fix:" in out
    assert "Full (" not in out


def test_no_checker_is_reported_in_the_verdict(write):
    rc, out, err = cli("check", write(GOOD), "-q", "--no-checker")
    assert rc == 0 and "exhaustive checker: off (--no-checker)" in verdict_line(out)
    assert "deadlocks, races and PDL order across tasks were NOT checked" in out


def test_html_report(write, tmp_path):
    report = tmp_path / "report.html"
    rc, out, err = cli("check", "--example", "gemm", "-q", "--html", str(report))
    assert rc == 0, out + err
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    for name in ("StoreTask", "LoadTask", "MmaTask", "SmemAB", "TmemC"):
        assert name in html
    assert "ACCEPTED" in html
    bad = tmp_path / "bad.html"
    rc, out, err = cli("check", write(TWO_LOOPS), "-q", "--html", str(bad))
    assert rc == 1 and "REJECTED" in bad.read_text() and "schedule capture" in bad.read_text()


def test_module_level_task_manager_and_verbose_only_builder(write):
    rc, out, err = cli("check", write(MODULE_LEVEL, "mod.py"), "-q")
    assert rc == 0 and "ACCEPTED" in out, out + err
    rc, out, err = cli("check", write(VERBOSE_ONLY, "vb.py"), "-q")
    assert rc == 0 and "ACCEPTED" in out, out + err


def test_help_teaches():
    rc, out, err = cli("check", "--help")
    assert rc == 0
    for text in ("PATH[:NAME]", "--example", "--quiet", "--html", "exit codes", "0  ACCEPTED", "1  REJECTED",
                 "2  usage error", "3  UNPROVEN", "def build(verbose=True, **manager_options)"):
        assert text in out, text


def test_list_examples(capsys):
    assert main(["check", "--list-examples"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXAMPLES)


def test_split_target():
    assert split_target("a/b.py:build") == ("a/b.py", "build")
    assert split_target("a/b.py") == ("a/b.py", None)
    assert split_target("C:/x/b.py") == ("C:/x/b.py", None)


# ------------------------------------------------------------------ bundled examples
def test_example_gemm_from_the_readme():
    rc, out, err = cli("check", "--example", "gemm")
    assert rc == 0, out + err
    for header in ("StoreTask[0:4)", "LoadTask[4:5)", "MmaTask[5:6)"):
        assert header in out
    assert "warpsched: ACCEPTED example gemm: 3 tasks" in out


@pytest.mark.parametrize("name", ["grid_stride_copy", "tma_copy", "gemm", "gemm_persistent"])
def test_foundation_examples_are_accepted(name, capsys):
    assert main(["check", "--example", name, "-q"]) == 0, capsys.readouterr()
    assert f"ACCEPTED example {name}" in capsys.readouterr().out


def test_every_listed_example_exists():
    import importlib

    for name in EXAMPLES:
        mod = importlib.import_module(f"warpsched.examples.{name}")
        assert callable(mod.build), name
    here = os.path.dirname(importlib.import_module("warpsched.examples").__file__)
    modules = {f[:-3] for f in os.listdir(here) if f.endswith(".py") and not f.startswith("_")}
    assert set(EXAMPLES) <= modules


def test_a_package_module_with_relative_imports_is_checked_by_path(tmp_path):
    """`warpsched check pkg/kernels/prog.py`, where prog.py does `from ._shared import ...`: the
    file is imported as pkg.kernels.prog (its package's relative imports work), and a finding's
    location is still that file."""
    pkg = tmp_path / "mypkg" / "kernels"
    pkg.mkdir(parents=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_shared.py").write_text(textwrap.dedent(PREAMBLE))
    (pkg / "prog.py").write_text("from ._shared import *  # noqa\nfrom ._shared import Src, Dst, copy\n"
                                 + textwrap.dedent(GOOD.replace(PREAMBLE, "")))
    rc, out, err = cli("check", str(pkg / "prog.py"), "-q", cwd=str(tmp_path))
    assert rc == 0, out + err
    assert verdict_line(out).startswith("warpsched: ACCEPTED")
    (pkg / "bad.py").write_text("from ._shared import *  # noqa\nfrom ._shared import Src, Dst\n"
                                + textwrap.dedent(TWO_LOOPS.replace(PREAMBLE, "")))
    rc, out, err = cli("check", str(pkg / "bad.py"), "-q", cwd=str(tmp_path))
    assert rc == 1, out + err
    assert "bad.py:" in out and "Internal error" not in out + err


def test_cli_native_says_why_it_is_off(monkeypatch, capsys):
    """`warpsched native` where the native path is off (WARPSCHED_NATIVE=0; CI, without torch, is the same
    branch): exit 1, the reason, and that warpsched.nn stays on its Python path."""
    import warpsched.native as native

    monkeypatch.setenv("WARPSCHED_NATIVE", "0")
    monkeypatch.setattr(native, "_STATE", {"tried": False, "op": None, "reason": "not loaded yet"})
    assert main(["native"]) == 1
    err = capsys.readouterr().err
    assert "unavailable (WARPSCHED_NATIVE=0)" in err and "Python path" in err


def test_native_build_failure_warns_once_and_keeps_the_python_path(monkeypatch):
    import warnings

    import warpsched.native as native

    monkeypatch.setattr(native, "_STATE", {"tried": False, "op": None, "reason": "not loaded yet"})
    monkeypatch.setattr(native, "_build", lambda: (None, "CalledProcessError: c++ not found"))
    with pytest.warns(RuntimeWarning, match=r"unavailable \(CalledProcessError: c\+\+ not found\).*Python path"):
        assert native.load() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call: no warning again
        assert native.load() is None and native.reason() == "CalledProcessError: c++ not found"
