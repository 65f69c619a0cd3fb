"""List the product modules that no test imports, and the public functions no test reaches.

    python scripts/untested_modules.py [-v]

A module counts as tested when some file under tests/ imports it: ``import a.b.c``,
``from a.b import c`` or ``from a.b.c import x`` (at any depth of the file, functions included), or
runs it: ``"-m", "a.b"`` in a command line (``a.b.__main__`` for a package). A package whose
``__init__`` holds nothing but its docstring decides nothing and is not listed.

A public function (a top-level ``def`` whose name does not start with ``_``, and a public method of a
public class) counts as tested when a test names it, or when code of its own package that counts names it
(``reached_functions``): statically, by name, never by running anything. Exit status 1 when a module
or a function is left (``UNREACHED`` lists the functions no unit test can reach, each with why and what runs
it instead); ``-v`` also lists the functions reached only through other product code.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("testbed", "controller", "traffic", "pfc", "fabrics", "common")

_ROOT_FABRIC = "needs root and an emulated fabric"
_BACKEND_SEAM = ("called through the Backend seam by the live driver (testbed.repetition.drivers.live), another "
                 "package")
# Public functions no unit test reaches by the rules above (the module docstring), each with why and what runs
# it instead; tests/unit/test_every_module_is_tested.py fails on an entry that is reached or gone.
UNREACHED: dict[str, str] = {
    # BPF objects, pinned maps and bpffs: clang, the BPF filesystem and root
    "pfc.queue_watch.compile_object": f"clang and bpffs, {_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "pfc.queue_watch.compile_bpf": f"clang and bpffs, {_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "pfc.queue_watch.ensure_bpffs": f"mounts bpffs, {_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "pfc.queue_watch.remove_pins": f"pinned maps in bpffs, {_ROOT_FABRIC}: tests/integration/test_lifecycle.py",
    # the backends' serving entry: the live driver calls it, from testbed.repetition
    "testbed.backends.base.Backend.serve": "abstract: each backend's own is listed here",
    "testbed.backends.ideal.IdealBackend.serve": f"{_BACKEND_SEAM}; tests/unit/backends/test_ideal.py runs it",
    "testbed.backends.ns3.backend.Ns3Backend.serve": f"{_BACKEND_SEAM}; tests/unit/backends/ns3/test_run.py runs it",
    "testbed.backends.ns3.apps.serve": "Ns3Backend.serve's simulation; tests/unit/backends/ns3/test_run.py runs it",
    "testbed.backends.emulated.backend.EmulatedBackend.serve": f"{_ROOT_FABRIC}: tests/integration/test_live.py",
    "testbed.backends.emulated.multihost.MultiHostBackend.serve": "SSH hosts and root: "
                                                                  "tests/integration/test_multihost.py",
    "testbed.backends.emulated.serving.run_serving": f"{_ROOT_FABRIC}: tests/integration/test_live.py",
    "testbed.backends.emulated.serving.run_hosted": f"{_ROOT_FABRIC}: tests/integration/test_emulation_speed.py",
    # a fabric held across repetitions: the live driver renews it after an environment failure
    "testbed.backends.base.Held.renew": f"{_BACKEND_SEAM}: nothing held, nothing to renew",
    "testbed.backends.emulated.backend.HeldFabric.renew": f"{_ROOT_FABRIC}: tests/integration/test_emulation_speed.py",
    "traffic.runtime.launcher.die_with_parent": "the coordinator's Popen preexec_fn "
                                                "(testbed.backends.emulated.serving), root: "
                                                "tests/integration/test_live.py",
    # benchmarks: their pure parts have unit tests (tests/unit/bench/), these bring a fabric up
    "testbed.bench.exchange.bench": f"{_ROOT_FABRIC}: tests/integration/test_bench_serving.py",
    "testbed.bench.lateness.run_bench": f"{_ROOT_FABRIC}: tests/integration/test_bench_serving.py",
    "testbed.bench.pfc.bench": f"{_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "testbed.bench.control_path.run_bench": f"{_ROOT_FABRIC}: tests/integration/test_emulation_speed.py",
    "testbed.bench.control_path.run_path": f"{_ROOT_FABRIC}: tests/integration/test_emulation_speed.py",
    "testbed.bench.control_path.pulse_config": f"run_path's serving config, {_ROOT_FABRIC}: "
                                               "tests/integration/test_emulation_speed.py",
    "testbed.bench.datapath.run_bench": f"{_ROOT_FABRIC}: tests/integration/test_emulation_speed.py",
    "testbed.bench.datapath.emulated_hop": f"{_ROOT_FABRIC}: tests/integration/test_emulation_speed.py",
    "testbed.bench.datapath.kernel_hop": "veth and a bridge, root: tests/integration/test_emulation_speed.py",
    "testbed.bench.datapath.remove_kernel_hop": "veth and a bridge, root: tests/integration/test_emulation_speed.py",
    "testbed.bench.datapath.blast": "iperf3 in namespaces, root: tests/integration/test_emulation_speed.py",
    "testbed.bench.pfc.phase": f"{_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "testbed.bench.pfc.run_incast": f"{_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "testbed.bench.pfc.spreading": f"{_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "testbed.bench.pfc.start_flows": f"iperf3 in the namespaces, {_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "testbed.bench.pfc.collect": f"iperf3 in the namespaces, {_ROOT_FABRIC}: tests/integration/test_pfc.py",
    "testbed.bench.pfc.save_logs": f"{_ROOT_FABRIC}: tests/integration/test_pfc.py",
    # Mininet's CLI over a running fabric
    "testbed.emulation.attach.attached": f"Mininet, {_ROOT_FABRIC}: tests/integration/test_mininet.py",
    "testbed.emulation.attach.run_cli": f"Mininet, {_ROOT_FABRIC}: tests/integration/test_mininet.py",
    "testbed.emulation.attach.drive": f"Mininet, {_ROOT_FABRIC}: tests/integration/test_mininet.py",
    "testbed.emulation.attach.AttachedOVSSwitch.batchStartup": "called by Mininet: tests/integration/test_mininet.py",
    "testbed.emulation.attach.AttachedOVSSwitch.batchShutdown": "called by Mininet: "
                                                                "tests/integration/test_mininet.py",
    "testbed.emulation.attach.AttachedOVSSwitch.dpctl": "called by Mininet: tests/integration/test_mininet.py",
    # several machines over SSH
    "testbed.emulation.hosts.cluster.up": "SSH hosts and root: tests/integration/test_multihost.py",
    "testbed.emulation.hosts.cluster.down": "SSH hosts and root: tests/integration/test_multihost.py",
    "testbed.emulation.hosts.cluster.clean": "SSH hosts and root: tests/integration/test_pseudo_hosts.py",
    "testbed.emulation.hosts.cluster.Cluster.upload": "SSH hosts: tests/integration/test_multihost.py",
    "testbed.emulation.hosts.cluster.Cluster.check_alive": "SSH hosts: tests/integration/test_multihost.py",
    # called by asyncio's event loop (a BufferedProtocol)
    "traffic.runtime.receiver.Receiver.get_buffer": "asyncio calls it: tests/unit/traffic/runtime/test_receiver.py",
    "traffic.runtime.receiver.Receiver.eof_received": "asyncio calls it: "
                                                      "tests/unit/traffic/runtime/test_receiver.py",
}


def product_modules() -> set[str]:
    mods = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__main__":
                parts[-1] = "__main__"
            elif parts[-1] == "__init__":
                parts.pop()
            mods.add(".".join(parts))
    return mods


def module_path(module: str) -> Path:
    path = ROOT / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def empty(module: str) -> bool:
    """A module with nothing in it but a docstring."""
    body = ast.parse(module_path(module).read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def _test_files() -> list[Path]:
    return sorted((ROOT / "tests").rglob("*.py"))


def imported_by_tests(mods: set[str]) -> set[str]:
    seen = set()
    for path in _test_files():
        text = path.read_text()
        for run in re.findall(r'"-m",\s*"([\w.]+)"', text):
            seen.update({run, f"{run}.__main__"})
        seen |= _imports(ast.parse(text, str(path)))
    return {m for m in mods if m in seen}


# ------------------------------------------------------------------ functions
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Definition:
    """A function, a class or a method of a product module (``qualname``: ``f``, ``C`` or ``C.f``)."""

    module: str
    qualname: str
    node: ast.AST

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def method(self) -> bool:
        return "." in self.qualname

    @property
    def public(self) -> bool:
        return not any(part.startswith("_") for part in self.qualname.split(".")) and not isinstance(
            self.node, ast.ClassDef)


def _imports(tree: ast.AST) -> set[str]:
    """Every module (and ``module.name``) a file imports, absolute imports only."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _names(node: ast.AST) -> set[str]:
    """The names a piece of code uses: variables, attributes and what it imports (not strings)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).rsplit(".", 1)[-1])
            out.add(n.name.rsplit(".", 1)[-1])
    return out


def _module_code(tree: ast.Module) -> list[ast.AST]:
    """A module's own statements, run on import: everything but its functions, classes and ``__all__``."""
    def all_list(n) -> bool:
        return isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)

    return [n for n in tree.body if not isinstance(n, (*_DEF, ast.ClassDef)) and not all_list(n)]


