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



# tests/unit/'s own files, about the repository as a whole (the rest of its top level is testbed/'s top modules)
REPO_WIDE_TESTS = ("test_import_contract.py", "test_repo_contract.py", "test_every_module_is_tested.py",
                   "test_one_definition.py")


def _stands_for(rel: Path) -> Path | None:
    """The package a folder of tests/unit/ mirrors: testbed's subpackages without the testbed/ prefix, the other
    product packages by name, ci/ for .ci/ (None: none)."""
    if rel.parts[0] == "ci":
        return ROOT / ".ci" if len(rel.parts) == 1 else None
    for where in (ROOT / "testbed" / rel, ROOT / rel if rel.parts[0] in PRODUCT else None):
        if where is not None and where.is_dir() and any(where.glob("*.py")):
            return where
    return None


def test_unit_tests_mirror_the_packages():
    unit = ROOT / "tests" / "unit"
    folders = sorted(p for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__")
    stray = [str(d.relative_to(ROOT)) for d in folders if _stands_for(d.relative_to(unit)) is None]
    assert not stray, f"test folders that stand for no package (tests/unit/<package>/ mirrors it): {stray}"
    no_init = [str(d.relative_to(ROOT)) for d in folders if not (d / "__init__.py").is_file()]
    assert not no_init, f"test folders without __init__.py (two test files of one name would clash): {no_init}"
    top = sorted(p.name for p in unit.glob("test_*.py"))
    loose = [n for n in top if n not in REPO_WIDE_TESTS and not (ROOT / "testbed" / n.removeprefix("test_")).is_file()]
    assert not loose, f"tests/unit/ holds the repository-wide tests and those of testbed/'s top modules: {loose}"
