"""Text printouts: the schedule table and the register budget (as on the TS printout page)."""
from __future__ import annotations

from typing import Dict, List, Optional

from ..model.ir import Section, Step, StepKind
from ..verify import registers
from ..verify.program import Program, name_of

COL = 30
PHASES = ("    Phase tags:  P - Prologue (before work_tile_loop) | H - Head (before the loop) |\n"
          "      F - FirstIter | L - LastIter | N - every(n) | ?/! - when_true/when_false |\n"
          "      S - skippable | T - Tail (after the loop) | E - Epilogue (after work_tile_loop) |\n"
          "      0 - if_empty() (after a loop that ran no iteration)")

_ARROWS = {StepKind.ProducerAcquire: ("", "<-"), StepKind.ProducerCommit: ("", "->"),
           StepKind.ConsumerWait: ("->", ""), StepKind.ConsumerRelease: ("<-", "")}


def cell(step: Step) -> str:
    pre, post = _ARROWS.get(step.kind, ("", ""))
    stage = f"{pre}{step.kind.short}{post}"
    tags = step.section.tag + "".join(g.tag for g in step.guards)
    res = (step.resource_name if step.via_group is None else f"{step.resource_name}")[:11]
    return f" {res:<11}{stage:>9}  {tags:<3}{step.call_idx:>2} "[:COL].ljust(COL)  # as wide as an empty cell


def _not_in_iteration_0(step) -> bool:
    """The step does not run in the walk's one iteration: ``every(n, start > 0)`` in the loop, or an
    ``if_empty()`` block after it (the walk's loop ran)."""
    return any((g.kind == "every" and g.start > 0) or g.kind == "loop_empty" for g in step.guards)


def _simulate(program: Program) -> List[List[Optional[Step]]]:
    """Rows of a credit simulation (head, one loop iteration, tail): each round, every task
    whose next step is not blocked takes one step. Blocked steps end the table. The iteration
    walked is iteration 0: a step under ``every(n, start=s)`` with s > 0 is shown in the loop body
    but takes and gives no credit (it does not run in iteration 0; a lagged wait would otherwise
    take a credit the walk never gives back and stop the table), and so is one under ``if_empty()``
    after the loop (the walk's loop ran an iteration)."""
    columns = [list(program.steps_of(t)) for t in program.tasks]
    # credits per consumer task: a broadcast stage is waited on by every consumer task of its
    # resource, and its empty slot comes back once all of them released it
    consumers: Dict[int, set] = {}
    for i, col in enumerate(columns):
        for step in col:
            if step.kind is StepKind.ConsumerWait:
                consumers.setdefault(id(step.resource), set()).add(i)
    full: Dict[tuple, int] = {}
    released: Dict[tuple, int] = {}
    acquired: Dict[int, int] = {}

    def stages(step):
        cfg = getattr(step.resource, "pipeline_config", None)
        if cfg is None and hasattr(step.resource, "members"):
            cfg = step.resource.members[0].pipeline_config if step.resource.members else None
        return cfg.num_stages if cfg is not None and isinstance(cfg.num_stages, int) else None

    def empty_slots(key, s):
        back = min((released.get((key, c), 0) for c in consumers.get(key, ())), default=0)
        return s - acquired.get(key, 0) + back

    def blocked(step, task):
        s = stages(step)
        if s is None or _not_in_iteration_0(step):
            return False
        key = id(step.resource)
        if step.kind is StepKind.ConsumerWait:
            return full.get((key, task), 0) <= 0
        if step.kind is StepKind.ProducerAcquire:
            return empty_slots(key, s) <= 0
        return False

    def apply(step, task):
        s = stages(step)
        if s is None or _not_in_iteration_0(step):
            return
        key = id(step.resource)
        if step.kind is StepKind.ProducerAcquire:
            acquired[key] = acquired.get(key, 0) + 1
        elif step.kind is StepKind.ProducerCommit:
            for c in consumers.get(key, ()):
                full[(key, c)] = full.get((key, c), 0) + 1
        elif step.kind is StepKind.ConsumerWait:
            full[(key, task)] = full.get((key, task), 0) - 1
        elif step.kind is StepKind.ConsumerRelease:
            released[(key, task)] = released.get((key, task), 0) + 1

    rows: List[List[Optional[Step]]] = []
    cursors = [0] * len(columns)
    while any(c < len(col) for c, col in zip(cursors, columns)):
        row: List[Optional[Step]] = [None] * len(columns)
        progressed = False
        for i, col in enumerate(columns):
            if cursors[i] < len(col) and not blocked(col[cursors[i]], i):
                row[i] = col[cursors[i]]
                cursors[i] += 1
                progressed = True
        if not progressed:
            rows.append([col[c] if c < len(col) else None for c, col in zip(cursors, columns)] + ["blocked"])
            break
        for i, step in enumerate(row):
            if step is not None:
                apply(step, i)
        rows.append(row)
    return rows


