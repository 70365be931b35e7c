"""FlashAttention for Hopper as warpsched programs.

Forward: ``forward`` (``FlashAttention``, the program and kernel), ``schedules`` / ``ahead`` (its task
schedules), ``softmax`` (the online softmax's state), ``register_math`` (its arithmetic in registers),
``masks`` (``window_size``, ``mask_mod``, ``softcap``), ``epilogue``, ``units`` (persistent work units and
the K/V tiles each visits), ``host`` (``warpsched.ops.attention``).
Backward: ``backward`` (``FlashAttentionBackward``), ``backward_schedules``, ``backward_math``,
``backward_prep`` (the dO.O row-sum pre-pass), ``backward_host``. Importing a kernel module imports cutlass.
"""


def out_in_q_order(q) -> bool:
    """Whether attention's O for ``q`` (B, H, S_q, D) is made in (B, S_q, H, D) memory order: q's sequence stride
    is larger than its head stride, i.e. q is (a slice of) a (B, S_q, ..., D) tensor seen through
    ``transpose(1, 2)``, how a model's QKV projection hands it over. SDPA's flash and cuDNN backends return O
    so, and a model's ``O.transpose(1, 2).reshape(B, S_q, H * D)`` is then a view, not a copy. The host
    (``empty_out``) and the custom op's fake (``warpsched.torch_ops``) both allocate through it, so compiled and
    eager agree on O's strides. Pure Python: no cutlass."""
    _, H, S, _ = q.shape
    return H > 1 and S > 1 and q.stride(2) > q.stride(1)


def empty_out(q):
    """A new O for ``q`` (B, H, S_q, D), q's dtype and device: in (B, S_q, H, D) memory where ``out_in_q_order``
    says so, else contiguous (``new_empty``: a real tensor on the device, a fake one under a tracer)."""
    B, H, S, D = q.shape
    if out_in_q_order(q):
        return q.new_empty((B, S, H, D)).transpose(1, 2)
    return q.new_empty((B, H, S, D))
