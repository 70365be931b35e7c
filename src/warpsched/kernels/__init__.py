"""Ready-made kernels written as warpsched programs (CuTe DSL, imported on demand).

``warpsched.kernels.gemm``: the persistent warp-specialized Hopper GEMM behind ``warpsched.ops.gemm``.
``warpsched.kernels.attention``: FlashAttention forward and backward behind ``warpsched.ops.attention``.
``shipped``: every program the package ships proven (``warpsched prove``). Importing a kernel module
imports cutlass; set ``CUTE_DSL_ARCH`` (e.g. ``sm_90a``) first when compiling without a GPU.
"""
