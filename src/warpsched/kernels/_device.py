"""Facts about the device the bundled kernels default to (no cutlass import)."""
from __future__ import annotations

# Streaming multiprocessors of an H200 (and an H100 SXM): the default grid of the persistent kernels
# (one CTA per SM) when the caller passes no max_ctas.
H200_SMS = 132

__all__ = ["H200_SMS"]
