"""The ``warpsched`` command line: check a schedule program on the CPU, no GPU needed."""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import inspect
import io
import os
import sys
import sysconfig
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple

from .errors import Finding, HasFindings, ValidationError
from .manager import TaskManager, ValidationWarning

EXIT_ACCEPTED, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2
DEFAULT_NAMES = ("build", "make_task_manager", "main")
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

DESCRIPTION = """\
warpsched checks warp-specialized GPU kernels written as explicit schedules.

`warpsched check` imports a Python file, calls the function that builds your
TaskManager (on the CPU: no GPU, no kernel launch), and prints what TaskManager
verified: the schedule table (one column per task, head + loop + tail walked step
by step), the register budget, and every finding with the file:line of the
schedule call it is about, what was expected, and the usual fix.
"""

EPILOG = """\
which function is called:
  PATH:NAME names it. Without NAME the first of build, make_task_manager, main
  found in the file is called; failing those, a module-level TaskManager object
  is used. The function is called with verbose=... when it accepts it, and with
  the manager options (e.g. exhaustive_deadlock_race_check=False) when it takes
  **kwargs, e.g.

      def build(verbose=True, **manager_options):
          ...
          return TaskManager(tasks=..., resource_dependency_graph=...,
                             verbose=verbose, **manager_options)

  Options are also applied to every TaskManager the function constructs.

examples:
  warpsched check --example gemm            check a bundled example
  warpsched check --list-examples           list the bundled examples
  warpsched check my_kernel.py              call build() in my_kernel.py
  warpsched check my_kernel.py:make_tm -q   call make_tm(), print only the verdict
  warpsched check my_kernel.py --html report.html
                                            also write a standalone HTML report
  python -m warpsched check --example tma_copy

exit codes:
  0  accepted (warnings may still be listed)
  1  rejected: a ValidationError or ScheduleError, printed as a report
  2  usage error: file or NAME not found, or the file raised another exception
     (its traceback is shown, limited to your own code)
"""


# ------------------------------------------------------------------ outcome of one run
@dataclass
class Outcome(HasFindings):
    target: str
    findings: List[Finding] = field(default_factory=list)
    manager: Optional[TaskManager] = None
    rejected: bool = False
    title: str = ""  # "malformed schedule" / "warpsched rejected the program"


class UsageError(Exception):
    """Exit code 2 with a message (and optionally the user's traceback frames)."""

    def __init__(self, message: str, tb_text: str = ""):
        super().__init__(message)
        self.tb_text = tb_text


# ------------------------------------------------------------------ loading the user's file
def split_target(target: str) -> Tuple[str, Optional[str]]:
    """``path.py:name`` -> (path, name). A Windows drive letter is not a NAME separator."""
    if ":" in target:
        path, _, name = target.rpartition(":")
        if path and os.sep not in name and "/" not in name and not (len(path) == 1 and path.isalpha()):
            return path, name or None
    return target, None


def _user_frames(exc: BaseException) -> str:
    """The traceback limited to the user's own frames: not warpsched, the standard library,
    installed packages or the import machinery."""
    stdlib = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
    frames = []
    for fs in traceback.extract_tb(exc.__traceback__):
        fn = os.path.abspath(fs.filename)
        parts = fn.split(os.sep)
        if (fs.filename.startswith("<") or fn.startswith(_PKG_DIR + os.sep) or fn.startswith(stdlib)
                or "site-packages" in parts or "dist-packages" in parts):
            continue
        frames.append(fs)
    if not frames:  # nothing of the user's in it: a fault inside warpsched, show where
        lines = ["Internal error inside warpsched (please report it); last frames:\n"]
        lines += traceback.format_list(traceback.extract_tb(exc.__traceback__)[-4:])
        return "".join(lines + traceback.format_exception_only(type(exc), exc))
    lines = ["Traceback (your code only):\n"] + traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def load_module(path: str):
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give the Python file that builds the TaskManager")
    path = os.path.abspath(path)
    name = "_warpsched_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_").replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(path))  # so the file's sibling imports work
    try:
        spec.loader.exec_module(module)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(os.path.dirname(path))
    return module


def resolve(module, name: Optional[str], label: str) -> Any:
    """The builder function, or an already-built TaskManager attribute."""
    if name is not None:
        if not hasattr(module, name):
            found = [n for n in DEFAULT_NAMES if callable(getattr(module, n, None))]
            hint = f" (found: {', '.join(found)})" if found else ""
            raise UsageError(f"{label} has no attribute {name!r}{hint}")
        return getattr(module, name)
    for n in DEFAULT_NAMES:
        if callable(getattr(module, n, None)):
            return getattr(module, n)
    managers = [n for n, v in vars(module).items() if isinstance(v, TaskManager)]
    if managers:
        return getattr(module, managers[0])
    raise UsageError(f"{label} defines none of {', '.join(DEFAULT_NAMES)} and no TaskManager object; "
                     f"name the function with {label}:NAME")


