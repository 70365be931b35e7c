"""Source locations of user calls, so every finding can point at file:line."""
from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int

    @property
    def text(self) -> str:
        return linecache.getline(self.file, self.line).strip()

    def __str__(self) -> str:
        return f"{_short(self.file)}:{self.line}"


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


_SKIP = {"contextlib.py", "dataclasses.py", "<string>", "functools.py"}
# The bundled examples and kernels live inside the package but are user code (programs written
# with warpsched): their lines are the locations.
_USER_DIRS = tuple(os.path.join(_PACKAGE_DIR, d) + os.sep for d in ("examples", "kernels"))
UNKNOWN = SourceLoc("<unknown>", 0)


def _user_frame():
    frame = sys._getframe(2)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        user = not filename.startswith(_PACKAGE_DIR + os.sep) or filename.startswith(_USER_DIRS)
        if user and os.path.basename(filename) not in _SKIP:
            return frame
        frame = frame.f_back
    return None


def caller_location() -> SourceLoc:
    """The first frame outside the warpsched package: where the user made the call."""
    frame = _user_frame()
    return UNKNOWN if frame is None else SourceLoc(frame.f_code.co_filename, frame.f_lineno)


# set to True in a module that warpsched.compat.port_imports ported from the reference TS (schedule.py
# reads it: a ported module's domain_loop keeps the reference's default unroll)
PORT_MARKER = "__warpsched_port__"


def caller_globals() -> dict:
    """The module globals of that frame (``{}`` when there is none)."""
    frame = _user_frame()
    return {} if frame is None else frame.f_globals
