"""Loop and work-tile decisions: every trip count, shared by the tasks of a loop group.

A group state is ``(decided, bound, next value per member)``; see the engine's docstring and
docs/checker.md for what the abstraction proves.
"""
from __future__ import annotations

from .model import Instr
from .violations import Violation

ROUND_ENDS = True  # see _round_end (a switch so the tests can compare against the unrounded search)
# False: the reference search the differential tests compare against (tests/test_checker_bulk_diff.py):
# no skip(count=K) reductions (Engine._pre_idle, idle loops as one step, jumper values modulo
# jump_period) and no lifting of exact counts; meant for exact counts (a symbolic one is unbounded)
BULK_REDUCTIONS = True
EXITED = 1 << 40  # a member's value once it has left the loop
EMPTY = -1  # an executor's loop counter after a loop that ran no iteration (read by if_empty() blocks)
# fields of an executor's state tuple
PC, J, LAST, CUR, SYNC, ASYNC, PEND, TOK, KPOS, WAITED = range(10)


def _inc_counter(j, c, p):
    if j is None:
        return 0
    j += 1
    if j >= c + p:
        j -= p
    return j if c or p > 1 else 0


def _round_end(bound, grp):
    """A decided end is only ever compared with member values (``v >= end``), and member m only
    takes values congruent to its start modulo its step (shifts are multiples of the lcm). Two
    ends with no member value between them are the same decision: keep the smallest member
    value >= end (e.g. step 4 from 0: ends 1, 2, 3, 4 are all 'one iteration')."""
    best = None
    for start, step in zip(grp.starts, grp.steps):
        x = bound + (start - bound) % step
        if best is None or x < best:
            best = x
    return bound if best is None else best


