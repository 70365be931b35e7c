"""FlashAttention for Hopper as warpsched programs.

Forward: ``forward`` (``FlashAttention``, the program and kernel), ``schedules`` / ``ahead`` (its task
schedules), ``softmax`` (the online softmax's state), ``register_math`` (its arithmetic in registers),
``masks`` (``window_size``, ``mask_mod``, ``softcap``), ``epilogue``, ``units`` (persistent work units and
the K/V tiles each visits), ``host`` (``warpsched.ops.attention``).
Backward: ``backward`` (``FlashAttentionBackward``), ``backward_schedules``, ``backward_math``,
``backward_prep`` (the dO.O row-sum pre-pass), ``backward_host``. Importing a kernel module imports cutlass.
"""
