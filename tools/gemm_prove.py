"""Prove GEMM configurations on the CPU ahead of a GPU run: each named configuration of the
sweep (gemm_sweep_configs.CONFIGS) is compiled for sm_90a with fake tensors, which runs the exhaustive
checker on its traced program and stores the verdict under $WARPSCHED_CACHE_DIR. Send that
folder with the GPU run (device `carry`) and the GPU machine reads the verdicts instead of
re-proving the slow programs (the 5-stage 128x176 ping-pong: 594k states, about a minute):

  export WARPSCHED_CACHE_DIR=$PWD/.wscache && python3 tools/gemm_prove.py \\
      pps128x176,pps128x176s5,pps128x192,f8pps128x176,f8pps128x176s5,f8pps128x192

A verdict is reused only for the same program and the same warpsched sources: prove again after
any change under src/warpsched.
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))  # bench/: timing helpers, sweep configurations


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) == 2 else 2)
    import cutlass

    from gemm_sweep_configs import CONFIGS
    from warpsched.kernels.gemm.host import compile_for_cpu

    for name in sys.argv[1].split(","):
        if name not in CONFIGS:
            raise SystemExit(f"{name!r} is not in gemm_sweep_configs.CONFIGS")
        cfg = {k: v for k, v in CONFIGS[name].items() if k not in ("fp8", "split_k")}
        if CONFIGS[name].get("fp8"):
            cfg["ab_dtype"] = cutlass.Float8E4M3FN
        t0 = time.time()
        compile_for_cpu(**cfg)
        print(f"{name}: proven and compiled in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
