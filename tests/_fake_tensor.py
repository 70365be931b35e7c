"""A stand-in for a torch tensor with just what the GEMM hosts' argument checks read (the CPU
runners have no torch)."""
from __future__ import annotations


class FakeTensor:
    def __init__(self, shape, dtype="torch.bfloat16", strides=None, cuda=True, ptr=4096, itemsize=2):
        self.shape, self.dtype, self.is_cuda, self._ptr, self._item = tuple(shape), dtype, cuda, ptr, itemsize
        self._strides = strides or _row_major(shape)
        self.device = "cuda:0" if cuda else "cpu"

    def dim(self):
        return len(self.shape)

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def element_size(self):
        return self._item

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return 0 if self.is_cuda else -1

    def t(self):
        """The 2-D transpose, a view as torch's: shape and strides swapped."""
        return FakeTensor(self.shape[::-1], self.dtype, self._strides[::-1], self.is_cuda, self._ptr, self._item)

    def view(self, *shape):
        """Row-major views only (what a contiguous torch tensor allows); else RuntimeError, as torch."""
        if self._strides != _row_major(self.shape):
            raise RuntimeError("view size is not compatible with input tensor's size and stride")
        n = 1
        for d in self.shape:
            n *= d
        shape = tuple(n // -(_prod(shape)) if d == -1 else d for d in shape)
        return FakeTensor(shape, self.dtype, _row_major(shape), self.is_cuda, self._ptr, self._item)


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def _row_major(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))
