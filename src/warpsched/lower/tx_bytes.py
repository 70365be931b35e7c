"""Trace-time TMA byte accounting: the bytes a producer bracket's copies really deliver, against
what its acquire arms.

A work method that issues its TMA loads through ``StageInfo.tma_copy`` reports each copy's
compile-time byte count (KernelContext.tma_copies). Between a task's ``acquire`` and ``commit``
of a transaction-byte pipeline the copies of one warp are summed; every warp that runs the bracket
issues them (a TMA copy is issued per warp), so the CTA's stage receives that sum x the warps of
one operation, which must equal what the sync plan says the acquire arms
(``protocol.plan.tma_bytes_per_cta``). A mismatch hangs the kernel on the hardware (fewer bytes)
or completes the phase while copies still land (more), so it fails the compilation with a
finding. Works that issue copies any other way are not counted (the opt-in is the helper)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..errors import Finding
from ..protocol.plan import config_of, tma_bytes_per_cta
from . import reject_traced, resource_name
from .context import TMA_SMEM_ALIGN

CHECK = "pipeline thread counts and bytes"


class TxLedger:
    """One task's open producer brackets: resource id -> (the copies recorded so far, the works that issued them)."""

    def __init__(self, task, skip_validation: bool = False):
        self.task = task
        self.skip_validation = skip_validation  # TaskManager(skip_validation=True): a warning, as for the static findings
        self.open: Dict[int, Tuple[List[Tuple[int, str, Optional[int], str]], List[Any]]] = {}

    def acquired(self, resource, protocol) -> None:
        if protocol.transaction_bytes:
            self.open[id(resource)] = ([], [])

    def worked(self, resource, step, copies: List[Tuple[int, str, Optional[int], str]]) -> None:
        self._check_alignment(resource, step, copies)
        bracket = self.open.get(id(resource))
        if bracket is not None and copies:
            bracket[0].extend(copies)
            bracket[1].append(step)
        elif copies:
            self._outside(resource, step, copies)

    def _outside(self, resource, step, copies) -> None:
        """A copy completes transaction bytes on the stage's barrier: with no acquire of this task armed for it
        (an AUXILIARY or consumer work, or a producer work after its commit), the bytes count against a phase
        nobody expects them in, so it completes early or never."""
        name = resource_name(resource)
        self._report(Finding(
            check=CHECK, task=self.task.name, resource=name, location=step.location,
            message=(f"{name}.{step.method}() issues {len(copies)} TMA cop{'y' if len(copies) == 1 else 'ies'} "
                     f"({' + '.join(c[1] for c in copies)}) on the stage's barrier outside a producer acquire / "
                     "commit bracket of the task: no arrive.expect_tx armed the phase for those bytes"),
            expected=f"StageInfo.tma_copy() only in producer works between {name}.acquire() and .commit() of a "
                     "transaction-byte pipeline",
            fix=f"move {step.method}() inside the producer bracket (and drop WorkAttr.AUXILIARY if it has it)"))

    def _check_alignment(self, resource, step, copies) -> None:
        """A copy into an SMEM address CuTe cannot prove 128-byte aligned (a stage stride that is not a multiple
        of 128 bytes, or a base allocation aligned to less) faults with "misaligned address" on the hardware."""
        bad = [(align, dst) for _, _, align, dst in copies if align is not None and align < TMA_SMEM_ALIGN]
        if not bad:
            return
        name = resource_name(resource)
        align, dst = bad[0]
        self._report(Finding(
            check="TMA alignment", task=self.task.name, resource=name, location=step.location,
            message=(f"{name}.{step.method}(): a TMA copy's SMEM destination {dst} is only {align}-byte aligned "
                     f"(the hardware faults with 'misaligned address' at run time)"),
            expected=f"a destination address aligned to {TMA_SMEM_ALIGN} bytes in every stage",
            fix=(f"pad each stage of the destination to a multiple of {TMA_SMEM_ALIGN} bytes (its layout's stage "
                 f"stride and its SmemAllocation's count), and give the allocation alignment >= {TMA_SMEM_ALIGN}")))

    def _report(self, finding) -> None:
        reject_traced(finding, self.skip_validation)

    def committed(self, resource) -> None:
        copies, works = self.open.pop(id(resource), ([], []))
        if not copies:
            return  # no copy went through StageInfo.tma_copy: nothing known to compare
        cfg = config_of(resource)
        warps, want, derivation = tma_bytes_per_cta(cfg, self.task.num_warps)
        per_warp = sum(c[0] for c in copies)
        if per_warp * warps == want:
            return
        name = resource_name(resource)
        calls = ", ".join(f"{s.method}()" for s in works)
        each = " + ".join(c[1] for c in copies)
        many = f"each of its {warps} warps issues" if warps > 1 else "its warp issues"
        split = f"{want // warps} per warp, " if warps > 1 and want % warps == 0 else ""
        if warps > 1:
            fix = (f"one producer warp (num_warps=1), or let each of the {warps} warps copy its 1/{warps} of the "
                   f"stage ({want // warps} bytes)")
        else:
            what = "num_bytes" if cfg.num_bytes_per_warp_per_cta is None else "num_bytes_per_warp_per_cta"
            fix = (f"copy the whole stage ({want} bytes), or {what}={per_warp} (with SMEM allocations of num_stages x "
                   f"{per_warp} bytes, or partial_stage=True)")
        finding = Finding(
            check=CHECK, task=self.task.name, resource=name, location=works[0].location,
            message=(f"{name}: in task {self.task.name!r}, {many} TMA copies of {per_warp} bytes per stage "
                     f"({calls}: {each}), so {per_warp * warps} bytes land in the CTA's stage, but the acquire "
                     f"arms {want}: the phase " + ("never completes (the kernel hangs)" if per_warp * warps < want
                                                   else "completes before the last copies land")),
            expected=f"copies of {split}{want} bytes into each CTA's stage ({derivation})", fix=fix)
        self._report(finding)


__all__ = ["TxLedger"]
