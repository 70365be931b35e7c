"""The state space: executing the compiled barrier protocol, one transition at a time.

A state is a tuple (hashable, so BFS can deduplicate it):

  execs    per executor: pc, loop counter, last-iteration flag, cursors (stage, parity,
           bytes-delivered), open synchronous window, asynchronous windows (UMMA / WGMMA
           reads), pending UMMA release arrivals, guard-key values and FIFO positions,
           "has executed wait_griddep"
  bars     per mbarrier: (phase bit, pending arrivals, pending tx bytes)
  hw       hardware producer write windows, each tied to the full barrier whose phase
           completion ends it
  tiles    the shared work-tile decision (see loops below) and one record per live tile
           (skipped flag, domain-loop decisions)
  fifos    per when_true/when_false key: values chosen but not yet read by every task
  pdl      some task has executed wait_griddep

Loops: a loop group (tasks whose domain loops share an end bound) keeps ``(decided, bound,
next value per member)``. Undecided, ``bound`` is the largest value known to be inside the
domain; decided, it is the end. A task starting an iteration that may be the last chooses
both ways, so every trip count >= 1 is explored; values are shifted down by the group's
step lcm once every member has entered, so the state stays finite (see docs/checker.md).
"""
from __future__ import annotations

from typing import Optional, Tuple

from . import loops
from .loops import ASYNC, CUR, EMPTY, J, KPOS, LAST, PC, PEND, SYNC, TOK, WAITED, LoopsMixin  # noqa: F401
from .model import Compiled, Instr, Op
from .macro import MacroMixin
from .tables import fast_forward, maybe_local, merge_static, wait_at
from .wgmma import WG_TAGS, issue_group, retire_groups
from .violations import Unbounded, Violation  # noqa: F401 (re-exported: explore, balance import them here)

EAGER_DECISIONS = True  # see Engine.is_local


