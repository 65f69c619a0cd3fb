"""CI cannot pass by skipping: count the integration tests a pytest run executed.

    python .ci/check_integration.py JUNIT.xml [--require]

Reads pytest's JUnit XML (``--junitxml``), prints how many tests under
tests/integration/ ran and how many were skipped (with the reasons), and with
``--require`` exits 1 when none ran. ``.ci/run`` passes ``--require`` when it
runs as root with Open vSwitch up, where every integration test can run.
Standard library only: it must work before anything else does.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def is_integration(case: ET.Element) -> bool:
    """A test case from tests/integration/ (pytest's classname is the dotted module path)."""
    parts = (case.get("classname") or "").split(".")
    return "integration" in parts or "tests/integration/" in (case.get("file") or "")


def count(path: str) -> tuple[int, int, Counter]:
    """(integration tests that ran, skipped, skip reasons) in one JUnit XML file."""
    ran = skipped = 0
    reasons: Counter = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        if not is_integration(case):
            continue
        skip = case.find("skipped")
        if skip is None:
            ran += 1
        else:
            skipped += 1
            reasons[(skip.get("message") or "no reason given").strip()] += 1
    return ran, skipped, reasons


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--require"]
    if len(args) != 1:
        print("usage: check_integration.py JUNIT.xml [--require]", file=sys.stderr)
        return 2
    try:
        ran, skipped, reasons = count(args[0])
    except (OSError, ET.ParseError) as exc:
        print(f"ci: cannot read the test report {args[0]}: {exc}", file=sys.stderr)
        return 1
    print(f"ci: {ran} integration tests ran, {skipped} skipped")
    for reason, n in reasons.most_common():
        print(f"ci:   skipped {n}: {reason}")
    if "--require" in argv and ran == 0:
        print("ci: FAILED: no integration test ran although this machine can run them (root, Open vSwitch up); "
              "see the skip reasons above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
