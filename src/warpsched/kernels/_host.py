"""torch <-> CuTe DSL glue shared by the kernels (imported only when a kernel runs or compiles)."""
from __future__ import annotations

import os

PTX_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "warpsched_kernels_ptx")
PTX_PATTERNS = ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx", "cp.async.bulk.tensor",
                "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group", "setmaxnreg", "bar.sync"]


def ptx_options(arch=None):
    """Keep the PTX (tests count its instructions); pin the target when compiling on the CPU."""
    os.makedirs(PTX_DIR, exist_ok=True)
    return f"--keep-ptx --dump-dir={PTX_DIR}" + (f" --gpu-arch {arch}" if arch else "")


def count_ptx(ptx, patterns=PTX_PATTERNS):
    lines = ptx.splitlines()
    return {p: sum(p in line for line in lines) for p in patterns}


def cutlass_dtype(torch_dtype):
    import cutlass
    import torch

    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32}[
        torch_dtype]


def current_stream():
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def to_cute(t, leading_dim):
    """A torch tensor as a CuTe tensor with a dynamic layout (one compile serves every shape)."""
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=leading_dim)


def num_sms():
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
