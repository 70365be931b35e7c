"""The persistent GEMM's serial split-K / stream-K hand-over ported to GmemFlag (issue 29):
gemm_handover's protocols (the kernel's own unit assignment, serial_fixup's calls in its order)
are SAFE for every launch up to the bound and their planted twins rejected; the kernel with
gmem_flags=True compiles for sm_90a with the same flag / fence / barrier instructions as the
hand-written path, and is refused where it does not apply."""
from __future__ import annotations

import os
import sys

import pytest

from warpsched import check_grid
from warpsched.kernels.gemm import handover as H

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _handover_twins as twins  # noqa: E402


@pytest.mark.parametrize("protocol", [
    H.serial_split_k_protocol(2), H.serial_split_k_protocol(3), H.serial_split_k_protocol(4, tiles=(1, 2, 3, 4)),
    H.stream_k_protocol(3), H.stream_k_protocol(2, tiles=tuple(range(1, 9))),
    H.stream_k_protocol(5, grids=(1, 2, 3, 4, 5, 6), tiles=(1, 2, 3)),
    H.parallel_split_k_protocol(2), H.parallel_split_k_protocol(3),
    H.atomic_split_k_protocol(2), H.atomic_split_k_protocol(3),
], ids=lambda p: p.name)
def test_gemm_hand_overs_are_safe(protocol):
    r = check_grid(protocol)
    assert r.verdict == "SAFE", r.report()
    assert "UNPROVEN beyond" in r.statement


def test_units_are_the_kernels_partition():
    # every (tile, share) exactly once, each CTA in increasing unit order
    for ctas in range(1, 6):
        for tiles in range(1, 5):
            units = [u for c in range(ctas) for u in H.split_k_units(c, ctas, tiles, 3)]
            assert sorted(units) == sorted((t, s) for t in range(tiles) for s in range(3))
            for c in range(ctas):
                order = [s * tiles + t for t, s in H.split_k_units(c, ctas, tiles, 3)]
                assert order == sorted(order)


@pytest.mark.parametrize("kind, bug, words", [
    ("serial", "missing_signal", ["can block forever", "a missing signal"]),
    ("serial", "reversed", ["a cycle of waits", "its own later unit"]),
    ("serial", "read_first", ["without a hand-over from its writer"]),
    ("stream", "read_first", ["before its writer"]),
    ("stream", "wrong_neighbour", ["can block forever", "no CTA ever signals it"]),
    ("stream", "missing_signal", ["no CTA ever signals it"]),
    ("stream", "two_share_rule", ["has a second writer"]),
    ("parallel", "missing_signal", ["can block forever"]),
    ("parallel", "read_first", ["without a hand-over from its writer"]),
    ("atomic", "plain_write", ["has a second writer"]),
    ("atomic", "release_only", ["without a hand-over from its writer"]),
])
def test_gemm_twins_are_rejected_naming_ctas_and_units(kind, bug, words):
    r = check_grid(twins.TWINS[kind](bug))
    assert r.verdict == "REJECTED", r.report()
    f = r.findings[0]
    # the call the finding names: the kernel's description, or the twin's planted wrapper
    assert f.task.startswith("CTA ") and "unit" in f.task
    assert f.location.file.endswith(("gemm/handover.py", "_handover_twins.py")), f.location
    assert "launch:" in f.detail
    for w in words:
        assert w in f.message, f.message


def test_every_planted_twin_is_tested():
    tested = {(k, b) for k, b, _ in test_gemm_twins_are_rejected_naming_ctas_and_units.pytestmark[0].args[1]}
    assert tested == {(k, b) for k, bugs in twins.BUGS.items() for b in bugs}


def test_stream_k_wrong_neighbour_races_on_three_ctas():
    r = check_grid(twins.stream("wrong_neighbour", grids=(3,), tiles=(4,)))
    f = r.findings[0]
    assert "CTA 0 unit (1, 0, 1, 1) reads workspace tile 1" in f.message and "CTA 1 unit (1, 1, 2, 1)" in f.message


# --------------------------------------------------------------- the kernel (CPU compile, sm_90a)
def _sync_counts(ptx):
    keys = ("ld.acquire.gpu", "st.release.gpu", "st.relaxed.gpu", "atom.", "red.", "fence.acq_rel.gpu",
            "bar.sync", "ld.global", "st.global")
    return {k: sum(k in line for line in ptx.splitlines()) for k in keys}


@pytest.mark.parametrize("opts", [dict(split_k=True, split_reduce="serial"), dict(stream_k=True),
                                  dict(split_k=True, split_reduce="parallel"),
                                  dict(split_k=True, split_reduce="atomic")],
                         ids=["serial", "stream", "parallel", "atomic"])
def test_gmem_flags_kernel_has_the_same_hand_over_instructions(opts):
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    from warpsched.kernels.gemm import host as gp

    base = gp.compile_for_cpu(schedule="cooperative", **opts).artifacts.PTX
    ported = gp.compile_for_cpu(schedule="cooperative", gmem_flags=True, **opts).artifacts.PTX
    counts = _sync_counts(ported)
    assert counts == _sync_counts(base)
    assert counts["st.relaxed.gpu"] == 1  # the reset
    if opts.get("split_reduce") == "atomic":  # nothing waits: one acq_rel count
        assert counts["ld.acquire.gpu"] == 0 and counts["atom."] == 1
        assert [x for x in ported.splitlines() if "atom." in x][0].split()[0] == "atom.global.acq_rel.add.u32"
    else:  # a bounded wait, and the hand-on: a release store or a release add
        assert counts["ld.acquire.gpu"] == 2 and counts["st.release.gpu"] + counts["atom."] == 1
    assert abs(len(ported.splitlines()) - len(base.splitlines())) <= 4  # the bounded wait's branch shape only


