"""Which ``@schedule`` body is being captured right now, and how a capture-time mistake is raised.

Both ``schedule`` (which pushes captures) and ``resources`` (whose work methods refuse to run
inside one) read this; neither imports the other for it.
"""
from __future__ import annotations

from typing import Any, List, Optional

from ..errors import Finding, ScheduleError
from .source import SourceLoc, caller_location

ACTIVE: List[Any] = []  # the captures in progress, innermost last


def capturing() -> bool:
    return bool(ACTIVE)


def fail(check: str, message: str, *, location: Optional[SourceLoc] = None, resource=None,
         expected=None, fix=None) -> None:
    """Raise the one finding of a capture-time mistake, located at the user's call."""
    raise ScheduleError(Finding(check=check, message=message, location=location or caller_location(),
                                resource=resource, expected=expected, fix=fix))
