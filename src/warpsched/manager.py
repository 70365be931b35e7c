"""TaskManager: ties tasks, graph and allocators together; verifies at construction."""
from __future__ import annotations

import contextlib
import contextvars
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from .errors import Finding, HasFindings, ValidationError, ValidationWarning, user_facing
from .model.task import Task
from .protocol.plan import SyncPlan
from .report.printout import memory_summary, register_summary, schedule_table
from .verify import Options, Program, run_static_checks
from .verify.checker import run_checker
from .verify.fingerprint import program_fingerprint
from .verify.manifest import MANIFEST
from .verify.verdicts import DISK, VERDICTS


@dataclass
class VerifyResult(HasFindings):
    """What ``TaskManager.print_and_verify()`` found: every finding (errors and warnings) and
    the exhaustive checker's result (``.checker``: verdict, states, report) when it ran."""

    findings: List[Finding] = field(default_factory=list)
    checker: Any = None  # the exhaustive checker's result, when it ran
    families: List[Any] = field(default_factory=list)  # verify.coverage.FamilyRun per static check family
    checker_skipped: str = ""  # why the exhaustive checker did not run ("" when it ran)

    @property
    def accepted(self) -> bool:
        return not self.errors


# Options a caller (the CLI) may impose on every TaskManager built in a capture_managers() block.
OVERRIDABLE = ("verbose", "exhaustive_deadlock_race_check", "max_states", "max_seconds", "progress")
_capture: contextvars.ContextVar = contextvars.ContextVar("warpsched_capture", default=None)


@contextlib.contextmanager
def capture_managers(**overrides) -> Iterator[List["TaskManager"]]:
    """Record every TaskManager constructed inside the block (a rejected one too: it is recorded
    before verification raises) and impose ``overrides`` (names in OVERRIDABLE) on each."""
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise TypeError(f"capture_managers() cannot override {', '.join(sorted(unknown))}")
    built: List[TaskManager] = []
    token = _capture.set((built, dict(overrides)))
    try:
        yield built
    finally:
        _capture.reset(token)


