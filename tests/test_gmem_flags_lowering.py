"""GmemFlag's kernel side (lower/gmem_flags.py) compiled for sm_90a on the CPU with fake tensors:
the verbs lower to release / acquire GPU-scope accesses and the fences that make a CTA's tile
writes visible (issue 29)."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("cutlass")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import make_fake_compact_tensor  # noqa: E402

from warpsched import GmemFlag  # noqa: E402
from warpsched.lower.gmem_flags import BoundFlag, bind  # noqa: E402
from warpsched.model.gmem_flags import FLAG_VERBS  # noqa: E402

FLAG = GmemFlag(name="chain")


@cute.kernel
def chain_kernel(flags: cute.Tensor, data: cute.Tensor):
    """CTA b waits for CTA b - 1's flag, adds to its word, sets its own flag, counts itself."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    f = bind(FLAG, flags)
    if tidx == 0:
        if bidx > 0:
            f.wait(bidx - 1, 1)
        data[bidx] = data[bidx] + 1.0
        f.signal(bidx, 1)
        old = f.add(7, 1)
        if old == 3:
            f.reset(7)
        f.wait_at_least(6, 2, spin_limit=100)


@cute.jit
def chain_host(flags: cute.Tensor, data: cute.Tensor):
    chain_kernel(flags, data).launch(grid=(4, 1, 1), block=(32, 1, 1))


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    out = tmp_path_factory.mktemp("gmem_flags_ptx")
    flags = make_fake_compact_tensor(cutlass.Int32, (8,))
    data = make_fake_compact_tensor(cutlass.Float32, (8,))
    compiled = cute.compile(chain_host, flags, data, options=f"--keep-ptx --dump-dir={out}")
    return [line.strip() for line in compiled.artifacts.PTX.splitlines()]


def _count(ptx, word):
    return sum(word in line for line in ptx)


def test_flag_verbs_lower_to_release_acquire_gpu_scope(ptx):
    assert _count(ptx, "st.release.gpu.global.b32") == 1  # signal
    assert _count(ptx, "atom.global.acq_rel.add.u32") == 1  # add (PTX's default scope is .gpu)
    assert _count(ptx, "st.relaxed.gpu.global.b32") == 1  # reset
    # wait and wait_at_least: a first acquire load and one in the spin loop each
    assert _count(ptx, "ld.acquire.gpu.global.b32") == 4
    # no plain (weak) load polls a flag, and no .cta-scope ordering slips in
    assert not any(".cta." in line and ("ld." in line or "st." in line) for line in ptx)


def test_fences_order_the_tile_around_each_hand_over(ptx):
    body = [line for line in ptx if any(k in line for k in ("ld.acquire", "st.release", "atom.", "fence.",
                                                                "st.global", "ld.global"))]
    # the wait's last acquire load, then a fence, then the data access; a fence right before the
    # release store and before the atomic add
    i_rel = next(i for i, line in enumerate(body) if "st.release.gpu" in line)
    assert body[i_rel - 1] == "fence.acq_rel.gpu;"
    i_atom = next(i for i, line in enumerate(body) if "atom.global.acq_rel" in line)
    assert body[i_atom - 1] == "fence.acq_rel.gpu;"
    i_data = next(i for i, line in enumerate(body) if line.startswith("ld.global.b32"))
    assert body[i_data - 1] == "fence.acq_rel.gpu;" and "ld.acquire.gpu" in body[i_data - 2]
    assert _count(ptx, "fence.acq_rel.gpu") == 4  # after each wait, before signal and add


def test_the_kernel_side_has_every_verb_the_checker_models():
    for verb in FLAG_VERBS:
        assert callable(getattr(BoundFlag, verb)), verb
