"""The native tests' stand-in kernels receive DLTensor* arguments (views the C++ owns); ``view`` reads one as a
torch tensor over the same CPU memory."""
import ctypes

import torch


def view(t):
    """A DLTensor* argument as a torch tensor over the same 4-byte-element CPU memory (fp32; ``.view(torch.int32)``
    for int32 words such as the attention backward's turn words)."""
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.strides))
    ptr = t.data_ptr() if callable(t.data_ptr) else t.data_ptr
    buf = (ctypes.c_float * span).from_address(ptr)
    return torch.frombuffer(buf, dtype=torch.float32).as_strided(tuple(t.shape), tuple(t.strides))
