"""Macro-steps: one transition of an executor, extended with the steps of the same executor that
may run atomically with it (Lipton's reduction: a transition may be fused with its successor in
program order when one of them commutes with every other executor's transitions in the right
direction).

**Left movers after a transition.** Arrivals (commit, release) and window openings are left
movers: running them as early as possible loses no deadlock or race (an arrival can only enable
others; an opening only lengthens a window). So every transition is extended with the
executor's following *mergeable* steps (``mergeable``).

**Returns parked until the next wait (FUSE_RETURNS).** A *return* (the end of a synchronous
work call: its read / write window closes) is a right mover: it changes nothing but its own
executor's window and pc, no transition of another executor is enabled or disabled by it, and
delaying it only keeps a window open longer. So a return whose executor then reaches (through
jumps and local steps only) an unguarded wait / acquire is taken only together with that wait,
at the moment the wait can pass: ``[return; wait; left movers]``. While the wait cannot pass,
the executor is *parked*: it has no transition, its window stays open. What this preserves:

- every state of the full search is reached with at most some windows still open (move each
  return right, past the other executors' steps, to just before its executor's next step: an
  order the full search has too, since a return changes no other step's enabledness);
- races: a window is open at least as long as in the full search, so every race is found; a
  race found in a reordered run is a real one (that order is a real interleaving);
- deadlocks: a state where every executor is done, blocked, or parked is one whose owed returns
  (``settle``) lead to a real deadlock: the explorer reports that state, with the returns shown;
- terminal states (and so the balance check): a return before ``done`` is never parked;
- violations of the wait itself (over-arrival, a bracket race): the fused step is not offered
  when its wait raises one; the return alone is, and the explorer meets the violation next;
- PDL order, over-arrivals elsewhere: they depend on barriers and pdl flags only, not on windows.

Only the interleavings of a return with other executors' steps are dropped (e.g. the per-role
example's four wait warps: each read's return is taken with the next acquire of partials).
"""
from __future__ import annotations

from .loops import CUR, PC, PEND, SYNC
from .tables import action_mergeable
from .violations import Unbounded, Violation

FUSE_RETURNS = True  # a switch so the tests can compare against the search without it


class MacroMixin:
    def successors(self, state, e: int):
        """All (label, next_state) of executor ``e``; raises Violation / Unbounded.

        Labels are (executor, what, pc, merged) with merged = ((what, pc, cursors), ...): the
        steps run atomically after the first (see the module docstring)."""
        out = []
        hw_first = bool(state[0][e][PEND])  # _raw lists the hardware event first
        for label, st in self._raw(state, e):
            if hw_first:
                hw_first = False
                out.append((label + ((),), st))
                continue
            if FUSE_RETURNS and label[1] == "return":
                fused = self._fused_return(label, st, e)
                if fused is not None:
                    out.extend(fused)
                    continue
            out.append(self._extend(label, st, e, []))
        return out

    def _extend(self, label, st, e, merged):
        """The transition ``label`` (to ``st``) with the executor's following mergeable steps."""
        ff, merge_static, prog, rules = self.ff[e], self.merge_static[e], self.execs[e].program, self.rules[e]
        while True:
            es = st[0][e]
            if es[SYNC] is not None:
                break  # a return closes a window: it must stay a separate transition
            pc = es[PC]
            hop = ff[pc]
            if hop is not None:  # fast-forward over jumps and unguarded local steps
                cur = es[CUR]
                merged.extend([(what, p, cur) for what, p in hop[1]])
                pc = hop[0]
                es = (pc,) + es[1:]
                execs = st[0]
                st = (execs[:e] + (es,) + execs[e + 1:],) + st[1:]
            m = merge_static[pc]
            try:
                if m is True:  # an unguarded step (merge_static): straight to its rule
                    rule = rules[pc]
                    sub = rule(st, e, es, prog[pc].action) if rule is not None else self._raw(st, e, hw=False)
                elif m is None and self.mergeable(st, e):
                    sub = self._raw(st, e, hw=False)
                else:
                    break
            except (Violation, Unbounded):
                break  # leave it to the explorer, so the counterexample shows it
            if len(sub) != 1:
                break
            (lab2, st2), = sub
            merged.append((lab2[1], lab2[2], es[CUR]))
            st = st2
        return (label + (tuple(merged),), st)

    def _parks_at(self, e: int, pc: int):
        """The pc of the unguarded wait / acquire a return at ``pc`` is fused with, else None."""
        nxt = pc + 1
        hop = self.ff[e][nxt]
        if hop is not None:
            nxt = hop[0]
        return nxt if self.wait_at[e][nxt] is not None else None

    def _fused_return(self, label, st, e):
        """[return; wait; left movers] for each outcome of the wait; [] while the wait cannot
        pass (parked); None: the return stays alone (no wait follows, or the wait raises)."""
        es = st[0][e]
        at = self._parks_at(e, label[2])
        if at is None:
            return None
        merged = []
        hop = self.ff[e][es[PC]]
        if hop is not None:
            merged.extend((what, p, es[CUR]) for what, p in hop[1])
            st = self._set_exec(st, e, es, pc=at)
        try:
            sub = self._raw(st, e, hw=False)
        except (Violation, Unbounded):
            return None
        cur = st[0][e][CUR]
        return [self._extend(label, st2, e, merged + [(lab2[1], lab2[2], cur)]) for lab2, st2 in sub]

    def parked(self, state, e: int) -> bool:
        """Is ``e`` parked: its return waits for the wait after it (see the module docstring)?"""
        es = state[0][e]
        return FUSE_RETURNS and es[SYNC] is not None and self._parks_at(e, es[PC]) is not None

    def settle(self, state):
        """The returns a state's parked executors owe, taken alone: ([(pre-state, label)], state).
        Used where no executor can move, to show the deadlock the full search reaches."""
        path = []
        for e in range(len(self.execs)):
            if self.parked(state, e):
                es = state[0][e]
                path.append((state, (e, "return", es[PC], ())))
                state = self._set_exec(state, e, es[:SYNC] + (None,) + es[SYNC + 1:], pc=es[PC] + 1)
        return path, state

    def mergeable(self, state, e: int) -> bool:
        es = state[0][e]
        if es[SYNC] is not None:
            return False  # a return closes a window: it must stay a separate transition
        ins = self.execs[e].program[es[PC]]
        k = ins.kind
        if k == "jump":
            return True
        if k in ("loop_head", "tile_head"):
            return self.is_local(state, e, deterministic=True)
        if k != "step":
            return False
        if not self._guards_hold(state, e, es, ins):
            return True
        return action_mergeable(ins.action)

