"""torch <-> CuTe DSL glue shared by the kernels (imported only when a kernel runs or compiles)."""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import tempfile

PTX_PATTERNS = ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx", "cp.async.bulk.tensor",
                "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group", "setmaxnreg", "bar.sync"]


def non_tensor(named, attrs=("shape", "dtype"), optional=(), hints=None):
    """"<name> is a <type>; pass a torch.Tensor<hint>" for the first value of ``named`` (name -> value) that lacks
    one of ``attrs`` (duck-typed, so the checks run without a GPU), ``None`` allowed for the names in
    ``optional``; ``hints``: name -> what to add for that argument (e.g. " or None"). None when every value
    passes. Each entry point raises it as its own error class."""
    for name, t in named.items():
        if not (t is None and name in optional) and not all(hasattr(t, a) for a in attrs):
            kind = type(t).__name__
            hint = (hints or {}).get(name, "")
            return f"{name} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}; pass a torch.Tensor{hint}"
    return None


_PTX_DIR = []


def ptx_dir():
    """This process's PTX dump folder (removed at exit). CuTe DSL names a kept PTX file after the
    kernel's class and argument types only, so processes sharing one folder read each other's PTX."""
    if not _PTX_DIR:
        _PTX_DIR.append(tempfile.mkdtemp(prefix="warpsched_kernels_ptx_"))
        atexit.register(shutil.rmtree, _PTX_DIR[0], True)
    return _PTX_DIR[0]


_PTXAS_REMARKS = []


def ptx_options(arch=None):
    """A compile whose PTX is read (the CPU tests and tools count its instructions): keep the PTX,
    and pin the target when compiling on the CPU (inside ``ptxas_remarks``, with ptxas's report). Not for
    what a model launches: launch_options."""
    return (f"--keep-ptx --dump-dir={ptx_dir()}" + (f" --gpu-arch {arch}" if arch else "")
            + (" remarks{ptx}" if _PTXAS_REMARKS else ""))


@contextlib.contextmanager
def ptxas_remarks():
    """Within it, a ``ptx_options`` compile prints the report of the ptxas CuTe DSL runs (registers, spills,
    and its warnings, such as C7512: every wgmma of the kernel serialized) to stderr; ``ptxas_findings``
    reads it."""
    _PTXAS_REMARKS.append(True)
    try:
        yield
    finally:
        _PTXAS_REMARKS.pop()


def ptxas_findings(report):
    """(spill store bytes, spill load bytes, serialized) from the stderr of a compile in ``ptxas_remarks``;
    None when the report has no spill line (ptxas did not run)."""
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    if not spills:
        return None
    return (sum(int(a) for a, _ in spills), sum(int(b) for _, b in spills),
            "C7512" in report or "are serialized" in report)


def launch_options():
    """A compile for this process's GPU, as ops.* and the torch ops launch it: nothing kept on disk."""
    return ""


def count_ptx(ptx, patterns=PTX_PATTERNS):
    lines = ptx.splitlines()
    return {p: sum(p in line for line in lines) for p in patterns}


_FFI = []


def ffi_enabled() -> bool:
    """Launch through TVM FFI: ``apache-tvm-ffi`` is installed and ``WARPSCHED_TVM_FFI`` is not "0".
    Kernels are then compiled once with fake operands (``--enable-tvm-ffi``) and called with the
    torch tensors themselves on torch's current stream: the call checks shapes, strides, dtypes and
    alignment in C and costs microseconds, where the JIT executor's per-call argument adaptation
    (``from_dlpack``, CuTe tensors) costs hundreds."""
    if not _FFI:
        ok = os.environ.get("WARPSCHED_TVM_FFI", "1") != "0"
        if ok:
            try:
                import tvm_ffi  # noqa: F401
            except ImportError:
                ok = False
        _FFI.append(ok)
    return _FFI[0]


def ffi_options(arch=None):
    """The TVM-FFI calling convention; with ``arch`` (a CPU compile) the PTX is kept, as ``ptx_options``."""
    return (ptx_options(arch) + " " if arch else "") + "--enable-tvm-ffi"


def fake_bhsd(dtype, b, h, s, d):
    """A fake (B, H, S, D) tensor for a CPU / TVM-FFI compile: unit D stride, the other strides
    multiples of 8 elements and a 16-byte aligned base (what TMA needs; the hosts make inputs so)."""
    from cutlass.cute.runtime import make_fake_tensor
    import cutlass.cute as cute

    return make_fake_tensor(dtype, (b, h, s, d), (cute.sym_int64(divisibility=8), cute.sym_int64(divisibility=8),
                            cute.sym_int64(divisibility=8), 1), assumed_align=16)


def fake_rows(b, h, s, assumed_align=16, stride_divisibility=1):
    """A fake fp32 (B, H, S) tensor with a unit S stride (an LSE or delta per query row); strides multiples
    of ``stride_divisibility`` elements (4: 16 bytes, what a TMA view of it needs)."""
    from cutlass.cute.runtime import make_fake_tensor
    import cutlass
    import cutlass.cute as cute

    return make_fake_tensor(cutlass.Float32, (b, h, s), (cute.sym_int64(divisibility=stride_divisibility),
                                                         cute.sym_int64(divisibility=stride_divisibility), 1),
                            assumed_align=assumed_align)


def fake_env_stream():
    """The stream argument of a TVM-FFI compile: the caller's current (torch) stream at each call."""
    from cutlass.cute.runtime import make_fake_stream

    return make_fake_stream(use_tvm_ffi_env_stream=True)


def fake_target(arch=None):
    """(compile options, stream argument) of a compile with fake operands: PTX for ``arch`` on the CPU, else
    TVM FFI (called with torch tensors on the current stream)."""
    from cutlass.cute.runtime import make_fake_stream

    return (ptx_options(arch), make_fake_stream()) if arch else (ffi_options(), fake_env_stream())


def cutlass_dtype(torch_dtype):
    """The CuTe DSL type of a torch dtype (or its name: ``torch.bfloat16`` and "bfloat16" alike)."""
    import cutlass

    return {"float8_e4m3fn": cutlass.Float8E4M3FN, "float8_e5m2": cutlass.Float8E5M2, "bfloat16": cutlass.BFloat16,
            "float16": cutlass.Float16, "float32": cutlass.Float32}[str(torch_dtype).split(".")[-1]]


def checked(mgr):
    """(fingerprint, verdict) of a TaskManager a kernel built while it was traced: what the kernel
    records on itself (``kern.checked``) for ``record_verdict``."""
    return mgr.fingerprint, getattr(getattr(mgr.result, "checker", None), "verdict", "not checked")


def record_verdict(table, key, kern):
    """``table[key]``: the exhaustive checker's verdict on the program ``kern``'s compile traced (the
    kernel recorded it as ``kern.checked``)."""
    table[key] = getattr(kern, "checked", (None, "not checked"))[1]


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
