"""The ``warpsched`` command line: check a schedule program on the CPU, no GPU needed."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import io
import os
import re
import sys
import sysconfig
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple

from .errors import Finding, HasFindings, ValidationError
from .manager import TaskManager, ValidationWarning, capture_managers
from .verify.program import Options
from .report.verdict import (EXIT_ACCEPTED, EXIT_REJECTED, EXIT_UNPROVEN, EXIT_USAGE,  # noqa: F401 - re-exported
                             Verdict, judge)

DEFAULT_NAMES = ("build", "make_task_manager", "main")
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

DESCRIPTION = """\
warpsched checks warp-specialized GPU kernels written as explicit schedules.

`warpsched check` imports a Python file (or module), calls the function that
builds your TaskManager (on the CPU: no GPU, no kernel launch), and prints what
TaskManager verified: the schedule table (one column per task, head + loop + tail
walked step by step), the register budget, the exhaustive checker's search, and
every finding with the file:line of the schedule call it is about, what was
expected, and the usual fix. The verdict line says which check families applied
and what the exhaustive checker proved.
"""

EPILOG = """\
what is checked:
  PATH is a Python file (path/to/kernel.py; inside a package, next to an
  __init__.py, it is imported as that package's module, so its relative imports
  work); MODULE is a dotted module name (pkg.kernels.gemm), imported like
  `python -m` would (the current directory is on sys.path).
  :NAME names the function. Without NAME the first of build, make_task_manager,
  main found is called; failing those, a module-level TaskManager object is used.
  The function must return the TaskManager (returning None is a usage error).
  It is called with verbose=... when it accepts it, and with the manager
  options (e.g. exhaustive_deadlock_race_check=False) when it takes **kwargs, e.g.

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
  warpsched check pkg.kernels.gemm:build    a module that uses relative imports
  warpsched check big.py --max-states 2000000 --max-seconds 600
  warpsched check my_kernel.py --html report.html
                                            also write a standalone HTML report
  python -m warpsched check --example tma_copy

verdicts and exit codes:
  0  ACCEPTED  no errors; the exhaustive checker proved every interleaving SAFE
               (or was turned off with --no-checker, which the verdict says)
  1  REJECTED  a ValidationError or ScheduleError (an UNSAFE counterexample is one),
               printed as a report
  2  usage error: file, module or NAME not found, build() returned no TaskManager,
     or the file raised another exception (its traceback is shown, limited to
     your own code)
  3  UNPROVEN  no errors found, but the exhaustive search stopped at --max-states
               or --max-seconds before covering every interleaving: nothing is
               proven about deadlocks or races (never exit 0)
  130 interrupted (Ctrl-C): the check did not finish, nothing is proven

  A search running longer than 2 s prints a progress line on stderr about every
  2 s, also with --quiet.
"""


# ------------------------------------------------------------------ outcome of one run
@dataclass
class Outcome(HasFindings):
    target: str
    findings: List[Finding] = field(default_factory=list)
    manager: Optional[TaskManager] = None
    rejected: bool = False
    title: str = ""  # "malformed schedule" / "warpsched rejected the program"
    checker_off: Optional[str] = None  # how the exhaustive checker was turned off (e.g. "--no-checker")

    @property
    def verdict(self) -> Verdict:
        return judge(rejected=self.rejected, errors=len(self.errors), manager=self.manager,
                     checker_off=self.checker_off)


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


def _package_module(path: str):
    """(dotted name, directory above the top package) of a .py file inside a package (its
    directory has an ``__init__.py``), else (None, None)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    folder, parts = os.path.dirname(path), []
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    names = parts + ([] if stem == "__init__" else [stem])
    if not parts or not all(_MODULE_NAME.fullmatch(n) and "." not in n for n in names):
        return None, None
    return ".".join(names), folder


def load_module(path: str):
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give the Python file that builds the TaskManager")
    path = os.path.abspath(path)
    dotted, root = _package_module(path)
    if dotted is not None:  # a module of a package: import it as one, so its relative imports work
        sys.path.insert(0, root)
        try:
            return importlib.import_module(dotted)
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(root)
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


