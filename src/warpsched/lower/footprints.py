"""Trace-time footprint accounting: the parts of a stage a work really touches, against the
``consumer_footprint`` the checker trusted.

A resource whose stage two consumer tasks hold at once, and one of them writes, declares
``consumer_footprint(task_name) -> {part: "r" | "rw"}``; the static check (verify/checks_writes.py)
proves the declared parts disjoint where one is written. Work bodies are opaque to it, so a body that
indexes another warp group's part (a warp-group index passed wrong from the schedule) runs a race the
checker never saw. A work body reports each part it indexes with ``StageInfo.touches(part, mode)``
(``resource=`` for an operand it reads through another resource's declaration, e.g. a WGMMA's second
operand); here each report is held to the running task's footprint, and a ``WorkAttr.WRITES`` work of a
resource with a footprint must report the part it writes. Works of resources without a footprint are
not checked (nothing was declared to hold them to)."""
from __future__ import annotations

from typing import Any, List, Tuple

from ..errors import Finding
from ..model.enums import WorkAttr
from ..model.resources import work_spec_of
from . import reject_traced, resource_name

CHECK = "consumer writes"


class FootprintLedger:
    """One task's reports, checked as each work returns."""

    def __init__(self, program, task, skip_validation: bool = False):
        self.program, self.task, self.skip_validation = program, task, skip_validation
        self.declared = set()  # resources a WGMMA_OPERAND work named for the task's next WGMMA group

    def worked(self, resource, step, touches: List[Tuple[Any, str, str]]) -> None:
        spec = work_spec_of(getattr(type(resource), step.method, None))
        attrs = spec.attrs if spec is not None else WorkAttr.NONE
        if attrs & WorkAttr.WGMMA_OPERAND:
            self.declared.add(id(resource))
        touches = [(self._resolve(target, resource, step), part, mode) for target, part, mode in touches]
        for target, part, mode in touches:
            if target is not resource:
                self._declared_read(resource, step, target, part, mode, attrs)
            elif mode == "w" and spec is not None and spec.role == "consumer" and not attrs & WorkAttr.WRITES:
                self._unmarked_write(resource, step, part)
            self._hold(resource, step, target, part, mode)
        if attrs & WorkAttr.WGMMA:
            self.declared.clear()  # the group took its declarations
        if (attrs & WorkAttr.WRITES and callable(getattr(resource, "consumer_footprint", None))
                and not any(mode == "w" and t is resource for t, _, mode in touches)):
            name = resource_name(resource)
            self._report(Finding(
                check=CHECK, task=self.task.name, resource=name, location=step.location,
                message=(f"{name}.{step.method}() is a WRITES work of a resource with a consumer_footprint, and "
                         "reported no part it writes while the kernel was traced"),
                expected=f"stage_info.touches(part, 'w') in {step.method}() for each part of the stage it writes",
                fix=("call stage_info.touches('<part>', 'w') in the work body before it writes (the checker "
                     "trusts the footprint; the report holds the body to it)")))

    def _declared_read(self, resource, step, target, part, mode, attrs) -> None:
        """A work touches another resource's stage only as a WGMMA's second operand, read (not written) through a
        ``WGMMA_OPERAND`` declaration of that resource made by this task for this commit group: the checker
        sees the read only there."""
        if attrs & WorkAttr.WGMMA and mode == "r" and id(target) in self.declared:
            return
        name, other = resource_name(resource), resource_name(target)
        if not attrs & WorkAttr.WGMMA or mode != "r":
            why = (f"{'writes' if mode == 'w' else 'reads'} part {part!r} of {other}'s stage, which only a WGMMA "
                   "work may read (through a WGMMA_OPERAND declaration)")
        else:
            why = (f"reads part {part!r} of {other}'s stage, which no WGMMA_OPERAND work of {other} declared for "
                   f"this commit group in task {self.task.name!r}")
        self._report(Finding(
            check="WGMMA groups", task=self.task.name, resource=other, location=step.location,
            message=f"{name}.{step.method}() {why}: the checker does not see that access",
            expected=f"{other}.<declaration>() (work_attrs=WorkAttr.WGMMA_OPERAND) in the task, after its previous "
                     f"WGMMA work and before {step.method}()",
            fix=f"declare the read right before {step.method}() (e.g. {other}.gemm_operand())"))

    def _unmarked_write(self, resource, step, part) -> None:
        name = resource_name(resource)
        self._report(Finding(
            check=CHECK, task=self.task.name, resource=name, location=step.location,
            message=(f"{name}.{step.method}() writes part {part!r} of the stage it holds as a consumer, but is not "
                     "marked WorkAttr.WRITES: the checker takes it for a read, which other consumers may overlap"),
            expected=f"@consumer_work(work_attrs=WorkAttr.WRITES) on {type(resource).__name__}.{step.method}",
            fix="mark the work WRITES (and declare consumer_footprint where two consumer tasks hold the stage)"))

    def _resolve(self, target, resource, step):
        if target is None:
            return resource
        if not isinstance(target, str):
            return target
        found = [r for r in self.program.resources if getattr(r, "name", None) == target]
        if not found:
            known = ", ".join(sorted(resource_name(r) for r in self.program.resources))
            self._report(Finding(
                check=CHECK, task=self.task.name, resource=resource_name(resource), location=step.location,
                message=f"{resource_name(resource)}.{step.method}() reports touching resource {target!r}, which the program "
                        "does not have", expected=f"one of: {known}", fix="pass the resource (or its exact name)"))
            return resource
        return found[0]

    def _hold(self, resource, step, target, part, mode) -> None:
        footprint = getattr(target, "consumer_footprint", None)
        if not callable(footprint):
            return
        parts = footprint(self.task.name)
        held = parts.get(part) if isinstance(parts, dict) else None
        if held is not None and (mode == "r" or held == "rw"):
            return
        verb = "writes" if mode == "w" else "reads"
        tname, rname = self.task.name, resource_name(target)
        why = (f"which consumer_footprint({tname!r}) does not name" if held is None
               else f"which consumer_footprint({tname!r}) marks read-only")
        self._report(Finding(
            check=CHECK, task=tname, resource=rname, location=step.location,
            message=(f"{resource_name(resource)}.{step.method}() in task {tname!r} {verb} part {part!r} of {rname}'s stage, "
                     f"{why} ({parts!r}): the checker proved the footprints, not this access"),
            expected=f"the parts of {rname}'s stage task {tname!r} touches named in its footprint"
                     + (" ('rw' for a write)" if mode == "w" else ""),
            fix=(f"index the task's own part (a warp-group index passed to {step.method}() that is not the "
                 f"task's own?), or declare the access in {type(target).__name__}.consumer_footprint")))

    def _report(self, finding) -> None:
        reject_traced(finding, self.skip_validation)


__all__ = ["FootprintLedger"]
