"""Mutation testing of warpsched's checks: small bugs planted in the bundled programs and in the
Hopper examples' CPU builds, each checked by the static checks and the exhaustive checker.

  PYTHONPATH=src python tools/mutate.py [--out bench/results/mutate.txt] [--only SUBSTR]

Operators (one edit per mutant, line numbers kept, applied to the module's source text):
  del-verb        delete one pipeline verb (acquire / commit / wait / release / try_*, queue and PDL
                  verbs, the WGMMA wait)
  swap-up/-down   swap a pipeline verb with the statement before / after it in the same block
  guard-drop      run a guarded block unconditionally (first_iter, last_iter, every, when_*, skippable)
  guard-flip      first_iter <-> last_iter, when_true <-> when_false; every(p, s): s+1, p+1
  loop-start/-end/-step   +1 on one argument of a domain_loop
  group+1 / group-1       a cooperative-group size (producer_group / consumer_group) off by one
  bytes+1 / bytes-1       num_bytes or num_bytes_per_warp_per_cta off by one
  stages+1 / stages-1     num_stages off by one
  stride+1        interleave_stride (or one of its 4 entries) + 1
  signal=X        a side's signaling threads replaced (or set where the default All applied)
  warps+1 / warps-1       a task's num_warps off by one

Files in ``TRACED`` are also compiled for sm_90a on the CPU when the static checks accept a mutant:
the trace checks the TMA bytes each producer bracket's copies deliver (StageInfo.tma_copy).

Outcomes: killed (an error finding; the check and file:line are recorded), warned (only a new
warning), survived, stillborn (the mutant is not a program: an exception outside warpsched),
crash (an exception inside warpsched: a bug), timeout. Every survivor is classified in
``CLASSIFIED`` below (equivalent, with the reason) or by a rule in ``classify``; the report
lists anything left unclassified.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import itertools
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ["WARPSCHED_VERDICT_CACHE"] = "0"  # mutants are throwaway programs: no verdict of theirs belongs on disk
for p in (os.path.join(ROOT, "src"), os.path.join(ROOT, "examples", "hopper"),
          os.path.join(ROOT, "examples", "hopper", "patterns")):
    if p not in sys.path:
        sys.path.insert(0, p)

from mutate_targets import BUNDLED, PATCHES, TARGETS, TRACED  # noqa: E402  (the mutated programs)

VERBS = {"acquire", "try_acquire", "commit", "wait", "try_wait", "release", "get_and_advance_work_tile",
         "fetch_work_tile", "wait_griddep", "launch_griddep"}
GUARDS = {"first_iter", "last_iter", "every", "skippable", "when_true", "when_false"}
SIGNALS = ["SignalingThreads.All", "SignalingThreads.CtaLeader", "SignalingThreads.TaskWarpLeader",
           "SignalingThreads.CtaLeader | SignalingThreads.TaskWarpLeader"]
SIG_MOD = "__import__('warpsched').SignalingThreads."
MAX_STATES = 150_000
TIMEOUT_S = 60


@dataclass
class Mutant:
    path: str  # relative to ROOT
    line: int
    op: str
    detail: str
    source: str  # the whole mutated module
    meta: dict = field(default_factory=dict)

    func: str = ""  # the innermost def around the mutated line
    nth: int = 0  # occurrence of (path, func, op, detail) in the file: keeps keys unique

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}:{self.op}" + (f":{self.detail}" if self.detail else "")

    @property
    def key(self) -> str:
        """A line-number-free name (the hand classification survives edits above the line)."""
        return f"{self.path}::{self.func}:{self.op}" + (f":{self.detail}" if self.detail else "") + \
            (f"#{self.nth}" if self.nth else "")


@dataclass
class Outcome:
    kind: str  # killed | warned | survived | stillborn | crash | timeout
    note: str = ""
    verdicts: List[str] = field(default_factory=list)


# ---------------------------------------------------------------------- source editing
class Source:
    """The module's text as UTF-8 bytes (ast offsets are byte offsets), with splicing helpers."""

    def __init__(self, text: str):
        self.text = text
        self.data = text.encode()
        self.starts = [0]
        for i, b in enumerate(self.data):
            if b == 10:
                self.starts.append(i + 1)

    def off(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def seg(self, node) -> str:
        return self.data[self.off(node.lineno, node.col_offset):self.off(node.end_lineno, node.end_col_offset)].decode()

    def replace(self, edits) -> str:
        """edits: [(start byte, end byte, new text)], non-overlapping."""
        out = self.data
        for a, b, new in sorted(edits, reverse=True):
            out = out[:a] + new.encode() + out[b:]
        return out.decode()

    def span(self, node):
        return self.off(node.lineno, node.col_offset), self.off(node.end_lineno, node.end_col_offset)


def _called(node) -> Optional[str]:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def _is_schedule(fn) -> bool:
    return any((isinstance(d, ast.Name) and d.id == "schedule") or
               (isinstance(d, ast.Attribute) and d.attr == "schedule") for d in fn.decorator_list)


def _wgmma_wait_methods(tree) -> set:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and "WGMMA_WAIT" in ast.dump(d):
                    names.add(node.name)
    return names


def _blocks(fn):
    """Every statement list inside a function (its body, with / if / for bodies, ...)."""
    stack = [fn.body]
    while stack:
        body = stack.pop()
        yield body
        for st in body:
            for attr in ("body", "orelse", "finalbody"):
                sub = getattr(st, attr, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    stack.append(sub)


def _verb_of(st, extra) -> Optional[str]:
    if isinstance(st, ast.Expr):
        name = _called(st.value)
    elif isinstance(st, ast.Assign):
        name = _called(st.value)
    else:
        return None
    return name if name in VERBS or name in extra else None


def mutants_of(path: str, text: Optional[str] = None) -> List[Mutant]:
    text = open(os.path.join(ROOT, path)).read() if text is None else text
    out = _mutants(path, text)
    funcs = sorted(((n.end_lineno - n.lineno, n.lineno, n.end_lineno, n.name) for n in ast.walk(ast.parse(text))
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))))
    seen: Counter = Counter()
    for m in out:
        m.func = next((name for _, lo, hi, name in funcs if lo <= m.line <= hi), "<module>")
        k = (m.func, m.op, m.detail)
        m.nth = seen[k]
        seen[k] += 1
    return out


