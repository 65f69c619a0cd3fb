"""The import contract: imports run one way, from the entry points down to the bottom modules.

Every ``import`` in testbed/, controller/, pfc/, traffic/, fabrics/ and common/ counts, at module level and inside
functions alike (a function-level import is still a dependency, only a later one). The layers
and the rules are data below; a new module must be placed in a layer on purpose. Its sibling
``test_one_definition.py`` forbids a second definition of a range or default outside its owner.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "controller", "traffic", "pfc", "fabrics", "common")

# A unit is a package whose modules move together (longest prefix wins); a module directly
# under testbed/ is a unit of its own. The datapath plan (fabrics.datapath) is a unit apart from the fabric
# models: the pause daemon's policy needs it, and it names the emulator's devices.
PACKAGE_UNITS = ("testbed.cli", "testbed.experiment", "testbed.repetition", "testbed.backends", "testbed.emulation",
                 "testbed.bench", "testbed.report", "pfc", "controller", "traffic.model", "traffic.runtime", "traffic",
                 "fabrics", "fabrics.datapath", "common")

# Top to bottom: the folder list. A unit may import units of lower layers, and of its own layer
# without a cycle.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("entry points", ("testbed", "testbed.__main__", "testbed.cli", "testbed.mininet_topos")),
    ("experiments and benchmarks", ("testbed.experiment", "testbed.bench")),
    ("repetitions", ("testbed.repetition",)),
    ("network backends", ("testbed.backends",)),
    ("fabric lifecycle", ("testbed.emulation",)),
    ("controller and report", ("controller", "testbed.report")),
    ("pfc", ("pfc",)),
    ("datapath plan", ("fabrics.datapath",)),
    ("traffic runtime", ("traffic.runtime",)),
    ("models", ("fabrics", "traffic.model", "traffic")),
    ("bottom", ("common",)),
)
BOTTOM = dict(LAYERS)["bottom"]
ENTRY_POINTS = dict(LAYERS)["entry points"]

# Besides the layers: importer prefix -> prefixes it must not import, and why.
FORBIDDEN: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("traffic", ("testbed", "controller", "pfc", "fabrics.datapath"),
     "traffic is the pure model and the in-namespace runtime: of the project only the models and the bottom"),
    ("traffic.model", ("traffic.runtime",), "the model is clock- and network-free: it runs nothing"),
    ("controller", ("testbed",), "the controller runs as its own process on the models, the PFC policy and the "
                                 "bottom modules: it imports nothing of the testbed (and the testbed nothing of it)"),
    ("testbed", ("controller",), "the testbed starts the controller as a process (python -m controller) and talks "
                                 "OpenFlow and files with it: it imports nothing of it"),
    ("testbed.report", ("testbed.emulation", "testbed.bench", "testbed.backends", "testbed.repetition", "controller"),
     "the report reads saved files only and touches no fabric"),
    ("testbed", ("testbed.cli",), "library code never imports the command line"),
)

def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()
# folders of modules without an __init__.py (namespace packages) are importable names too
FOLDERS = {".".join(p.parent.relative_to(ROOT).parts) for p in MODULES.values()}


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import statement in the file."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:  # "from pkg import module" names the module, else the package
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else base), node.lineno


def _graph() -> dict[str, dict[str, int]]:
    """module -> {project module it imports: first line}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in MODULES.items():
        for target, line in _imports(name, path):
            if target.split(".")[0] in PACKAGES and target != name:
                graph.setdefault(name, {}).setdefault(target, line)
    return graph


GRAPH = _graph()


def _unit(module: str) -> str:
    for unit in sorted(PACKAGE_UNITS, key=len, reverse=True):
        if module == unit or module.startswith(unit + "."):
            return unit
    return module


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _where(module: str, target: str) -> str:
    return f"{MODULES[module].relative_to(ROOT)}:{GRAPH[module][target]}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def _unit_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = _unit(module), _unit(target)
            if a != b:
                edges.setdefault((a, b), []).append(f"{_where(module, target)} imports {target}")
    return edges


def test_every_project_import_names_an_existing_module():
    stale = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}"
             for m, p in MODULES.items() for t, line in _imports(m, p)
             if t.split(".")[0] in PACKAGES and t not in MODULES and t not in FOLDERS]
    assert not stale, "imports of modules that do not exist (moved?):\n" + "\n".join(stale)


def test_every_unit_is_in_exactly_one_layer():
    declared = [u for _, units in LAYERS for u in units]
    assert len(declared) == len(set(declared)), "a unit is in two layers"
    missing = sorted({_unit(m) for m in MODULES} - set(declared))
    assert not missing, f"place these in a layer of {Path(__file__).name}: {missing}"
    gone = [u for u in declared if u not in MODULES and u not in FOLDERS]
    assert not gone, f"layers name units that no longer exist: {gone}"


def test_no_module_import_cycle():
    cycles = _cycles({m: set(t) for m, t in GRAPH.items()})
    detail = [" <-> ".join(c) + ": " + "; ".join(f"{_where(a, b)} imports {b}" for a in c for b in c
                                                  if b in GRAPH.get(a, {})) for c in cycles]
    assert not cycles, "module import cycles:\n" + "\n".join(detail)


def test_no_package_cycle():
    edges = _unit_edges()
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    cycles = _cycles(graph)
    detail = [" <-> ".join(c) + ":\n  " + "\n  ".join(w for a in c for b in c for w in edges.get((a, b), []))
              for c in cycles]
    assert not cycles, "package cycles:\n" + "\n".join(detail)


def test_imports_run_down_the_layers():
    level = {u: i for i, (_, units) in enumerate(LAYERS) for u in units}
    upward = [f"{w} ({a} is below {b})" for (a, b), where in sorted(_unit_edges().items())
              if a in level and b in level and level[b] < level[a] for w in where]
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


@pytest.mark.parametrize("importer,banned,why", FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_forbidden_imports(importer, banned, why):
    bad = [f"{_where(m, t)} imports {t}" for m, targets in GRAPH.items() if _under(m, importer)
           and not any(_under(m, b) for b in banned)  # a package's own modules may import each other
           and (m not in ENTRY_POINTS or any(_under(b, "controller") for b in banned))
           for t in targets if any(_under(t, b) for b in banned)]
    assert not bad, f"{why}:\n" + "\n".join(bad)


def test_the_contract_sees_function_level_imports():
    """The pause daemon enters namespaces through an import inside a function: it must be seen."""
    assert "traffic.runtime.netns" in GRAPH["pfc.pfcd"]
