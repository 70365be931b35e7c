"""Lowering fuzzer: random programs that warpsched proves SAFE must compile, or be refused cleanly.

The verifier fuzzers (``diff_fuzz.py``, ``fuzz_model.py``) stop at the verdict. This one goes on:
each generated program (``diff_fuzz_programs.generate``: 2-4 tasks, 1-3 pipelines of the four
types, runtime ``when_true`` guards, ``every`` / first / last-iteration blocks, loops in every
direction and stride, one random mutation) that warpsched accepts outside a kernel is built again
inside a ``@cute.kernel``, lowered and compiled on the CPU with fake tensors, for sm_90a
(programs without UMMA pipelines) or sm_100a (all).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python tools/lower_fuzz.py --n 100 --seed 1 [--arch sm_90a] [--show 5]

With ``--stateful`` (the default) the work bodies keep state the way TS programs do, so the
lowering's runtime regions must carry it (``lower/region_state.py``): every stage buffer counts
its fills and reads in a field declared ``cutlass.Int32`` that starts as a Python ``0`` (the reads also in
a dataclass the buffer holds), and every output keeps a ``cutlass.Boolean`` set by its first store. ``--plain`` keeps the bodies empty.

Outcomes: ``compiled``; ``refused`` (a warpsched ``ValidationError`` / ``LoweringError`` anywhere
in the exception chain: a clean rejection that names the fix, e.g. a TMA pipeline whose empty fill
work issues no copy for its ``num_bytes``); ``crash`` (anything else: an internal error or invalid
IR, what this tool looks for); ``timeout``. Exit status 1 when any program crashed.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import dataclasses
import functools
import io
import os
import random
import re
import signal
import sys
import time
import traceback
import warnings
from typing import Any, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import diff_fuzz as D  # noqa: E402
from diff_fuzz_programs import Prog, generate  # noqa: E402

UMMA = ("TmaUmma", "UmmaAsync")


@functools.lru_cache(maxsize=None)
def stateful_lib(undeclared: bool = False) -> D.Lib:
    """warpsched's names, with resource classes whose works keep state across the program's regions;
    ``undeclared``: the count is a plain ``int`` field, a mistake every region that changes it must refuse."""
    import cutlass

    base = D.warpsched_lib()
    lib = D.Lib()
    lib.__dict__.update(base.__dict__)
    lib.name = "warpsched (stateful works)"
    MR, cw, pw = lib.MemoryResource, lib.consumer_work, lib.producer_work

    @dataclasses.dataclass
    class Reads:  # a user's dataclass in a resource field: carried like the resource's own fields
        total: cutlass.Int32 = 0

    class Buf(MR):
        count = 0  # a Python 0 until a region carries it as the declared type (annotated below)
        reads = dataclasses.field(default_factory=Reads)

        @pw
        def fill(self, stage_info):
            self.count = self.count + 1

        @cw
        def read(self, stage_info):
            step = stage_info.loop_offset  # None outside a domain_loop
            self.count = self.count + (1 if step is None else step)
            self.reads.total = self.reads.total + 1

    Buf.__annotations__ = {"count": int if undeclared else cutlass.Int32, "reads": Any}
    Buf = dataclasses.dataclass(kw_only=True, eq=False)(Buf)

    @dataclasses.dataclass(kw_only=True, eq=False)
    class GmemIn(MR):
        @cw
        def load(self, stage_info):
            pass

    @dataclasses.dataclass(kw_only=True, eq=False)
    class GmemOut(MR):
        stored: Any = None

        @pw
        def store(self, stage_info):
            self.stored = cutlass.Boolean(True) if self.stored is None else self.stored | True

    lib.Buf, lib.GmemIn, lib.GmemOut = Buf, GmemIn, GmemOut
    return lib


def needs_blackwell(prog: Prog) -> bool:
    return any(p.ptype in UMMA for p in prog.pipes)


def _clean_in_chain(exc: BaseException) -> Optional[BaseException]:
    """The warpsched rejection (ValidationError / LoweringError) this exception carries, if any."""
    from warpsched import ValidationError
    from warpsched.lower import LoweringError

    seen = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (ValidationError, LoweringError)):
            return e
        e = e.__cause__ or e.__context__
    return None


def _where(exc: BaseException) -> str:
    """The innermost frame in warpsched (else the innermost at all) of the exception chain's first error."""
    tb = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in tb if os.sep + "warpsched" + os.sep in f.filename]
    f = (ours or tb or [None])[-1]
    if f is None:
        return "?"
    return f"{os.path.relpath(f.filename, ROOT) if f.filename.startswith(ROOT) else os.path.basename(f.filename)}" \
           f":{f.lineno} in {f.name}"


