"""Program descriptions for tools/diff_fuzz.py: plain data, no library imported.

``generate(rng)`` draws a small TS program (2-4 tasks, 1-3 pipelines), mostly well-formed, and
applies one random mutation to it; ``unrolled(prog)`` writes its loops out as straight-line code.
diff_fuzz.py instantiates a description against warpsched and against the reference TS.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import List, Optional, Tuple

PTYPES = ("AsyncAsync", "TmaAsync", "TmaUmma", "UmmaAsync")
PTYPE_WEIGHTS = (0.40, 0.34, 0.13, 0.13)
TMA = ("TmaAsync", "TmaUmma")


# ====================================================================== program description
@dataclass
class Pipe:
    name: str
    ptype: str
    stages: int
    prod_size: int
    cons_size: int
    prod_sig: str = "All"  # "All" | "TaskWarpLeader"
    num_bytes: int = 0
    bytes_per_warp: Optional[int] = None  # num_bytes_per_warp_per_cta (TMA with TaskWarpLeader)


@dataclass
class TaskD:
    name: str
    warp_idx: int
    num_warps: int
    src: List[str]
    dst: List[str]
    body: list  # nodes, see _emit


@dataclass
class Prog:
    pipes: List[Pipe]
    tasks: List[TaskD]
    K: int
    mutation: str = "none"
    note: str = ""

    def describe(self) -> str:
        lines = [f"K={self.K} mutation={self.mutation} {self.note}"]
        for p in self.pipes:
            lines.append(f"  pipe {p.name}: {p.ptype} S={p.stages} prod={p.prod_size}/{p.prod_sig} "
                         f"cons={p.cons_size} bytes={p.num_bytes} per_warp={p.bytes_per_warp}")
        for t in self.tasks:
            lines.append(f"  task {t.name} warps={t.num_warps} src={t.src} dst={t.dst}: {_fmt(t.body)}")
        return "\n".join(lines)


# Nodes:
#   ("op", res, method)                      a call; "decide" on a cond_* resource records its token
#   ("loop", start, end, step, [nodes])     domain_loop
#   ("first_iter"|"last_iter", [nodes])     per-iteration guard (inside a loop)
#   ("every", period, start, [nodes])        d.every(period, start=start): zero-based iterations
#   ("when", cond, [nodes])                 when_true(token of cond's latest decide, key=cond)
# A cond_* resource is one runtime flag; tasks that guard with the same cond see the same value.
def _fmt(nodes) -> str:
    out = []
    for n in nodes:
        if n[0] == "op":
            out.append(f"{n[1]}.{n[2]}")
        elif n[0] == "loop":
            out.append(f"loop({n[1]},{n[2]},{n[3]}){{{_fmt(n[4])}}}")
        elif n[0] == "when":
            out.append(f"when[{n[1]}]{{{_fmt(n[2])}}}")
        elif n[0] == "every":
            out.append(f"every({n[1]},{n[2]}){{{_fmt(n[3])}}}")
        else:
            out.append(f"{n[0]}{{{_fmt(n[1])}}}")
    return " ".join(out)


# ====================================================================== generator
def right_sizes(ptype: str, prod_warps: List[int], cons_warps: List[int], prod_sig: str) -> Tuple[int, int]:
    """Conventional cooperative-group sizes, from the TS pipeline pages (not from either checker)."""
    twl = prod_sig == "TaskWarpLeader"
    if ptype == "AsyncAsync":
        prod = 32 * (len(prod_warps) if twl else sum(prod_warps))
    elif ptype in TMA:
        prod = len(prod_warps) if twl else sum(prod_warps)  # one elected thread per arming warp
    else:
        prod = 1  # tcgen05.commit
    if ptype == "TmaUmma":
        cons = len(cons_warps)  # one tcgen05.commit per consuming (MMA) task
    elif ptype == "TmaAsync":
        cons = sum(cons_warps)  # one elected lane per consuming warp
    else:
        cons = 32 * sum(cons_warps)
    return prod, cons


MUTATIONS = ("none", "delete_verb", "duplicate_verb", "swap_verbs", "extra_wait", "missing_commit",
             "unconsumed_stage", "group_off_by_one", "signaling_flip", "trip_off_by_one", "guard_first_iter",
             "guard_last_iter", "when_one_sided", "stale_token", "num_bytes_wrong", "stages_zero_or_odd",
             "degenerate")
MUTATION_WEIGHTS = (18, 8, 6, 8, 6, 6, 8, 8, 5, 6, 5, 4, 5, 3, 4, 2, 4)


def _topology(rng: random.Random) -> Tuple[int, List[Tuple[int, str, List[int]]]]:
    """(number of tasks, [(producer task, pipe name, consumer tasks)])."""
    shape = rng.choice(["chain", "chain", "broadcast", "dual"])
    if shape == "chain":
        n = rng.randint(1, 3)
        return n + 1, [(i, f"P{i}", [i + 1]) for i in range(n)]
    if shape == "broadcast":
        edges = [(0, "P0", [1, 2])]
        if rng.random() < 0.4:
            edges.append((1, "P1", [3]))
            return 4, edges
        return 3, edges
    edges = [(0, "P0", [1]), (0, "P1", [1])]
    if rng.random() < 0.4:
        edges.append((1, "P2", [2]))
        return 3, edges
    return 2, edges


def generate(rng: random.Random) -> Prog:
    ntasks, edges = _topology(rng)
    warps = [rng.choice([1, 1, 1, 2, 4]) for _ in range(ntasks)]
    K = rng.randint(1, 6)
    pipes: List[Pipe] = []
    conditional = set()
    every: dict = {}  # pipe name -> (period, producer start, consumer start)
    for prod, name, cons in edges:
        ptype = rng.choices(PTYPES, PTYPE_WEIGHTS)[0]
        sig = "TaskWarpLeader" if (warps[prod] > 1 and ptype in TMA) or rng.random() < 0.03 else "All"
        if ptype == "AsyncAsync" and warps[prod] > 1 and rng.random() < 0.25:
            sig = "TaskWarpLeader"  # the relu_pipeline shape (issue 17)
        ps, cs = right_sizes(ptype, [warps[prod]], [warps[c] for c in cons], sig)
        p = Pipe(name, ptype, rng.randint(1, 4), ps, cs, sig)
        if ptype in TMA:
            per = rng.choice([1024, 2048, 4096])
            p.num_bytes = per * warps[prod]
            if sig == "TaskWarpLeader" and warps[prod] > 1:
                p.bytes_per_warp = per
        pipes.append(p)
        if rng.random() < 0.15:
            conditional.add(name)
        elif rng.random() < 0.15:  # producer and consumer blocks under every(2, start): in or out of phase
            s_prod = rng.randint(0, 1)
            every[name] = (2, s_prod, s_prod if rng.random() < 0.5 else 1 - s_prod)
    # a hardware (DMA) producer reads its inputs asynchronously: an input released inside a
    # when_true block before that load would be malformed on both sides, so keep it unconditional
    hw_out = {e[0] for e, p in zip(edges, pipes) if p.ptype != "AsyncAsync"}
    conditional = {e[1] for e in edges if e[1] in conditional and not hw_out & set(e[2])}
    tasks = []
    w = 0
    for i in range(ntasks):
        src = [p for p, e in zip(pipes, edges) if i in e[2]]
        dst = [p for p, e in zip(pipes, edges) if e[0] == i]
        t = TaskD(f"T{i}", w, warps[i], [p.name for p in src] or [f"in_{i}"], [p.name for p in dst] or [f"out_{i}"],
                  [])
        t.src += [f"cond_{p.name}" for p in src + dst if p.name in conditional]
        t.body = _task_body(rng, t, src, dst, conditional, K, every)
        tasks.append(t)
        w += warps[i]
    prog = Prog(pipes, tasks, K)
    prog.mutation = rng.choices(MUTATIONS, MUTATION_WEIGHTS)[0]
    prog.note = mutate(rng, prog)
    return prog


def _iteration(rng: random.Random, t: TaskD, src: List[Pipe], dst: List[Pipe], conditional, every=None) -> list:
    """One iteration's calls: wait/read every input, acquire/fill/commit every output, release.
    ``every``: pipe name -> (period, producer start, consumer start): that pipe's blocks run under
    d.every(period, start) (loop iterations only; None: head and tail iterations)."""
    every = every or {}

    def on(p, block, side):
        if p.name not in every:
            return block
        period, s_prod, s_cons = every[p.name]
        return [("every", period, s_prod if side == "prod" else s_cons, block)]

    it = []
    if t.src[0].startswith("in_"):
        it.append(("op", t.src[0], "load"))
    for p in src + dst:
        if p.name in conditional:
            it.append(("op", f"cond_{p.name}", "decide"))
    releases = []
    for p in src:
        block = ([("op", p.name, "try_wait")] if rng.random() < 0.2 else []) + \
                [("op", p.name, "wait"), ("op", p.name, "read")]
        if p.name in conditional:
            it.append(("when", f"cond_{p.name}", block + [("op", p.name, "release")]))
        else:
            it.extend(on(p, block, "cons"))
            releases.extend(on(p, [("op", p.name, "release")], "cons"))
    for p in dst:
        block = ([("op", p.name, "try_acquire")] if rng.random() < 0.2 else []) + \
                [("op", p.name, "acquire"), ("op", p.name, "fill"), ("op", p.name, "commit")]
        it.extend([("when", f"cond_{p.name}", block)] if p.name in conditional else on(p, block, "prod"))
    if t.dst[0].startswith("out_"):
        it.append(("op", t.dst[0], "store"))
    return it + releases


LOOP_FORMS = ("forward", "offset", "strided", "reversed", "reversed_strided")
LOOP_FORM_WEIGHTS = (45, 10, 15, 20, 10)


def loop_form(rng: random.Random, trip: int, kind: Optional[str] = None) -> Tuple[int, int, int]:
    """(start, end, step) of a loop that runs exactly ``trip`` times, in one of LOOP_FORMS: counting
    up from 0 or from another start, strided (step 2 or 3, an end the step need not reach exactly),
    counting down (step -1, or -2 / -3 strided). ``trip`` 0 gives an empty range of that form."""
    kind = kind or rng.choices(LOOP_FORMS, LOOP_FORM_WEIGHTS)[0]
    step = {"forward": 1, "offset": 1, "strided": rng.choice([2, 3]), "reversed": -1,
            "reversed_strided": -rng.choice([2, 3])}[kind]
    start = {"forward": 0, "offset": rng.choice([2, -3]), "strided": rng.choice([0, 1, -4]),
             "reversed": rng.choice([trip, trip + 2, 7, 0]), "reversed_strided": rng.choice([trip * -step, 9, 1])}[kind]
    sign = 1 if step > 0 else -1
    if trip > 0:
        end = start + (trip - 1) * step + sign * rng.randint(1, abs(step))
    else:
        end = start - sign * rng.randint(0, 2)
    assert len(range(start, end, step)) == trip, (kind, start, end, step, trip)
    return start, end, step


def _task_body(rng, t, src, dst, conditional, K, every=None) -> list:
    """K iterations: some in a head before the loop, some in a tail after it (none when a pipe of
    the task runs under every(): its phase is the loop's iteration count)."""
    guarded = bool(every) and any(p.name in every for p in src + dst)
    head = rng.randint(0, 1) if K >= 2 and rng.random() < 0.3 and not guarded else 0
    tail = rng.randint(0, 1) if K - head >= 2 and rng.random() < 0.3 and not guarded else 0
    trip = K - head - tail
    body = []
    for _ in range(head):
        body += _iteration(rng, t, src, dst, conditional)
    start, end, step = loop_form(rng, trip)
    loop_body = _iteration(rng, t, src, dst, conditional, every)
    if rng.random() < 0.15:  # a harmless first-iteration hint
        for i, n in enumerate(loop_body):
            if n[0] == "op" and n[2] in ("acquire", "wait"):
                if i == 0 or loop_body[i - 1][0] != "op" or not loop_body[i - 1][2].startswith("try_"):
                    loop_body.insert(i, ("first_iter", [("op", n[1], "try_" + n[2])]))
                break
    body.append(("loop", start, end, step, loop_body))
    for _ in range(tail):
        body += _iteration(rng, t, src, dst, conditional)
    return body


# ---------------------------------------------------------------------- mutations
VERBS = ("acquire", "commit", "wait", "release", "try_acquire", "try_wait", "fill", "read")


def _op_paths(nodes, prefix=(), verbs=VERBS, res=None):
    """Paths (index tuples) of every op node whose method is in verbs."""
    out = []
    for i, n in enumerate(nodes):
        if n[0] == "op":
            if n[2] in verbs and (res is None or n[1] == res):
                out.append(prefix + (i,))
        else:
            out += _op_paths(n[-1], prefix + (i,), verbs, res)
    return out


def _parent(nodes, path):
    for i in path[:-1]:
        nodes = nodes[i][-1]
    return nodes


def _loop_of(body):
    return next(i for i, n in enumerate(body) if n[0] == "loop")


def _pick_task_path(rng, prog, verbs, res=None):
    choices = [(t, p) for t in prog.tasks for p in _op_paths(t.body, verbs=verbs, res=res)]
    return rng.choice(choices) if choices else (None, None)


def mutate(rng: random.Random, prog: Prog) -> str:
    """Apply prog.mutation in place; returns a short note. Falls back to 'none' when it does not apply."""
    m = prog.mutation
    tasks = prog.tasks
    if m in ("delete_verb", "duplicate_verb", "missing_commit"):
        t, path = _pick_task_path(rng, prog, ("commit",) if m == "missing_commit" else VERBS)
        if t is None:
            prog.mutation = "none"
            return ""
        parent = _parent(t.body, path)
        node = parent[path[-1]]
        if m == "duplicate_verb":
            parent.insert(path[-1], node)
            return f"{t.name}: {node[1]}.{node[2]} twice"
        del parent[path[-1]]
        return f"{t.name}: no {node[1]}.{node[2]} at {path}"
    if m == "swap_verbs":
        cands = []
        for t in tasks:
            for path in _op_paths(t.body, verbs=VERBS + ("load", "store", "decide")):
                parent = _parent(t.body, path)
                j = path[-1]
                nxt = parent[j + 1] if j + 1 < len(parent) else None
                # a when block must stay after the decide that makes its token
                if nxt is not None and nxt != parent[j] and "decide" not in (parent[j][2], nxt[0] == "op" and nxt[2]):
                    cands.append((t, parent, j))
        if not cands:
            prog.mutation = "none"
            return ""
        t, parent, j = rng.choice(cands)
        parent[j], parent[j + 1] = parent[j + 1], parent[j]
        return f"{t.name}: swapped {_fmt([parent[j + 1]])} / {_fmt([parent[j]])}"
    if m == "extra_wait":
        t = rng.choice([t for t in tasks if any(p.name in t.src for p in prog.pipes)] or tasks)
        pipe = rng.choice([s for s in t.src if any(p.name == s for p in prog.pipes)] or [prog.pipes[0].name])
        loop = t.body[_loop_of(t.body)][4]
        pos = rng.randint(0, len(loop))
        loop.insert(pos, ("op", pipe, "wait"))
        return f"{t.name}: extra {pipe}.wait at loop[{pos}]"
    if m == "unconsumed_stage":
        p = rng.choice(prog.pipes)
        cons = [t for t in tasks if p.name in t.src]
        t = rng.choice(cons)
        li = _loop_of(t.body)
        if len(cons) > 1 and rng.random() < 0.5:  # a broadcast consumer that never reads it
            t.body = _strip(t.body, p.name)
            return f"{t.name} never waits on {p.name} (still in src)"
        lo = t.body[li]
        trip = len(range(lo[1], lo[2], lo[3]))
        if li + 1 < len(t.body) and _op_paths(t.body[li + 1:], res=p.name):  # drop the tail iteration's use
            t.body = t.body[:li + 1] + _strip(t.body[li + 1:], p.name)
            return f"{t.name}: tail iteration does not consume {p.name}"
        if trip >= 1:
            t.body[li] = ("loop", lo[1], lo[2] - lo[3], lo[3], lo[4])
            if trip == 1:
                t.body = _strip(t.body, p.name)
            return f"{t.name}: consumes {p.name} one iteration less"
        prog.mutation = "none"
        return ""
    if m == "group_off_by_one":
        p = rng.choice(prog.pipes)
        side = rng.choice(["prod", "cons"])
        size = getattr(p, f"{side}_size")
        d = 1 if size == 1 else rng.choice([-1, 1])
        setattr(p, f"{side}_size", size + d)
        return f"{p.name}.{side}_size {d:+d}"
    if m == "signaling_flip":
        p = rng.choice(prog.pipes)
        p.prod_sig = "All" if p.prod_sig == "TaskWarpLeader" else "TaskWarpLeader"
        return f"{p.name}.prod_sig -> {p.prod_sig} (sizes unchanged)"
    if m == "trip_off_by_one":
        t = rng.choice(tasks)
        li = _loop_of(t.body)
        lo = t.body[li]
        d = rng.choice([-1, 1])
        t.body[li] = ("loop", lo[1], lo[2] + d * lo[3], lo[3], lo[4])
        return f"{t.name}: loop trip {d:+d}"
    if m in ("guard_first_iter", "guard_last_iter"):
        t = rng.choice(tasks)
        loop = t.body[_loop_of(t.body)][4]
        i = rng.randrange(len(loop))
        j = rng.randint(i + 1, min(len(loop), i + 3))
        loop[i:j] = [(m[len("guard_"):], loop[i:j])]
        return f"{t.name}: {m[len('guard_'):]} around loop[{i}:{j}]"
    if m == "when_one_sided":
        p = rng.choice(prog.pipes)
        side = rng.choice([t for t in tasks if p.name in t.src + t.dst])
        paths = _op_paths(side.body, res=p.name)
        top = sorted({pa[:-1] for pa in paths})
        scope = rng.choice(top)
        parent = _parent(side.body, scope + (0,))
        idx = [i for i, n in enumerate(parent) if n[0] == "op" and n[1] == p.name]
        if not idx or "when" in [n[0] for n in parent]:
            prog.mutation = "none"
            return ""
        a, b = idx[0], idx[-1] + 1
        cond = f"cond_{side.name}_only"
        parent[a:b] = [("op", cond, "decide"), ("when", cond, parent[a:b])]
        side.src.append(cond)
        return f"{side.name}: {p.name} ops under a when_true only this task has"
    if m == "stale_token":  # the flag's slot is written again between the decide and its guard
        cands = [(t, path) for t in tasks for path in _op_paths(t.body, verbs=("decide",))]
        if not cands:
            prog.mutation = "none"
            return ""
        t, path = rng.choice(cands)
        parent = _parent(t.body, path)
        parent.insert(path[-1] + 1, ("op", parent[path[-1]][1], "decide_again"))
        return f"{t.name}: {parent[path[-1]][1]}.decide() twice, the guard reads the first token"
    if m == "num_bytes_wrong":
        tp = [p for p in prog.pipes if p.ptype in TMA]
        if not tp:
            prog.mutation = "none"
            return ""
        p = rng.choice(tp)
        p.num_bytes = rng.choice([0, p.num_bytes // 2, p.num_bytes + 16])
        return f"{p.name}.num_bytes={p.num_bytes}"
    if m == "degenerate":  # values no sane program has: hunting internal errors
        what = rng.choice(["size0", "bytes<0", "trip0", "warps0", "overlap"])
        p, t = rng.choice(prog.pipes), rng.choice(tasks)
        if what == "size0":
            setattr(p, rng.choice(["prod_size", "cons_size"]), 0)
            return f"{p.name}: a group of size 0"
        if what == "bytes<0":
            p.num_bytes = -64
            return f"{p.name}.num_bytes=-64"
        if what == "trip0":
            li = _loop_of(t.body)
            lo = t.body[li]
            t.body[li] = ("loop", lo[1], lo[1], lo[3], lo[4])
            return f"{t.name}: loop runs 0 times"
        if what == "warps0":
            t.num_warps = 0
            return f"{t.name}.num_warps=0"
        if t.warp_idx == 0:
            t = tasks[-1]
        t.warp_idx = max(0, t.warp_idx - 1)
        return f"{t.name} overlaps the previous task's warps"
    if m == "stages_zero_or_odd":
        p = rng.choice(prog.pipes)
        p.stages = rng.choice([0, -1])
        return f"{p.name}.stages={p.stages}"
    return ""


def _strip(nodes, res):
    """The nodes without any call on res (empty guard blocks dropped)."""
    out = []
    for n in nodes:
        if n[0] == "op":
            if n[1] != res:
                out.append(n)
        elif n[0] == "loop":
            out.append(n[:4] + (_strip(n[4], res),))
        else:
            inner = _strip(n[-1], res)
            if inner:
                out.append(n[:-1] + (inner,))
    return out


# ---------------------------------------------------------------------- unrolled twin
def _has_when(nodes) -> bool:
    return any(n[0] == "when" or (n[0] != "op" and _has_when(n[-1])) for n in nodes)


def _resolve(nodes, i: int, trip: int) -> list:
    """One iteration of a loop body with first_iter / last_iter decided."""
    out = []
    for n in nodes:
        if n[0] == "first_iter":
            out += _resolve(n[1], i, trip) if i == 0 else []
        elif n[0] == "last_iter":
            out += _resolve(n[1], i, trip) if i == trip - 1 else []
        elif n[0] == "every":
            out += _resolve(n[3], i, trip) if i >= n[2] and (i - n[2]) % n[1] == 0 else []
        else:
            out.append(n)
    return out


def unrolled(prog: Prog) -> Optional[Prog]:
    """The same program with every domain_loop's iterations written out as straight-line code
    before an empty ``domain_loop(0, 0, 1)`` (the reference wants a loop in every schedule).
    None when a when_true guard is present (a flag per iteration has no straight-line twin) or
    a loop runs 0 times (its calls would vanish, and with them the task's use of a resource)."""
    if any(_has_when(t.body) for t in prog.tasks):
        return None
    if any(n[0] == "loop" and not range(n[1], n[2], n[3] or 1) for t in prog.tasks for n in t.body):
        return None
    twin = copy.deepcopy(prog)
    for t in twin.tasks:
        body = []
        for n in t.body:
            if n[0] == "loop":
                trip = len(range(n[1], n[2], n[3])) if n[3] else 0
                for i in range(trip):
                    body += _resolve(n[4], i, trip)
                body.append(("loop", 0, 0, 1, []))
            else:
                body.append(n)
        t.body = body
    return twin


# ---------------------------------------------------------------------- loop-form twin
def reformed(prog: Prog, rng: random.Random) -> Prog:
    """The same program with every domain_loop written in another form (LOOP_FORMS) with the same
    trip count: forward <-> reversed, strided, offset. Guards count iterations from 0, so no
    verdict may change."""
    twin = copy.deepcopy(prog)
    for t in twin.tasks:
        for i, n in enumerate(t.body):
            if n[0] == "loop":
                trip = len(range(n[1], n[2], n[3])) if n[3] else 0
                now = n[1:4]
                for _ in range(8):
                    form = loop_form(rng, trip)
                    if form != now:
                        break
                t.body[i] = ("loop", *form, n[4])
    twin.note = (twin.note + " [loop forms rewritten]").strip()
    return twin
