""".ci/check_integration.py: CI fails when, able to run them, it ran no integration test (issue 14, section 6)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / ".ci" / "check_integration.py"
spec = importlib.util.spec_from_file_location("check_integration", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

SKIP = '<skipped type="pytest.skip" message="a fabric is already up (/run/zcube-testbed/state.json)">x</skipped>'


def junit(tmp_path: Path, cases: list[tuple[str, bool]]) -> str:
    body = "".join(f'<testcase classname="{cls}" name="t{i}" time="0.1">{SKIP if skipped else ""}</testcase>'
                   for i, (cls, skipped) in enumerate(cases))
    path = tmp_path / "junit.xml"
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return str(path)


def test_all_integration_tests_skipped_fails_when_required(tmp_path, capsys):
    path = junit(tmp_path, [("tests.unit.test_x", False), ("tests.integration.test_run", True),
                            ("tests.integration.test_fabric", True)])
    assert check.count(path)[:2] == (0, 2)
    assert check.main([path, "--require"]) == 1
    out = capsys.readouterr()
    assert "0 integration tests ran, 2 skipped" in out.out and "a fabric is already up" in out.out
    assert "FAILED" in out.err
    assert check.main([path]) == 0  # not root / no OVS: skipping is allowed


@pytest.mark.parametrize("cases", [[], [("tests.unit.test_x", False)]])
def test_no_integration_test_at_all_fails_when_required(tmp_path, cases):
    assert check.main([junit(tmp_path, cases), "--require"]) == 1


def test_one_integration_test_that_ran_passes(tmp_path):
    path = junit(tmp_path, [("tests.integration.test_run", False), ("tests.integration.test_report_browser", True)])
    assert check.count(path)[:2] == (1, 1)
    assert check.main([path, "--require"]) == 0


def test_unreadable_report_fails(tmp_path):
    assert check.main([str(tmp_path / "missing.xml"), "--require"]) == 1
    (tmp_path / "bad.xml").write_text("<testsuites")
    assert check.main([str(tmp_path / "bad.xml")]) == 1