class LoopsMixin:
    """Loop heads, tile heads and the normalisation that keeps their state finite."""

    def _choose(self, gs, mi, start, step, grp):
        """Loop-head outcomes for member ``mi``: list of (new group state, 'exit'|'first'|'last'|'more').

        Undecided, the end N is any value > ``bound`` that the group's declared set allows
        (``grp.allows``: the divisibility residue); decided, it is ``bound``."""
        dec, bound, nvs = gs
        v = nvs[mi]
        outs = []

        def put(dec2, bound2, nv2, what):
            n = list(nvs)
            n[mi] = nv2
            outs.append(((dec2, bound2, tuple(n)), what))

        if dec:
            if v >= bound:
                put(True, bound, EXITED, "exit")
            else:
                put(True, bound, v + step, "last" if v + step >= bound else "more")
            return outs
        def ends(lo, hi):
            """The allowed ends in (lo, hi], one per decision: ends with no member value between
            them are the same decision (see _round_end)."""
            seen = set()
            for n_end in range(lo + 1, hi + 1):
                key = _round_end(n_end, grp) if ROUND_ENDS else n_end
                if grp.allows(n_end) and key not in seen:
                    seen.add(key)
                    yield n_end

        for n_end in ends(bound, v):  # the domain ended before v
            put(True, n_end, EXITED, "exit")
        for n_end in ends(max(bound, v), v + step):  # v is this member's last value
            put(True, n_end, v + step, "last")
        put(False, max(bound, v + step), v + step, "more")
        return outs

    def _normalize(self, gs, lcm, tiles=False, grp=None):
        """Canonical form of a loop-group state: exited members drop out; a gap wider than
        ``gap`` between two clusters of members (which then cannot be coupled through any
        pipeline) is shrunk to ``gap``; all values shift down by a multiple of the steps' lcm.
        Shrinking only shortens the remaining trip count of the lagging cluster, a count the
        exploration already allows for other end values, so no behaviour is lost."""
        if grp is not None and grp.jumpers:
            return self._normalize_jumpers(gs, lcm, grp)
        dec, bound, nvs = gs
        active = [v for v in nvs if v != EXITED]
        if not active:
            return (True, 0, tuple(EXITED for _ in nvs)), None
        if dec and grp is not None and ROUND_ENDS:
            bound = _round_end(bound, grp)
        exact = grp is not None and grp.exact is not None
        if exact:
            # an exact trip count far ahead moves closer only by whole periods of everything the
            # loop drives (steps, guard periods, 2 x stages x stride of every cursor), the same
            # periodicity the symbolic lift rests on; flagged, so that a problem found is
            # re-checked without lifting (run_checker) and UNSAFE is always real at N
            if not self.exact_lift:
                return self._shift_only(dec, bound, nvs, active, lcm, tiles)
        period = grp.lift_period if exact else max(lcm, grp.gap_period if grp is not None else 1)
        if tiles:
            if exact and dec:
                far = bound - max(active) - self.gap
                if far > period:
                    bound -= (far // period) * period
                    self.exact_lifted = True
            # tile records are indexed by tile value: shift only, keep the tile a member is in
            shift = max(0, min(active) - 1)
            if not shift:
                return (dec, bound, nvs), 0
            return (dec, bound - shift, tuple(v if v == EXITED else v - shift for v in nvs)), shift
        pts = sorted(set(active + [bound]), reverse=True)
        gap = self.gap
        lift = {}
        acc = 0
        for hi, lo in zip(pts, pts[1:]):
            d = hi - lo
            if d > gap:
                acc += ((d - gap) // period) * period
            if acc:
                lift[lo] = acc
        if lift:
            if exact:
                self.exact_lifted = True
            bound = bound + lift.get(bound, 0)
            nvs = tuple(v if v == EXITED else v + lift.get(v, 0) for v in nvs)
            active = [v for v in nvs if v != EXITED]
        m = min(active + [bound])
        shift = (m // lcm) * lcm
        if not shift:
            return (dec, bound, nvs), 0
        return (dec, bound - shift, tuple(v if v == EXITED else v - shift for v in nvs)), shift

    def _normalize_jumpers(self, gs, lcm, grp):
        """``_normalize`` for a group with ``skip(count=K)`` members. Those only ever read
        ``end - value``, and only modulo ``grp.jump_period`` (whole cycles of the cursors they
        advance), so their value is kept modulo it and takes no part in the gap or the shift;
        the others' gaps shrink by multiples of ``gap_period`` (a multiple of those cycles), so the
        loops the members run and the count the jumpers skip stay equal modulo every cycle.

        Sound: a skip's count acts only on its cursors, each periodic in the count with period
        2 x stages (x stride), which divides jump_period; a shift moves end and value alike; a lift
        moves the end only by multiples of gap_period (exact: lift_period), both multiples of those
        cycles, and a member's presence never moves another's value relative to the end, so the
        skipped jumper takes no part. Checked against the unreduced search (BULK_REDUCTIONS)."""
        dec, bound, nvs = gs
        jump = grp.jumpers
        active = [v for i, v in enumerate(nvs) if v != EXITED and i not in jump]
        if not active and all(nvs[i] == EXITED for i in jump):
            return (True, 0, tuple(EXITED for _ in nvs)), None
        if dec and ROUND_ENDS:
            bound = _round_end(bound, grp)
        exact = grp.exact is not None
        lift = {}
        if active and (self.exact_lift or not exact):
            period = grp.lift_period if exact else max(lcm, grp.gap_period)
            pts = sorted(set(active + [bound]), reverse=True)
            acc = 0
            for hi, lo in zip(pts, pts[1:]):
                d = hi - lo
                if d > self.gap:
                    acc += ((d - self.gap) // period) * period
                if acc:
                    lift[lo] = acc
        if lift and exact:
            self.exact_lifted = True
        bound += lift.get(bound, 0)
        m = min(active + [bound]) if active else bound
        shift = (m // lcm) * lcm
        P = grp.jump_period if self.bulk_reduce else 0  # 0: the reference keeps the value exactly
        nvs = tuple(EXITED if v == EXITED else ((v - shift) % P if i in jump and P else
                                                v - shift if i in jump else v + lift.get(v, 0) - shift)
                    for i, v in enumerate(nvs))
        return (dec, bound - shift, nvs), shift

    def _shift_only(self, dec, bound, nvs, active, lcm, tiles):
        """Exact mode: no lifting, only the shift that forgets how far the loop has come."""
        m = min(active) - 1 if tiles else min(active + [bound])
        shift = max(0, m) if tiles else (m // lcm) * lcm
        if not shift:
            return (dec, bound, nvs), 0
        return (dec, bound - shift, tuple(v if v == EXITED else v - shift for v in nvs)), shift

    def _head_outcomes(self, ins, gs, grp):
        """_choose then _normalize for a loop head: a function of (member, group state) alone,
        so it is memoized per engine (``exact_lifted`` is set again on every hit that lifted)."""
        key = (ins.group, ins.member, gs)
        hit = self._head_memo.get(key)
        if hit is None:
            was, self.exact_lifted = self.exact_lifted, False
            outs = [(self._normalize(gs2, grp.lcm, grp=grp)[0], what)
                    for gs2, what in self._choose(gs, ins.member, ins.start, ins.step, grp)]
            hit = self._head_memo[key] = (outs, self.exact_lifted)
            self.exact_lifted = was
        if hit[1]:
            self.exact_lifted = True
        return hit[0]

    def _tile_outcomes(self, mi, tile):
        """_choose then _normalize for a tile head, memoized like ``_head_outcomes``:
        [(chosen tile state, what, normalized tile state, shift)]."""
        key = (mi, tile)
        hit = self._tile_memo.get(key)
        if hit is None:
            was, self.exact_lifted = self.exact_lifted, False
            outs = [(ts2, what) + self._normalize(ts2, 1, tiles=True, grp=self.tile_group)
                    for ts2, what in self._choose(tile, mi, 0, 1, self.tile_group)]
            hit = self._tile_memo[key] = (outs, self.exact_lifted)
            self.exact_lifted = was
        if hit[1]:
            self.exact_lifted = True
        return hit[0]

    def _loop_head(self, state, e, ins: Instr):
        es = state[0][e]
        ri = self._record_index(state, e)
        rec = state[5] if ri is None else state[4][ri]
        grp = self.c.groups[ins.group]
        gs = rec[1][ins.group]
        ex = self.execs[e]
        out = []
        idle_guards = ins.idle_guards if self.bulk_reduce else None
        idle = idle_guards is not None and all(any(bool(es[TOK][pos]) != want for pos, want in g)
                                               for g in idle_guards)
        if idle_guards is not None and gs[2][ins.member] == EXITED and not idle:  # see Engine._pre_idle
            raise Violation("fault", f"checker: {ex.name} left its loop before it ran it", e, None)
        if idle:
            # every step of the body is off for this loop run and nothing in it changes that: the
            # iterations touch nothing, so the member leaves at once and decides nothing. Sound:
            # the other members' heads read only their own value and the end, a decision it skips
            # is the environment's (another member or the skip makes it), and an idle loop never
            # blocks, so every other behaviour and every deadlock stays (tests/test_checker_bulk_diff.py)
            choices = [((gs[0], gs[1], gs[2][:ins.member] + (EXITED,) + gs[2][ins.member + 1:]), "exit")]
            choices = [(self._normalize(gs2, grp.lcm, grp=grp)[0], what) for gs2, what in choices]
        elif ins.all_skippable and rec[0] and not ex.uses_empty:
            choices = [((gs[0], gs[1], gs[2][:ins.member] + (EXITED,) + gs[2][ins.member + 1:]), "exit")]
            choices = [(self._normalize(gs2, grp.lcm, grp=grp)[0], what) for gs2, what in choices]
        else:
            choices = self._head_outcomes(ins, gs, grp)
        for gs2, what in choices:
            rec2 = (rec[0], rec[1][:ins.group] + (gs2,) + rec[1][ins.group + 1:])
            if what == "exit":  # an if_empty() block after the loop reads whether it ran an iteration
                es2 = (ins.target, EMPTY if ex.uses_empty and es[J] is None else None, False) + es[3:]
            else:
                j = _inc_counter(es[J], ex.counter_c, ex.counter_p) if es[J] is not None else 0
                es2 = (es[PC] + 1, j, what == "last" and ex.uses_last) + es[3:]
            st = self._set_exec(state, e, es2)
            if ri is None:
                st = st[:5] + (rec2,) + st[6:]
            else:
                st = st[:4] + (st[4][:ri] + (rec2,) + st[4][ri + 1:],) + st[5:]
            out.append(((e, "loop:" + what, es[PC]), st))
        return out

    def _tile_head(self, state, e, ins: Instr):
        es = state[0][e]
        mi = self.tile_member[e]
        tile = state[3]
        out = []
        for ts2, what, ts3, shift in self._tile_outcomes(mi, tile):
            records = state[4]
            if what == "exit":
                es2 = (ins.target, None, False) + es[3:]
                choices = [records]
            else:
                es2 = (es[PC] + 1, None, False) + es[3:]
                idx = ts2[2][mi] - 1
                if idx < len(records):
                    choices = [records]
                else:
                    choices = [records + (self._fresh_record(sk),) for sk in
                               ((False, True) if self.c.has_skippable else (False,))]
            for recs in choices:
                label = "tile:" + ("exit" if what == "exit" else ("skipped" if recs and len(choices) > 1 and
                                                                   recs[-1][0] else "run"))
                if shift is None:
                    recs = ()
                elif shift:
                    recs = recs[shift:]
                ts4, recs = self._tile_lift(ts3, recs)
                st = self._set_exec(state, e, es2)
                st = st[:3] + (ts4, recs) + st[5:]
                out.append(((e, label, es[PC]), st))
        return out

    def _tile_lift(self, ts, recs):
        """Tasks more than ``gap`` tiles apart cannot be coupled through a pipeline: drop the
        tile records between them that no task is in (the lagging tasks will meet freshly
        chosen tiles instead, which the exploration allows anyway)."""
        dec, bound, nvs = ts
        active = sorted(set(v for v in nvs if v != EXITED))
        for a, b in reversed(list(zip(active, active[1:]))):
            d = b - a - self.gap
            if d <= 0:
                continue
            recs = recs[:a] + recs[a + d:]
            nvs = tuple(v - d if v != EXITED and v >= b else v for v in nvs)
            if bound > a:
                bound = max(a, bound - d)
        return (dec, bound, nvs), recs

    # ------------------------------------------------------------------ skip(count=K)
    def _bulk_records(self, state, e, bulk, ends):
        """[(count, state)]: the skip(count=K) member leaves K's group in this tile's record,
        with each end in ``ends`` (None: the group's own, decided or not)."""
        gid, mi = bulk
        grp = self.c.groups[gid]
        ri = self._record_index(state, e)
        rec = state[5] if ri is None else state[4][ri]
        dec, bound, nvs = rec[1][gid]
        v = nvs[mi]
        out = []
        for end in ends:
            nv = nvs[:mi] + (EXITED,) + nvs[mi + 1:]
            gs2 = (dec, bound, nv) if end is None else (True, end, nv)
            gs2 = self._normalize(gs2, grp.lcm, grp=grp)[0]
            rec2 = (rec[0], rec[1][:gid] + (gs2,) + rec[1][gid + 1:])
            if ri is None:
                st = state[:5] + (rec2,) + state[6:]
            else:
                st = state[:4] + (state[4][:ri] + (rec2,) + state[4][ri + 1:],) + state[5:]
            count = None if end is None or v == EXITED else end - v
            out.append((count % grp.jump_period if count is not None and self.bulk_reduce else count, st))
        return out

    def _bulk_skip(self, state, e, es, a, label):
        """skip(count=K): the counters move K strides on at once, K this tile's end of K's loop
        group. Undecided, the skip decides it: every allowed end up to the gap plus one period
        past the bound (a later end normalizes to one of these, see loops._normalize_jumpers:
        the range holds gap + jump_period consecutive ends, so every residue modulo the lift
        period above the coupling gap). Like a loop head's, this decision has the same outcomes
        whoever makes it first (an eager decision), so the step is explored alone."""
        if a.bulk is None:
            outs = [(a.bulk_const, state)]
        else:
            grp = self.c.groups[a.bulk[0]]
            dec, bound, nvs = self._record(state, e)[1][a.bulk[0]]
            if nvs[a.bulk[1]] == EXITED:
                raise Violation("fault", f"{self.execs[e].name}: {a.step.describe()} runs twice in one tile; "
                                "skip(count=K) skips the whole loop once per tile", e, a.step)
            span = self.gap if self.gap < 1 << 20 else 0  # the exact replay (balance.NO_GAP): a subset
            ends = [bound] if dec else [n for n in range(bound + 1, bound + span + grp.jump_period + 1)
                                        if grp.allows(n)]
            outs = self._bulk_records(state, e, a.bulk, ends)
        ex = self.execs[e]
        res = []
        for count, st in outs:
            curs = list(es[CUR])
            for s in a.advance:
                for _ in range(count % (2 * ex.cursors[s].num_stages)):
                    self._advance(curs, (s,), ex)
            es2 = es[:CUR] + (tuple(curs),) + es[CUR + 1:]
            res += self._with_keys(self._set_exec(st, e, es2, pc=es[PC] + 1), e, es2, a, label, es[PC] + 1)
        return res

    def _pre_idle(self, state, kid):
        """A task's k-th value of a key is the first task's (key FIFO): once produced, a lagging
        task whose loop that value makes idle (Instr.idle_guards) is known to leave it at once in
        that tile, deciding nothing, so its member leaves the tile's record now (the loop head
        checks that it is idle when it gets there). Its value is read once per tile, before the
        loop, so FIFO position j is tile ``ri + (j - KPOS)`` (+ 1 once this tile's is read).

        Sound as the idle exit at the loop head is (same member, same record, only earlier; its
        presence changes no other member's transitions). The key run-ahead bound (key_cap, half
        the coupling gap) keeps the lagging task within the gap, so no tile record between it and
        the producer is dropped (_tile_lift) and FIFO positions map to records. Any wrong early
        exit is caught: the loop head raises a 'checker:' fault for an EXITED member whose loop
        is not idle, never a silent pass."""
        vals = state[6][kid]
        j, v = len(vals) - 1, vals[-1]
        records = list(state[4])
        changed = False
        for x, (_, gid, mi, tile_pc, prod_pc, idle) in self.pre_idle[kid]:
            es = state[0][x]
            tv = state[3][2][self.tile_member[x]]
            if tv == EXITED or not all(any(bool(v) != want for _, want in g) for g in idle):
                continue
            # past this tile's read: also inside a synchronous producing call (its keys are read at
            # the call, its pc moves on at the return)
            passed = es[PC] <= tile_pc or es[PC] > prod_pc or (es[PC] == prod_pc and es[SYNC] is not None)
            r = tv - 1 + (1 if passed else 0) + (j - es[KPOS][self.execs[x].keys.index(kid)])
            if not 0 <= r < len(records) or records[r][1][gid][2][mi] == EXITED:
                continue
            dec, bound, nvs = records[r][1][gid]
            gs = self._normalize((dec, bound, nvs[:mi] + (EXITED,) + nvs[mi + 1:]), self.c.groups[gid].lcm,
                                 grp=self.c.groups[gid])[0]
            records[r] = (records[r][0], records[r][1][:gid] + (gs,) + records[r][1][gid + 1:])
            changed = True
        return state[:4] + (tuple(records),) + state[5:] if changed else state
