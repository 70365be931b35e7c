"""The persistent warp-specialized Hopper GEMM as a warpsched program.

``config`` (constants, no cutlass import), ``resources`` / ``program`` (the program: rings, epilogue, the
fused epilogue's ``epilogue``), ``kernel`` (``PersistentGemm``, the CuTe DSL kernel), ``host`` / ``launch``
(plans and compiled launches), ``ops`` / ``batched`` / ``autotune`` (``warpsched.ops.gemm`` on it),
``handover`` / ``fixup`` / ``streamk`` / ``residency`` (split-K and stream-K's cross-CTA hand-overs, the
grid protocol the checker proves and the kernel runs). Importing a module that builds kernels imports cutlass.
"""
