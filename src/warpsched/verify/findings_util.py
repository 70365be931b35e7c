"""Small helpers shared by the static check families.

The check families must never crash on a malformed program: every accessor here
tolerates garbage (a config that is not a PipelineConfig, a group that is None...). A
PipelineConfig's own fields are validated when its factory builds it
(model/pipeline_fields.py); a resource whose ``pipeline_config`` is something else is reported
once, by ``checks_pipelines``, and the other families skip it (``valid_config``).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..errors import Finding
from ..model.ir import Section, Step, StepKind
from ..model.pipeline_config import PipelineConfig
from ..model.pipeline_fields import is_int, is_pos_int  # noqa: F401 (the check families' int tests)
from ..model.pipeline_group import PipelineGroup
from ..model.resources import MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, WorkQueue, work_spec_of
from ..model.task import Task
from .program import Program, name_of, step_targets

SECTION_ORDER = {Section.PROLOGUE: 0, Section.HEAD: 1, Section.LOOP: 2, Section.TAIL: 3, Section.EPILOGUE: 4}

OPEN_KINDS = {StepKind.ProducerAcquire, StepKind.ConsumerWait}
CLOSE_KINDS = {StepKind.ProducerCommit, StepKind.ConsumerRelease}
TRY_KINDS = {StepKind.ProducerTryAcquire, StepKind.ConsumerTryWait}


def rname(resource: Any) -> str:
    try:
        return name_of(resource)
    except Exception:  # noqa: BLE001 - a garbage object still needs a printable name
        return type(resource).__name__


def tname(task: Any) -> str:
    name = getattr(task, "name", None)
    return name if isinstance(name, str) else type(task).__name__


def is_resource(x: Any) -> bool:
    return isinstance(x, MemoryResource)


def config_of(resource: Any) -> Any:
    """The raw ``pipeline_config`` attribute (may be garbage), None when absent."""
    try:
        return getattr(resource, "pipeline_config", None)
    except Exception:  # noqa: BLE001
        return None


def strides_of(cfg: Any) -> Optional[Tuple[int, int, int, int]]:
    """The 4 role strides of a PipelineConfig (parsed when it was built), None for anything else."""
    return cfg.strides if isinstance(cfg, PipelineConfig) else None


def valid_config(cfg: Any) -> bool:
    """True for a PipelineConfig: its factory refused malformed fields (model/pipeline_fields.py)."""
    return isinstance(cfg, PipelineConfig)


def good_config(resource: Any) -> Optional[PipelineConfig]:
    cfg = config_of(resource)
    return cfg if valid_config(cfg) else None


def task_ok(task: Any) -> bool:
    return (isinstance(task, Task) and is_int(task.warp_idx) and task.warp_idx >= 0
            and is_pos_int(task.num_warps))


def steps(program: Program, task: Any) -> Tuple[Step, ...]:
    try:
        return program.steps_of(task)
    except Exception:  # noqa: BLE001 - a task without a usable schedule has no steps
        return ()


def declared(task: Any, attr: str) -> List[Any]:
    lst = getattr(task, attr, None)
    return list(lst) if isinstance(lst, (list, tuple)) else []


def in_list(resource: Any, lst: Iterable[Any]) -> bool:
    return any(r is resource for r in lst)


def targets(step: Step) -> List[Any]:
    try:
        return step_targets(step)
    except Exception:  # noqa: BLE001
        return [step.resource]


def member_steps(program: Program, task: Any, resource: Any) -> List[Tuple[Step, str]]:
    """(step, role) for every step of ``task`` that touches ``resource``; role is the kind's side."""
    out = []
    for s in steps(program, task):
        if any(t is resource for t in targets(s)):
            out.append((s, s.kind.side))
    return out


def tasks_with(program: Program, resource: Any, kinds: Iterable[StepKind]) -> List[Any]:
    kinds = set(kinds)
    out = []
    for t in program.tasks:
        if any(s.kind in kinds and any(x is resource for x in targets(s)) for s in steps(program, t)):
            out.append(t)
    return out


def is_pdl(resource: Any) -> bool:
    return isinstance(resource, (PdlWaitBarrier, PdlLaunchBarrier))


def is_queue(resource: Any) -> bool:
    return isinstance(resource, WorkQueue)


def self_edge(program: Program, resource: Any) -> bool:
    return any(u is resource for u in graph_upstream(program, resource))


def graph_items(program: Program) -> List[Tuple[Any, List[Any]]]:
    """(downstream, [upstream...]) pairs, tolerating values that are not lists."""
    graph = program.graph if isinstance(program.graph, dict) else {}
    out = []
    for k, v in graph.items():
        out.append((k, as_list(v)))
    return out


def as_list(v: Any) -> List[Any]:
    if v is None:
        return []
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    return [v]


def graph_upstream(program: Program, resource: Any) -> List[Any]:
    for k, vs in graph_items(program):
        if k is resource:
            return vs
    return []


def transitive_upstream(program: Program, resource: Any) -> List[Any]:
    out: Dict[int, Any] = {}
    stack = list(graph_upstream(program, resource))
    while stack:
        r = stack.pop()
        if id(r) in out:
            continue
        out[id(r)] = r
        stack.extend(graph_upstream(program, r))
    return list(out.values())


def groups(program: Program) -> List[PipelineGroup]:
    try:
        return program.pipeline_groups
    except Exception:  # noqa: BLE001
        return []


def first_step_on(program: Program, task: Any, resource: Any) -> Optional[Step]:
    for s in steps(program, task):
        if any(t is resource for t in targets(s)):
            return s
    return None


