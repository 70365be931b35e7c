"""Findings and the errors that carry them. Every finding says where and how to fix."""
from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types
from dataclasses import dataclass
from typing import Iterable, List, Optional

from .model.source import SourceLoc


@dataclass
class Finding:
    """One problem (or warning) a check found: the check family, the task, the resource, the
    schedule call's ``file:line``, what was expected and how to fix it; ``detail`` holds the
    checker's counterexample timeline."""

    check: str  # the check family, e.g. "work bracketing"
    message: str  # what is wrong
    task: Optional[str] = None
    resource: Optional[str] = None
    location: Optional[SourceLoc] = None  # the offending schedule call (or declaration)
    expected: Optional[str] = None  # what was expected, with exact numbers where relevant
    fix: Optional[str] = None  # the usual fix
    severity: str = "error"  # "error" | "warning"
    detail: Optional[str] = None  # multi-line extra (e.g. a counterexample timeline)

    @property
    def line(self) -> Optional[int]:
        return self.location.line if self.location else None

    def format(self) -> str:
        head = f"[{self.check}] {self.message}"
        parts = [head]
        who = ", ".join(x for x in (f"task {self.task!r}" if self.task else "",
                                    f"resource {self.resource!r}" if self.resource else "") if x)
        if who:
            parts.append(f"    in: {who}")
        if self.location is not None and self.location.line:
            parts.append(f"    at: {self.location}")
            text = self.location.text
            if text:
                parts.append(f"        {text}")
        if self.expected:
            parts.append(f"    expected: {self.expected}")
        if self.fix:
            parts.append(f"    fix: {self.fix}")
        if self.detail:
            parts.extend("    " + ln for ln in self.detail.splitlines())
        return "\n".join(parts)


class HasFindings:
    """Mixin for results that carry ``findings``: splits them by severity."""

    findings: List[Finding]

    @property
    def errors(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> List[Finding]:
        return [f for f in self.findings if f.severity != "error"]


class ValidationError(ValueError):
    """A rejected program. ``.findings`` lists every problem found, not just the first."""

    def __init__(self, findings: Iterable[Finding], title: str = "warpsched rejected the program"):
        self.findings: List[Finding] = list(findings)
        n = len(self.findings)
        body = "\n\n".join(f"{i + 1}. {f.format()}" for i, f in enumerate(self.findings))
        super().__init__(f"{title}: {n} finding{'s' if n != 1 else ''}\n\n{body}")


class ValidationWarning(UserWarning):
    """A finding reported as a warning (a warning-level check, or ``skip_validation=True``)."""


class ScheduleError(ValidationError):
    """A schedule that cannot be captured (raised when the @schedule function is called)."""

    def __init__(self, finding: Finding):
        super().__init__([finding], title="malformed schedule")
        self.finding = finding


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
ENV_TRACEBACK = "WARPSCHED_TRACEBACK"  # "full": keep warpsched's own frames (for reports of warpsched's bugs)


def _user_frames(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    """``tb`` without warpsched's own frames, nor the library frames (CuTe DSL, the standard library) that lead
    into them (a ``with domain_loop`` entered, a runtime loop the lowering opens): the user's frames, their work
    bodies' included, remain."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    libraries = _library_dirs()
    kinds = [_kind(t.tb_frame.f_code.co_filename, libraries) for t in entries]
    keep = []
    for i, (t, k) in enumerate(zip(entries, kinds)):
        if k == "warpsched":
            continue
        if k == "library":
            after = next((x for x in kinds[i + 1:] if x != "library"), None)
            if after == "warpsched" or (after is None and "warpsched" in kinds[:i]):
                continue
        keep.append(t)
    out = None
    for t in reversed(keep):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _library_dirs() -> tuple:
    dirs = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")]
    dsl = sys.modules.get("cutlass")  # loaded where a kernel is traced; never imported here
    if getattr(dsl, "__file__", None):
        dirs.append(os.path.dirname(os.path.dirname(os.path.abspath(dsl.__file__))))
    return tuple(os.path.join(d, "") for d in dirs)


def _kind(filename: str, libraries: tuple) -> str:
    if filename.startswith(_PACKAGE_DIR):
        return "warpsched"
    if filename.startswith(libraries) or filename == "<string>":  # exec'd code: a dataclass's __init__
        return "library"
    return "user"


def _is_user_error(e: BaseException) -> bool:
    """A rejection warpsched raises on purpose (its message names the fix), not an internal error."""
    return isinstance(e, ValueError) and type(e).__module__.startswith("warpsched.")


def user_facing(fn):
    """An entry point users call: a rejection it raises shows the user's frames only (the message already names
    the schedule call's file:line); an internal error keeps its whole traceback. ``WARPSCHED_TRACEBACK=full``
    keeps every frame."""

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as e:
            if _is_user_error(e) and os.environ.get(ENV_TRACEBACK) != "full":
                e.__traceback__ = _user_frames(e.__traceback__)
            raise

    return entry
