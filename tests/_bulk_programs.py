"""Small ``skip(count=...)`` programs and the on/off verdict comparison (no tests in this module).

``draw(rng)`` returns a random configuration, ``build(cfg)`` its Program (built directly, no
static checks: the checker must be right on broken programs too), ``compare(program)`` the
verdict with the checker's bulk-skip reductions on and with the unreduced reference search
(``loops.BULK_REDUCTIONS = False``: no Engine._pre_idle, no idle loop as one step, skip values
kept exactly, no lifting of exact counts). Used by tests/test_checker_bulk_diff.py and
tools/fuzz_model.py / tools/bulk_diff.py.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from test_checker_builders import Buf, Queue, async_cfg, program, task  # noqa: F401 (re-exported)
from warpsched import (SmemAllocation, SmemAllocator, TaskLocalVariable, consumer_work, domain_loop, schedule, trip_count, when_false,
                       when_true, work_tile_loop)
from warpsched.verify.checker import loops, run_checker  # noqa: F401 (run_checker re-exported)

COUNTS = ["K", "K", "K", "K+1", "K-1", "K-2", "1", "0", "k", "k+1", "2K"]


@dataclass(kw_only=True)
class OwnedBuf(Buf):
    """``owns``: this tile's owner (a token); ``owns_sync`` the same from synchronous work
    that holds the call open (its key is evaluated before the call returns)."""

    mine: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        super().__post_init__()
        self.mine = TaskLocalVariable(dtype="Boolean", default=False)

    @consumer_work(returns=mine)
    def owns_sync(self, stage_info):
        return True


def draw(rng: random.Random, symbolic_ok=True) -> dict:
    """A configuration: mostly valid ping-pong / hand-off programs, a third with one bug."""
    cfg = dict(shape=rng.choice(["pingpong", "pingpong", "handoff"]), stages=rng.choice([1, 2, 2, 3]),
               k=rng.choice([1, 2, 3, 1, 2, 3, 7]), k_kind=rng.choice(["int", "tc", "tc"]),
               tiles=rng.choice([1, 2, 3, None]),
               count="K", turn=True, guard_skip=True, skip_at="tail", owner_wait=True, owner_release=True,
               sync_owns=rng.random() < 0.3, extra_consumer_loop=rng.random() < 0.2,
               producer_reads_key=rng.random() < 0.3, step=1 if rng.random() < 0.85 else 2)
    if symbolic_ok and rng.random() < 0.3:
        cfg["k_kind"] = "sym"
    if rng.random() < 0.4:
        bug = rng.choice(["count", "count", "turn", "guard_skip", "skip_at", "owner_wait", "owner_release"])
        if bug == "count":
            cfg["count"] = rng.choice(COUNTS[3:])
        elif bug == "skip_at":
            cfg["skip_at"] = rng.choice(["head", "before_turn"])
        else:
            cfg[bug] = False
    return cfg


def _count(cfg, K, k):
    c = cfg["count"]
    table = {"K": K, "K+1": K + 1, "K-1": K - 1, "K-2": K - 2, "2K": None, "1": 1, "0": 0, "k": k, "k+1": k + 1}
    if c == "2K":  # not expressible as K + c: two skips of K (two bulk members of one group)
        return [K, K]
    return [table[c]]


def _skip(b, c, cfg):
    """skip(count=c), or (``cfg['unrolled']``) c single skips: what a bulk skip must equal."""
    if not cfg.get("unrolled"):
        b.skip(count=c)
        return
    for _ in range(c if type(c) is int else c.exact):
        b.skip()


def unrollable(cfg):
    """An exact configuration whose every count is >= 0 (it can be written as single skips)."""
    if cfg["k_kind"] == "sym":
        return False
    return all((c if type(c) is int else c.exact) >= 0 for c in _count(cfg, cfg["k"], cfg["k"]))


def build(cfg, k=None):
    """The program of ``cfg``; ``k``: the exact K to instantiate a symbolic configuration with."""
    if cfg["k_kind"] == "sym":
        K = trip_count("K") if k is None else trip_count("K", k)
    else:
        K = cfg["k"] if cfg["k_kind"] == "int" else trip_count("K", cfg["k"])
    counts = _count(cfg, K, cfg["k"])
    # real bytes: a stage read while the producer refills it is a race; ``Sched`` (private
    # bytes, no pipeline) makes owns_sync a synchronous call (its return is its own transition)
    ring_bytes, sched_bytes = SmemAllocation("ring", dtype=2, count=256 * cfg["stages"]), SmemAllocation("sched", 2, 8)
    ring = OwnedBuf(name="Ring", pipeline_config=async_cfg(stages=cfg["stages"]), allocs=(ring_bytes,))
    sched = OwnedBuf(name="Sched", allocs=(sched_bytes,))
    smem = SmemAllocator()
    smem.allocations += [ring_bytes, sched_bytes]
    smem.compute_layout()
    cfg = dict(cfg, _smem=smem, _sched=sched)
    if cfg["shape"] == "handoff":
        return _handoff(cfg, ring, K, counts)
    return _pingpong(cfg, ring, K, counts)


def _handoff(cfg, ring, K, counts):
    turn = Buf(name="Turn", pipeline_config=async_cfg(stages=1))

    @schedule
    def prod(b):
        with domain_loop(0, K, cfg.get("step", 1)):
            b.acquire()
            b.fill()
            b.commit()
        b.acquire()
        b.fill()
        b.commit()

    @schedule
    def owner(b, t):
        with domain_loop(0, K, cfg.get("step", 1)):
            if cfg["owner_wait"]:
                b.wait()
            b.read()
            if cfg["owner_release"]:
                b.release()
        t.acquire()
        t.fill()
        t.commit()
        b.skip()

    @schedule
    def skipper(b, t):
        if cfg["skip_at"] == "head":
            for c in counts:
                _skip(b, c, cfg)
        if cfg["turn"]:
            t.wait()
            t.read()
            t.release()
        if cfg["skip_at"] != "head":
            for c in counts:
                _skip(b, c, cfg)
        b.wait()
        b.read()
        b.release()
        if not cfg["turn"]:
            t.wait()
            t.read()
            t.release()

    return program([task("Producer", prod(ring), dst=[ring]),
                    task("Owner", owner(ring, turn), src=[ring], dst=[turn], warp=1),
                    task("Skipper", skipper(ring, turn), src=[ring, turn], warp=2)], smem=cfg["_smem"],
                   max_states=400_000)


def _pingpong(cfg, ring, K, counts):
    """CUTLASS's ping-pong in small: a tile's owner (by ``owns``) waits for and releases its K
    stages, then commits its turn; the other waits for that turn and skips the K stages."""
    wq = Queue(name="WorkQueue")
    turns = [Buf(name=f"Turn{w}", pipeline_config=async_cfg(stages=1)) for w in (0, 1)]
    tiles = cfg["tiles"]

    def tail(q):
        q.try_wait()
        q.wait()
        q.get_and_advance_work_tile()
        q.release()

    @schedule
    def prod(b, q, sched):
        with work_tile_loop(q, tile_count=tiles):
            if cfg.get("producer_reads_key"):  # a third task evaluates the ownership key, ahead of both
                ahead = sched.owns_sync() if cfg["sync_owns"] else b.decide()
                with when_true(ahead):  # read in a guard: the same key as the math tasks'
                    sched.read()
            with domain_loop(0, K, cfg.get("step", 1)):
                b.acquire()
                b.fill()
                b.commit()
            tail(q)

    def math(w):
        own, other = (when_true, when_false) if w == 0 else (when_false, when_true)

        @schedule
        def mma(b, q, mine, theirs, sched):
            with work_tile_loop(q, tile_count=tiles):
                even = sched.owns_sync() if cfg["sync_owns"] else b.decide()

                def skip():
                    for c in counts:
                        if cfg["guard_skip"]:
                            with other(even):
                                _skip(b, c, cfg)
                        else:
                            _skip(b, c, cfg)
                if cfg["skip_at"] == "head":
                    skip()
                with domain_loop(0, K, cfg.get("step", 1)):
                    with own(even):
                        if cfg["owner_wait"]:
                            b.wait()
                        b.read()
                        if cfg["owner_release"]:
                            b.release()
                if cfg["skip_at"] == "before_turn":
                    skip()
                if cfg["turn"]:
                    with own(even):
                        mine.acquire()
                        mine.commit()
                    with other(even):
                        theirs.wait()
                        theirs.release()
                if cfg["skip_at"] == "tail":
                    skip()
                tail(q)
        return mma(ring, wq, turns[w], turns[1 - w], cfg["_sched"])

    tasks = [task("Producer", prod(ring, wq, cfg["_sched"]), src=[wq, cfg["_sched"]], dst=[ring])]
    for w in (0, 1):
        tasks.append(task(f"Mma{w}", math(w), src=[ring, wq, turns[1 - w], cfg["_sched"]], dst=[turns[w]],
                          warp=1 + w))
    if cfg["extra_consumer_loop"]:  # a loop of K's group with no idle guard (a plain member)
        side = Buf(name="Side", pipeline_config=async_cfg(stages=2))

        @schedule
        def side_prod(s, q):
            with work_tile_loop(q, tile_count=tiles):
                with domain_loop(0, K, cfg.get("step", 1)):
                    s.acquire()
                    s.fill()
                    s.commit()
                tail(q)

        @schedule
        def side_cons(s, q):
            with work_tile_loop(q, tile_count=tiles):
                with domain_loop(0, K, cfg.get("step", 1)):
                    s.wait()
                    s.read()
                    s.release()
                tail(q)
        tasks += [task("SideP", side_prod(side, wq), src=[wq], dst=[side], warp=3),
                  task("SideC", side_cons(side, wq), src=[side, wq], warp=4)]
    return program(tasks, smem=cfg["_smem"], max_states=400_000)


def signature(res):
    """What must agree: the verdict and, for UNSAFE, the kinds of problem found."""
    kinds = tuple(sorted(k for k, v in res.exploration.counts.items() if v)) if res.exploration else ()
    return res.verdict, kinds


def run(prog, reduced=True):
    was = loops.BULK_REDUCTIONS
    loops.BULK_REDUCTIONS = reduced
    try:
        return run_checker(prog)
    finally:
        loops.BULK_REDUCTIONS = was


def compare(cfg, ks=(1, 2, 3, 4)):
    """(reduced result, [reference results]): for an exact configuration the unreduced run of the
    same program and (counts >= 0) the run of the program with each skip(count=n) written as n
    single skips; for a symbolic K the reference runs of K = each of ``ks`` (exact)."""
    on = run(build(cfg))
    if cfg["k_kind"] != "sym":
        refs = [run(build(cfg), reduced=False)]
        if unrollable(cfg):  # the semantics: a bulk skip of n stages is n single skips
            refs.append(run(build(dict(cfg, unrolled=True))))
        return on, refs
    return on, [run(build(cfg, k=k), reduced=False) for k in ks]


def disagreement(cfg, on, refs):
    """None, or why the reduced verdict is not the reference's.

    Exact: same verdict (and kinds overlap when UNSAFE). Symbolic: SAFE needs every reference
    SAFE (a reference finding is a missed bug); UNSAFE needs some reference UNSAFE (else the
    counterexample needs a K past ``ks``: reported too, to be looked at)."""
    s_on = signature(on)
    sigs = [signature(r) for r in refs]
    if "INCOMPLETE" in [s_on[0]] + [s[0] for s in sigs]:
        return f"incomplete: {s_on} {sigs}"
    if cfg["k_kind"] != "sym":
        for what, ref in zip(("unreduced", "single skips"), sigs):
            if s_on[0] != ref[0] or (s_on[1] and ref[1] and not set(s_on[1]) & set(ref[1])):
                return f"exact: reduced {s_on} {what} {ref}"
        return None
    if s_on[0] == "SAFE" and any(s[0] != "SAFE" for s in sigs):
        return f"symbolic SAFE but a reference finds {sigs}"
    if s_on[0] == "UNSAFE" and all(s[0] == "SAFE" for s in sigs):
        return f"symbolic UNSAFE {s_on} but every reference K is SAFE {sigs}"
    return None
