"""Shared host helpers for the warpsched examples (CPU compile with fake tensors, torch -> CuTe).

Every example has ONE ``build(...)``: ``warpsched check`` calls it on the CPU and the kernel calls
it while tracing, and TaskManager runs the static checks and the exhaustive checker both times.
Values the kernel only knows at run time (a loop bound from a tensor shape, the block index of a
grid-stride loop) are declared once in ``build`` with ``trip_count(name, value, ...)``: the kernel
passes the DSL value, the CPU passes None, and both check the same declared set of trip counts.
Everything else (stage counts, tile sizes, SMEM allocations) is computed by the same Python code on
both sides, so both get the same program fingerprint (``TaskManager.fingerprint``).
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # must precede `import cutlass`
# One folder per process, removed at exit: CuTe DSL names a kept PTX file after the kernel's class
# and argument types only, so two processes sharing a folder could read each other's PTX.
PTX_DIR = tempfile.mkdtemp(prefix="warpsched_examples_ptx_")
atexit.register(shutil.rmtree, PTX_DIR, True)
PTX_OPTIONS = "--keep-ptx --dump-dir=" + PTX_DIR

import cutlass  # noqa: E402


def cutlass_dtype(torch_dtype):
    import torch

    return {torch.float32: cutlass.Float32, torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16,
            torch.int32: cutlass.Int32}[torch_dtype]


def current_stream():
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def num_sms() -> int:
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def to_cute(t, leading_dim=None):
    from cutlass.cute.runtime import from_dlpack

    m = from_dlpack(t, assumed_align=16)
    if leading_dim is not None:
        m = m.mark_layout_dynamic(leading_dim=leading_dim)
    return m


PTX_PATTERNS = ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx", "cp.async.bulk.tensor",
                "wgmma.mma_async", "tcgen05.mma", "tcgen05.commit", "tcgen05.alloc", "setmaxnreg",
                "griddepcontrol"]


def count_ptx(ptx: str, patterns=PTX_PATTERNS):
    lines = ptx.splitlines()
    return {p: sum(p in line for line in lines) for p in patterns}


def ptx_options(arch: str = "sm_90a") -> str:
    """Compile options for CPU builds: keep the PTX and pin the target (CI has no GPU to detect)."""
    return f"{PTX_OPTIONS} --gpu-arch {arch}"


def fake_gemm_operands(ab_dtype, c_dtype):
    """Fake row-major A (M x K), B (N x K) and C (M x N) for CPU compiles: M any, N and K multiples
    of 8 (16-byte rows, as TMA needs), leading strides symbolic."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    M, N, K = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=8)

    def rows(dtype, shape):
        return make_fake_tensor(dtype, shape, (cute.sym_int64(divisibility=8), 1), assumed_align=16)

    return rows(ab_dtype, (M, K)), rows(ab_dtype, (N, K)), rows(c_dtype, (M, N))
