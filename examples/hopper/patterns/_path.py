"""Import helper: the pattern kernels reuse examples/hopper/_common.py (arch pin, torch -> CuTe)."""
import os
import sys

_HOPPER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _HOPPER not in sys.path:
    sys.path.insert(0, _HOPPER)

import _common  # noqa: E402,F401

__all__ = ["_common"]
