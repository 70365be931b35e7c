"""Ready-made kernels written as warpsched programs (CuTe DSL, imported on demand).

``warpsched.kernels.attention``: FlashAttention forward for Hopper; ``warpsched.ops.attention``
is its torch-facing entry point. Importing a kernel module imports cutlass; set
``CUTE_DSL_ARCH`` (e.g. ``sm_90a``) first when compiling without a GPU.
"""
