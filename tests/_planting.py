"""Planting a bug in a kernel's program from a test: ``planted(module, name=twin)`` replaces the schedule
(or any module-level name) that the module's ``build()`` reads, for the duration of a ``with`` block. The
production builders take no test hooks; the twins live in the tests."""
from __future__ import annotations

import contextlib
import os

# build() options for a quick check in a test: no printout, no progress lines, no verdict cache
QUIET = {"verbose": False, "progress": False, "cache_verdict": False}


def planted_line(test_file, marker):
    """``name.py:N`` for the line of ``test_file`` holding the comment ``marker``: where a planted twin goes
    wrong, which a rejection must name."""
    lines = open(test_file).read().splitlines()
    return f"{os.path.basename(test_file)}:{1 + next(i for i, l in enumerate(lines) if marker in l)}"


class Standin:
    """A schedule argument standing for a resource, with some of its work calls replaced:
    ``Standin(smem_v, retire=lambda **_: None)`` drops the retire a schedule calls on it."""

    def __init__(self, resource, **works):
        self._resource, self._works = resource, works

    def __getattr__(self, name):
        return self._works[name] if name in self._works else getattr(self._resource, name)


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


def rejected(module, g, test_file, named, marker=None, **replacements):
    """Build ``g`` with ``module.build`` while ``replacements`` are planted: the ValidationError's text, which must
    name ``named`` and, given a ``marker``, the line of ``test_file`` holding it (``planted_line``)."""
    import pytest

    from warpsched import ValidationError

    with planted(module, **replacements):
        with pytest.raises(ValidationError) as e:
            module.build(g, **QUIET)
    msg = str(e.value)
    assert named in msg, msg
    if marker:
        assert planted_line(test_file, marker) in msg, msg
    return msg
