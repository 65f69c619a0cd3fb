"""List the product modules that no test imports (directly, by module name).

    python scripts/untested_modules.py

A module counts as tested when some file under tests/ imports it: ``import a.b.c``,
``from a.b import c`` or ``from a.b.c import x`` (at any depth of the file, functions included), or
runs it: ``"-m", "a.b"`` in a command line (``a.b.__main__`` for a package). A package whose
``__init__`` holds nothing but its docstring decides nothing and is not listed. Exit status 1 when any
is left.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("testbed", "controller", "traffic", "pfc", "fabrics", "common")


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


def empty(module: str) -> bool:
    """A module with nothing in it but a docstring."""
    path = ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    body = ast.parse(path.read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def imported_by_tests(mods: set[str]) -> set[str]:
    seen = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text()
        for run in re.findall(r'"-m",\s*"([\w.]+)"', text):
            seen.update({run, f"{run}.__main__"})
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                seen.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                seen.add(node.module)
                seen.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in mods if m in seen}


def main() -> int:
    mods = product_modules()
    left = sorted(m for m in mods - imported_by_tests(mods) - set(PACKAGES) if not empty(m))
    for m in left:
        print(m)
    print(f"{len(left)} of {len(mods)} product modules imported by no test", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
