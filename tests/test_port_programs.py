"""Reference-TS programs compile with warpsched after the import switch (CPU, fake tensors).

Each file in tests/port_programs/ is written against NVIDIA's TS import paths and uses the TS
surface the CUTLASS tutorials use. The test does what a porting user does -- replaces those
imports by ``from warpsched import`` and nothing else -- compiles the kernel for its architecture
and pins the TS kernel's barrier, TMA and tcgen05 instruction counts. The pinned counts equal the
reference TS's for the same programs at the same unroll (measured with nvidia-cutlass-dsl 4.8.1:
``tools/port_tutorials.py`` does the same side by side for the real tutorials).
"""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

cutlass = pytest.importorskip("cutlass")

from warpsched.compat import port_imports  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "port_programs")
PATTERNS = {"mbarrier": "mbarrier.", "try_wait": "mbarrier.try_wait", "arrive": "mbarrier.arrive",
            "init": "mbarrier.init", "TMA": "cp.async.bulk.tensor", "tcgen05": "tcgen05.",
            "tcgen05.alloc": "tcgen05.alloc", "tcgen05.commit": "tcgen05.commit", "bar.sync": "bar.sync"}


def ported(name: str, tmp_path):
    with open(os.path.join(HERE, f"{name}.py")) as f:
        text = f.read()
    assert "from cutlass.experimental.task_scheduling" in text  # written against the reference
    new = port_imports(text)
    assert "cutlass.experimental.task_scheduling" not in new
    path = tmp_path / f"{name}.py"
    path.write_text(new)
    spec = importlib.util.spec_from_file_location(f"ported_{name}", str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _compile(mod):
    import tempfile

    import cutlass.cute as cute

    fn, args, arch = mod.cpu_build()
    dump = tempfile.mkdtemp(prefix="warpsched_port_ptx_")  # --keep-ptx writes files: not into the repo
    return cute.compile(fn, *args, options=f"--keep-ptx --dump-dir={dump} --gpu-arch {arch}").artifacts.PTX, arch


def compile_counts(mod):
    ptx, arch = _compile(mod)
    assert f".target {arch}" in ptx
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    return {k: sum(p in ln for ln in lines) for k, p in PATTERNS.items()}


def _ptx(mod):
    return _compile(mod)[0]


# Counts of the TS kernel's PTX; "bar.sync" is warpsched's own CTA barrier after barrier init (the
# reference leaves that barrier to the kernel), every other column equals the reference TS's count
# for the same program (checked with nvidia-cutlass-dsl 4.8.1; the programs pin unroll=1 where a
# pipeline runs in the loop, since the reference's default lets the compiler unroll).
NO_BARRIERS = {"mbarrier": 0, "try_wait": 0, "arrive": 0, "init": 0, "TMA": 0, "tcgen05": 0, "tcgen05.alloc": 0,
               "tcgen05.commit": 0, "bar.sync": 0}
EXPECTED = {
    # runtime Int32 / Float32 fields read under runtime ifs (the DSL carries `self` through them)
    "strided_scale": NO_BARRIERS,
    # 2 stages x (full, empty) inits; try_wait: producer try + acquire, consumer try + wait, the
    # producer tail; one arrive.expect_tx (acquire) and one consumer release arrive; one TMA copy
    "tma_strip_copy": {**NO_BARRIERS, "mbarrier": 12, "try_wait": 6, "arrive": 2, "init": 4, "TMA": 1,
                       "bar.sync": 1},
    # static persistent queue from PersistentTileSchedulerParams, dynamic domain, skip predicate
    "ragged_rows": NO_BARRIERS,
    # ring 2 x 2 + accumulator 1 x 2 inits + the kernel's own flag barrier; the kernel allocates TMEM
    # itself (add_tmem_ptr): exactly one tcgen05.alloc, the one it wrote; commits: ring release + acc commit
    "umma_tile": {**NO_BARRIERS, "mbarrier": 20, "try_wait": 11, "arrive": 2, "init": 7, "TMA": 2, "tcgen05": 13,
                  "tcgen05.alloc": 1, "tcgen05.commit": 2, "bar.sync": 1},
    # 4 stages x (full, empty); try_ probes in the head and outside a guard (see the program)
    "guarded_probe": {**NO_BARRIERS, "mbarrier": 18, "try_wait": 8, "arrive": 2, "init": 8, "bar.sync": 1},
    # Merge of AsyncAsync + TmaAsync: 4 x (full_a, full_b, shared empty); LoadA's commit, LoadB's
    # arrive.expect_tx, the one group release. The reference 4.8.1 does not compile CUTLASS's
    # 07_01 (its DSL front end fails); these are the counts of that tutorial's port (31 / 1 TMA).
    "merge_mix_copy": {**NO_BARRIERS, "mbarrier": 31, "try_wait": 16, "arrive": 3, "init": 12, "TMA": 1,
                       "bar.sync": 1},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ported_program_compiles_with_reference_counts(name, tmp_path):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = compile_counts(ported(name, tmp_path))
    assert counts == EXPECTED[name]
    probe_warnings = [str(w.message) for w in caught if "wasted" in str(w.message) or "discarded" in str(w.message)]
    if name == "guarded_probe":  # the head probe is reported; the unguarded probe before every(2) is not
        assert len(probe_warnings) == 1 and "in the head but its wait() is in the loop" in probe_warnings[0]
    else:
        assert not probe_warnings


def test_static_persistent_queue_follows_the_dsl_tile_scheduler(tmp_path):
    """TileSchedulerConfig from PersistentTileSchedulerParams walks tiles like
    StaticPersistentTileScheduler: the cluster index starts at blockIdx.z (get_grid_shape's grid)."""
    ptx = _ptx(ported("ragged_rows", tmp_path))
    assert "%ctaid.z" in ptx and "%nctaid" in ptx


@pytest.mark.parametrize("use_tma", [True, False])
def test_merge_of_tma_and_thread_members_inits_the_shared_empty_for_all_threads(use_tma, tmp_path):
    """07_01's mix: the shared empty barrier is initialised with the AsyncAsync member's 128 (not
    the TmaAsync member's 4 warps) and the collapsed release is one mbarrier.arrive per thread."""
    import re

    mod = ported("merge_mix_copy", tmp_path)
    mod.USE_TMA = use_tma
    ptx = _ptx(mod)
    counts = {}
    for reg in re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^]]+\],\s*(%r\d+);", ptx):
        value = re.findall(rf"mov\.b32\s+{re.escape(reg)},\s*(\d+);", ptx)
        counts[int(value[0])] = counts.get(int(value[0]), 0) + 1
    # full_a: 32 thread arrivals; full_b: 1 arming thread (TMA) or 32; shared empty: 128
    assert counts == ({32: 4, 1: 4, 128: 4} if use_tma else {32: 8, 128: 4}), counts
    assert sum("cp.async.bulk.tensor" in ln for ln in ptx.splitlines()) == (1 if use_tma else 0)


@pytest.mark.parametrize("form", ["array", "array_in_if", "cluster"])
def test_stage_barrier_has_the_ts_array_interface(form, tmp_path):
    """``stage_info.barrier`` is what TS hands out too: ``.data_ptr()`` (``.toint()`` as an mbarrier
    address, 04_02) and an mbarrier for ``cp_async_bulk_tensor_shared_cluster_global`` (04_01);
    the TMA copy still completes on the stage's full barrier (same counts as the pointer form).
    ``array_in_if``: used under a runtime ``if`` (StageInfo is a frozen dataclass, so the DSL does not
    carry it -- and the kernel context it holds -- through the ``if``; 04_02 does this)."""
    mod = ported("merge_mix_copy", tmp_path)
    mod.BARRIER_FORM = form
    assert compile_counts(mod) == EXPECTED["merge_mix_copy"]