def _mutants(path: str, text: str) -> List[Mutant]:
    src = Source(text)
    tree = ast.parse(text)
    extra = _wgmma_wait_methods(tree)
    out: List[Mutant] = []
    needs_null = False

    def add(line, op, detail, edits, null=False, **meta):
        new = src.replace(edits)
        if null:
            new += "\nfrom contextlib import nullcontext as _mut_nullcontext  # mutate.py\n"
        out.append(Mutant(path, line, op, detail, new, meta))

    scheds = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_schedule(n)]
    swapped = set()
    for fn in scheds:
        for body in _blocks(fn):
            for i, st in enumerate(body):
                verb = _verb_of(st, extra)
                if verb is not None:
                    a, b = src.span(st)
                    add(st.lineno, "del-verb", verb, [(a, b, "pass" + "\n" * (st.end_lineno - st.lineno))])
                    for j, op in ((i - 1, "swap-up"), (i + 1, "swap-down")):
                        if not 0 <= j < len(body):
                            continue
                        other = body[j]
                        pair = tuple(sorted((st.lineno, other.lineno)))
                        if pair in swapped or st.lineno != st.end_lineno or other.lineno != other.end_lineno:
                            continue
                        swapped.add(pair)
                        a2, b2 = src.span(other)
                        add(st.lineno, op, f"{verb}<->{src.seg(other).split('(')[0][-40:]}",
                            [(a, b, src.seg(other)), (a2, b2, src.seg(st))])
                if isinstance(st, ast.With) and len(st.items) == 1:
                    ce = st.items[0].context_expr
                    name = _called(ce)
                    if name in GUARDS:
                        a, b = src.span(ce)
                        add(st.lineno, "guard-drop", name, [(a, b, "_mut_nullcontext()")], null=True)
                        flip = {"first_iter": "last_iter", "last_iter": "first_iter", "when_true": "when_false",
                                "when_false": "when_true"}.get(name)
                        if flip:
                            fa, fb = src.span(ce.func)
                            seg = src.seg(ce.func)
                            add(st.lineno, "guard-flip", f"{name}->{flip}",
                                [(fa, fb, seg[: len(seg) - len(name)] + flip)])
                        if name == "every":
                            args = list(ce.args)
                            kws = {k.arg: k.value for k in ce.keywords}
                            period = args[0] if args else kws.get("period")
                            start = args[1] if len(args) > 1 else kws.get("start")
                            if period is not None:
                                pa, pb = src.span(period)
                                add(st.lineno, "guard-flip", "every-period+1", [(pa, pb, f"({src.seg(period)}) + 1")])
                            if start is not None:
                                sa, sb = src.span(start)
                                add(st.lineno, "guard-flip", "every-start+1", [(sa, sb, f"({src.seg(start)}) + 1")])
                            else:
                                _, cb = src.span(ce)
                                add(st.lineno, "guard-flip", "every-start+1", [(cb - 1, cb - 1, ", start=1")])
                    elif name == "domain_loop":
                        for k, arg in enumerate(ce.args[:3]):
                            a, b = src.span(arg)
                            add(st.lineno, ("loop-start", "loop-end", "loop-step")[k], "+1",
                                [(a, b, f"({src.seg(arg)}) + 1")])
    for node in ast.walk(tree):
        name = _called(node)
        if name and name.startswith("create_") and name.endswith("_pipeline_cfg"):
            kws = {k.arg: k.value for k in node.keywords}
            for key in ("producer_group", "consumer_group"):
                v = kws.get(key)
                if isinstance(v, ast.Call) and v.args:
                    arg = v.args[-1]
                    a, b = src.span(arg)
                    for d in (1, -1):
                        add(v.lineno, f"group{d:+d}", key, [(a, b, f"({src.seg(arg)}) {'+' if d > 0 else '-'} 1")])
            for key in ("num_bytes", "num_bytes_per_warp_per_cta"):
                v = kws.get(key)
                if v is not None and not (isinstance(v, ast.Constant) and v.value is None):
                    a, b = src.span(v)
                    for d in (1, -1):
                        add(v.lineno, f"bytes{d:+d}", key, [(a, b, f"({src.seg(v)}) {'+' if d > 0 else '-'} 1")])
            v = kws.get("num_stages")
            if v is not None:
                a, b = src.span(v)
                for d in (1, -1):
                    add(v.lineno, f"stages{d:+d}", "", [(a, b, f"({src.seg(v)}) {'+' if d > 0 else '-'} 1")])
            v = kws.get("interleave_stride")
            if v is not None and (isinstance(v, ast.Tuple) or isinstance(v, ast.Constant)):
                elts = v.elts if isinstance(v, ast.Tuple) else [v]
                for k, e in enumerate(elts):
                    a, b = src.span(e)
                    add(e.lineno, "stride+1", f"#{k}" if len(elts) > 1 else "", [(a, b, f"({src.seg(e)}) + 1")])
            for key in ("producer_signaling_threads", "consumer_signaling_threads"):
                v = kws.get(key)
                if v is not None:
                    cur = src.seg(v)
                    a, b = src.span(v)
                    for alt in SIGNALS:
                        literal = cur.startswith("SignalingThreads.") and " if " not in cur
                        if literal and alt.replace(" ", "") != cur.replace(" ", ""):
                            new = " | ".join(SIG_MOD + x.split(".")[1] for x in alt.split(" | "))
                            add(v.lineno, "signal", f"{key}={alt.replace('SignalingThreads.', '')}",
                                [(a, b, new)], cfg=(node.lineno, node.end_lineno), key=key, old=cur, new=alt)
                else:
                    _, cb = src.span(node)
                    add(node.lineno, "signal", f"{key}=TaskWarpLeader(added)",
                        [(cb - 1, cb - 1, f", {key}={SIG_MOD}TaskWarpLeader")], cfg=(node.lineno, node.end_lineno),
                        key=key, old="SignalingThreads.All", new="SignalingThreads.TaskWarpLeader")
        if name == "Task":
            kws = {k.arg: k.value for k in node.keywords}
            v = kws.get("num_warps")
            if v is not None:
                a, b = src.span(v)
                for d in (1, -1):
                    add(v.lineno, f"warps{d:+d}", "", [(a, b, f"({src.seg(v)}) {'+' if d > 0 else '-'} 1")])
    del needs_null
    return out


