"""Ready-made kernels written as warpsched programs (CuTe DSL, imported on demand).

``warpsched.kernels.attention``: FlashAttention forward for Hopper; ``warpsched.ops.attention``
is its torch-facing entry point. ``gemm_config`` / ``gemm_resources`` / ``gemm_program`` /
``gemm_kernel`` / ``gemm_host``: the persistent warp-specialized Hopper GEMM; ``gemm_ops`` /
``gemm_autotune``: ``warpsched.ops.gemm`` on it (pure Python until called) and its on-disk
autotuner. Importing a kernel module imports cutlass; set ``CUTE_DSL_ARCH`` (e.g. ``sm_90a``)
first when compiling without a GPU.
"""
