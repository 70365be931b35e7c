"""FlashAttention for Hopper as warpsched programs.

Forward: ``forward`` (``FlashAttention``, the program and kernel), ``schedules`` / ``ahead`` (its task
schedules), ``register_math`` (the online softmax in registers), ``masks`` (causal, ``mask_mod``,
``softcap``), ``epilogue``, ``units`` (persistent work units), ``host`` (``warpsched.ops.attention``).
Backward: ``backward`` (``FlashAttentionBackward``), ``backward_schedules``, ``backward_math``,
``backward_prep`` (the dO.O row-sum pre-pass), ``backward_host``. Importing a kernel module imports cutlass.
"""
