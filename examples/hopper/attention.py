"""FlashAttention forward for Hopper, written as a warpsched program.

The kernel ships in the package (``warpsched.kernels.attention.forward``, torch entry point
``warpsched.ops.attention``); this file is its examples/ entry, so that

    warpsched check examples/hopper/attention.py            # the program, checked on the CPU
    CUTE_DSL_ARCH=sm_90a python examples/hopper/attention.py   # compile all variants for sm_90a

work like the other examples. See docs/attention.md.
"""
from __future__ import annotations

try:
    from . import _common  # noqa: F401  (pins CUTE_DSL_ARCH before cutlass is imported)
except ImportError:
    import _common  # type: ignore # noqa: F401

from warpsched.kernels.attention.forward import *  # noqa: F401,F403
from warpsched.kernels.attention.forward import HEAD_DIMS, _host, build  # noqa: F401
from warpsched.kernels.attention.host import (attention, build_tuned_hd64, build_unit_overlap,  # noqa: F401
                                              check_args, compile_for_cpu, prepare, tuned_options)

if __name__ == "__main__":
    for hd in HEAD_DIMS:
        for causal in (False, True):
            print(f"hd{hd} causal={causal}", _host.count_ptx(compile_for_cpu(head_dim=hd, causal=causal).artifacts.PTX))