def definitions(mods: set[str]) -> tuple[list[Definition], dict[str, set[str]], dict[str, list[ast.AST]]]:
    """Every function, class and method of the product; what each module imports; each module's own code."""
    defs, imports, code = [], {}, {}
    for m in sorted(mods):
        tree = ast.parse(module_path(m).read_text(), str(module_path(m)))
        imports[m], code[m] = _imports(tree), _module_code(tree)
        for node in tree.body:
            if isinstance(node, _DEF):
                defs.append(Definition(m, node.name, node))
            elif isinstance(node, ast.ClassDef):
                defs.append(Definition(m, node.name, node))
                defs += [Definition(m, f"{node.name}.{b.name}", b) for b in node.body if isinstance(b, _DEF)]
    return defs, imports, code


def public_functions(module: str) -> list[str]:
    """The module's public functions and the public methods of its public classes, as qualnames."""
    return [d.qualname for d in definitions({module})[0] if d.public]


def _body(d: Definition) -> list[ast.AST]:
    """What runs when ``d`` is used: a function's code; a class's bases, decorators and own statements."""
    if isinstance(d.node, ast.ClassDef):
        return [*d.node.bases, *d.node.decorator_list, *(b for b in d.node.body if not isinstance(b, _DEF))]
    return [d.node]