def _call_builder(fn: Callable, verbose: bool, manager_options: dict) -> Any:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn()
    params = sig.parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {}
    if "verbose" in params or takes_kwargs:
        kwargs["verbose"] = verbose
    if takes_kwargs:
        kwargs.update(manager_options)
    required = [p.name for p in params.values() if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and p.name not in kwargs]
    if required:
        raise UsageError(f"{getattr(fn, '__name__', fn)}() needs argument(s) {', '.join(required)}; "
                         "warpsched check calls it with no positional arguments")
    return fn(**kwargs)


@contextlib.contextmanager
def _manager_overrides(options: dict, built: List[TaskManager]):
    """Apply the CLI's manager options to every TaskManager built meanwhile, and remember each
    one (even a rejected one: its program is set before verification raises)."""
    original = TaskManager.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        kwargs.update(options)
        built.append(self)
        original(self, *args, **kwargs)

    TaskManager.__init__ = init
    try:
        yield
    finally:
        TaskManager.__init__ = original


def run_check(load: Callable[[], Any], target: str, *, verbose: bool, manager_options: dict) -> Outcome:
    """Import/call the user's builder and collect what TaskManager verified."""
    built: List[TaskManager] = []
    outcome = Outcome(target)
    overrides = dict(manager_options)
    if not verbose:
        overrides["verbose"] = False
    argv = sys.argv
    sink = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, _manager_overrides(overrides, built):
        warnings.simplefilter("always", ValidationWarning)
        sys.argv = [target]  # a user's main() may parse sys.argv
        try:
            with contextlib.redirect_stdout(sink) if not verbose else contextlib.nullcontext():
                result = load()
                if callable(result) and not isinstance(result, TaskManager):
                    result = _call_builder(result, verbose, manager_options)
        except ValidationError as e:  # ScheduleError is a ValidationError
            outcome.rejected = True
            outcome.findings = list(e.findings)
            outcome.title = str(e).split(":", 1)[0]
            result = None
        except UsageError:
            raise
        except SystemExit as e:
            raise UsageError(f"{target} called sys.exit({e.code!r}) while building the TaskManager")
        except Exception as e:  # noqa: BLE001 - the user's code failed: report it, exit 2
            raise UsageError(f"{target} raised {type(e).__name__} while building the TaskManager",
                             tb_text=_user_frames(e)) from e
        finally:
            sys.argv = argv
    if isinstance(result, TaskManager):
        outcome.manager = result
    elif built:
        outcome.manager = built[-1]
    elif not outcome.rejected:
        raise UsageError(f"{target} returned {type(result).__name__}, not a TaskManager, and built none")
    if not outcome.rejected and outcome.manager is not None and outcome.manager.result is not None:
        outcome.findings = list(outcome.manager.result.findings)
    if not outcome.findings:  # warnings only: recover them from the warning records
        outcome.findings = [Finding(check="warning", message=str(w.message), severity="warning")
                            for w in caught if issubclass(w.category, ValidationWarning)]
    return outcome


# ------------------------------------------------------------------ report
def _one_line(f: Finding) -> str:
    where = str(f.location) if f.location is not None and f.location.line else "<no location>"
    who = ", ".join(x for x in (f"task {f.task!r}" if f.task else "",
                                f"resource {f.resource!r}" if f.resource else "") if x)
    return f"  {where}: {f.severity} [{f.check}] {f.message}" + (f" ({who})" if who else "")


def format_report(outcome: Outcome, *, quiet: bool) -> str:
    lines: List[str] = []
    if not quiet and outcome.findings:
        lines.append("")
        lines.append(f"Findings ({outcome.title or 'warpsched'}):" if outcome.rejected else "Findings:")
        for i, f in enumerate(outcome.findings, 1):
            lines.append(f"{i}. {f.severity}: " + f.format())
    n_err, n_warn = len(outcome.errors), len(outcome.warnings)
    counts = f"{n_err} error{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}"
    if outcome.rejected:
        verdict = f"REJECTED {outcome.target}: {counts}"
        if outcome.title == "malformed schedule":
            verdict += " (malformed schedule: capture failed)"
        elif _fingerprint(outcome):
            verdict += f" ({_fingerprint(outcome)})"
    else:
        tasks = len(outcome.manager.tasks) if outcome.manager is not None else 0
        verdict = f"ACCEPTED {outcome.target}: {tasks} task{'s' if tasks != 1 else ''}, {counts}"
        verdict += f" ({_coverage(outcome)})"
    lines.append("")
    lines.append(f"warpsched: {verdict}")
    for f in outcome.findings:
        lines.append(_one_line(f))
        if quiet:  # the full block was not printed: keep what makes a finding actionable
            lines.extend(f"      {k}: {v}" for k, v in (("expected", f.expected), ("fix", f.fix)) if v)
    return "\n".join(lines)


