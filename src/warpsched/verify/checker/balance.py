"""The balance check at the end of the kernel: every commit is consumed, on every path.

It runs on *terminal* states (every executor done), which the search reaches for every trip
count, skip pattern and branch value; the reductions keep every terminal state (they keep all
states with no enabled transition). Two rules, both relations between a cursor and the
barriers of its own pipeline, so the stage-rotation / phase-flip symmetry keeps them:

- **consumed**: for each consumer executor and each pipeline it waits on, no phase of a full
  barrier that it would wait on has completed without it waiting (its next wait on every stage
  of its lane would block), and no full barrier is left with a phase half done (arrivals or
  transaction bytes pending). Otherwise a tile was dropped for that consumer -- and for a TMA
  or UMMA producer, the copy may still be writing shared memory when the CTA exits.
- **released**: the lowering ends every dense producer task (acquire stride 1) with
  ``producer_tail``, a wait on the empty barrier of every stage from the producer's cursor on.
  That wait must pass at the end, i.e. every committed stage was released; otherwise the
  kernel hangs at exit.

Counts are global: the loop and tile gap over-approximations (a task more than G tiles ahead lets
the lagging ones meet fresh tiles; an exact trip count far from its end is lifted by periods) can
drop a tile the leader produced in, which no deadlock or race notices but a count does. So an
imbalance is reported only when its counterexample replays step for step on an engine without them
(``confirm``): then it is a real run. One that does not replay marks the search ``unconfirmed``, and
run_checker searches again without the exact-count lift (as it does for any problem found lifted).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from .engine import ASYNC, CUR, Engine

MAX_CONFIRM = 200  # replays tried per search (each is one counterexample path long)
NO_GAP = 1 << 30


def _expected_parity(stage: int, cur_stage: int, cur_parity: int) -> int:
    """Parity of a cursor's next visit of ``stage``: this lap if at or after the cursor, else the next."""
    return cur_parity if stage >= cur_stage else cur_parity ^ 1


class Balance:
    """The per-executor checks of one compiled program (built once per search)."""

    def __init__(self, comp):
        self.c = comp
        self._exact = None
        self._confirmed = set()
        self._attempts = 0
        # (exec, slot, full base, S, stride, step, resource ids the wait's bracket holds)
        self.waits: List[Tuple[int, int, int, int, int, object, frozenset]] = []
        self.tails: List[Tuple[int, int, int, int, object]] = []  # (exec, slot, empty base, S, step)
        for ex in comp.executors:
            seen = set()
            for ins in ex.program:
                a = ins.action
                if ins.kind != "step" or a is None or a.cursor is None:
                    continue
                key = (a.op, a.cursor, a.barrier_base)
                if key in seen:
                    continue
                seen.add(key)
                if a.op == "wait" and a.num_stages % max(1, a.stride) == 0:
                    rids = frozenset(rid for rid, _ in a.regions)
                    self.waits.append((ex.index, a.cursor, a.barrier_base, a.num_stages, a.stride, a.step, rids))
                elif a.op == "acquire" and a.stride == 1:
                    self.tails.append((ex.index, a.cursor, a.barrier_base, a.num_stages, a.step))

    def problem(self, state) -> Optional[Tuple[str, int, object, int]]:
        """(text, executor, step, barrier index) of the first imbalance of a terminal state, or None."""
        bars = state[1]
        barriers = self.c.barriers
        for e, slot, base, S, stride, step, rids in self.waits:
            es = state[0][e]
            cur_stage, parity, _ = es[CUR][slot]
            # a stage still held (waited, not released) was consumed; its release is the tail's business
            held = {w[0][1] for w in es[ASYNC] if w[2] == "hold" and w[0][0] in rids}
            for s in range(cur_stage % stride, S, stride):
                if s in held:
                    continue
                phase, pending, tx = bars[base + s]
                b = barriers[base + s]
                name = self.c.executors[e].name
                if pending != b.init or tx:
                    return (f"{b.label} is left with a phase half done at kernel exit ({b.init - pending} of "
                            f"{b.init} arrival(s) made, {tx} transaction byte(s) outstanding): a commit that no "
                            f"wait of {name} consumes", e, step, base + s)
                if phase != _expected_parity(s, cur_stage, parity):
                    return (f"{name} ends without waiting for a phase of {b.label} that was committed: the tile "
                            f"of stage {s} is never consumed by {name} (a dropped tile; a hardware producer's "
                            "copy may still be writing that stage when the CTA exits)", e, step, base + s)
        for e, slot, base, S, step in self.tails:
            cur_stage, parity, _ = state[0][e][CUR][slot]
            for s in range(S):
                if bars[base + s][0] == _expected_parity(s, cur_stage, parity):
                    b = barriers[base + s]
                    name = self.c.executors[e].name
                    owner = getattr(step, "resource_name", "?")
                    return (f"{name} ends with {owner}'s releases out of step with its commits: the producer tail "
                            f"the lowering emits at the end of {name} waits for a phase of {b.label} (stage {s}) that "
                            "never completes (a committed stage is never released, or a release came for a stage "
                            "that was never committed), so the kernel hangs at exit", e, step, base + s)
        return None


    def confirm(self, problem, path, target, replay) -> bool:
        """Does this terminal imbalance replay exactly, with no gap over-approximation?
        ``path`` / ``target``: the canonical counterexample; ``replay``: explore.replay."""
        key = (problem[1], getattr(problem[2], "location", None))
        if key in self._confirmed:
            return True
        if self._attempts >= MAX_CONFIRM:
            return False
        self._attempts += 1
        if self._exact is None:
            from .symmetry import Canon

            self._exact = Engine(self.c, exact_lift=False)
            self._exact.gap = self._exact.key_cap = NO_GAP
            self._canon = Canon(self.c)
        _, final, replayed = replay(self._exact, self._canon, path, target)
        if replayed and self.problem(final) is not None:
            self._confirmed.add(key)
            return True
        return False


__all__ = ["Balance"]