def _signature(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "X", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return " ".join(text.split())[:90]


def compile_program(prog: Prog, arch: str, stateful: bool = True, undeclared: bool = False) -> None:
    """Build ``prog`` inside a kernel, lower it and compile it for ``arch`` (raises what the compile raises)."""
    import _common
    import cutlass.cute as cute

    lib = stateful_lib(undeclared) if stateful else D.warpsched_lib()
    warps = max(t.warp_idx + t.num_warps for t in prog.tasks)

    @cute.kernel
    def kern():
        tasks, graph = D.instantiate(lib, copy.deepcopy(prog))
        mgr = lib.TaskManager(tasks=tasks, resource_dependency_graph=graph, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host():
        kern().launch(grid=[1, 1, 1], block=[32 * warps, 1, 1])

    compiled = cute.compile(host, options=_common.ptx_options(arch))
    if "mbarrier" not in compiled.artifacts.PTX and prog.pipes:
        raise AssertionError("the compiled kernel has no mbarrier instruction, though the program has pipelines")


def run_one(prog: Prog, arch: str, timeout: float, stateful: bool = True,
            undeclared: bool = False) -> Tuple[str, str, str]:
    """(outcome, bucket signature, detail) for one accepted program."""
    old = signal.signal(signal.SIGALRM, D._alarm)  # the verdict fuzzer's per-program limit
    signal.setitimer(signal.ITIMER_REAL, timeout)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checker's warnings were seen when the verdict was taken
            compile_program(prog, arch, stateful, undeclared)
        return "compiled", "", ""
    except D.Timeout:
        return "timeout", "", ""
    except Exception as e:  # noqa: BLE001 - sorted below: a clean rejection or an internal error
        clean = _clean_in_chain(e)
        if clean is not None:
            first = str(clean).strip().splitlines()
            text = " ".join(first[1:3] if first and first[0].startswith("warpsched rejected") else first[:1])
            return "refused", _signature(text), str(clean)
        return "crash", f"{type(e).__name__} at {_where(e)}", f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def fuzz(n: int, seed: int, arch: str, timeout: float, show: int, stateful: bool = True,
         log=print, undeclared: bool = False) -> collections.Counter:
    rng = random.Random(seed)
    ws = D.warpsched_lib()
    counts: collections.Counter = collections.Counter()
    buckets: dict = collections.defaultdict(list)
    t0 = time.time()
    for i in range(n):
        prog = generate(rng)
        if arch == "sm_90a" and needs_blackwell(prog):
            counts["skipped (UMMA on sm_90a)"] += 1
            continue
        verdict = D.run_side(ws, prog, timeout)
        if verdict.kind != "accept":
            counts[f"not accepted ({verdict.kind})"] += 1
            continue
        outcome, sig, detail = run_one(prog, arch, timeout, stateful, undeclared)
        counts[outcome] += 1
        if outcome in ("refused", "crash"):
            buckets[(outcome, sig)].append((i, prog, detail))
        if (i + 1) % 20 == 0:
            log(f"  {i + 1}/{n} programs, {time.time() - t0:.0f} s: {dict(counts)}", file=sys.stderr)
    kind = "plain" if not stateful else "stateful (undeclared count)" if undeclared else "stateful"
    log(f"lower_fuzz seed={seed} n={n} arch={arch} {kind} works: {dict(counts)} "
        f"in {time.time() - t0:.0f} s")
    for (outcome, sig), items in sorted(buckets.items(), key=lambda kv: (kv[0][0] != "crash", -len(kv[1]))):
        log(f"\n[{outcome}] x{len(items)}: {sig}")
        for i, prog, detail in items[:show]:
            log(f"  program {i}:\n    " + prog.describe().replace("\n", "\n    "))
            log("    -> " + detail.strip().replace("\n", "\n       ")[:1500])
    return counts


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100, help="programs to generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", choices=("sm_90a", "sm_100a"), default=os.environ.get("CUTE_DSL_ARCH", "sm_90a"),
                    help="compile target; sm_90a skips programs with UMMA pipelines")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per check / compile")
    ap.add_argument("--show", type=int, default=3, help="programs printed per bucket")
    ap.add_argument("--plain", action="store_true", help="empty work bodies (no state for regions to carry)")
    ap.add_argument("--undeclared", action="store_true",
                    help="the stage buffers' count is a plain int: programs whose regions change it must be refused "
                         "cleanly (LoweringError), never crash")
    args = ap.parse_args(argv)
    os.environ["CUTE_DSL_ARCH"] = args.arch
    counts = fuzz(args.n, args.seed, args.arch, args.timeout, args.show, not args.plain,
                  log=lambda *a, **k: print(*a, **k, flush=True), undeclared=args.undeclared)
    return 1 if counts["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
