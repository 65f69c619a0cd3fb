"""The repository's shape, beside the import contract (test_import_contract.py: no cycle, imports run down
the layers, library code never imports the CLI): a short top level, no product file over 800 lines, no
declared dependency nothing imports, ruff clean. `.ci/run` runs these with the rest of the suite."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("testbed", "controller", "traffic", "pfc", "fabrics", "common")
MAX_TOP_LEVEL_MODULES = 8  # testbed/ besides its packages
MAX_LINES = 800


def _product_files() -> list[Path]:
    return sorted(p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))


def _imported_top_level() -> set[str]:
    """Every top-level module name product code imports (module level and inside functions)."""
    out = set()
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(node.module.split(".")[0])
    return out


def test_testbed_top_level_is_short():
    modules = sorted(p.name for p in (ROOT / "testbed").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, (f"testbed/ has {len(modules)} modules besides its packages "
                                                   f"(at most {MAX_TOP_LEVEL_MODULES}): {modules}")


def test_no_product_file_is_over_800_lines():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in _product_files()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"product files over {MAX_LINES} lines (split them by what they hold):\n" + "\n".join(long)


def test_every_runtime_dependency_is_imported_by_product_code():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].strip() for d in declared]
    modules_of: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    imported = _imported_top_level()
    unknown = [n for n in names if n.lower().replace("_", "-") not in modules_of]
    assert not unknown, f"declared but not installed (pip install -e .[test]): {unknown}"
    unused = [n for n in names if not modules_of[n.lower().replace("_", "-")] & imported]
    assert not unused, (
        "runtime dependencies in pyproject.toml that no product code imports (drop them, or move a test-only "
        f"one to the test extra): {unused}")


def test_ruff_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    assert ruff.is_file(), f"{ruff} is missing: the test extra installs the pinned ruff (pip install -e .[test])"
    proc = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]

