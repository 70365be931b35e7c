"""The register rule: how many registers each warp holds, shared by the printout and the check.

The block is launched with whole warp groups (4 warps) and one block per SM, so every thread
starts with the launch share ``default`` = register file / threads, rounded down to a multiple
of 8 (at most 248). The CTA's pool is ``threads x default``. ``setmaxnreg`` is warp-group wide:
every warp of a warp group -- idle warps included -- moves to the group's ``num_registers``;
``.dec`` returns registers to the pool and ``.inc`` blocks until the pool has them. So the
program fits when the sum over warps of 32 x registers stays within the pool, i.e. when the
TS "Reg budget" (sum over warps of default - registers) is >= 0. A group without a task that
sets ``num_registers`` keeps the default. CUTLASS's 1 producer + 2 consumer warp groups at
40 / 232 / 232 use exactly 3 x 168 (see docs/validation.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

WARPS_PER_GROUP = 4
THREADS_PER_WARP = 32
MIN_REGS, MAX_REGS = 24, 256  # setmaxnreg range, in steps of 8
MAX_LAUNCH_REGS = 248  # the largest multiple of 8 within ptxas' 255 registers per thread


def _int(x: Any) -> bool:
    return type(x) is int


def is_setmaxnreg_value(regs: Any) -> bool:
    return _int(regs) and MIN_REGS <= regs <= MAX_REGS and regs % 8 == 0


def block_warps(num_warps: int) -> int:
    """Warps the block is launched with: whole warp groups."""
    return (max(0, num_warps) + WARPS_PER_GROUP - 1) // WARPS_PER_GROUP * WARPS_PER_GROUP


def launch_registers(num_threads: int, register_file: int = 65536) -> int:
    """Per-thread registers of a 1-block-per-SM launch of ``num_threads`` threads."""
    return min(MAX_LAUNCH_REGS, (register_file // max(1, num_threads)) // 8 * 8)


@dataclass
class Row:
    """A printout line: a task, or the idle warps of one warp group."""
    label: str
    warp_start: int
    num_warps: int
    regs: int
    contribution: int  # num_warps x (default - regs)
    task: Any = None


@dataclass
class RegisterPlan:
    block_warps: int
    default: int
    register_file: int
    group_regs: Dict[int, int] = field(default_factory=dict)  # warp group -> registers per thread
    rows: List[Row] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return self.block_warps * THREADS_PER_WARP

    @property
    def pool(self) -> int:
        """Registers the CTA holds at launch; setmaxnreg only redistributes them."""
        return self.threads * self.default

    @property
    def used(self) -> int:
        return sum(r.num_warps * THREADS_PER_WARP * r.regs for r in self.rows)

    @property
    def budget(self) -> int:
        """TS "Reg budget": sum over warps of (default - registers); negative = over the pool."""
        return sum(r.contribution for r in self.rows)

    @property
    def fits(self) -> bool:
        return self.budget >= 0

    @property
    def free_blocks(self) -> int:
        """Unused allocation units of the pool (a unit is 256 registers: one warp x 8)."""
        return max(0, (self.pool - self.used) // (THREADS_PER_WARP * 8))


def _valid_tasks(program) -> list:
    from ..model.task import Task

    return [t for t in program.tasks if isinstance(t, Task) and _int(t.warp_idx) and t.warp_idx >= 0
            and _int(t.num_warps) and t.num_warps >= 1]


def plan(program) -> RegisterPlan:
    tasks = _valid_tasks(program)
    warps = block_warps(max((t.warp_idx + t.num_warps for t in tasks), default=0))
    file_size = program.options.register_file_size
    default = launch_registers(warps * THREADS_PER_WARP, file_size)
    out = RegisterPlan(warps, default, file_size)
    own: Dict[int, int] = {}  # warp -> the registers of the task running on it
    asked: Dict[int, List[int]] = {}  # warp group -> num_registers set by its tasks
    for t in tasks:
        regs = t.num_registers if _int(t.num_registers) else default
        for w in range(t.warp_idx, t.warp_idx + t.num_warps):
            own.setdefault(w, regs)
            if _int(t.num_registers):
                asked.setdefault(w // WARPS_PER_GROUP, []).append(t.num_registers)
    for g in range(warps // WARPS_PER_GROUP):
        # mixed requests are the consistency check's error; the largest keeps the budget honest
        members = [own[w] for w in range(g * WARPS_PER_GROUP, (g + 1) * WARPS_PER_GROUP) if w in own]
        out.group_regs[g] = max(asked[g] + members) if g in asked else default
    for t in tasks:
        regs = t.num_registers if _int(t.num_registers) else default
        out.rows.append(Row(f"Task {tasks.index(t):>2} {str(t.name)[:20]!r:<22}", t.warp_idx, t.num_warps, regs,
                            t.num_warps * (default - regs), t))
    for g, regs in out.group_regs.items():  # idle warps follow their group's setmaxnreg
        idle = [w for w in range(g * WARPS_PER_GROUP, (g + 1) * WARPS_PER_GROUP) if w not in own]
        for start, n in _runs(idle):
            label = f"Idle warps [{start}:{start + n}) (group {g})"
            out.rows.append(Row(f"{label:<30}", start, n, regs, n * (default - regs)))
    return out


def _runs(ws: List[int]):
    out: List[List[int]] = []
    for w in ws:
        if out and out[-1][0] + out[-1][1] == w:
            out[-1][1] += 1
        else:
            out.append([w, 1])
    return [(s, n) for s, n in out]


def describe_groups(p: RegisterPlan) -> str:
    """'128 threads x (40 + 232 + 232)' -- what the pool must hold, per warp group."""
    return f"{WARPS_PER_GROUP * THREADS_PER_WARP} threads x (" + " + ".join(
        str(p.group_regs[g]) for g in sorted(p.group_regs)) + ")"


def pool_text(p: RegisterPlan) -> str:
    return f"{p.pool} ({p.threads} threads x {p.default} registers at launch)"

