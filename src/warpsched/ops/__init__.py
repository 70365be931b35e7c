"""Ready-made kernels for torch users, built from the warpsched examples.

``import warpsched.ops`` stays pure Python: torch, cutlass and the example kernels are imported
by the first call. Each op lives in its own module (``gemm``; attention adds its own)."""
from .gemm import gemm

__all__ = ["gemm"]
