"""CI cannot pass by skipping: count what a pytest run executed and skipped.

    python .ci/check_integration.py JUNIT.xml [--require]

Reads pytest's JUnit XML (``--junitxml``) and prints how many tests under tests/integration/ ran,
and every skipped test (unit and integration alike; an xfail counts as a skip) with its reason.

With ``--require`` (``.ci/run`` passes it when it runs as root with Open vSwitch up, after
scripts/setup.sh: every test can run there) it exits 1 when no integration test ran, or when any
test was skipped that is not on the allow-list ``.ci/allowed_skips.txt`` (a short list in the
repository, each entry with its reason). Without it (a developer's machine) it only reports.

Standard library only: it must work before anything else does.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ALLOW_LIST = Path(__file__).resolve().with_name("allowed_skips.txt")


@dataclass(frozen=True)
class Skip:
    test: str  # "dotted.module[.Class]::name[params]", as the JUnit report names it
    reason: str


def test_id(case: ET.Element) -> str:
    return f"{case.get('classname') or ''}::{case.get('name') or ''}"


def is_integration(case: ET.Element) -> bool:
    """A test case from tests/integration/ (pytest's classname is the dotted module path from the repository)."""
    classname = case.get("classname") or ""
    return classname.startswith("tests.integration.") or (case.get("file") or "").startswith("tests/integration/")


def count(path: str) -> tuple[int, int, list[Skip]]:
    """(integration tests that ran, integration tests skipped, every skip of the run) in one JUnit XML file."""
    ran = skipped = 0
    skips = []
    for case in ET.parse(path).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is None:
            ran += is_integration(case)
            continue
        skipped += is_integration(case)
        skips.append(Skip(test_id(case), " ".join((skip.get("message") or "no reason given").split())))
    return ran, skipped, skips


def read_allow_list(path: Path = ALLOW_LIST) -> dict[str, str]:
    """pattern -> reason: one entry a line, ``<test id or prefix*> | <reason>``; '#' starts a comment. An
    entry without a reason is an error: the list says why each skip is fine, or it is no list."""
    entries = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern, sep, reason = (part.strip() for part in line.partition("|"))
        if not sep or not pattern or not reason:
            raise ValueError(f"{path}:{number}: expected '<test id> | <reason>'")
        entries[pattern] = reason
    return entries


def allowed(skip: Skip, allow: dict[str, str]) -> str | None:
    """The allow-list's reason for this skip (None: not allowed). A pattern ending in '*' is a prefix."""
    for pattern, reason in allow.items():
        if skip.test == pattern or (pattern.endswith("*") and skip.test.startswith(pattern[:-1])):
            return reason
    return None


def main(argv: list[str], allow_path: Path = ALLOW_LIST) -> int:
    args = [a for a in argv if a != "--require"]
    require = "--require" in argv
    if len(args) != 1:
        print("usage: check_integration.py JUNIT.xml [--require]", file=sys.stderr)
        return 2
    try:
        ran, skipped, skips = count(args[0])
    except (OSError, ET.ParseError) as exc:
        print(f"ci: cannot read the test report {args[0]}: {exc}", file=sys.stderr)
        return 1
    try:
        allow = read_allow_list(allow_path)
    except (OSError, ValueError) as exc:
        print(f"ci: cannot read the skip allow-list: {exc}", file=sys.stderr)
        return 1
    print(f"ci: {ran} integration tests ran, {skipped} skipped; {len(skips)} tests skipped in all")
    refused = []
    for skip in skips:
        why = allowed(skip, allow)
        print(f"ci:   skipped {skip.test}: {skip.reason}" + (f" (allowed: {why})" if why else ""))
        if why is None:
            refused.append(skip)
    status = 0
    if require and ran == 0:
        print("ci: FAILED: no integration test ran although this machine can run them (root, Open vSwitch up); "
              "see the skip reasons above", file=sys.stderr)
        status = 1
    if require and refused:
        print(f"ci: FAILED: {len(refused)} skipped tests are not on the allow-list {allow_path.name} "
              f"(first: {refused[0].test}: {refused[0].reason}); on this machine every test can run",
              file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
