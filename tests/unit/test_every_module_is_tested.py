"""Every product module is imported (or run) by some test, and every public function is reached by one:
scripts/untested_modules.py lists none, the functions of its ``UNREACHED`` aside (each with why and what runs it
instead; issues 28 and 34).

A public function is a top-level ``def`` whose name does not start with ``_``, or a public method of a public
class. It counts as reached (``reached_functions``) when

* a test file names it (a call, an attribute, an import; not a string) and can see it: the test imports its
  module or the name from it, a method by its name alone; or
* code of its own package (``testbed.report``, ``traffic.model``, ``fabrics``, ...: ``package_of``) that
  counts names it, transitively, or its package's module-level code does (tables of sections, verbs,
  backends, run on import).

What this does not check: that the function runs (the analysis is static, by name: a name two definitions
share counts for both, a method matches any object's attribute of that name, a test that only monkeypatches a
function names it too); that a function reached through its package has a test of its own, or that any of its
branches runs; functions reached only from another package's code (``UNREACHED`` lists those, with the test
that runs them); private functions (``_x``); and the tests under tests/integration, which need root.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "untested_modules.py"
spec = importlib.util.spec_from_file_location("untested_modules", SCRIPT)
untested = sys.modules.setdefault("untested_modules", importlib.util.module_from_spec(spec))
spec.loader.exec_module(untested)


def test_no_product_module_is_left_without_a_test():
    mods = untested.product_modules()
    left = sorted(m for m in mods - untested.imported_by_tests(mods) - set(untested.PACKAGES) if not untested.empty(m))
    assert left == []


def test_every_public_function_is_reached_by_a_test_or_says_why_not():
    left = untested.untested_functions(untested.product_modules(), untested.UNREACHED)
    assert left == [], ("public functions no test reaches: test them, or add them to UNREACHED in "
                        "scripts/untested_modules.py with the reason")


def test_the_list_of_unreached_functions_holds_only_unreached_public_functions():
    """A function that gained a test, was renamed or went leaves the list: it never hides a new one."""
    mods = untested.product_modules()
    public = {f"{m}.{q}" for m in mods for q in untested.public_functions(m)}
    assert sorted(set(untested.UNREACHED) - public) == [], "no such public function (renamed? gone?)"
    assert sorted(set(untested.UNREACHED) - set(untested.untested_functions(mods, ()))) == [], "reached by a test now"


def test_the_script_sees_imports_runs_and_empty_packages():
    mods = untested.product_modules()
    assert {"common.owned", "controller.__main__", "testbed.__main__", "traffic.runtime.bulk"} <= mods
    assert untested.empty("testbed.emulation") and not untested.empty("common.units")


def test_a_function_counts_when_a_test_or_its_own_package_names_it_not_another_package():
    named, reached = untested.reached_functions(untested.product_modules())
    assert ("fabrics.describe", "plan_json") in named  # tests/unit/fabrics/test_describe.py calls it
    assert ("fabrics.roft", "build_roft") in reached - named  # through fabrics.build_fabric, its own package
    assert ("testbed.report.serving", "serving_section") in reached  # the report's SECTIONS table names it
    assert ("testbed.backends.ideal", "IdealBackend.serve") not in reached  # only testbed.repetition calls it
    assert untested.package_of("testbed.report.build") == "testbed.report" and untested.package_of("fabrics.roft") \
        == "fabrics"