def location_for(program: Program, resource: Any):
    """Where to point for a resource-level problem: its config, else its first use."""
    cfg = config_of(resource)
    loc = getattr(cfg, "location", None)
    if loc is not None and getattr(loc, "line", 0):
        return loc
    for t in program.tasks:
        s = first_step_on(program, t, resource)
        if s is not None:
            return s.location
    for t in program.tasks:
        if in_list(resource, declared(t, "src_resources") + declared(t, "dst_resources")):
            return getattr(t, "location", None)
    return None


def F(check: str, message: str, *, task: Any = None, resource: Any = None, location=None, expected=None,
      fix=None, severity: str = "error", detail=None) -> Finding:
    """Build a Finding from objects (names are derived here)."""
    tn = task if isinstance(task, str) or task is None else tname(task)
    rn = resource if isinstance(resource, str) or resource is None else rname(resource)
    return Finding(check=check, message=message, task=tn, resource=rn, location=location, expected=expected,
                   fix=fix, severity=severity, detail=detail)


def dedupe(findings: Iterable[Finding]) -> List[Finding]:
    seen = set()
    out = []
    for f in findings:
        key = (f.check, f.message, f.task, f.resource, f.location)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out


_STAGE_READS: Dict = {}


def reads_stage(resource, method: str, attrs=("stage_idx", "barrier")) -> bool:
    """Does the body of ``resource.method`` read ``stage_info.<attr>`` (its stage index or barrier)?
    Read from the source; a body without source counts as not reading it."""
    key = (type(resource), method, attrs)
    if key not in _STAGE_READS:
        _STAGE_READS[key] = _body_reads_stage(getattr(type(resource), method, None), attrs)
    return _STAGE_READS[key]


def _body_reads_stage(fn, attrs) -> bool:
    spec = work_spec_of(fn)
    try:
        src = textwrap.dedent(inspect.getsource(inspect.unwrap(spec.fn if spec is not None else fn)))
        tree = ast.parse(src)
    except Exception:  # noqa: BLE001 - no source (built-in, generated): treated as not stage-indexed
        return False
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not funcs or len(funcs[0].args.args) < 2:
        return False
    info = funcs[0].args.args[1].arg
    return any(isinstance(n, ast.Attribute) and n.attr in attrs and isinstance(n.value, ast.Name)
               and n.value.id == info for n in ast.walk(funcs[0]))


def ignores_stage(resource, method: str) -> bool:
    """Does ``resource.method`` certainly not depend on its stage index? True only when its source
    is read and it neither reads ``stage_info.stage_idx`` nor hands ``stage_info`` itself to another
    call (a helper that may index by it); no source: not known, False."""
    key = (type(resource), method, "ignores")
    if key not in _STAGE_READS:
        _STAGE_READS[key] = _body_ignores_stage(getattr(type(resource), method, None))
    return _STAGE_READS[key]


def _body_ignores_stage(fn) -> bool:
    spec = work_spec_of(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(spec.fn if spec is not None else fn))))
    except Exception:  # noqa: BLE001 - no source: unknown
        return False
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not funcs or len(funcs[0].args.args) < 2:
        return False
    info = funcs[0].args.args[1].arg
    attributed = {id(n.value) for n in ast.walk(funcs[0]) if isinstance(n, ast.Attribute)}
    for n in ast.walk(funcs[0]):
        if isinstance(n, ast.Name) and n.id == info and id(n) not in attributed:
            return False  # stage_info passed on whole
        if isinstance(n, ast.Attribute) and n.attr == "stage_idx" and isinstance(n.value, ast.Name) \
                and n.value.id == info:
            return False
    return True


def is_stub(resource, method: str) -> bool:
    """Is ``resource.method`` a placeholder body (a docstring, ``pass``, ``...`` or a constant
    return), as pure-Python models have before the kernel's work is written? No source: False."""
    key = (type(resource), method, "stub")
    if key not in _STAGE_READS:
        fn = getattr(type(resource), method, None)
        spec = work_spec_of(fn)
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(spec.fn if spec is not None else fn))))
            body = tree.body[0].body
        except Exception:  # noqa: BLE001
            body = None
        _STAGE_READS[key] = body is not None and all(
            isinstance(n, ast.Pass) or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) or
            (isinstance(n, ast.Return) and (n.value is None or isinstance(n.value, ast.Constant))) for n in body)
    return _STAGE_READS[key]


def returns_stage(resource, method: str) -> bool:
    """Does ``resource.method`` return its ``stage_info.stage_idx`` itself (a stage reference, as a
    descriptor or a ``stage()`` helper does), rather than a value read from the stage?"""
    key = (type(resource), method, "returns")
    if key not in _STAGE_READS:
        _STAGE_READS[key] = _body_returns_stage(getattr(type(resource), method, None))
    return _STAGE_READS[key]


def _body_returns_stage(fn) -> bool:
    spec = work_spec_of(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(spec.fn if spec is not None else fn))))
    except Exception:  # noqa: BLE001
        return False
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not funcs or len(funcs[0].args.args) < 2:
        return False
    info = funcs[0].args.args[1].arg

    def is_stage(v):
        return isinstance(v, ast.Attribute) and v.attr == "stage_idx" and isinstance(v.value, ast.Name) and \
            v.value.id == info

    for n in ast.walk(funcs[0]):
        if isinstance(n, ast.Return) and n.value is not None:
            vals = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
            if any(is_stage(v) for v in vals):
                return True
    return False