# ---------------------------------------------------------------------- running one program
class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


_counter = itertools.count()


def load_module(path: str, source: str, tmpdir: str):
    """Import ``source`` as a fresh module, written under ``tmpdir`` with the file's own name (so
    findings name the same file and line)."""
    rel = os.path.relpath(os.path.dirname(os.path.join(ROOT, path)), ROOT)
    d = os.path.join(tmpdir, rel)
    os.makedirs(d, exist_ok=True)
    fpath = os.path.join(d, os.path.basename(path))
    with open(fpath, "w") as f:
        f.write(source)
    base = os.path.basename(path)[:-3]
    name = (f"warpsched.examples._mut_{base}_{next(_counter)}" if path.startswith(BUNDLED)
            else f"_mut_{base}_{next(_counter)}")
    spec = importlib.util.spec_from_file_location(name, fpath)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def covered_lines(path: str, mod) -> set:
    """Lines of the module that the target's builders execute (schedule bodies run at capture)."""
    fname = mod.__file__
    lines = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != fname:
            return None

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local
        lines.add(frame.f_lineno)
        return local

    sys.settrace(tracer)
    try:
        verdicts(path, mod, SIDES.setdefault(path, {}))
    finally:
        sys.settrace(None)
    return lines


def _finding_key(f) -> str:
    """'check @ file:line (message)': how a killing finding is recorded."""
    where = f"{os.path.basename(str(f.location.file))}:{f.location.line}" if f.location else "?:?"
    return f"{f.check} @ {where} ({f.message[:90]})"


