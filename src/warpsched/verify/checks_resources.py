"""Capacities: SMEM and TMEM against the allocator's capacity, registers (warp-group
consistency of num_registers and the per-block register budget, see registers.py), and
whole warp groups for WGMMA."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..errors import Finding
from ..model.memory import BARRIER_BYTES_PER_STAGE, SM90_SMEM_CAPACITY, TMEM_COLUMNS
from ..model.enums import WorkAttr
from ..model.resources import work_spec_of
from ..model.task import Task
from . import registers
from .findings_util import F, config_of, dedupe, is_int, is_pos_int, valid_config
from .program import Program, name_of

SMEM = "smem capacity"
TMEM = "tmem capacity"
WG_REGS = "warp-group register consistency"
BUDGET = "register budget"
WGMMA_GROUPS = "wgmma warp groups"

WARPS_PER_GROUP, MIN_REGS, MAX_REGS = registers.WARPS_PER_GROUP, registers.MIN_REGS, registers.MAX_REGS


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    out += _smem(program)
    out += _tmem(program)
    out += _registers(program)
    out += _wgmma_warp_groups(program)
    return dedupe(out)


def _size(a: Any) -> Optional[int]:
    try:
        n = int(a.size_bytes)
    except Exception:  # noqa: BLE001 - a malformed allocation is reported, not crashed on
        return None
    return n if n >= 0 else None


def _smem(program: Program) -> List[Finding]:
    alloc = program.smem_allocator
    if alloc is None:
        return []
    out = []
    allocations = list(getattr(alloc, "allocations", []) or [])
    sizes = []
    for a in allocations:
        n = _size(a)
        if n is None:
            raw = getattr(a, "declared_bytes", None)
            field_ = f"size_bytes={raw!r}" if raw is not None else f"count={getattr(a, 'count', None)!r}"
            out.append(F(SMEM, f"SMEM allocation {getattr(a, 'name', a)!r} has an invalid size ({field_})",
                         resource=str(getattr(a, "name", a)), location=getattr(a, "location", None),
                         expected=f"{field_.split('=')[0]} an int >= 0",
                         fix="give the byte size (size_bytes=) or the element count (count=) of the buffer"))
        else:
            sizes.append((a, n))
    total = alloc.total_bytes if is_int(getattr(alloc, "total_bytes", None)) else sum(n for _, n in sizes)
    backing = getattr(program.barrier_allocator, "backing", None)
    barriers = 0
    if backing is not alloc:  # a backed BarrierAllocator already placed its mbarriers in this block
        barriers = BARRIER_BYTES_PER_STAGE * sum(config_of(r).num_stages for r in program.pipelined_resources
                                                 if valid_config(config_of(r)))
    cap = program.options.smem_capacity_bytes or getattr(alloc, "capacity_bytes", None) or SM90_SMEM_CAPACITY
    if not is_pos_int(cap):
        return out
    if total + barriers > cap:
        big = max(sizes, key=lambda x: x[1])[0] if sizes else None
        top = ", ".join(f"{a.name} {n} B" for a, n in sorted(sizes, key=lambda x: -x[1])[:3])
        out.append(F(SMEM, f"shared memory needs {total + barriers} B (data {total} B + barriers {barriers} B = "
                     f"{BARRIER_BYTES_PER_STAGE} B x stages); largest: {top}",
                     resource=getattr(big, "name", None), location=getattr(big, "location", None),
                     expected=f"at most {cap} B (allocator capacity)",
                     fix="reduce num_stages or tile sizes, or alias buffers that are never live together "
                     "(SmemAllocator.add_alias_group)"))
    return out


def _tmem(program: Program) -> List[Finding]:
    alloc = program.tmem_allocator
    if alloc is None:
        return []
    out = []
    cols = []
    for a in list(getattr(alloc, "allocations", []) or []):
        c = getattr(a, "columns", None)
        if not (is_int(c) and c >= 0):
            out.append(F(TMEM, f"TMEM allocation {getattr(a, 'name', a)!r} has columns={c!r}",
                         resource=str(getattr(a, "name", a)), location=getattr(a, "location", None),
                         expected="an int >= 0", fix="give the number of TMEM columns"))
        else:
            cols.append((a, c))
    total = sum(c for _, c in cols)
    cap = program.options.tmem_capacity_columns or getattr(alloc, "capacity_columns", None) or TMEM_COLUMNS
    if is_pos_int(cap) and total > cap:
        big = max(cols, key=lambda x: x[1])[0]
        out.append(F(TMEM, f"tensor memory needs {total} columns ("
                     + ", ".join(f"{a.name} {c}" for a, c in cols) + ")", resource=big.name,
                     location=getattr(big, "location", None), expected=f"at most {cap} columns",
                     fix="fewer accumulator stages or a narrower MMA tile"))
    return out


# ------------------------------------------------------------------ registers
def _registers(program: Program) -> List[Finding]:
    out = []
    tasks = [t for t in program.tasks if isinstance(t, Task) and is_int(t.warp_idx) and t.warp_idx >= 0
             and is_pos_int(t.num_warps)]
    for t in tasks:
        r = t.num_registers
        if r is not None and not registers.is_setmaxnreg_value(r):
            out.append(F(BUDGET, f"num_registers={r!r} of task {t.name!r}", task=t, location=t.location,
                         expected=f"None or a multiple of 8 in [{MIN_REGS}, {MAX_REGS}] (setmaxnreg)",
                         fix="round to a multiple of 8"))
    if not any(t.num_registers is not None for t in tasks):
        return out
    plan = registers.plan(program)  # the same plan the register printout shows
    default = plan.default
    groups: Dict[int, List[Tuple[Task, int]]] = {}
    for t in tasks:
        regs = t.num_registers if is_int(t.num_registers) else default
        for w in range(t.warp_idx, t.warp_end):
            groups.setdefault(w // WARPS_PER_GROUP, []).append((t, regs))
    for g, members in sorted(groups.items()):
        values = {}
        for t, regs in members:
            values.setdefault(regs, [])
            if t not in values[regs]:
                values[regs].append(t)
        if len(values) > 1:
            desc = "; ".join(f"{', '.join(t.name for t in ts)}: {v}" for v, ts in values.items())
            worst = [t for v, ts in values.items() for t in ts][-1]
            out.append(F(WG_REGS, f"warp group {g} (warps {g * 4}-{g * 4 + 3}) mixes register counts ({desc}); "
                         "setmaxnreg applies to a whole warp group", task=worst, location=worst.location,
                         expected="one num_registers for every task in a warp group (None means the default "
                         f"{default})", fix="align the tasks' num_registers, or move a task to its own warp group"))
    if not plan.fits:
        hungry = max(tasks, key=lambda t: (t.num_registers if is_int(t.num_registers) else default) * t.num_warps)
        out.append(F(BUDGET, f"the block needs {plan.used} registers, {registers.describe_groups(plan)} per warp "
                     f"group (idle warps follow their group's setmaxnreg); Reg budget {plan.budget}",
                     task=hungry, location=hungry.location,
                     expected=f"at most {registers.pool_text(plan)}: setmaxnreg only redistributes the launch's "
                     "registers, and setmaxnreg.inc waits until enough are free",
                     fix="lower num_registers of the data-movement warp groups (they donate) or of the largest "
                     "task, e.g. 40 / 232 / 232 for one producer and two consumer warp groups"))
    return out


# ------------------------------------------------------------------ WGMMA
def _wgmma_warp_groups(program: Program) -> List[Finding]:
    """wgmma.mma_async / wait_group are warp-group instructions (.sync.aligned over the 4
    warps of an aligned warp group): a task issuing them must consist of whole warp groups."""
    out = []
    for t in program.tasks:
        if not (isinstance(t, Task) and is_int(t.warp_idx) and t.warp_idx >= 0 and is_pos_int(t.num_warps)):
            continue
        if t.warp_idx % WARPS_PER_GROUP == 0 and t.num_warps % WARPS_PER_GROUP == 0:
            continue
        for step in program.steps_of(t):
            spec = work_spec_of(getattr(type(step.resource), step.method, None)) if step.kind.is_work else None
            if spec is None or not spec.attrs & (WorkAttr.WGMMA | WorkAttr.WGMMA_WAIT):
                continue
            first = t.warp_idx // WARPS_PER_GROUP
            last = (t.warp_end - 1) // WARPS_PER_GROUP
            warps = f"warp {t.warp_idx}" if t.num_warps == 1 else f"warps {t.warp_idx}-{t.warp_end - 1}"
            where = (f"{warps} (warp group{'s' if last > first else ''} "
                     f"{first}{f'-{last}' if last > first else ''}"
                     f"{', straddling' if last > first else ', part of it'})")
            start = t.warp_idx // WARPS_PER_GROUP * WARPS_PER_GROUP
            size = max(WARPS_PER_GROUP, (t.num_warps + WARPS_PER_GROUP - 1) // WARPS_PER_GROUP * WARPS_PER_GROUP)
            out.append(F(WGMMA_GROUPS, f"task {t.name!r} issues WGMMA ({name_of(step.resource)}.{step.method}, "
                         f"WorkAttr.{'WGMMA' if spec.attrs & WorkAttr.WGMMA else 'WGMMA_WAIT'}) on {where}; "
                         "wgmma needs the 4 warps of one aligned warp group", task=t, resource=step.resource,
                         location=step.location,
                         expected=f"warp_idx a multiple of {WARPS_PER_GROUP} and num_warps a multiple of "
                         f"{WARPS_PER_GROUP} (whole warp groups)",
                         fix=f"give the task whole warp groups, e.g. warp_idx={start}, num_warps={size}, and move "
                         "the tasks that shared those warp groups elsewhere"))
            break
    return out