class TaskManager:
    """Owns the program; ``TaskManager(...)`` runs ``print_and_verify()`` immediately.

    A rejected program raises :class:`warpsched.ValidationError` listing every finding;
    with ``skip_validation=True`` the same findings are issued as warnings.

    Built inside a CuTe DSL trace (``@cute.kernel``), the program checked is the one the kernel
    is compiled from; the exhaustive checker's verdict is cached in-process by the program's
    fingerprint, so compiling the same program again does not rerun it (``cache_verdict``:
    None = cache inside a trace only, True / False = always / never).

    Keywords: ``tasks`` and ``resource_dependency_graph`` (resource -> the resources it is
    computed from) are the program; ``smem_allocator`` / ``tmem_allocator`` / ``barrier_allocator``
    place its memory. ``verbose`` prints the schedule table, register budget, memory report and the
    checker's report. ``skip_validation`` turns errors into warnings (the explicit way out).
    ``exhaustive_deadlock_race_check`` runs the exhaustive checker after clean static checks;
    ``max_states`` / ``max_seconds`` bound it (a search that stops early is UNPROVEN, never
    accepted as proven); ``progress`` prints a line to stderr every few seconds of a long search.
    ``assume_pdl_wait_completed`` treats the predecessor grid as finished.
    ``smem_capacity_bytes`` / ``tmem_capacity_columns`` / ``register_file_size`` override the
    device limits the checks use. Keywords only the reference TS uses (profiling, DMA labels) are
    accepted and ignored (docs/porting.md).
    """

    @user_facing
    def __init__(self, *, tasks: List[Task], resource_dependency_graph: Optional[Dict[Any, List[Any]]] = None,
                 smem_allocator=None, tmem_allocator=None, barrier_allocator=None, verbose: bool = True,
                 skip_validation: bool = False, exhaustive_deadlock_race_check: bool = True,
                 assume_pdl_wait_completed: bool = False, smem_capacity_bytes: Optional[int] = None,
                 tmem_capacity_columns: Optional[int] = None, max_states: int = Options.max_states,
                 max_seconds: Optional[float] = None, register_file_size: int = 65536,
                 cache_verdict: Optional[bool] = None, out=None, progress: Optional[bool] = None,
                 tmem_ptr_i32=None, **reference_only):
        if reference_only:  # profiling / DMA-label keywords of the reference TS: accepted, no effect
            from .compat import take_extra_keywords

            take_extra_keywords("TaskManager", reference_only)
        # An SMEM slot holding the TMEM base that the kernel allocates itself (as with
        # SmemAllocator.add_tmem_ptr): published as StageInfo.context.tmem_ptr_i32.
        self.tmem_ptr_i32 = tmem_ptr_i32
        capture = _capture.get()
        if capture is not None:
            capture[0].append(self)
            o = capture[1]
            verbose = o.get("verbose", verbose)
            exhaustive_deadlock_race_check = o.get("exhaustive_deadlock_race_check", exhaustive_deadlock_race_check)
            max_states = o.get("max_states", max_states)
            max_seconds = o.get("max_seconds", max_seconds)
            progress = o.get("progress", progress)
        self.tasks = list(tasks)
        for t in self.tasks:
            if isinstance(t, Task):  # Task.is_selected() inside the kernel: the lowering's warp test
                t.bind_selector(_warp_in_task)
        graph = resource_dependency_graph if resource_dependency_graph is not None else {}
        # A graph that is not a dict is kept as given and reported by the structure checks.
        self.resource_dependency_graph = dict(graph) if isinstance(graph, dict) else graph
        self.smem_allocator = smem_allocator
        self.tmem_allocator = tmem_allocator
        self.barrier_allocator = barrier_allocator
        self.verbose = verbose
        self.progress = verbose if progress is None else progress  # checker progress lines on stderr
        self._out = out
        self.program = Program(
            tasks=self.tasks, graph=self.resource_dependency_graph, smem_allocator=smem_allocator,
            tmem_allocator=tmem_allocator, barrier_allocator=barrier_allocator,
            options=Options(skip_validation=skip_validation,
                            exhaustive_deadlock_race_check=exhaustive_deadlock_race_check,
                            assume_pdl_wait_completed=assume_pdl_wait_completed,
                            smem_capacity_bytes=smem_capacity_bytes, tmem_capacity_columns=tmem_capacity_columns,
                            max_states=max_states, max_seconds=max_seconds,
                            register_file_size=register_file_size))
        self.result: Optional[VerifyResult] = None
        self._lowering = None
        self._fingerprint: Optional[str] = None
        self.in_trace = _inside_dsl_trace()
        """True when this TaskManager was built while CuTe DSL traced a kernel."""
        self.cache_verdict = self.in_trace if cache_verdict is None else bool(cache_verdict)
        """Whether the checker's verdict is looked up in / stored to the in-process cache."""
        self.verdict_cached = False
        """True when the checker's verdict came from the cache (no search was run)."""
        self.print_and_verify()

    # ------------------------------------------------------------------ verification
    def _print(self, text: str = "") -> None:
        if self.verbose:
            print(text, file=self._out or sys.stdout)

    def print_and_verify(self) -> VerifyResult:
        """Print the schedule table, budgets and checker output; raise on errors."""
        program = self.program
        families: List[Any] = []
        findings = run_static_checks(program, families)
        structural_errors = [f for f in findings if f.severity == "error"]
        if self.verbose:
            self._print(_render(schedule_table, program, structural_errors))
            self._print()
            self._print(_render(register_summary, program, structural_errors))
            mem = _render(memory_summary, program, structural_errors)
            if mem:
                self._print(mem)
        checker_result = None
        skipped = ""
        if program.options.exhaustive_deadlock_race_check and not structural_errors:
            checker_result = self._run_checker()
            self._print()
            self._print(checker_result.report())
            findings.extend(checker_result.findings)
        elif program.options.exhaustive_deadlock_race_check:
            skipped = "static errors first"
            self._print("\nExhaustive checker skipped: fix the static findings first.")
        else:
            skipped = "exhaustive_deadlock_race_check=False"
        self.result = VerifyResult(findings, checker_result, families, skipped)
        for f in self.result.warnings:
            warnings.warn(ValidationWarning(f.format()), stacklevel=3)
        if self.result.errors:
            if program.options.skip_validation:
                for f in self.result.errors:
                    warnings.warn(ValidationWarning(f.format()), stacklevel=3)
            else:
                title = ("warpsched rejected the program traced in this kernel" if self.in_trace
                         else "warpsched rejected the program")
                raise ValidationError(self.result.errors, title=title)
        return self.result

    @property
    def plan(self):
        """The program's sync plan (``protocol.plan.SyncPlan.of``): the one the checker ran and the
        lowering emits."""
        return SyncPlan.of(self.program)

    @property
    def fingerprint(self) -> str:
        """sha256 of the captured program (``warpsched.verify.fingerprint``): equal fingerprints,
        equal programs to every check, e.g. ``warpsched check``'s build and the kernel's."""
        if self._fingerprint is None:
            self._fingerprint = program_fingerprint(self.program)
        return self._fingerprint

    def _run_checker(self):
        if not self.cache_verdict:
            return run_checker(self.program, progress=self.progress)
        cached = VERDICTS.get(self.fingerprint)
        if cached is None:
            # shipped with the package (warpsched prove), or stored by this exact code in another process
            cached = MANIFEST.lookup(self.fingerprint) or DISK.load(self.fingerprint)
            if cached is not None:
                VERDICTS.remember(self.fingerprint, cached)
        if cached is not None:
            self.verdict_cached = True
            return cached
        result = run_checker(self.program, progress=self.progress)
        VERDICTS.put(self.fingerprint, result)
        DISK.store(self.fingerprint, result)
        return result

    def _repr_html_(self) -> str:
        """Jupyter: the same report page as ``warpsched check --html``."""
        from .report.html import render_manager

        return render_manager(self)

    # ------------------------------------------------------------------ lowering
    @user_facing
    def setup_resources_and_tasks(self):
        """Inside a ``@cute.kernel``: allocate SMEM, create and initialize barriers."""
        from .lower.kernel import KernelLowering

        self._lowering = KernelLowering(self.program, self.plan, tmem_ptr_i32=self.tmem_ptr_i32)
        self._lowering.setup()
        return self._lowering

    @user_facing
    def run(self, **values):
        """Inside a ``@cute.kernel``: dispatch every task to its warps and run its schedule.

        ``values``: the kernel's trace-time values its work methods read (TMA atoms, global tiles,
        MMAs, SMEM views), by name: a work method reads ``stage_info.context.values.<name>``. They
        never reach the program (``build()`` is the same on the CPU and in the kernel), and the
        kernel object carries none of them."""
        if self._lowering is None:
            self.setup_resources_and_tasks()
        self._lowering.run(values)


def _inside_dsl_trace() -> bool:
    from .lower.trace import inside_dsl_trace

    return inside_dsl_trace()


def _render(printout, program: Program, errors: List[Finding]) -> str:
    """A printout of the program. A malformed program (one with static errors) may not be
    printable; the findings then explain it. On an accepted program a failure is a bug."""
    try:
        return printout(program)
    except Exception:  # noqa: BLE001 - only tolerated when the findings already reject the program
        if not errors:
            raise
        return f"({printout.__name__} skipped: the program is malformed, see the findings)"


def _warp_in_task(task):
    """``Task.is_selected()``: whether the current warp is one of the task's (kernel side)."""
    from .lower.dispatch import warp_in_task

    return warp_in_task(task)