def verdicts(path: str, mod, record=None) -> Tuple[List[str], List[str], List[str]]:
    """(error findings 'check @ file:line', warning messages, checker verdicts) over the target's builders."""
    import warpsched

    errs, warns, checks = [], [], []
    for k, v in PATCHES.get(path, {}).items():
        setattr(mod, k, v)
    for fn, kw in TARGETS[path]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                m = getattr(mod, fn)(verbose=False, max_states=MAX_STATES, **kw)
            except warpsched.ValidationError as e:
                errs += [_finding_key(f) for f in e.findings]
                continue
            except warpsched.ScheduleError as e:
                f = e.finding
                errs.append(f"{f.check} @ capture:{f.location.line if f.location else '?'} ({f.message[:90]})")
                continue
        warns += [f.message for f in m.result.warnings]
        checks.append(m.result.checker.verdict if m.result.checker else "-")
        if record is not None:
            _record_sides(m.program, record)
    return errs, warns, checks


def traced_verdicts(path: str, mod) -> List[str]:
    """Error findings of the kernel traces of a TRACED file (a compile that fails otherwise is not
    counted: only warpsched's findings kill)."""
    import warpsched

    errs = []
    for kw in TRACED.get(path, []):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                mod.compile_for_cpu(**kw)
            except warpsched.ValidationError as e:
                errs += ["traced " + _finding_key(f) for f in e.findings]
            except Exception:  # noqa: BLE001 - not a finding: the CPU verdict stands
                pass
    return errs


def _record_sides(program, record) -> None:
    from warpsched.model.ir import StepKind

    """For each pipeline config: its call's source line, CTA count and the warp counts of the tasks
    that drive each side (what a signaling-threads mutation can change)."""
    for r in program.pipelined_resources:
        cfg = r.pipeline_config
        line = getattr(getattr(cfg, "location", None), "line", None)
        if line is None:
            continue
        try:
            allocs = bool(r.get_smem_requirements())
        except Exception:  # noqa: BLE001
            allocs = False
        entry = record.setdefault(line, {"ctas": cfg.num_ctas, "producer": set(), "consumer": set(),
                                         "allocs": allocs, "resource": getattr(r, "name", "?")})
        signals = {StepKind.ProducerAcquire: "producer", StepKind.ProducerCommit: "producer",
                   StepKind.ConsumerRelease: "consumer"}  # the verbs that arrive
        for t in program.tasks:
            for st in program.steps_of(t):
                if st.kind in signals and \
                        any(x is r for x in (list(st.resource.members) if st.is_group_op else [st.resource])):
                    entry[signals[st.kind]].add(t.num_warps)


