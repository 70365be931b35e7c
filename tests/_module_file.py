"""Modules executed from their files, for CPU tests that run real warpsched code against stand-in modules
(a stand-in torch) without importing the real package."""
from __future__ import annotations

import importlib.util
import sys


def exec_module_file(name, path, monkeypatch=None):
    """Module ``name`` executed from ``path``. With ``monkeypatch`` it is first registered in ``sys.modules``
    for the test's duration, so modules executed after it import this one; without, nothing is registered."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    return mod
