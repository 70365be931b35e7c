"""Breadth-first exploration with state hashing and partial-order reduction.

Partial-order reduction (ample sets): when some executor's next transition touches only
its own state (a jump, a try_ probe, a guard that is off, work on a resource whose bytes
nobody else can alias, the head of a loop no other task shares), it commutes with every
other executor's transitions and cannot enable or disable them, so exploring it alone is
enough. The cycle proviso is kept by expanding fully whenever the reduced successor was
already seen. Because the search is breadth-first, the first state reached with a given
problem has a shortest path (within the reduced graph) and that path is the counterexample.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .balance import Balance
from .engine import Engine, Unbounded, Violation
from .symmetry import Canon


@dataclass
class Problem:
    kind: str  # deadlock | race | pdl | over-arrival | unconsumed
    text: str
    exec_index: int
    step: object
    path: List[Tuple[object, tuple]]  # (pre-state, label) pairs
    blocked: List[Tuple[str, object]] = field(default_factory=list)
    barrier: Optional[int] = None
    region: object = None
    replayed: bool = True  # the path was re-run concretely (False: canonical states shown)
    timeline: object = None  # report.Timeline of the path, for the HTML report
    final: object = None  # the concrete state the problem was found in (the path's end)


@dataclass
class Exploration:
    states: int = 0
    complete: int = 0
    counts: Dict[str, int] = field(default_factory=lambda: {"deadlock": 0, "race": 0, "pdl": 0, "over-arrival": 0,
                                                                    "unconsumed": 0, "fault": 0})
    problems: List[Problem] = field(default_factory=list)
    hit_cap: bool = False
    hit_time: bool = False  # stopped at the max_seconds deadline
    unbounded: bool = False
    seconds: float = 0.0
    stop_at: Optional[int] = None
    truncated: bool = False  # stopped early after a counterexample: counts are lower bounds
    shortest_complete: Optional[List[Tuple[object, tuple]]] = None  # (pre-state, label) path to the first end
    unconfirmed: bool = False  # an imbalance at exit that did not replay exactly (see balance.confirm)


MAX_REPORTED = 8
MAX_PER_KIND = 3
AFTER_FIRST_PROBLEM = 5000
CHAIN_LIMIT = 64  # local steps compressed into one expansion, over all its branches (a local-only cycle stops)
MAX_BRANCH = 4  # a local decision with more outcomes is stored, not compressed
PROGRESS_EVERY = 2.0  # seconds


def explore(engine: Engine, max_states: int, progress=None, deadline: Optional[float] = None) -> Exploration:
    """Breadth-first search. ``progress``: a callable taking one line of text, called about
    every PROGRESS_EVERY seconds once the search has run that long (None: silent).
    ``deadline``: a time.perf_counter() value; the search stops there (``hit_time``)."""
    t0 = time.perf_counter()
    out = Exploration()
    canon = Canon(engine.c)
    balance = Balance(engine.c)
    n = len(engine.execs)
    successors, is_local, maybe_local = engine.successors, engine.is_local, engine.maybe_local
    execs_range = range(n)
    is_blocked = engine.blocked

    def close(st, chain=(), budget=None):
        """Chain compression: a local step (a jump, a guard that is off, private work, a loop
        or tile head) alone is an ample set, so instead of storing the state before it, run it
        right away. Deterministic steps go first; then a head with several outcomes (the
        environment's trip-count / skip choice) branches. Only the intermediate states are not
        stored; the cycle proviso is checked on the stored ends (see docs/checker.md).
        Returns [(state, chain)], chain = ((pre-state, label), ...) for the replay."""
        if budget is None:
            budget = [CHAIN_LIMIT]  # shared by every branch of one compression
        while budget[0] > 0:
            budget[0] -= 1
            ex_states = st[0]
            branch = None
            for e in execs_range:
                if maybe_local[e][ex_states[e][0]] and is_local(st, e):
                    try:
                        nxt = successors(st, e)
                    except (Violation, Unbounded):
                        continue  # left to the explorer, so the counterexample shows it
                    if len(nxt) == 1:
                        chain += ((st, nxt[0][0]),)
                        st = nxt[0][1]
                        break
                    if nxt and branch is None:
                        branch = nxt
            else:
                if branch is None or len(branch) > MAX_BRANCH:
                    break
                out = []
                for lab, s2 in branch:
                    out.extend(close(s2, chain + ((st, lab),), budget))
                return out
        return [(st, chain)]

    def expand(st, e):
        res = []
        for lab, s in successors(st, e):
            for s2, chain in close(s):
                res.append(((lab, chain) if chain else lab, canon(s2)))
        return res

    init = canon(engine.initial())
    ids: Dict[tuple, int] = {init: 0}
    states: List[tuple] = [init]
    parent: List[Tuple[int, Optional[tuple]]] = [(-1, None)]
    setdefault = ids.setdefault
    seen_problem = set()
    queue = deque([0])
    next_report = t0 + PROGRESS_EVERY

    def path_to(sid):
        p = []
        while sid > 0:
            psid, label = parent[sid]
            if isinstance(label[0], tuple):  # a compressed chain: the transition, then its local steps
                label, chain = label
                p.extend(reversed(chain))
            p.append((states[psid], label))
            sid = psid
        p.reverse()
        return p

    def note(kind, sid, text, e, step, extra_label=None, **kw):
        out.counts[kind] += 1
        key = (kind, getattr(step, "location", None))
        per_kind = sum(1 for p in out.problems if p.kind == kind)
        if key in seen_problem or len(out.problems) >= MAX_REPORTED or per_kind >= MAX_PER_KIND:
            return
        seen_problem.add(key)
        path, final, replayed = replay(engine, canon, path_to(sid), states[sid])
        if kind == "deadlock":  # the returns parked executors owe (engine.settle): the deadlock itself
            owed, final = engine.settle(final)
            path.extend(owed)
        if extra_label is not None:
            try:  # the concrete (un-rotated) run names the concrete stages
                engine.successors(final, e)
            except Violation as v:
                text, kw["barrier"], kw["region"] = v.text, v.barrier, v.region
            path.append((final, extra_label))
        prob = Problem(kind, text, e, step, path, replayed=replayed, final=final, **kw)
        if kind == "deadlock":
            prob.blocked = [r for r in (engine.blocked_reason(final, x) for x in range(n)) if r]
            if prob.blocked:
                prob.text = prob.blocked[0][0]
        out.problems.append(prob)

    while queue:
        sid = queue.popleft()
        st = states[sid]
        if not (sid & 255) and (progress is not None or deadline is not None):
            now = time.perf_counter()
            if deadline is not None and now >= deadline:
                out.hit_time = True
                break
            if progress is not None and now >= next_report:
                next_report = now + PROGRESS_EVERY
                progress(f"exhaustive checker: {len(ids)} states explored, frontier {len(queue) + 1}, "
                         f"{len(ids) / (now - t0):.0f} states/s, {now - t0:.1f}s")
        succ = None
        local_e = local_succ = None
        ex_states = st[0]
        for e in execs_range:
            if maybe_local[e][ex_states[e][0]] and is_local(st, e):
                try:
                    cand = expand(st, e)
                except (Violation, Unbounded):
                    break
                if cand and all(s not in ids for _, s in cand):
                    succ = cand
                else:  # cycle proviso: expand fully (reusing what was computed)
                    local_e, local_succ = e, cand
                break
        if succ is None:
            succ = []
            violated = False
            for e in range(n):
                if e == local_e:
                    succ.extend(local_succ)
                    continue
                if is_blocked(st, e):
                    continue
                try:
                    succ.extend(expand(st, e))
                except Violation as v:
                    pc = st[0][e][0]
                    kind = v.kind
                    violated = True
                    note(kind, sid, v.text, e, v.step, (e, "violation", pc, ()), barrier=v.barrier, region=v.region)
                except Unbounded:
                    out.unbounded = True
                    violated = True
            if not succ and not violated:
                if all(engine.is_done(st, e) for e in range(n)):
                    out.complete += 1
                    if out.shortest_complete is None:  # a fallback for representative_run
                        out.shortest_complete = replay(engine, canon, path_to(sid), st)[0]
                    left = balance.problem(st)  # every commit consumed and released by the end
                    if left is not None:
                        if balance.confirm(left, path_to(sid), st, replay):
                            note("unconsumed", sid, left[0], left[1], left[2], barrier=left[3])
                        else:
                            out.unconfirmed = True
                elif any(engine.key_capped(engine.settle(st)[1], e) for e in range(n)):
                    out.unbounded = True  # stuck only because of the run-ahead bound: not a proof either way
                else:
                    end = engine.settle(st)[1]  # parked executors' returns taken
                    blocked = [(e, r) for e, r in ((e, engine.blocked_reason(end, e)) for e in range(n)) if r]
                    e0, first = (blocked[0][0], blocked[0][1][1]) if blocked else (0, None)
                    note("deadlock", sid, "deadlock: no task can make progress", e0, first)
                continue
            if not succ:
                continue
        if out.problems and out.stop_at is None:
            out.stop_at = len(ids) + AFTER_FIRST_PROBLEM  # UNSAFE already: a little more, for the counts
        for label, nxt in succ:
            nid = len(states)
            if setdefault(nxt, nid) != nid:
                continue  # seen (one hash per successor: insert, then undo on a stop)
            if out.stop_at is not None and nid >= out.stop_at:
                del ids[nxt]
                out.truncated = True
                queue.clear()
                break
            if nid >= max_states:
                del ids[nxt]
                out.hit_cap = True
                queue.clear()
                break
            states.append(nxt)
            parent.append((sid, label))
            queue.append(nid)
    out.states = len(ids)
    out.seconds = time.perf_counter() - t0
    return out


def replay(engine: Engine, canon, path, target):
    """Re-run a path of canonical states from the real initial state, so the counterexample
    shows concrete stage numbers. Returns ([(concrete pre-state, label)], final state, replayed)."""
    cur = engine.initial()
    out = []
    for i, (pre, label) in enumerate(path):
        nxt_canon = canon(path[i + 1][0]) if i + 1 < len(path) else target  # chain states are raw
        chosen = None
        for lab, s in engine.successors(cur, label[0]):
            if lab[1] == label[1] or (lab[1].startswith("hw:") and label[1].startswith("hw:")) or \
                    (lab[1].split(":")[0] == label[1].split(":")[0] and lab[2] == label[2]):
                if nxt_canon is None or canon(s) == nxt_canon:
                    chosen = (lab, s)
                    if lab[1] == label[1]:
                        break
        if chosen is None:  # should not happen; fall back to the canonical states
            return list(path), path[-1][0] if path else cur, False
        out.append((cur, chosen[0]))
        cur = chosen[1]
    return out, cur, True


def representative_run(engine: Engine, iterations: int = 3, max_steps: int = 4000):
    """One complete interleaving, for display only (it proves nothing): an executor runs until
    it blocks, then the next one in lane order takes over, so producers fill every stage and
    consumers drain them; where the loop model offers the choice, a loop ends after ``iterations``
    iterations and a work-tile loop after two tiles.
    Returns ([(pre-state, label)], final state), or None when the walk gets stuck."""
    n = len(engine.execs)
    st = engine.initial()
    path = []
    loop_count: Dict[Tuple[int, int], int] = {}
    tiles: Dict[int, int] = {}
    turn = 0
    for _ in range(max_steps):
        if all(engine.is_done(st, x) for x in range(n)):
            return path, st
        for k in range(n):
            x = (turn + k) % n
            if engine.blocked(st, x):
                continue
            try:
                succ = engine.successors(st, x)
            except (Violation, Unbounded):
                continue
            if succ:
                break
        else:
            return None
        label, st2 = _pick(succ, x, loop_count, tiles, iterations)
        path.append((st, label))
        st, turn = st2, x
    return None


def _pick(succ, x, loop_count, tiles, iterations):
    whats = [lab[1] for lab, _ in succ]
    pc = succ[0][0][2]
    if any(w.startswith("loop:") for w in whats):
        done = loop_count.get((x, pc), 0)
        want = ("loop:last", "loop:exit") if done >= iterations - 1 else ("loop:more", "loop:first")
        choice = next((i for i, w in enumerate(whats) if w in want), 0)
        loop_count[(x, pc)] = 0 if whats[choice] in ("loop:last", "loop:exit") else done + 1
        return succ[choice]
    if any(w.startswith("tile:") for w in whats):
        want = ("tile:run",) if tiles.get(x, 0) < 2 else ("tile:exit",)
        choice = next((i for i, w in enumerate(whats) if w in want), 0)
        tiles[x] = tiles.get(x, 0) + (whats[choice] != "tile:exit")
        return succ[choice]
    return succ[0]