def run(mutant: Mutant, tmpdir: str, baseline_warnings) -> Outcome:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        try:
            mod = load_module(mutant.path, mutant.source, tmpdir)
        except _Timeout:
            raise
        except Exception as e:  # noqa: BLE001 - the mutant does not import: not a program
            return Outcome("stillborn", f"import: {type(e).__name__}: {str(e)[:80]}")
        errs, warns, checks = verdicts(mutant.path, mod)
        if not errs:
            errs = traced_verdicts(mutant.path, mod)
    except _Timeout:
        return Outcome("timeout", f"> {TIMEOUT_S}s")
    except Exception as e:  # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)
        last = tb[-1].filename if tb else ""
        inside = f"{os.sep}warpsched{os.sep}" in last and not last.startswith(tmpdir)
        where = f"{os.path.relpath(tb[-1].filename, ROOT)}:{tb[-1].lineno}" if tb else "?"
        return Outcome("crash" if inside else "stillborn", f"{type(e).__name__}: {str(e)[:80]} at {where}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if errs:
        return Outcome("killed", errs[0], checks)
    new_w = [w for w in warns if w not in baseline_warnings]
    if new_w:
        return Outcome("warned", new_w[0][:120], checks)
    if any(c == "INCOMPLETE" for c in checks):
        return Outcome("survived", "checker INCOMPLETE", checks)
    return Outcome("survived", "", checks)


# ---------------------------------------------------------------------- survivors, classified by hand
# id -> reason. Equivalent: the mutant is still a correct program (or the mutated code is not
# reached by any checked build); the reason says why.
from mutate_classified import CLASSIFIED  # noqa: E402  (the hand classification of the survivors)
from mutate_report import report  # noqa: E402
COVERED: Dict[str, set] = {}  # path -> lines the checked builds execute (filled at start)
SIDES: Dict[str, dict] = {}  # path -> config line -> {"ctas", "producer": {warps}, "consumer": {warps}}


def _config_at(m: Mutant) -> Optional[dict]:
    """The recorded pipeline config whose factory call spans the mutated line."""
    best = None
    for line, e in SIDES.get(m.path, {}).items():
        if line <= m.line and (best is None or line > best[0]):
            best = (line, e)
    return best[1] if best is not None and m.line - best[0] <= 6 else None


def _same_signaling(m: Mutant) -> Optional[str]:
    """A signaling mutation that changes nothing on this program: TaskWarpLeader on single-warp tasks
    (the leader is the only warp), CtaLeader on a single CTA (the CTA leads itself)."""
    meta = m.meta
    lo, hi = meta["cfg"]
    side = "producer" if meta["key"].startswith("producer") else "consumer"
    entry = next((e for line, e in SIDES.get(m.path, {}).items() if lo <= line <= hi), None)
    if entry is None:
        return None
    old = set(x.strip().replace("SignalingThreads.", "") for x in meta["old"].split("|"))
    new = set(x.strip().replace("SignalingThreads.", "") for x in meta["new"].split("|"))
    diff = (old ^ new) - {"All"}
    if "TaskWarpLeader" in diff and not entry[side] <= {1}:
        return None
    if "CtaLeader" in diff and entry["ctas"] != 1:
        return None
    why = []
    if "TaskWarpLeader" in diff:
        why.append(f"every {side} task of this pipeline has one warp, so TaskWarpLeader and All signal the same warp")
    if "CtaLeader" in diff:
        why.append("the pipeline spans one CTA, which leads itself: CtaLeader and All signal the same CTA")
    return "; ".join(why) or None


def classify(m: Mutant, o: Outcome) -> Optional[str]:
    """The reason a survivor is equivalent, or None (unclassified: a checker gap)."""
    if m.key in CLASSIFIED:
        return CLASSIFIED[m.key]
    if m.path in COVERED and m.line not in COVERED[m.path]:
        return "unreached: no checked build of this file executes the mutated line (a twin or variant builder)"
    if m.op == "signal":
        why = _same_signaling(m)
        if why:
            return why
    if not SIDES.get(m.path):
        return ("no pipeline in this program: the change decides which elements are copied (functional), no "
                "barrier, stage or shared byte is involved")
    if m.op.startswith(("bytes", "stages")):
        entry = _config_at(m)
        if entry is not None and not entry["allocs"]:
            what = "copy size" if m.op.startswith("bytes") else "ring depth"
            return (f"consistent: {entry['resource']} declares no SMEM allocation, so this value is the program's only "
                    f"statement of the {what} (the mutant is as consistent as the original; with allocations the "
                    "stage checks decide, see the Hopper mutants)")
    if m.op == "del-verb" and m.detail in ("try_acquire", "try_wait"):
        return ("a try_ probe only lets the blocking call that follows skip its wait; without it the blocking "
                "call waits itself")
    return None


# ---------------------------------------------------------------------- report
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "mutate.txt"))
    ap.add_argument("--only", default=None, help="only targets whose path contains this")
    ap.add_argument("--limit", type=int, default=0, help="at most this many mutants (0: all)")
    args = ap.parse_args(argv)
    t0 = time.time()
    paths = [p for p in TARGETS if args.only is None or args.only in p]
    tmpdir = tempfile.mkdtemp(prefix="warpsched_mutants_")
    base_warn = {}
    for p in paths:
        mod = load_module(p, open(os.path.join(ROOT, p)).read(), tmpdir)
        errs, warns, checks = verdicts(p, mod)
        if errs or any(c != "SAFE" for c in checks):
            print(f"baseline of {p} is not accepted/SAFE: {errs[:2]} {checks}", file=sys.stderr)
            return 2
        base_warn[p] = set(warns)
        COVERED[p] = covered_lines(p, mod)
    mutants = [m for p in paths for m in mutants_of(p)]
    if args.limit:
        mutants = mutants[:args.limit]
    rows = []
    for i, m in enumerate(mutants):
        o = run(m, tmpdir, base_warn[m.path])
        rows.append((m, o))
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(mutants)} mutants, {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    text = report(rows, time.time() - t0, classify)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
