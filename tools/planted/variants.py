"""Building the two variants of a planted case: the edited source, its module, the checker's verdict
(on the CPU) and the lowering patch a lowering-level case needs."""
from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import sys
import tempfile
import warnings
from typing import List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (os.path.join(ROOT, "src"), os.path.join(ROOT, "examples", "hopper"),
          os.path.join(ROOT, "examples", "hopper", "patterns"), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from cases import DELAY_IMPORT, Case  # noqa: E402

BUG, FIXED = "bug", "fixed"
_TMP = None
_count = itertools.count()


class EditError(ValueError):
    pass


def edited_source(base: str, edits: List[Tuple[object, str, str]]) -> str:
    """The base file with single-line edits applied (line count unchanged, plus a trailing import of
    the delay helper when an edit uses it). Every edit is located on the unedited lines first."""
    lines = open(os.path.join(ROOT, base)).read().splitlines(keepends=True)
    where = []
    for scope, old, new in edits:
        if isinstance(scope, int):
            start = scope - 1
        else:
            start = next((i for i, ln in enumerate(lines) if scope in ln), None)
            if start is None:
                raise EditError(f"{base}: no line contains the scope {scope!r}")
        at = next((i for i in range(max(0, start), len(lines)) if old in lines[i]), None)
        if at is None or (isinstance(scope, int) and at != start):
            raise EditError(f"{base}: {old!r} not found {'on line' if isinstance(scope, int) else 'after'} {scope!r}")
        where.append((at, old, new))
    for at, old, new in where:
        lines[at] = lines[at].replace(old, new, 1)
    text = "".join(lines)
    if any("planted_delay" in new for _, _, new in edits):
        text += "\n" + DELAY_IMPORT
    return text


def edits_of(case: Case, which: str):
    return list(case.common) + (list(case.bug) if which == BUG else [])


def load(case_or_base, which: str = FIXED, edits=None):
    """Import the variant as a fresh module (written to a temp dir under the base file's name, so
    findings and tracebacks name the same file and lines)."""
    global _TMP
    if _TMP is None:
        _TMP = tempfile.mkdtemp(prefix="warpsched_planted_")
    if isinstance(case_or_base, Case):
        base, edits = case_or_base.base, edits_of(case_or_base, which)
    else:
        base = case_or_base
    src = edited_source(base, edits or [])
    d = os.path.join(_TMP, f"v{next(_count)}", os.path.dirname(base))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, os.path.basename(base))
    with open(path, "w") as f:
        f.write(src)
    name = f"_planted_{os.path.basename(base)[:-3]}_{which}_{next(_count)}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def for_kernel(mod):
    """Make the module's kernels trace with ``skip_validation=True`` (a planted bug must compile): the
    ``TaskManager`` its ``build`` calls gets that default; the CPU verdicts use the module as is."""
    import warpsched

    if getattr(mod, "_planted_for_kernel", False):
        return mod

    def manager(*args, **kw):
        kw.setdefault("skip_validation", True)
        return warpsched.TaskManager(*args, **kw)

    mod.TaskManager = manager
    mod._planted_for_kernel = True
    return mod


def verdict(case: Case, which: str) -> dict:
    """The checker on the CPU build of one variant: {'verdict', 'check', 'where', 'message'}. ``where``
    is base-file:line (edits keep line numbers)."""
    import warpsched
    from warpsched.verify.checker import run_checker

    mod = load(case, which)
    tmp_dir = os.path.dirname(mod.__file__) + os.sep
    fn, kw = case.cpu_build

    def first(findings):
        f = next((x for x in findings if x.location is not None), findings[0])
        where = "?"
        if f.location is not None:
            name = os.path.basename(str(f.location.file))
            where = f"{case.base}:{f.location.line}" if name == os.path.basename(case.base) else \
                f"{name}:{f.location.line}"
        return f, where, f.message.replace(tmp_dir, os.path.dirname(case.base) + "/")

    out = dict(verdict="ACCEPTED", check="", where="", message="", findings=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            m = getattr(mod, fn)(verbose=False, **kw)
            out["verdict"] = m.result.checker.verdict if m.result.checker else "ACCEPTED"
        except warpsched.ValidationError as e:
            f, where, msg = first(e.findings)
            out = dict(verdict="UNSAFE" if f.check == "exhaustive interleaving" else "REJECTED", check=f.check,
                       where=where, message=msg, findings=len(e.findings))
        # the exhaustive checker alone (the static checks may reject first)
        m = getattr(mod, fn)(verbose=False, skip_validation=True, exhaustive_deadlock_race_check=False, **kw)
    res = run_checker(m.program)
    errs = [f for f in res.findings if f.severity == "error"]
    out["checker"] = res.verdict
    if errs:
        f, where, msg = first(errs)
        out.update(checker_where=where, checker_message=msg)
    return out


@contextlib.contextmanager
def lowering_patch(name: Optional[str]):
    """A lowering change for lowering-level cases; restored on exit."""
    if name is None:
        yield
        return
    from warpsched.lower import pipelines
    from warpsched.model.ir import StepKind

    if name != "no_task_sync":
        raise ValueError(name)
    original = pipelines.PipelineLowering.commit

    def commit_without_task_sync(self, task, warp_idx, state):
        if self.arms_on_acquire:
            return
        self._gate(task, StepKind.ProducerCommit, warp_idx, lambda: self.pipe.producer_commit(state), sync_task=False)

    pipelines.PipelineLowering.commit = commit_without_task_sync
    try:
        yield
    finally:
        pipelines.PipelineLowering.commit = original


def compile_cpu(case: Case, which: str, arch: str = "sm_90a"):
    """Compile one variant for ``arch`` on the CPU (no GPU); returns the PTX text."""
    mod = for_kernel(load(case, which))
    kw = _compile_kwargs(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with lowering_patch(case.lowering_patch if which == BUG else None):
            f = mod.compile_for_cpu(arch=arch, **kw)
    return f.artifacts.PTX


def _compile_kwargs(case: Case) -> dict:
    run_kw = case.runs[0].kwargs if case.runs else {}
    if "mode" in run_kw and case.launcher == "icopy":
        return {"mode": run_kw["mode"]}
    return {}
