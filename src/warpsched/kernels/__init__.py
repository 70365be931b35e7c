"""Ready-made kernels written as warpsched programs (CuTe DSL, imported on demand).

``warpsched.kernels.attention``: FlashAttention forward for Hopper; ``warpsched.ops.attention``
is its torch-facing entry point. ``gemm_ops`` / ``gemm_autotune``: ``warpsched.ops.gemm`` (pure
Python until called; it runs the persistent GEMM of examples/hopper) and its on-disk autotuner. Importing a kernel module imports cutlass; set
``CUTE_DSL_ARCH`` (e.g. ``sm_90a``) first when compiling without a GPU.
"""
