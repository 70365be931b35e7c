"""When ``warpsched.nn`` calls the kernels' hosts directly and when the custom ops (imports torch)."""
from __future__ import annotations

import torch


def eager(t) -> bool:
    """Whether to call the kernels' hosts directly for ``t``: a plain tensor in eager mode (the same kernels,
    without the dispatcher's round trip to a Python op, ~10 µs a call). Otherwise the custom ops
    ``torch.ops.warpsched.*``: under torch.compile, torch.export or another tracer (whose tensors are
    subclasses: fake, functional) an op is opaque, while dynamo would trace into the hosts' Python (plan
    caches, checks) and break the graph."""
    return type(t) is torch.Tensor and not torch.compiler.is_compiling()
