"""The house check: the package stays easy to change.

* no module of ``src/warpsched`` over 600 lines;
* no upward import between the layers model -> protocol -> verify / lower -> report -> manager ->
  cli (verify and lower are siblings: neither imports the other), function-level imports included;
* no import cycle between modules (function-level imports included);
* the exhaustive checker and the lowering take every protocol decision from the sync plan
  (``protocol/plan.py``): from ``protocol.barriers`` they import named constants only.

Run: ``python -m pytest tests/test_house.py`` (CI runs it with the suite), or
``python tests/test_house.py`` for the report (module sizes, layer of every module, edges).
"""
from __future__ import annotations

import ast
import os
import sys
from typing import Dict, List, Set, Tuple

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
PKG = "warpsched"
MAX_LINES = 600

# rank of each layer: a module may import modules of its own rank or below, never above
LAYERS = [  # (module-name prefix, layer, rank); the longest matching prefix wins
    ("warpsched.errors", "model", 0),
    ("warpsched.cachedir", "model", 0),  # a leaf (os only): where on-disk caches live
    ("warpsched.model", "model", 0),
    ("warpsched.compat", "model", 0),  # the TS porting surface (pure Python; model objects consult it)
    ("warpsched.compat.dsl", "lower", 2),  # its CuTe DSL side, used by the lowering
    ("warpsched.protocol", "protocol", 1),
    ("warpsched.verify", "verify", 2),
    ("warpsched.lower", "lower", 2),
    ("warpsched.report", "report", 3),
    ("warpsched.manager", "manager", 4),
    ("warpsched.cli", "cli", 5),
    ("warpsched.__main__", "cli", 5),
    ("warpsched", "api", 5),  # the package's public re-exports
    ("warpsched.examples", "cli", 5),  # the bundled examples `warpsched check --example` runs
]
SIBLINGS = {("verify", "lower"), ("lower", "verify")}
# what the checker and the lowering may import from protocol.barriers (named constants only)
BARRIER_CONSTANTS = {"CLC_RESPONSE_BYTES"}
PLAN_READERS = ("warpsched.verify.checker", "warpsched.lower")


def modules() -> Dict[str, str]:
    """Module name -> file path, for every .py under src/warpsched."""
    out = {}
    for dirpath, _dirs, files in os.walk(os.path.join(SRC, PKG)):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = path
    return out


def layer_of(name: str) -> Tuple[str, int]:
    best = None
    for prefix, layer, rank in LAYERS:
        if name == prefix or name.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer, rank)
    assert best is not None, name
    return best[1], best[2]


def imports(mods: Dict[str, str]) -> Dict[str, List[Tuple[str, int, Tuple[str, ...]]]]:
    """Module -> [(imported warpsched module, line, names imported from it)], every import
    statement of the file (top level and inside functions)."""
    out: Dict[str, List[Tuple[str, int, Tuple[str, ...]]]] = {}
    for name, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        package = name if is_pkg else name.rsplit(".", 1)[0]
        edges = []
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == PKG or a.name.startswith(PKG + "."):
                        edges.append((_existing(a.name, mods), node.lineno, ()))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not (target == PKG or target.startswith(PKG + ".")):
                    continue
                names = tuple(a.name for a in node.names)
                subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
                for s in subs:  # `from . import checks_interleave`: the submodule
                    edges.append((s, node.lineno, ()))
                rest = tuple(n for n in names if f"{target}.{n}" not in mods)
                if rest or not subs:
                    edges.append((_existing(target, mods), node.lineno, rest))
        out[name] = [e for e in edges if e[0] != name]
    return out


def _existing(name: str, mods: Dict[str, str]) -> str:
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def oversized(mods: Dict[str, str]) -> List[Tuple[str, int]]:
    return sorted((n, sum(1 for _ in open(p))) for n, p in mods.items() if sum(1 for _ in open(p)) > MAX_LINES)


def upward(graph) -> List[str]:
    bad = []
    for src, edges in graph.items():
        sl, sr = layer_of(src)
        for dst, line, _ in edges:
            dl, dr = layer_of(dst)
            if dr > sr or (sl, dl) in SIBLINGS:
                bad.append(f"{src} ({sl}) imports {dst} ({dl}) at line {line}")
    return bad


def cycles(graph) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _, _ in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def plan_bypasses(graph) -> List[str]:
    bad = []
    for src, edges in graph.items():
        if not src.startswith(PLAN_READERS):
            continue
        for dst, line, names in edges:
            if dst == "warpsched.protocol.barriers" and set(names) - BARRIER_CONSTANTS:
                bad.append(f"{src}:{line} imports {sorted(set(names) - BARRIER_CONSTANTS)} from protocol.barriers "
                           "(take it from the sync plan, protocol/plan.py)")
            elif dst == "warpsched.protocol":
                bad.append(f"{src}:{line} imports the protocol package (import protocol.plan)")
    return bad


# ------------------------------------------------------------------ tests
def test_no_module_over_600_lines():
    assert oversized(modules()) == []


def test_no_upward_or_sideways_imports_between_layers():
    assert upward(imports(modules())) == []


def test_no_import_cycles():
    assert cycles(imports(modules())) == []


def test_checker_and_lowering_read_the_sync_plan():
    assert plan_bypasses(imports(modules())) == []


def test_the_house_check_sees_what_it_forbids():
    """The checks fire on a planted violation (so a green run means something)."""
    graph = {"warpsched.model.memory": [("warpsched.lower.memory", 1, ("smem_pointer",))],
             "warpsched.lower.memory": [("warpsched.model.memory", 1, ())],
             "warpsched.verify.checks_resources": [("warpsched.report.printout", 2, ())],
             "warpsched.lower.loops": [("warpsched.verify.program", 3, ())],
             "warpsched.verify.checker.model": [("warpsched.protocol.barriers", 4, ("barrier_init",))]}
    assert len(upward(graph)) == 3
    assert cycles(graph) == [["warpsched.lower.memory", "warpsched.model.memory"]]
    assert len(plan_bypasses(graph)) == 1
    assert layer_of("warpsched.verify.checker.engine") == ("verify", 2)
    assert layer_of("warpsched.examples.gemm") == ("cli", 5)
    assert layer_of("warpsched.compat") == ("model", 0) and layer_of("warpsched.compat.dsl") == ("lower", 2)


if __name__ == "__main__":
    mods = modules()
    graph = imports(mods)
    for name in sorted(mods):
        n = sum(1 for _ in open(mods[name]))
        print(f"{n:5d}  {layer_of(name)[0]:9s} {name}")
    print(f"\n{len(mods)} modules, {sum(len(e) for e in graph.values())} import edges")
    problems = ([f"over {MAX_LINES} lines: {n} ({k})" for n, k in oversized(mods)] + upward(graph) +
                [f"cycle: {' -> '.join(c)}" for c in cycles(graph)] + plan_bypasses(graph))
    print("\n".join(problems) if problems else "house check: clean")
    sys.exit(1 if problems else 0)