_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def is_module_target(path: str) -> bool:
    """``pkg.module`` (not an existing file, no path separator, no .py suffix)."""
    return (not os.path.exists(path) and "/" not in path and os.sep not in path and not path.endswith(".py")
            and _MODULE_NAME.fullmatch(path) is not None)


def import_target_module(name: str):
    """Import ``pkg.module`` the way ``python -m`` finds it: the current directory first."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            raise UsageError(f"no such file or module: {name} (module {e.name!r} not found from {cwd}; "
                             "give a path to a .py file, or run from the directory that contains the package)"
                             ) from None
        raise
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)


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


def run_check(load: Callable[[], Any], target: str, *, verbose: bool, manager_options: dict) -> Outcome:
    """Import/call the user's builder and collect what TaskManager verified. ``manager_options``
    are imposed on every TaskManager built meanwhile (manager.capture_managers)."""
    outcome = Outcome(target)
    overrides = dict(manager_options)
    if not verbose:
        overrides["verbose"] = False
    overrides.setdefault("progress", True)  # a long search reports on stderr, even with --quiet
    argv = sys.argv
    sink = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, capture_managers(**overrides) as built:
        warnings.simplefilter("always", ValidationWarning)
        sys.argv = [target]  # a user's main() may parse sys.argv
        try:
            with contextlib.redirect_stdout(sink) if not verbose else contextlib.nullcontext():
                result = load()
                if callable(result) and not isinstance(result, TaskManager):
                    name = getattr(result, "__name__", "the builder")
                    result = _call_builder(result, verbose, manager_options)
                    if not isinstance(result, TaskManager):
                        built_note = (f"; it built {len(built)} TaskManager(s) without returning one: end it with "
                                      "`return TaskManager(...)`" if built else "")
                        raise UsageError(f"{target}: {name}() returned {type(result).__name__}, not a TaskManager"
                                         + built_note)
        except ValidationError as e:  # ScheduleError is a ValidationError
            outcome.rejected = True
            outcome.findings = list(e.findings)
            outcome.title = str(e).split(":", 1)[0]
            result = built[-1] if built and built[-1].result is not None else None  # the one that raised
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
    elif not outcome.rejected:
        raise UsageError(f"{target} is {type(result).__name__}, not a TaskManager")
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
    v = outcome.verdict
    n_err, n_warn = len(outcome.errors), len(outcome.warnings)
    counts = f"{n_err} error{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}"
    tasks = len(outcome.manager.tasks) if outcome.manager is not None else 0
    verdict = f"{v.word} {outcome.target}: "
    if outcome.rejected and outcome.title == "malformed schedule":
        verdict += f"{counts} (malformed schedule: capture failed)"
    else:
        extras = [x for x in (v.summary, _fingerprint(outcome)) if x]  # the fingerprint last: tests read it there
        verdict += f"{tasks} task{'s' if tasks != 1 else ''}, {counts}" + (f" ({'; '.join(extras)})" if extras else "")
    lines.append("")
    lines.append(f"warpsched: {verdict}")
    lines.extend(f"  {d}" for d in v.details)
    for f in outcome.findings:
        lines.append(_one_line(f))
        if quiet:  # the full block was not printed: keep what makes a finding actionable
            lines.extend(f"      {k}: {val}" for k, val in (("expected", f.expected), ("fix", f.fix)) if val)
    return "\n".join(lines)


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
    check.add_argument("target", nargs="?", metavar="PATH[:NAME] | MODULE[:NAME]",
                       help="Python file (or dotted module name) that builds a TaskManager; NAME is the "
                            "function (or TaskManager attribute) to use")
    check.add_argument("--example", metavar="NAME", help="check a bundled example instead of a file")
    check.add_argument("--list-examples", action="store_true", help="list the bundled examples and exit")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="print only the verdict and the findings (no schedule table)")
    check.add_argument("--no-checker", action="store_true",
                       help="skip the exhaustive interleaving checker (exhaustive_deadlock_race_check=False); "
                            "the verdict then says deadlocks and races were not checked")
    check.add_argument("--max-states", metavar="N", type=_positive(int),
                       help=f"stop the exhaustive search after N states (default {Options.max_states}); "
                            "a search that stops is UNPROVEN, exit 3")
    check.add_argument("--max-seconds", metavar="S", type=_positive(float),
                       help="stop the exhaustive search after S seconds (default: no limit); a search that "
                            "stops is UNPROVEN, exit 3")
    check.add_argument("--html", metavar="REPORT.html",
                       help="also write a standalone HTML report (verdict, checker timeline, graph, schedules, "
                            "findings)")
    check.add_argument("--traceback", action="store_true",
                       help="on a usage error, show the full Python traceback (for debugging warpsched)")
    prove = sub.add_parser("prove", help="prove the shipped kernels' programs into the package's proof manifest",
                           description="Run the exhaustive checker on every program of the kernels warpsched "
                           "ships (what ops.gemm / ops.attention / ops.attention_backward compile on their own) "
                           "and write the SAFE verdicts to src/warpsched/proofs/manifest.json, so a first "
                           "compile does not search. Only programs missing for the current checker are "
                           "searched.")
    prove.add_argument("--check", action="store_true",
                       help="only report the shipped programs the manifest lacks (exit 1 if any)")
    prove.add_argument("--all", action="store_true", help="search every shipped program again")
    prove.add_argument("--max-states", metavar="N", type=_positive(int), default=5_000_000,
                       help="the search budget per program (default 5000000)")
    sub.add_parser("native", help="build (once) and load the native launch path of warpsched.nn (needs torch)",
                   description="Build warpsched's native launch path (warpsched.native: the linear layer's autograd "
                   "node, its launches and attention's in C++, a torch extension) if it is not built for this torch "
                   "yet, load it and say where it is, or why it cannot be. warpsched.nn builds it on first use "
                   "anyway; this does it ahead (a container's build step, say). Needs torch, a C++17 compiler and "
                   "ninja; WARPSCHED_NATIVE=0 turns the native path off.")
    return parser


def _native() -> int:
    from . import native

    started = time.time()
    if native.load() is None:
        print(f"warpsched native: unavailable ({native.reason()}); warpsched.nn runs on its Python path",
              file=sys.stderr)
        return 1
    print(f"warpsched native: loaded in {time.time() - started:.1f} s from {native.build_directory()}")
    return EXIT_ACCEPTED


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value
    parse.__name__ = kind.__name__
    return parse


EXIT_INTERRUPTED = 130  # the shell's code for a command ended by SIGINT


def main(argv: Optional[List[str]] = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C in a long search or in the user's build(): a line, not our stack
        print("warpsched: interrupted (Ctrl-C): the check did not finish, nothing is proven", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "prove":
        from .prove import prove

        return prove(check_only=args.check, again=args.all, max_states=args.max_states)
    if args.command == "native":
        return _native()
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
        as_module = is_module_target(path)
        if not as_module and not os.path.exists(path):
            raise UsageError(f"no such file: {path}")
        target = args.target

        def load():
            try:
                module = import_target_module(path) if as_module else load_module(path)
            except (ValidationError, UsageError):
                raise
            except SyntaxError as e:
                raise UsageError(f"{path} has a syntax error", tb_text="".join(
                    traceback.format_exception_only(type(e), e))) from e
            return resolve(module, name, path)
    else:
        raise UsageError("nothing to check: give PATH[:NAME], MODULE[:NAME] or --example NAME "
                         "(see warpsched check --help)")
    options: dict = {"exhaustive_deadlock_race_check": False} if args.no_checker else {}
    if args.max_states is not None:
        options["max_states"] = args.max_states
    if args.max_seconds is not None:
        options["max_seconds"] = args.max_seconds
    outcome = run_check(load, target, verbose=not args.quiet, manager_options=options)
    if args.no_checker:
        outcome.checker_off = "--no-checker"
    print(format_report(outcome, quiet=args.quiet))
    if args.html:
        from .report.html import render_report

        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(render_report(outcome, outcome.verdict))
        except OSError as e:
            raise UsageError(f"cannot write {args.html}: {e.strerror}") from e
        print(f"warpsched: wrote {args.html}")
    return outcome.verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
