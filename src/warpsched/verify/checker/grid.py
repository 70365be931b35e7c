"""The grid checker: every interleaving of a small grid of CTAs running a CrossCtaProtocol.

For each launch the protocol covers (grid size x unit count), each CTA's flag and workspace calls
are captured in program order (model/gmem_flags.capture_cta: the kernel's own assignment function
on Python ints), then every interleaving of the CTAs is explored, state by state (program counters,
flag values, the values adds returned, vector clocks), with memoisation. Proven, per launch:

* no wait on a flag slot no call ever signals (a static check on the captured calls);
* no wait that can block forever: a cycle of waits across CTAs, or a wait for a value the slot
  never reaches;
* no read of a workspace tile that is not ordered after every write of it (release/acquire
  happens-before through the flags: a vector clock per CTA, joined at each acquire), and no
  read with no write ordered before it (a reader before its writer);
* no second plain writer to a tile (``accumulate`` declares one), and no two writes, or a write and
  a read, of a tile that no hand-over orders (``accumulate(atomic=True)`` only among themselves).

Every CTA of the grid is assumed resident (a persistent grid) unless the protocol says otherwise.
Workspace accesses touch no flag, and the race checks compare vector clocks, which do not depend on
the order in which unordered accesses ran: a CTA whose next call is an access (or a call its ticket
skips) runs it without branching (a sound partial-order reduction). Beyond the protocol's largest
grid and unit count the verdict says UNPROVEN (docs/checker.md, "Cross-CTA hand-overs").
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

from ...errors import Finding, ScheduleError
from ...model.gmem_flags import CrossCtaProtocol, GridOp, capture_cta

CHECK = "cross-CTA hand-over"
MAX_STATES = 200_000  # per launch; past it that launch is UNPROVEN


@dataclass
class GridResult:
    """``verdict``: SAFE (every launch up to the bound explored, no violation), REJECTED, or UNPROVEN
    (a launch ran past ``max_states``). ``statement`` says what the verdict covers."""

    protocol: str
    verdict: str
    findings: List[Finding]
    launches: List[Tuple[int, int]]
    states: int
    seconds: float
    statement: str
    per_launch: Dict[Tuple[int, int], int] = field(default_factory=dict)

    def report(self) -> str:
        lines = [f"{self.protocol}: {self.verdict} -- {self.statement}",
                 f"  {len(self.launches)} launches, {self.states} states, {self.seconds:.2f} s"]
        for f in self.findings:
            lines.append(f.format())
        return "\n".join(lines)


def check_grid(protocol: CrossCtaProtocol, max_states: int = MAX_STATES) -> GridResult:
    """Explore every launch of ``protocol`` up to its bound; stop at the first launch with a violation."""
    t0 = time.perf_counter()
    launches = protocol.launches()
    total, per = 0, {}
    unproven = []
    for ctas, units in launches:
        try:
            ops = [capture_cta(protocol, c, ctas, units) for c in range(ctas)]
        except ScheduleError as e:
            f = e.findings[0] if hasattr(e, "findings") else e.args[0]
            f.detail = (f.detail + "\n" if f.detail else "") + f"launch: {ctas} CTAs, {units} units"
            return _done(protocol, "REJECTED", [f], launches, total, t0, per)
        findings = _second_writers(ops, ctas, units)
        if not findings:
            runs = [True] if protocol.resident else [True, False]
            for resident in runs:
                ex = _Explorer(protocol, ops, ctas, units, max_states, resident)
                findings = ex.run()
                total += ex.states
                per[(ctas, units)] = per.get((ctas, units), 0) + ex.states
                if findings or ex.truncated:
                    break
            if not findings and ex.truncated:
                unproven.append((ctas, units))
        if not findings:  # waits the exploration never reached (e.g. under a ticket no run returns)
            findings = _unsignalled(ops, ctas, units)
        if findings:
            return _done(protocol, "REJECTED", findings, launches, total, t0, per)
    verdict = "UNPROVEN" if unproven else "SAFE"
    statement = f"proven for {protocol.bound()}, UNPROVEN beyond"
    if unproven:
        statement = (f"explored {protocol.bound()} without a violation, but not finished within {max_states} "
                     "states (UNPROVEN): " + ", ".join(f"{c} CTAs x {u} units" for c, u in unproven))
    if not protocol.resident:
        statement += "; also with CTAs started one at a time in launch order"
    return GridResult(protocol.name, verdict, [], launches, total, time.perf_counter() - t0, statement, per)


def needs_residency(protocol: CrossCtaProtocol, max_states: int = MAX_STATES) -> Optional[GridResult]:
    """None when the protocol is also SAFE with its CTAs started one at a time in launch order (no
    wait needs a later CTA resident); else the result that shows which wait needs one, so the
    launch must keep its grid within what can be resident at once (SM count, max active clusters)."""
    r = check_grid(replace(protocol, resident=False), max_states)
    return None if r.verdict == "SAFE" else r


def _done(protocol, verdict, findings, launches, total, t0, per) -> GridResult:
    statement = f"a violation within {protocol.bound()}"
    return GridResult(protocol.name, verdict, findings, launches, total, time.perf_counter() - t0, statement, per)


def _finding(message: str, op: GridOp, expected: str, fix: str, ctas: int, units: int,
             detail: Optional[str] = None) -> Finding:
    head = f"launch: {ctas} CTAs, {units} units"
    return Finding(check=CHECK, message=message, task=f"CTA {op.cta} unit {op.unit!r}",
                   resource=op.resource.display_name, location=op.location, expected=expected, fix=fix,
                   detail=head + ("\n" + detail if detail else ""))


# ------------------------------------------------------------------ static checks on the captured calls
def _unsignalled(ops: List[List[GridOp]], ctas: int, units: int) -> List[Finding]:
    flat = [op for cta_ops in ops for op in cta_ops]
    signalled = {(id(op.resource), op.slot) for op in flat if op.is_signal}
    for op in flat:
        if op.is_wait and (id(op.resource), op.slot) not in signalled:
            return [_finding(f"{op.resource.display_name}.{op.kind}({op.slot}, {op.value}) in CTA {op.cta} "
                             f"(unit {op.unit!r}) waits on a flag slot no CTA ever signals: a missing signal, "
                             "it hangs", op, f"a signal() or add() of {op.resource.display_name} slot {op.slot} "
                             "by the unit that hands the tile over",
                             "signal the slot after the writer's last write (or wait on the slot the writer "
                             "signals)", ctas, units)]
    return []


def _second_writers(ops: List[List[GridOp]], ctas: int, units: int) -> List[Finding]:
    writes: Dict[Tuple[int, int], List[GridOp]] = {}
    for op in (op for cta_ops in ops for op in cta_ops):
        if op.kind == "write" and not op.guards:  # guarded ones: when two of them run (_access)
            writes.setdefault((id(op.resource), op.slot), []).append(op)
    for key, ws in writes.items():
        if len(ws) > 1:
            return [_second_writer_finding(ws[0], ws[1], ctas, units)]
    return []


def _second_writer_finding(a: GridOp, b: GridOp, ctas: int, units: int, detail: Optional[str] = None) -> Finding:
    return _finding(f"workspace tile {b.slot} of {b.resource.display_name} has a second writer: CTA {b.cta} unit "
                    f"{b.unit!r} at {b.location} after CTA {a.cta} unit {a.unit!r} at {a.location}", b,
                    "one write() per tile per launch, or accumulate() for the later shares (a declared "
                    "accumulation)", "give each share its own tile, or declare the accumulation with accumulate()",
                    ctas, units, detail)


# ------------------------------------------------------------------ exploration
class _Explorer:
    def __init__(self, protocol: CrossCtaProtocol, ops, ctas: int, units: int, max_states: int, resident: bool):
        self.protocol, self.ops, self.ctas, self.units = protocol, ops, ctas, units
        self.max_states, self.resident = max_states, resident
        self.seen = set()
        self.states = 0
        self.truncated = False
        self.path: List[GridOp] = []
        self.finding: Optional[Finding] = None

    def run(self) -> List[Finding]:
        n = self.ctas
        pcs = (0,) * n
        clocks = tuple((0,) * n for _ in range(n))
        limit = sys.getrecursionlimit()
        depth = sum(len(o) for o in self.ops) + 100
        sys.setrecursionlimit(max(limit, depth * 4 + 1000))
        try:
            self._visit(pcs, clocks, (), ())
        finally:
            sys.setrecursionlimit(limit)
        return [self.finding] if self.finding else []

    # state: pcs, clocks (a vector clock per CTA), flags (sorted (key, value, clock)), tickets
    def _visit(self, pcs, clocks, flags, tickets) -> None:
        if self.finding is not None or self.truncated:
            return
        key = (pcs, clocks, flags, tickets)
        if key in self.seen:
            return
        self.seen.add(key)
        self.states += 1
        if self.states > self.max_states:
            self.truncated = True
            return
        fl = dict((k, (v, c)) for k, v, c in flags)
        tk = dict(tickets)
        running = self._running(pcs)
        # a local step (workspace access or a call its ticket skips) runs first, without branching
        for c in running:
            op = self.ops[c][pcs[c]]
            if not _enabled_guard(op, c, tk):
                return self._step(c, op, pcs, clocks, fl, tk, skip=True)
            if not op.is_sync:
                return self._step(c, op, pcs, clocks, fl, tk)
        moved = False
        for c in running:
            op = self.ops[c][pcs[c]]
            if op.is_wait and not _satisfied(op, fl.get((id(op.resource), op.slot), (0, None))[0]):
                continue
            moved = True
            self._step(c, op, pcs, clocks, fl, tk)
            if self.finding is not None or self.truncated:
                return
        if not moved and any(pcs[c] < len(self.ops[c]) for c in range(self.ctas)):
            self.finding = self._deadlock(pcs, fl, tk, running)

    def _running(self, pcs) -> List[int]:
        live = [c for c in range(self.ctas) if pcs[c] < len(self.ops[c])]
        if self.resident:
            return live
        return live[:1]  # one CTA at a time, in launch order

    def _step(self, c, op: GridOp, pcs, clocks, fl, tk, skip=False) -> None:
        clock = list(clocks[c])
        clock[c] = pcs[c] + 1
        fl = dict(fl)
        tk = dict(tk)
        if not skip:
            k = (id(op.resource), op.slot)
            value, fclock = fl.get(k, (0, None))
            if op.is_wait:
                clock = _join(clock, fclock)
            elif op.kind == "signal":
                fl[k] = (op.value, tuple(clock))
            elif op.kind == "reset":  # relaxed: the value changes, no release
                fl[k] = (0, None)
            elif op.kind == "add":  # a read-modify-write continues the release sequence
                if op.acquire:
                    clock = _join(clock, fclock)
                tk[(c, op.index)] = value
                fl[k] = (value + op.value, tuple(_join(clock, fclock)))
            else:
                problem = self._access(c, op, pcs, clock, tk)
                if problem is not None:
                    self.path.append(op)
                    self.finding = problem
                    return
        new_pcs = pcs[:c] + (pcs[c] + 1,) + pcs[c + 1:]
        new_clocks = clocks[:c] + (tuple(clock),) + clocks[c + 1:]
        flags = tuple(sorted((k, v, fc) for k, (v, fc) in fl.items()))
        self.path.append(op)
        self._visit(new_pcs, new_clocks, flags, tuple(sorted(tk.items())))
        if self.finding is None:
            self.path.pop()

    def _access(self, c, op: GridOp, pcs, clock, tk) -> Optional[Finding]:
        """The workspace access ``op`` against every access of the tile that has run (in any CTA)."""
        prior_writes = []
        for d in range(self.ctas):
            upto = pcs[d]
            for other in self.ops[d][:upto]:
                if other.resource is not op.resource or other.slot != op.slot or other.is_sync:
                    continue
                if not _enabled_guard(other, d, tk):
                    continue
                if op.kind == other.kind == "write":
                    return self._second_writer(op, other)
                ordered = d == c or clock[d] >= other.index + 1
                both_atomic = op.kind == other.kind == "accumulate" and op.value and other.value
                if other.kind != "read":
                    prior_writes.append((other, ordered))
                if ordered or both_atomic or (op.kind == other.kind == "read"):
                    continue
                return self._race(op, other)
        if op.kind == "read" and not any(ordered for _, ordered in prior_writes):
            return self._early_read(op)
        return None

    def _trace(self, extra: Optional[GridOp] = None) -> str:
        ops = self.path + ([extra] if extra is not None and (not self.path or self.path[-1] is not extra) else [])
        lines = ["interleaving (oldest first):" if ops else "interleaving: none (the CTAs block at their first calls)"]
        shown = ops[-24:]
        if len(ops) > len(shown):
            lines.append(f"  ... {len(ops) - len(shown)} earlier calls")
        lines += [f"  {op.describe()}" for op in shown]
        return "\n".join(lines)

    def _race(self, op: GridOp, other: GridOp) -> Finding:
        name = op.resource.display_name
        if op.kind == "read" or other.kind == "read":
            reader, writer = (op, other) if op.kind == "read" else (other, op)
            msg = (f"CTA {reader.cta} unit {reader.unit!r} reads workspace tile {op.slot} of {name} at "
                   f"{reader.location} without a hand-over from its writer, CTA {writer.cta} unit {writer.unit!r} "
                   f"({writer.kind} at {writer.location}): the read can run before the write lands")
            expected = (f"the reader waits on the flag slot the writer signals after its {writer.kind}() "
                        "(release -> acquire)")
            fix = "wait on the writer's flag slot before the read, and signal it after the write"
        else:
            msg = (f"two writes of workspace tile {op.slot} of {name} that no hand-over orders: CTA {other.cta} unit "
                   f"{other.unit!r} ({other.kind} at {other.location}) and CTA {op.cta} unit {op.unit!r} "
                   f"({op.kind} at {op.location})")
            expected = "each accumulate() ordered after the tile's earlier writes by a flag, or all atomic"
            fix = "chain the shares with a flag (wait for the previous share's signal), or accumulate(atomic=True)"
        return _finding(msg, op, expected, fix, self.ctas, self.units, self._trace(op))

    def _second_writer(self, op: GridOp, other: GridOp) -> Finding:
        return _second_writer_finding(other, op, self.ctas, self.units, self._trace(op))

    def _early_read(self, op: GridOp) -> Finding:
        writers = [o for cta_ops in self.ops for o in cta_ops
                   if o.resource is op.resource and o.slot == op.slot and o.kind != "read" and not o.is_sync]
        who = ", ".join(f"CTA {w.cta} unit {w.unit!r} at {w.location}" for w in writers[:4]) or "none in this launch"
        msg = (f"CTA {op.cta} unit {op.unit!r} reads workspace tile {op.slot} of {op.resource.display_name} at "
               f"{op.location} before its writer: no write of the tile is ordered before the read (writers: {who})")
        return _finding(msg, op, "the read after a wait on the flag slot its writer signals after writing",
                        "wait for the writer's signal before reading (the right slot, the right value)",
                        self.ctas, self.units, self._trace(op))

    def _deadlock(self, pcs, fl, tk, running) -> Finding:
        blocked = {c: self.ops[c][pcs[c]] for c in running}
        # who can still signal each blocked wait's slot: CTAs with a later signal / add of it
        waits_for: Dict[int, List[Tuple[int, GridOp]]] = {}
        for c, op in blocked.items():
            sigs = []
            for d in range(self.ctas):
                for later in self.ops[d][pcs[d]:]:
                    if _can_satisfy(later, op):
                        sigs.append((d, later))
                        break
            waits_for[c] = sigs
        graph = {c: [d for d, _ in s if d in blocked] for c, s in waits_for.items()}
        cycle = _cycle({c: [d for d in ds if d != c] for c, ds in graph.items()}) or _cycle(graph)
        lines = [self._trace(), "blocked:"]
        for c, op in blocked.items():
            value = fl.get((id(op.resource), op.slot), (0, None))[0]
            sig = "; ".join(f"CTA {d} would signal it at {s.location} (unit {s.unit!r})" for d, s in waits_for[c])
            lines.append(f"  {op.describe()} sees {value}" + (f"; {sig}" if sig else "; nothing left signals it"))
        if not self.resident and not cycle:
            lines.append("  (CTAs started one at a time, in launch order: the wait needs a later CTA resident)")
        if cycle:
            first = blocked[cycle[0]]
            if len(cycle) == 1:
                sig = waits_for[cycle[0]][0][1]
                msg = (f"CTA {first.cta} (unit {first.unit!r}) waits at {first.location} for slot {first.slot} of "
                       f"{first.resource.display_name}, which only its own later unit {sig.unit!r} signals (at "
                       f"{sig.location}): a cycle of waits, it hangs")
                return _finding(msg, first, "a unit waits only for units that run earlier in their own CTA, or "
                                "in another CTA", "reverse the hand-over order so waits point one way (e.g. share "
                                "s waits for share s - 1 only)", self.ctas, self.units, "\n".join(lines))
            chain = " -> ".join(f"CTA {c} (unit {blocked[c].unit!r}, {blocked[c].kind}({blocked[c].slot}) at "
                                f"{blocked[c].location})" for c in cycle + [cycle[0]])
            msg = (f"a cycle of waits across CTAs: {chain}; each waits for a signal the next issues only later "
                   "in its own order: it hangs")
            return _finding(msg, first, "hand-overs in an order every CTA agrees on (a unit waits only for units "
                            "that run earlier in their own CTA)", "reverse the hand-over order so waits point "
                            "one way (e.g. share s waits for share s - 1 only)", self.ctas, self.units,
                            "\n".join(lines))
        c, op = next(iter(blocked.items()))
        value = fl.get((id(op.resource), op.slot), (0, None))[0]
        ever = any(o.is_signal and o.resource is op.resource and o.slot == op.slot
                   for cta_ops in self.ops for o in cta_ops)
        ever_value = any(_can_satisfy(o, op) for cta_ops in self.ops for o in cta_ops)
        what = ("no CTA ever signals it: a missing signal, or the wrong slot" if not ever else
                f"no CTA ever sets it to {op.value}: a missing signal, or the wrong value" if not ever_value else
                "nothing left signals the value it waits for" if not waits_for[c] else
                "it waits for a CTA that cannot run")
        msg = (f"{op.resource.display_name}.{op.kind}({op.slot}, {op.value}) in CTA {op.cta} (unit {op.unit!r}) at "
               f"{op.location} can block forever: slot {op.slot} stays {value} ({what}); it hangs")
        return _finding(msg, op, f"a signal that sets slot {op.slot} to {op.value} after this CTA reached the wait",
                        "signal the slot the reader waits on with the value it waits for (or wait for the value "
                        "the writer signals)", self.ctas, self.units, "\n".join(lines))


def _can_satisfy(signal: GridOp, wait: GridOp) -> bool:
    """Whether ``signal`` (a later call) could release ``wait``: an add, or a store of a value it accepts."""
    if not signal.is_signal or signal.resource is not wait.resource or signal.slot != wait.slot:
        return False
    return signal.kind == "add" or _satisfied(wait, signal.value)


def _enabled_guard(op: GridOp, cta: int, tickets) -> bool:
    return all(tickets.get((cta, idx)) == old for idx, old in op.guards)


def _satisfied(op: GridOp, value: int) -> bool:
    return value == op.value if op.kind == "wait" else value >= op.value


def _join(clock, other) -> list:
    if other is None:
        return list(clock)
    return [max(a, b) for a, b in zip(clock, other)]


def _cycle(graph: Dict[int, List[int]]) -> Optional[List[int]]:
    """A cycle of the waits-for graph (a CTA waiting for a signal it issues later itself included)."""
    def dfs(node, path, on_path):
        for nxt in graph.get(node, ()):
            if nxt in on_path:
                return path[path.index(nxt):]
            found = dfs(nxt, path + [nxt], on_path | {nxt})
            if found:
                return found
        return None

    for start in sorted(graph):
        found = dfs(start, [start], {start})
        if found:
            return found
    return None
