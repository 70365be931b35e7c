"""Test-wide settings and shared fixtures."""
import atexit
import os
import shutil
import tempfile

import pytest

# The on-disk verdict cache (warpsched.verify.verdicts.DISK) would let one test run's SAFE verdicts
# answer the next run's compiles: the tests count checker runs, so it is off here (and in the
# subprocesses they start); tests/test_verdict_disk_cache.py turns it on in a temporary directory.
os.environ["WARPSCHED_VERDICT_CACHE"] = "0"

# Under pytest-xdist (the README's `-n 2`) each worker gets its own TMPDIR: a folder a module names from
# it at import (bench/handwritten's kept-PTX folder) would otherwise be shared, and two workers
# compiling the same kernel would read each other's half-written PTX file. Everything else a test
# writes lives in tmp_path or a per-process mkdtemp (warpsched.kernels._host.ptx_dir, examples' _common).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _worker_tmp = os.path.join(tempfile.gettempdir(),
                               f"warpsched-tests-{os.getpid()}-{os.environ['PYTEST_XDIST_WORKER']}")
    os.makedirs(_worker_tmp, exist_ok=True)
    os.environ["TMPDIR"] = _worker_tmp
    atexit.register(shutil.rmtree, _worker_tmp, True)


@pytest.fixture
def checker_runs(monkeypatch):
    """Counts the exhaustive checker's runs made by TaskManager (the programs it searched); starts
    and ends with an empty in-process verdict cache."""
    import warpsched.manager as manager_mod
    from warpsched.verify.verdicts import VERDICTS

    runs = []
    real = manager_mod.run_checker

    def counting(program, progress=False):
        runs.append(program)
        return real(program, progress=progress)

    monkeypatch.setattr(manager_mod, "run_checker", counting)
    VERDICTS.clear()
    yield runs
    VERDICTS.clear()


@pytest.fixture
def cuda_build_torch():
    """torch, for tests that trace calls on fake CUDA tensors (what torch.compile sees of a GPU call, no GPU
    needed): those need a CUDA build of torch; a CPU-only build (``torch==2.13.0`` from this machine's disk, say)
    aborts the process on them, so the test is skipped there, saying why."""
    torch = pytest.importorskip("torch")
    if torch.version.cuda is None:
        pytest.skip("fake CUDA tensors need a CUDA build of torch; this one is CPU-only")
    return torch


@pytest.fixture(scope="module")
def native_op():
    """``torch.ops.warpsched_native.linear`` built here (torch-only tests: the extension's CPU stand-in kernels);
    the real resolver registered again after the module's tests."""
    pytest.importorskip("torch")
    pytest.importorskip("tvm_ffi")
    import warpsched.native as native

    got = native.load()
    assert got is not None, f"the native extension did not build here: {native.reason()}"
    yield got.default
    native.register_resolver()