def package_of(module: str) -> str:
    """The package a module is tested with: testbed's and traffic's subpackages (``testbed.report``,
    ``traffic.model``), else the top-level package (``fabrics``, ``pfc``, ``common``, ...)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("testbed", "traffic") and len(parts) > 1 else parts[0]


def _visible(d: Definition, where: str | None, imports: set[str]) -> bool:
    """Whether a name used in ``where`` (a product module, None: a test file; importing ``imports``) can be
    ``d``: only code of ``d``'s own package (``package_of``) for product code; then a method by its name (its
    object's class is not known statically), a function or class of the same module or of a module imported."""
    if where is not None and package_of(where) != package_of(d.module):
        return False
    return d.method or d.module == where or d.module in imports or f"{d.module}.{d.name}" in imports


def reached_functions(mods: set[str]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """``_reached`` of these modules (computed once per set)."""
    return _reached(frozenset(mods))


@functools.lru_cache(maxsize=4)
def _reached(mods: frozenset[str]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(named by a test, reached) as sets of (module, qualname). Named: a test file uses the name (a call, an
    attribute, an import) and can see the definition (it imports its module, or the name from it; a method by
    name). Reached: named, or used by reached code of its own package (``package_of``), transitively, or by its
    package's own module-level code (run on import: tables of sections, verbs, backends). Code of another
    package does not count: a package is tested by its tests and through its own tested entry points."""
    defs, imports, code = definitions(mods)
    by_name: dict[str, list[Definition]] = {}
    for d in defs:
        by_name.setdefault(d.name, []).append(d)
    named: set[Definition] = set()
    for path in _test_files():
        tree = ast.parse(path.read_text(), str(path))
        seen = _imports(tree)
        for name in _names(tree):
            named |= {d for d in by_name.get(name, ()) if _visible(d, None, seen)}
    reached, todo = set(named), list(named)
    todo_code = [(m, node) for m, nodes in code.items() for node in nodes]

    def use(names: set[str], where: str) -> None:
        for name in names:
            for d in by_name.get(name, ()):
                if d not in reached and _visible(d, where, imports[where]):
                    reached.add(d)
                    todo.append(d)

    for m, node in todo_code:
        use(_names(node), m)
    while todo:
        d = todo.pop()
        for node in _body(d):
            use(_names(node), d.module)
    key = lambda d: (d.module, d.qualname)  # noqa: E731
    return {key(d) for d in named}, {key(d) for d in reached}


def untested_functions(mods: set[str], allowed=UNREACHED) -> list[str]:
    """``module.qualname`` of every public function no test reaches (``reached_functions``), ``allowed`` aside
    (``UNREACHED``; ``()``: none)."""
    _, reached = reached_functions(mods)
    return sorted(f"{m}.{q}" for m in mods for q in public_functions(m)
                  if (m, q) not in reached and f"{m}.{q}" not in allowed)


def main() -> int:
    mods = product_modules()
    left = sorted(m for m in mods - imported_by_tests(mods) - set(PACKAGES) if not empty(m))
    for m in left:
        print(m)
    print(f"{len(left)} of {len(mods)} product modules imported by no test", file=sys.stderr)
    named, reached = reached_functions(mods)
    public = [(m, q) for m in sorted(mods) for q in public_functions(m)]
    functions = untested_functions(mods)
    for f in functions:
        print(f)
    print(f"{len(functions)} of {len(public)} public functions reached by no test ({len(UNREACHED)} more listed "
          "in UNREACHED, with why)", file=sys.stderr)
    if "-v" in sys.argv:
        indirect = [f"{m}.{q}" for m, q in public if (m, q) in reached and (m, q) not in named]
        print(f"{len(indirect)} reached only through other product code:", *indirect, sep="\n  ", file=sys.stderr)
    return 1 if left or functions else 0


if __name__ == "__main__":
    sys.exit(main())
