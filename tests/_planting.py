"""Planting a bug in a kernel's program from a test: ``planted(module, name=twin)`` replaces the schedule
(or any module-level name) that the module's ``build()`` reads, for the duration of a ``with`` block. The
production builders take no test hooks; the twins live in the tests."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def planted(module, **replacements):
    missing = [name for name in replacements if not hasattr(module, name)]
    if missing:  # a renamed schedule must not turn a twin into a silent no-op
        raise AttributeError(f"{module.__name__} has no {', '.join(missing)} to replace")
    saved = {name: getattr(module, name) for name in replacements}
    try:
        for name, value in replacements.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