class Engine(MacroMixin, LoopsMixin):
    def __init__(self, comp: Compiled, exact_lift: bool = True):
        self.c = comp
        # exact trip counts far from their end may be lifted (a superset, see loops._normalize);
        # exact_lifted records that it happened, so that a problem found is re-checked without
        self.bulk_reduce = loops.BULK_REDUCTIONS  # off: the unreduced reference (differential tests)
        self.exact_lift = exact_lift and self.bulk_reduce
        self.exact_lifted = False
        self._head_memo, self._tile_memo = {}, {}  # loop / tile head outcomes (loops.py)
        self.execs = comp.executors
        self.nb = len(comp.barriers)
        self.init_bars = tuple((0, b.init, 0) for b in comp.barriers)
        self.bar_init = [b.init for b in comp.barriers]
        self.regions = comp.regions
        self.domain_groups = [g for g in comp.groups if g.label != "work tiles"]
        self.tile_group = next((g for g in comp.groups if g.label == "work tiles"), None)
        self.tile_member = {e: i for i, e in enumerate(self.tile_group.members)} if self.tile_group else {}
        self.gap = comp.gap
        self.key_cap = max(1, comp.gap // 2)  # keeps key-coupled tasks inside one loop cluster
        # static per-instruction tables for the hot paths (see tables.py)
        self.maybe_local = [maybe_local(ex.program) for ex in self.execs]
        self.ff = [fast_forward(ex.program) for ex in self.execs]
        self.pre_idle = {}
        for ex in self.execs:
            if ex.pre_idle is not None and ex.persistent and self.bulk_reduce:
                self.pre_idle.setdefault(ex.pre_idle[0], []).append((ex.index, ex.pre_idle))
        self.merge_static = [merge_static(ex.program) for ex in self.execs]
        self.wait_at = [wait_at(ex.program) for ex in self.execs]
        self.rules = [[self._rule(ins) for ins in ex.program] for ex in self.execs]

    # ------------------------------------------------------------------ initial state
    def initial(self):
        execs = []
        for ex in self.execs:
            curs = tuple((c.lane, 1 if c.side == "producer" else 0, False) for c in ex.cursors)
            execs.append((0, None, False, curs, None, (), (), tuple(None for _ in ex.keys),
                          tuple(0 for _ in ex.keys), False))
        tile = None
        if self.tile_group is not None:
            tile = self.tile_group.initial()
        glob = self._fresh_record(False)
        fifos = tuple(() for _ in self.c.key_names)
        return (tuple(execs), self.init_bars, (), tile, (), glob, fifos, False)

    def _fresh_record(self, skipped):
        return (skipped, tuple(g.initial() for g in self.c.groups))

    # ------------------------------------------------------------------ successors
    def _raw(self, state, e: int, hw: bool = True):
        es = state[0][e]
        if hw and es[PEND]:  # the hardware event first, then the executor's own step
            return [self._hw_event(state, e)] + self._raw(state, e, hw=False)
        pc = es[PC]
        if es[SYNC] is not None:  # the synchronous work call returns: its bytes are free again
            es2 = (pc + 1,) + es[1:SYNC] + (None,) + es[SYNC + 1:]
            execs = state[0]
            return [((e, "return", pc), (execs[:e] + (es2,) + execs[e + 1:],) + state[1:])]
        ins = self.execs[e].program[pc]
        k = ins.kind
        if k == "step":
            if ins.guards and not self._guards_hold(state, e, es, ins):
                st = self._set_exec(state, e, es, pc=pc + 1)
                if ins.action.bulk is not None:  # a skip(count=K) that is off leaves K's group
                    st = self._bulk_records(st, e, ins.action.bulk, [None])[0][1]
                return [((e, "skip", pc), st)]
            return self._step(state, e, es, ins)
        if k == "done":
            return []
        if k == "jump":
            return [((e, "jump", pc), self._set_exec(state, e, es, pc=ins.target))]
        if k == "tile_head":
            return self._tile_head(state, e, ins)
        return self._loop_head(state, e, ins)

    def is_local(self, state, e: int, deterministic: bool = False) -> bool:
        """Can this executor's next transition(s) be explored alone (an ample set)?

        Loop and tile heads qualify even when they branch: the branch is the environment's
        choice of a trip count / skip flag, the same set of outcomes whichever task of the
        group makes it first and whenever it is made, and it touches nothing but the group's
        decision. ``deterministic=True`` asks for a single outcome (for macro-steps)."""
        es = state[0][e]
        if not self.maybe_local[e][es[PC]] or es[SYNC] is not None:
            return False
        ins = self.execs[e].program[es[PC]]
        if ins.kind == "jump":
            return True
        if ins.kind in ("loop_head", "tile_head") and not deterministic and EAGER_DECISIONS:
            return True
        if ins.kind == "loop_head":
            # deterministic heads commute with every other member's head: the outcome depends
            # only on this member's value and a bound no other transition can move past it
            if len(self.c.groups[ins.group].members) == 1:
                return True
            ri = self._record_index(state, e)
            rec = state[5] if ri is None else state[4][ri]
            if ins.all_skippable and rec[0]:
                return True
            dec, bound, nvs = rec[1][ins.group]
            return dec or nvs[ins.member] + ins.step <= bound
        if ins.kind == "tile_head":
            dec, bound, nvs = state[3]
            v = nvs[self.tile_member[e]]
            return (dec and v >= bound) or (v < len(state[4]) and (dec or v + 1 <= bound))
        if ins.kind != "step":
            return False
        if ins.local:
            return True
        return not self._guards_hold(state, e, es, ins)

    def blocked(self, state, e: int) -> bool:
        """A cheap sufficient test for 'no transition of e is enabled' (done, or an unguarded
        wait / acquire on a phase that has not completed, with no hardware event pending);
        successors() also returns [] for a parked executor (macro.py), which this does not test."""
        es = state[0][e]
        if es[PEND] or es[SYNC] is not None:
            return False
        pc = es[PC]
        w = self.wait_at[e][pc]
        if w is None:
            return self.execs[e].program[pc].kind == "done"
        stage, parity, _ = es[CUR][w[0]]
        return state[1][w[1] + stage][0] == parity

    def is_done(self, state, e: int) -> bool:
        es = state[0][e]
        return self.execs[e].program[es[PC]].kind == "done" and not es[PEND] and es[SYNC] is None

    # ------------------------------------------------------------------ helpers
    def _set_exec(self, state, e, es, pc=None):
        if pc is not None:
            es = (pc,) + es[1:]
        execs = state[0][:e] + (es,) + state[0][e + 1:]
        return (execs,) + state[1:]

    def _record_index(self, state, e):
        if not self.execs[e].persistent:
            return None
        return state[3][2][self.tile_member[e]] - 1

    def _record(self, state, e):
        ri = self._record_index(state, e)
        return state[5] if ri is None else state[4][ri]

    def _guards_hold(self, state, e, es, ins: Instr) -> bool:
        ex = self.execs[e]
        for g in ins.guards:
            k = g.kind
            if k == "first_iter":
                if es[J] != 0:
                    return False
            elif k == "last_iter":
                if not es[LAST]:
                    return False
            elif k == "every":
                j = es[J]
                if j is None:
                    return False
                if j < ex.counter_c:
                    if j < g.start or (j - g.start) % g.period:
                        return False
                elif (j - g.start) % g.period:
                    return False
            elif k == "skippable":
                if self._record(state, e)[0]:
                    return False
            elif k == "loop_empty":
                if es[J] != EMPTY:
                    return False
            elif k in ("when_true", "when_false"):
                kid = self.c.key_names.index(repr(g.key))
                v = es[TOK][ex.keys.index(kid)]
                v = bool(v)  # a value never produced reads as its default: false
                if v != (k == "when_true"):
                    return False
        return True

    # ------------------------------------------------------------------ loops
    # ------------------------------------------------------------------ barriers
    def _arrive(self, bars, b, n, e, step):
        """``n`` arrivals on barrier ``b`` (``bars``: a list, updated); True when its phase completes."""
        phase, pending, tx = bars[b]
        pending -= n
        if pending < 0:
            raise Violation("over-arrival", f"{self.c.barriers[b].label} received {n} arrival(s) with only "
                            f"{pending + n} pending (init count {self.bar_init[b]})", e, step,
                            barrier=b)
        if pending == 0 and tx == 0:
            bars[b] = (phase ^ 1, self.bar_init[b], 0)
            return True
        bars[b] = (phase, pending, tx)
        return False

    def _tx(self, bars, b, delta):
        """Transaction bytes expected (+) or delivered (-) on ``b``; True when its phase completes."""
        phase, pending, tx = bars[b]
        tx += delta
        if pending == 0 and tx == 0:
            bars[b] = (phase ^ 1, self.bar_init[b], 0)
            return True
        bars[b] = (phase, pending, tx)
        return False

    # ------------------------------------------------------------------ windows and races
    def _check_race(self, state, e, region, write, step, hw=None, extra_hw=(), what=""):
        ov = self.regions.overlap
        for o, os_ in enumerate(state[0]):
            if o == e:
                if write:  # the task's own wgmma reads run on after the call that issued them
                    for (r2, _, tag) in os_[ASYNC]:
                        if tag in WG_TAGS and ov(region, r2):
                            raise Violation("race", f"{self.execs[e].name} writes {self.regions.label(region)} while "
                                            f"its own WGMMA still reads {self.regions.label(r2)} (WGMMA reads until "
                                            "wgmma.wait_group)", e, step, region=region)
                continue
            w = os_[SYNC]
            if w is not None and (write or w[1]) and ov(region, w[0]):
                raise Violation("race", self._race_text(e, region, write, o, w[0], w[1], "synchronous work"), e,
                                step, region=region)
            for (r2, w2, tag) in os_[ASYNC]:
                if (write or w2) and ov(region, r2):
                    what = {"umma": "UMMA reads until its commit arrives", "wg": "WGMMA reads until wgmma.wait_group",
                            "wgj": "WGMMA reads until wgmma.wait_group",
                            "wgo": "WGMMA reads, declared for its next WGMMA group, until wgmma.wait_group",
                            "hold": f"between its {'acquire and commit' if w2 else 'wait and release'}"}[tag]
                    raise Violation("race", self._race_text(e, region, write, o, r2, w2, what), e, step,
                                    region=region)
        for (b, o, r2) in tuple(state[2]) + tuple(extra_hw):
            if o != e and ov(region, r2):
                raise Violation("race", self._race_text(e, region, write, o, r2, True,
                                                        f"hardware writes until {self.c.barriers[b].label} "
                                                        "completes"), e, step, region=region)

    def _race_text(self, e, region, write, o, r2, w2, what):
        lab = self.regions.label
        return (f"{self.execs[e].name} {'writes' if write else 'reads'} {lab(region)} while "
                f"{self.execs[o].name} {'writes' if w2 else 'reads'} {lab(r2)} ({what})")

    def _close_hw(self, hw, completed):
        if not hw or not completed:
            return hw
        return tuple(h for h in hw if h[0] not in completed)

    # ------------------------------------------------------------------ steps
    def _step(self, state, e, es, ins: Instr):
        return self.rules[e][es[PC]](state, e, es, ins.action)

    def _rule(self, ins: Instr):
        """The method that runs a step instruction (a table, so the hot path skips the dispatch)."""
        if ins.kind != "step":
            return None
        op = ins.action.op
        if op is Op.WAIT or op is Op.ACQUIRE:
            return self._open_step
        if op is Op.COMMIT or op is Op.RELEASE:
            return self._close_step
        return self._work_step if op is Op.WORK else self._other_step

    def _other_step(self, state, e, es, a):
        op = a.op
        label = (e, "step", es[PC])
        if op is Op.NOP:
            return self._with_keys(state, e, es, a, label, es[PC] + 1)
        if a.fault is not None:
            raise Violation("fault", a.fault, e, a.step)
        if op is Op.SKIP and (a.bulk is not None or a.bulk_const is not None):
            return self._bulk_skip(state, e, es, a, label)
        if op is Op.SKIP:  # the consumer's position moves on; it neither waits nor arrives
            curs = list(es[CUR])
            self._advance(curs, a.advance, self.execs[e])
            es2 = es[:CUR] + (tuple(curs),) + es[CUR + 1:]
            return self._with_keys(self._set_exec(state, e, es2, pc=es[PC] + 1), e, es2, a, label, es[PC] + 1)
        if op is Op.PDL_WAIT:
            es2 = es[:WAITED] + (True,)
            st = self._set_exec(state, e, es2, pc=es[PC] + 1)
            return self._with_keys(st[:7] + (True,), e, es2, a, label, es[PC] + 1)
        if not state[7] and not self.c.pdl_assumed:  # PDL_LAUNCH
            raise Violation("pdl", f"{self.execs[e].name} launches dependent grids (launch_griddep) before any "
                            "task has executed wait_griddep", e, a.step)
        return self._with_keys(state, e, es, a, label, es[PC] + 1)

    def _open_step(self, state, e, es, a):
        """acquire / wait: passes once the phase with the cursor's parity has completed."""
        curs = es[CUR]
        stage, parity, _ = curs[a.cursor]
        bars = state[1]
        if bars[a.barrier_base + stage][0] == parity:
            return []  # blocked: the phase with this parity has not completed
        hw = state[2]
        if a.arrivals or a.tx_expect:
            bars = list(bars)
            completed = set()
            fb = a.deliver_base + stage
            if a.tx_expect and self._tx(bars, fb, a.tx_expect):
                completed.add(fb)
            if a.arrivals and self._arrive(bars, fb, a.arrivals, e, a.step):
                completed.add(fb)
            bars = tuple(bars)
            hw = self._close_hw(hw, completed)
        asyncw = es[ASYNC]
        if a.hold_open:
            asyncw = self._open_holds(state, e, asyncw, a, stage)
        if a.umma_wait_window and not a.private:
            for rid, _ in a.regions:
                reg = (rid, stage)
                if (reg, False, "umma") not in asyncw:
                    self._check_race(state, e, reg, False, a.step)
                    asyncw = asyncw + ((reg, False, "umma"),)
        if a.advance:
            curs = list(curs)
            self._advance(curs, a.advance, self.execs[e])
            curs = tuple(curs)
        pc = es[PC]
        es2 = (pc + 1,) + es[1:CUR] + (curs, es[SYNC], asyncw) + es[PEND:]
        execs = state[0]
        st = (execs[:e] + (es2,) + execs[e + 1:], bars, hw) + state[3:]
        if a.keys:
            return self._with_keys(st, e, es2, a, (e, "step", pc), pc + 1)
        return [((e, "step", pc), st)]

    def _close_step(self, state, e, es, a):
        """commit / release: arrivals (now, or for a UMMA side when the MMAs complete)."""
        curs = es[CUR]
        stage, parity, _ = curs[a.cursor]
        bars = list(state[1])
        completed = ()
        pend = es[PEND]
        b = a.barrier_base + stage
        asyncw = es[ASYNC]
        regs = tuple([(rid, stage) for rid, _ in a.regions])
        hw = state[2]
        if a.umma_release and not a.private:
            pend = pend + ((b, a.arrivals, regs),)  # holds and UMMA reads end when the MMAs complete
            # a pair's commit multicast: one more hardware arrival per further barrier
            pend = pend + tuple((x + stage, a.arrivals, ()) for x in a.also_bases)
        else:
            done = regs
            if a.completes_umma:  # the commit's arrival (modelled now) implies every earlier MMA of
                # this task completed: their SMEM reads are over, though their own arrivals may lag
                done = regs + tuple(r for (_, _, rs) in pend for r in rs)
            if asyncw:
                asyncw = tuple(w for w in asyncw if not (w[2] in ("umma", "hold") and w[0] in done))
            if a.tx_expect and self._tx(bars, b, a.tx_expect):
                completed += (b,)
            if a.arrivals and self._arrive(bars, b, a.arrivals, e, a.step):
                completed += (b,)
            for x in a.also_bases:  # the same arrivals on every CTA of a pair (tcgen05.commit multicast)
                if a.arrivals and self._arrive(bars, x + stage, a.arrivals, e, a.step):
                    completed += (x + stage,)
            if a.hold_hw and b not in completed and bars[b][0] == 1 - parity:
                # hardware writes of this bracket are still landing: held until full[s] completes
                hw = tuple(sorted(set(hw + tuple((b, e, r) for r in regs))))
        if a.advance:
            curs = list(curs)
            self._advance(curs, a.advance, self.execs[e])
            curs = tuple(curs)
        pc = es[PC]
        es2 = (pc + 1,) + es[1:CUR] + (curs, es[SYNC], asyncw, pend) + es[PEND + 1:]
        execs = state[0]
        st = (execs[:e] + (es2,) + execs[e + 1:], tuple(bars), self._close_hw(hw, completed)) + state[3:]
        if a.keys:
            return self._with_keys(st, e, es2, a, (e, "step", pc), pc + 1)
        return [((e, "step", pc), st)]

    def _work_step(self, state, e, es, a):
        ex = self.execs[e]
        label = (e, "step", es[PC])
        stage = delivered = None
        if a.cursor is not None:
            stage, _, delivered = es[CUR][a.cursor]
        if a.pdl_dependent and not es[WAITED] and not self.c.pdl_assumed:
            raise Violation("pdl", f"{ex.name} reads {a.step.resource_name}, which depends on a PdlWaitBarrier, "
                            "before executing wait_griddep", e, a.step)
        asyncw = es[ASYNC]
        if a.wgmma_wait >= 0:
            asyncw = retire_groups(asyncw, a.wgmma_wait)
            es2 = es[:ASYNC] + (asyncw,) + es[ASYNC + 1:]
            return self._with_keys(self._set_exec(state, e, es2, pc=es[PC] + 1), e, es2, a, label, es[PC] + 1)
        if not a.regions:
            return self._with_keys(state, e, es, a, label, es[PC] + 1)
        if stage is not None and a.after_open:
            stage = (stage - a.stride) % a.num_stages
        rid, sl = a.regions[0]
        region = (rid, stage if sl is None else sl)
        if a.hold_open and (region, a.hold_open == "w", "hold") not in asyncw:
            asyncw = self._open_holds(state, e, asyncw, a, stage)
        es = es[:ASYNC] + (asyncw,) + es[ASYNC + 1:]
        if a.deliver_base >= 0 and (a.tx_deliver or a.hw_window):
            fb = a.deliver_base + stage
            hw_new = ((fb, e, region),) if a.hw_window and not a.private else ()
            if hw_new:
                self._check_race(state, e, region, a.write, a.step)
            bars = list(state[1])
            completed = set()
            curs = list(es[CUR])
            if a.tx_deliver and not delivered:
                curs[a.cursor] = curs[a.cursor][:2] + (True,)
                if self._tx(bars, fb, -a.tx_deliver):
                    completed.add(fb)
            hw = tuple(sorted(set(state[2] + hw_new)))
            if fb in completed:
                hw = self._close_hw(hw, completed)
            es2 = es[:CUR] + (tuple(curs),) + es[CUR + 1:]
            st = self._set_exec(state, e, es2, pc=es[PC] + 1)
            st = (st[0], tuple(bars), hw) + st[3:]
            return self._with_keys(st, e, es2, a, label, es[PC] + 1)
        if a.wgmma_operand:  # a declared read of the next WGMMA group: open until that group retires
            self._check_race(state, e, region, False, a.step)
            es2 = es[:ASYNC] + (asyncw + ((region, False, "wgo"),),) + es[ASYNC + 1:]
            return self._with_keys(self._set_exec(state, e, es2, pc=es[PC] + 1), e, es2, a, label, es[PC] + 1)
        if a.wgmma:  # wgmma keeps reading after the call: always tracked (same-resource races too)
            self._check_race(state, e, region, False, a.step)
            es2 = es[:ASYNC] + (issue_group(asyncw, region),) + es[ASYNC + 1:]
            return self._with_keys(self._set_exec(state, e, es2, pc=es[PC] + 1), e, es2, a, label, es[PC] + 1)
        if a.private:  # no other resource aliases these bytes, nor this task's own wgmma reads (parts)
            return self._with_keys(self._set_exec(state, e, es, pc=es[PC] + 1), e, es, a, label, es[PC] + 1)
        if a.umma_wait_window:
            entry = (region, False, "umma")
            if entry not in asyncw:
                self._check_race(state, e, region, False, a.step)
                asyncw = asyncw + (entry,)
            es2 = es[:ASYNC] + (asyncw,) + es[ASYNC + 1:]
            return self._with_keys(self._set_exec(state, e, es2, pc=es[PC] + 1), e, es2, a, label, es[PC] + 1)
        # synchronous work: the bytes are in use until the call returns (a separate transition)
        self._check_race(state, e, region, a.write, a.step)
        es2 = es[:SYNC] + ((region, a.write),) + es[SYNC + 1:]
        return self._with_keys(self._set_exec(state, e, es2), e, es2, a, label, es[PC])

    def _open_holds(self, state, e, asyncw, a, stage):
        write = a.hold_open == "w"
        for rid, _ in a.regions:
            reg = (rid, stage)
            entry = (reg, write, "hold")
            if entry not in asyncw:
                self._check_race(state, e, reg, write, a.step, what="bracket")
                asyncw = asyncw + (entry,)
        return asyncw

    def _advance(self, curs, slots, ex):
        for s in slots:
            c = ex.cursors[s]
            stage, parity, _ = curs[s]
            stage += c.stride
            if stage >= c.num_stages:
                stage -= c.num_stages
                parity ^= 1
            curs[s] = (stage, parity, False)

    def _with_keys(self, state, e, es, a, label, pc):
        """Apply the token choices of a step that produces when_true / when_false values."""
        es = state[0][e]
        if not a.keys:
            if pc == es[PC]:
                return [(label, state)]
            return [(label, self._set_exec(state, e, (pc,) + es[1:]))]
        if pc != es[PC]:
            es = (pc,) + es[1:]
        ex = self.execs[e]
        outs = [(state, es)]
        for kid in a.keys:
            nxt = []
            for st, es_ in outs:
                i = ex.keys.index(kid)
                pos = es_[KPOS][i]
                vals = st[6][kid]
                if pos >= len(vals) and len(vals) >= self.key_cap:
                    continue  # run-ahead bound: wait until the other tasks read this key's older values
                options = [vals[pos]] if pos < len(vals) else [True, False]
                for v in options:
                    vals2 = vals if pos < len(vals) else vals + (v,)
                    tok = es_[TOK][:i] + (v,) + es_[TOK][i + 1:]
                    kp = es_[KPOS][:i] + (pos + 1,) + es_[KPOS][i + 1:]
                    es2 = es_[:TOK] + (tok, kp) + es_[WAITED:]
                    st2 = self._set_exec(st, e, es2)
                    st2 = st2[:6] + (st2[6][:kid] + (vals2,) + st2[6][kid + 1:],) + st2[7:]
                    if pos >= len(vals) and kid in self.pre_idle:
                        st2 = self._pre_idle(st2, kid)
                    nxt.append((self._trim_fifo(st2, kid), es2))
            outs = nxt
        res = []
        for st, es2 in outs:
            tag = "" if len(outs) == 1 else ":" + "/".join(
                "T" if es2[TOK][ex.keys.index(k)] else "F" for k in a.keys)
            res.append(((label[0], label[1] + tag, label[2]), st))
        return res

    def _trim_fifo(self, state, kid):
        members = self.c.key_members[kid]
        m = min(state[0][x][KPOS][self.execs[x].keys.index(kid)] for x in members)
        if not m:
            return state
        execs = list(state[0])
        for x in members:
            es = execs[x]
            i = self.execs[x].keys.index(kid)
            kp = es[KPOS][:i] + (es[KPOS][i] - m,) + es[KPOS][i + 1:]
            execs[x] = es[:KPOS] + (kp,) + es[KPOS + 1:]
        fifos = state[6][:kid] + (state[6][kid][m:],) + state[6][kid + 1:]
        return (tuple(execs),) + state[1:6] + (fifos,) + state[7:]

    def _hw_event(self, state, e):
        es = state[0][e]
        (b, n, regs), rest = es[PEND][0], es[PEND][1:]
        bars = list(state[1])
        completed = set()
        if n and self._arrive(bars, b, n, e, None):
            completed.add(b)
        asyncw = tuple(w for w in es[ASYNC] if not (w[2] in ("umma", "hold") and w[0] in regs))
        es2 = es[:ASYNC] + (asyncw, rest) + es[PEND + 1:]
        st = self._set_exec(state, e, es2)
        st = (st[0], tuple(bars), self._close_hw(st[2], completed)) + st[3:]
        return ((e, f"hw:{self.c.barriers[b].label}", es[PC]), st)

    def key_capped(self, state, e) -> bool:
        es = state[0][e]
        ins = self.execs[e].program[es[PC]]
        if ins.kind != "step" or not ins.action.keys or es[SYNC] is not None:
            return False
        ex = self.execs[e]
        return any(es[KPOS][ex.keys.index(k)] >= len(state[6][k]) >= self.key_cap for k in ins.action.keys)

    # ------------------------------------------------------------------ blocked reasons
    def blocked_reason(self, state, e) -> Optional[Tuple[str, object]]:
        es = state[0][e]
        ex = self.execs[e]
        ins = ex.program[es[PC]]
        if ins.kind != "step" or es[SYNC] is not None:
            return None
        a = ins.action
        if a.op not in ("acquire", "wait") or a.cursor is None:
            return None
        stage, parity, _ = es[CUR][a.cursor]
        b = a.barrier_base + stage
        phase, pending, tx = state[1][b]
        bar = self.c.barriers[b]
        more = f"{pending} of {bar.init} arrival(s) still pending"
        if tx:
            more += f", {tx} transaction byte(s) outstanding"
        return (f"{ex.name} blocked in {a.step.kind.label} on {bar.label}: waits for the phase with parity "
                f"{parity} to complete, barrier is in phase {phase} ({more})", a.step)
