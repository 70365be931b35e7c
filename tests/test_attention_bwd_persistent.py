"""The backward's persistent grid (``persistent=True``): one CTA per SM, every task (the load warp, the dQ writer
and both gradient warp groups) walking the CTA's units through one work-tile loop, the step count read per tile
and checked for every count >= 0 (a causal key block past the last query has no step). Its program is in the
proof manifest (about 520k states); the kernel traces it with the default program's step loop; options it
cannot serve are refused by name; a twin that loads K / V once per CTA instead of once per unit is a deadlock
at the second unit. Numbers on the GPU: docs/attention.md ("A persistent grid")."""
from __future__ import annotations

import pytest

from warpsched import ValidationError, domain_loop, schedule
from warpsched.kernels.attention import backward as ab
from warpsched.kernels.attention import backward_host as host
from warpsched.kernels.attention.backward_schedules import next_tile, tile_loop
from warpsched.kernels.attention.forward import AttentionConfigError
from warpsched.verify.manifest import MANIFEST

from _planting import QUIET, planted


def _kernel(head_dim=128, causal=True, **extra):
    return ab.FlashAttentionBackward(head_dim=head_dim, causal=causal,
                                     **dict(host.default_options(head_dim), persistent=True, **extra))


@pytest.mark.parametrize("head_dim, extra", [(64, {}), (64, {"dkv_in_ds": True}), (128, {})])
def test_every_task_walks_the_units_and_the_proof_covers_units_without_steps(head_dim, extra):
    mgr = ab.build(_kernel(head_dim, **extra), verbose=False, exhaustive_deadlock_race_check=False)
    assert [t.name for t in mgr.tasks] == ["LoadTask", "DQWriter", "Grad0", "Grad1"]
    for task in mgr.tasks:
        sched = task.schedule
        assert sched.work_tile_loop is not None, task.name
        count = sched.domain_loop.count  # the per-tile step count the checker covers: every count >= 0
        assert (count.name, count.min) == ("steps", 0), task.name
    entry = MANIFEST.data()["entries"][mgr.fingerprint]  # proven by `warpsched prove`, not searched again
    assert entry["verdict"] == "SAFE" and entry["states"] > 100_000
    assert "every steps >= 0" in entry["loop_note"] and "every units_per_cta >= 1" in entry["loop_note"]


def test_one_cta_per_unit_is_the_same_program_without_the_tile_loop():
    """``persistent=False`` (the default) builds the program it built before the option existed: no work queue,
    the step count a runtime value of the CTA."""
    mgr = ab.build(ab.FlashAttentionBackward(head_dim=128, **host.default_options(128)), verbose=False,
                   exhaustive_deadlock_race_check=False)
    assert all(t.schedule.work_tile_loop is None and t.schedule.domain_loop.count is None for t in mgr.tasks)
    assert "WorkQueue" not in {r.name for t in mgr.tasks for r in t.src_resources}


@pytest.mark.parametrize("extra, named", [({"deterministic": True}, "deterministic=True"),
                                          ({"dq_finish": True}, "dq_finish=True"),
                                          ({"dq_defer": True}, "dq_defer=True")])
def test_what_the_persistent_grid_cannot_serve_is_refused_by_name(extra, named):
    with pytest.raises(AttentionConfigError, match=rf"persistent=True with .*{named}.*else persistent=False"):
        _kernel(64 if "dq_defer" in extra else 128, **extra)


def test_the_packed_kernel_and_head_dim_256_refuse_it():
    with pytest.raises(AttentionConfigError, match=r"persistent=True with head_dim=128, varlen=True"):
        ab.FlashAttentionBackwardVarlen(head_dim=128, persistent=True, **host.default_options(128))
    with pytest.raises(AttentionConfigError, match=r"persistent=True with head_dim=256.*head dims 64 and 128"):
        _kernel(256)


@schedule
def _kv_loaded_once_per_cta(smem_kv, smem_qdo, steps, wq=None, units=None, count=None):
    smem_kv.acquire()  # planted: K / V of the CTA's first unit only, before the loop over its units
    smem_kv.tma_load()
    smem_kv.commit()
    with tile_loop(wq, units):
        with domain_loop(0, steps, 1, count=count):
            smem_qdo.acquire()
            smem_qdo.tma_load()
            smem_qdo.commit()
        next_tile(wq)


def test_k_and_v_loaded_once_per_cta_deadlock_at_the_second_unit():
    """One CTA per unit this order is the program itself; with a loop over units the gradient warp groups wait
    for K / V at every unit, and no one loads them again."""
    with planted(ab, load_schedule=_kv_loaded_once_per_cta):
        with pytest.raises(ValidationError) as e:
            ab.build(_kernel(128), **QUIET)
    msg = str(e.value)
    assert "deadlock" in msg and "SmemKV" in msg, msg[-3000:]


def test_the_kernel_traces_the_checked_program_with_the_default_step_loop():
    """The traced program is the CPU's (its proof read from the manifest), the grid is the SM count, and the WGMMAs
    per step are the default kernel's: the tile loop adds none."""
    import re

    from warpsched.verify.verdicts import VERDICTS

    opts = dict(host.default_options(128), persistent=True)
    ptx = host.compile_for_cpu(head_dim=128, causal=True, **opts).artifacts.PTX
    fingerprint = VERDICTS.looked_up[-1]
    assert VERDICTS.get(fingerprint).verdict == "SAFE"
    assert fingerprint == ab.build(_kernel(128), verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    base = host.compile_for_cpu(head_dim=128, causal=True, **host.default_options(128)).artifacts.PTX
    wgmma = r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)"
    assert sorted(re.findall(wgmma, ptx)) == sorted(re.findall(wgmma, base))
