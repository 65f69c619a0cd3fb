"""Every product module is imported (or run) by some test: scripts/untested_modules.py lists none (issue 28)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "untested_modules.py"
spec = importlib.util.spec_from_file_location("untested_modules", SCRIPT)
untested = importlib.util.module_from_spec(spec)
spec.loader.exec_module(untested)


def test_no_product_module_is_left_without_a_test():
    mods = untested.product_modules()
    left = sorted(m for m in mods - untested.imported_by_tests(mods) - set(untested.PACKAGES) if not untested.empty(m))
    assert left == []


def test_the_script_sees_imports_runs_and_empty_packages():
    mods = untested.product_modules()
    assert {"common.owned", "controller.__main__", "testbed.__main__", "traffic.runtime.bulk"} <= mods
    assert untested.empty("testbed.emulation") and not untested.empty("common.units")