def schedule_table(program: Program) -> str:
    n = len(program.tasks)
    title = "   Full (Prologue + Head + Loop + Tail + Epilogue)   "
    width = max(n * (COL + 1) + 1, len(title) + 8)  # a one-task table still frames its title
    rule = "=" * width
    out = [rule, "|" + "|".join(f"{t.header:^{COL}}" for t in program.tasks) + "|", ""]
    title = "   Full (Prologue + Head + Loop + Tail + Epilogue)   "
    out.append(f"{title:=^{width}}")
    for row in _simulate(program):
        if row and row[-1] == "blocked":
            for task, step in zip(program.tasks, row[:-1]):
                if step is not None:
                    out.append(f"  {task.name}: {name_of(step.resource)} {step.kind.label} {step.call_idx} "
                               f"is blocked! ({step.location})")
            break
        out.append("|" + "|".join(cell(s) if s is not None else " " * COL for s in row) + "|")
    out.append(f"{'   End Full   ':=^{width}}")
    out.append(PHASES)
    return "\n".join(out)


# ------------------------------------------------------------------ registers
def default_registers(program: Program) -> int:
    """Per-thread registers every warp gets before reconfiguration (see verify/registers.py)."""
    return registers.plan(program).default


def register_summary(program: Program) -> str:
    """The TS register printout, from the same plan the register-budget check uses."""
    p = registers.plan(program)
    lines = [f"{r.label}, numWarps x (defaultMaxNumRegs - numRegsPerThread) = "
             f"{r.num_warps} x ({p.default} - {r.regs}) = {r.contribution}"
             for r in p.rows if r.task is not None or r.regs != p.default]  # idle warps at the default: 0
    lines.append(f"Num. regs: {p.used} of {p.pool} ({p.threads} threads x {p.default} at launch, register file "
                 f"{p.register_file}; free reg blocks: {p.free_blocks})")
    lines.append(f"Reg budget: {p.budget}" + ("" if p.fits else "  (negative: setmaxnreg.inc would wait forever)"))
    return "\n".join(lines)


def memory_summary(program: Program) -> str:
    lines = []
    smem = program.smem_allocator
    if smem is not None:
        data = smem.total_bytes if smem.total_bytes is not None else smem.unaliased_bytes
        barriers = 16 * sum(r.pipeline_config.num_stages for r in program.pipelined_resources
                            if isinstance(r.pipeline_config.num_stages, int))
        cap = program.options.smem_capacity_bytes or smem.capacity_bytes
        lines.append(f"SMEM usage: {data + barriers} B (data {data} B + barriers {barriers} B)"
                     + (f" / {cap} B capacity" if cap else ""))
    tmem = program.tmem_allocator
    if tmem is not None:
        cols = tmem.total_columns if tmem.total_columns is not None else sum(a.columns for a in tmem.allocations)
        cap = program.options.tmem_capacity_columns or tmem.capacity_columns
        lines.append(f"TMEM usage: {cols} columns / {cap} columns capacity")
    if smem is not None:
        lines.append(smem.usage_report())
    return "\n".join(lines)


_ = Section