def _coverage(outcome: Outcome) -> str:
    """Which verification actually ran, so an ACCEPTED verdict is not read as more than it is."""
    from .verify import CHECK_FAMILIES

    checker = getattr(getattr(outcome.manager, "result", None), "checker", None)
    if checker is not None:
        ran = f"exhaustive checker: {checker.verdict}"
    elif outcome.manager is not None and not outcome.manager.program.options.exhaustive_deadlock_race_check:
        ran = "exhaustive checker: off"
    else:
        ran = "exhaustive checker: not run (static findings first)"
    n = len(CHECK_FAMILIES)
    fp = _fingerprint(outcome)
    return f"static check families: {n}/{n}; {ran}" + (f"; {fp}" if fp else "")


def _fingerprint(outcome: Outcome) -> str:
    """``program <16 hex digits>``: the kernel traced from this program checks the same fingerprint
    (``TaskManager.fingerprint``)."""
    if outcome.manager is None:
        return ""
    try:
        return f"program {outcome.manager.fingerprint[:16]}"
    except Exception:  # noqa: BLE001 - a malformed program the findings already explain
        return ""


# ------------------------------------------------------------------ examples
def _examples() -> dict:
    from .examples import EXAMPLES

    return EXAMPLES


def list_examples() -> str:
    rows = [f"  {name:<18} {doc}" for name, doc in _examples().items()]
    return "Bundled examples (warpsched check --example NAME):\n" + "\n".join(rows)


def _example_loader(name: str) -> Callable[[], Any]:
    if name not in _examples():
        raise UsageError(f"unknown example {name!r}\n{list_examples()}")

    def load():
        return importlib.import_module(f"warpsched.examples.{name}").build
    return load


# ------------------------------------------------------------------ entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warpsched", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser("check", help="check a schedule program on the CPU and print the report",
                           description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("target", nargs="?", metavar="PATH[:NAME]",
                       help="Python file that builds a TaskManager; NAME is the function (or TaskManager "
                            "attribute) to use")
    check.add_argument("--example", metavar="NAME", help="check a bundled example instead of a file")
    check.add_argument("--list-examples", action="store_true", help="list the bundled examples and exit")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="print only the verdict and the findings (no schedule table)")
    check.add_argument("--no-checker", action="store_true",
                       help="skip the exhaustive interleaving checker (exhaustive_deadlock_race_check=False)")
    check.add_argument("--html", metavar="REPORT.html",
                       help="also write a standalone HTML report (graph, schedules, findings)")
    check.add_argument("--traceback", action="store_true",
                       help="on a usage error, show the full Python traceback (for debugging warpsched)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "check":
        parser.print_help()
        return EXIT_USAGE
    try:
        return _check(args)
    except BrokenPipeError:  # `warpsched check ... | head`: the reader left, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ACCEPTED
    except UsageError as e:
        if e.tb_text:
            print(e.tb_text, file=sys.stderr, end="" if e.tb_text.endswith("\n") else "\n")
            if args.traceback and e.__cause__ is not None:
                traceback.print_exception(type(e.__cause__), e.__cause__, e.__cause__.__traceback__)
        print(f"warpsched: error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _check(args) -> int:
    if args.list_examples:
        print(list_examples())
        return EXIT_ACCEPTED
    if args.example and args.target:
        raise UsageError("give either PATH[:NAME] or --example NAME, not both")
    if args.example:
        load, target = _example_loader(args.example), f"example {args.example}"
    elif args.target:
        path, name = split_target(args.target)
        if not os.path.exists(path):
            raise UsageError(f"no such file: {path}")
        target = args.target

        def load():
            try:
                module = load_module(path)
            except (ValidationError, UsageError):
                raise
            except SyntaxError as e:
                raise UsageError(f"{path} has a syntax error", tb_text="".join(
                    traceback.format_exception_only(type(e), e))) from e
            return resolve(module, name, path)
    else:
        raise UsageError("nothing to check: give PATH[:NAME] or --example NAME (see warpsched check --help)")
    options = {"exhaustive_deadlock_race_check": False} if args.no_checker else {}
    outcome = run_check(load, target, verbose=not args.quiet, manager_options=options)
    print(format_report(outcome, quiet=args.quiet))
    if args.html:
        from .report.html import render_report

        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(render_report(outcome))
        except OSError as e:
            raise UsageError(f"cannot write {args.html}: {e.strerror}") from e
        print(f"warpsched: wrote {args.html}")
    return EXIT_REJECTED if outcome.rejected or outcome.errors else EXIT_ACCEPTED


if __name__ == "__main__":
    sys.exit(main())