def test_gmem_flags_is_refused_where_the_kernel_does_not_use_the_chain():
    pytest.importorskip("cutlass")
    from warpsched.kernels.gemm import host as gp
    from warpsched.kernels.gemm.config import GemmConfigError

    for opts in (dict(split_k=True, split_reduce="host"), {}):
        with pytest.raises(GemmConfigError, match="gmem_flags=True"):
            gp.PersistentGemm(schedule="cooperative", gmem_flags=True, **opts)
    g = gp.PersistentGemm(schedule="cooperative", split_k=True, split_reduce="serial", gmem_flags=True)
    assert "gmem-flags" in g.describe()


def test_a_gmem_flags_kernel_carries_its_hand_over_proof(monkeypatch):
    pytest.importorskip("cutlass")
    from warpsched.kernels.gemm import host as gp
    from warpsched.kernels.gemm.config import GemmConfigError

    g = gp.PersistentGemm(schedule="cooperative", split_k=True, split_reduce="serial", gmem_flags=True)
    assert [r.verdict for r in g.handover_proof] == ["SAFE", "SAFE"]
    assert "2 shares" in g.handover_proof[0].protocol and "UNPROVEN beyond" in g.handover_proof[0].statement
    # a protocol the checker rejects refuses the kernel
    monkeypatch.setattr(H, "_PROVEN", {})
    monkeypatch.setattr(H, "serial_split_k_protocol", lambda splits: twins.stream("read_first"))
    with pytest.raises(GemmConfigError, match="does not prove the hand-over"):
        gp.PersistentGemm(schedule="cooperative", split_k=True, split_reduce="serial", gmem_flags=True)


def test_which_hand_overs_need_every_cta_resident():
    from warpsched.verify.checker.grid import needs_residency

    # serial split-K: share s of tile t may wait for a CTA with a higher index (unit (s - 1) * tiles + t)
    r = needs_residency(H.serial_split_k_protocol(2))
    assert r is not None and "can block forever" in r.findings[0].message
    assert "one at a time" in r.findings[0].detail
    # stream-K: CTA b - 1's last unit reads what CTA b's first unit writes, and CTA b starts after it
    # in launch order: stream-K needs residency too. One CTA alone never waits on another.
    assert needs_residency(H.stream_k_protocol(3)) is not None
    assert needs_residency(H.serial_split_k_protocol(2, grids=(1,))) is None


def _kernel_modules():
    """(gemm_fixup, gemm_host, gemm_resources), the arch pinned for CPU compiles."""
    pytest.importorskip("cutlass")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hopper"))
    import _common  # noqa: F401  (pins the arch before cutlass compiles anything)
    from warpsched.kernels.gemm import fixup as gemm_fixup
    from warpsched.kernels.gemm import host as gemm_host
    from warpsched.kernels.gemm import resources as gemm_resources

    return gemm_fixup, gemm_host, gemm_resources


def _signature(kind, kw, fx):
    """What a fix-up call was given, as (bindings, control flow); and what the kernel must give."""
    control = {"serial": ("branch",), "parallel": ("branch", "repeat"), "atomic": ("when",)}[kind]
    io = {"serial": fx.SerialFixupIO, "parallel": fx.ParallelFixupIO, "atomic": fx.AtomicFixupIO}[kind]
    want = {"branch": fx.runtime_branch, "repeat": fx.runtime_repeat, "when": fx.AtomicFixupIO.when}
    got = tuple(getattr(kw[c], "__func__", kw[c]) for c in control)
    bindings = tuple(type(v) for k, v in kw.items() if k in ("flag", "tile", "slabs"))
    return (bindings, got, kw.get("bug")), ((io,) * len(bindings), tuple(want[c] for c in control), None)


@pytest.mark.parametrize("kind,configs", [
    ("serial", [dict(split_k=True, split_reduce="serial"), dict(stream_k=True)]),
    ("parallel", [dict(split_k=True, split_reduce="parallel")]),
    ("atomic", [dict(split_k=True, split_reduce="atomic")]),
])
def test_the_kernel_runs_the_hand_over_the_checker_proves(monkeypatch, kind, configs):
    """One description: GmemC's serial_fixup (serial split-K and stream-K), parallel_fixup and
    atomic_fixup make their flag and workspace accesses by running gemm_handover's
    *_fixup_calls, the functions the grid checker proves, on their runtime values (gemm_fixup's
    runtime_branch / runtime_repeat / when and its *FixupIO bindings), not a hand-kept copy."""
    gemm_fixup, gp, gemm_resources = _kernel_modules()
    name = f"{kind}_fixup_calls"
    real = getattr(gemm_resources, name)
    assert real is getattr(H, name)
    seen = []

    def spy(*args, **kw):
        seen.append(_signature(kind, kw, gemm_fixup))
        return real(*args, **kw)

    monkeypatch.setattr(gemm_resources, name, spy)
    for opts in configs:
        for flags in (False, True):
            seen.clear()
            gp.compile_for_cpu(schedule="cooperative", gmem_flags=flags, **opts)
            assert seen and all(got == want for got, want in seen), seen
