""".ci/check_integration.py: CI fails when, able to run them, it ran no integration test, or skipped any
test, unit or integration, that the allow-list does not name with its reason (issue 14 section 6, issue 28)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / ".ci" / "check_integration.py"
spec = importlib.util.spec_from_file_location("check_integration", SCRIPT)
check = importlib.util.module_from_spec(spec)
sys.modules["check_integration"] = check  # its dataclasses look their module up
spec.loader.exec_module(check)

UP = "a fabric is already up (/run/zcube-testbed/state.json)"
SKIP = f'<skipped type="pytest.skip" message="{UP}">x</skipped>'
BROWSER = '<skipped type="pytest.skip" message="/usr/bin/chromium is not installed">x</skipped>'
OLD_KERNEL = "TCP_USER_TIMEOUT covers a shut window since about Linux 5.11"
KERNEL = f'<skipped type="pytest.skip" message="{OLD_KERNEL}">x</skipped>'
XFAIL = '<skipped type="pytest.xfail" message="known to fail">x</skipped>'
RETRY = "tests.unit.traffic.runtime.test_agent_retry"
RETRY_TEST = "test_data_left_unacknowledged_fails_the_connection_with_etimedout"


def junit(tmp_path: Path, cases: list[tuple[str, str]]) -> str:
    """A JUnit report: (classname::name, skipped element or '') per test."""
    body = ""
    for test, skipped in cases:
        cls, name = test.split("::")
        body += f'<testcase classname="{cls}" name="{name}" time="0.1">{skipped}</testcase>'
    path = tmp_path / "junit.xml"
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return str(path)


@pytest.fixture
def allow(tmp_path) -> Path:
    path = tmp_path / "allowed_skips.txt"
    path.write_text(f"# comment\n\n{RETRY}::{RETRY_TEST}* | the kernel decides\n")
    return path


def test_all_integration_tests_skipped_fails_when_required(tmp_path, capsys, allow):
    path = junit(tmp_path, [("tests.unit.test_x::t0", ""), ("tests.integration.test_run::t1", SKIP),
                            ("tests.integration.test_fabric::t2", SKIP)])
    ran, skipped, skips = check.count(path)
    assert (ran, skipped) == (0, 2)
    assert skips == [check.Skip("tests.integration.test_run::t1", UP),
                     check.Skip("tests.integration.test_fabric::t2", UP)]
    assert check.main([path, "--require"], allow) == 1
    out = capsys.readouterr()
    assert "0 integration tests ran, 2 skipped; 2 tests skipped in all" in out.out
    assert "skipped tests.integration.test_run::t1: a fabric is already up" in out.out
    assert "no integration test ran" in out.err and "2 skipped tests are not on the allow-list" in out.err
    assert check.main([path], allow) == 0  # not root / no OVS: skipping is reported, not failed


@pytest.mark.parametrize("cases", [[], [("tests.unit.test_x::t0", "")]])
def test_no_integration_test_at_all_fails_when_required(tmp_path, cases, allow):
    assert check.main([junit(tmp_path, cases), "--require"], allow) == 1


def test_one_partial_integration_skip_fails_when_required(tmp_path, capsys, allow):
    """Before: one integration test that ran was enough, so a missing Chromium hid the browser test."""
    path = junit(tmp_path, [("tests.integration.test_run::t0", ""),
                            ("tests.integration.test_report_browser::t1", BROWSER)])
    assert check.count(path)[:2] == (1, 1)
    assert check.main([path, "--require"], allow) == 1
    err = capsys.readouterr().err
    assert ("1 skipped tests are not on the allow-list allowed_skips.txt (first: "
            "tests.integration.test_report_browser::t1: /usr/bin/chromium is not installed)") in err


def test_a_unit_skip_counts_too(tmp_path, allow):
    """Before: only tests under tests/integration/ were looked at."""
    path = junit(tmp_path, [("tests.integration.test_run::t0", ""), ("tests.unit.test_mininet_topos::t1", SKIP)])
    assert check.count(path) == (1, 0, [check.Skip("tests.unit.test_mininet_topos::t1", UP)])
    assert check.main([path, "--require"], allow) == 1


def test_an_xfail_is_a_skip(tmp_path, allow):
    path = junit(tmp_path, [("tests.integration.test_run::t0", ""), ("tests.unit.test_x::t1", XFAIL)])
    assert check.main([path, "--require"], allow) == 1


def test_a_skip_on_the_allow_list_passes_and_is_printed_with_its_reason(tmp_path, capsys, allow):
    path = junit(tmp_path, [("tests.integration.test_run::t0", ""), (f"{RETRY}::{RETRY_TEST}[whole]", KERNEL)])
    assert check.main([path, "--require"], allow) == 0
    out = capsys.readouterr().out
    assert f"skipped {RETRY}::{RETRY_TEST}[whole]: {OLD_KERNEL} (allowed: the kernel decides)" in out


def test_allow_list_matches_exactly_or_by_a_starred_prefix():
    allow = {"tests.a::t1": "r1", "tests.b::t2*": "r2"}
    assert check.allowed(check.Skip("tests.a::t1", ""), allow) == "r1"
    assert check.allowed(check.Skip("tests.a::t1[x]", ""), allow) is None  # no star: exact
    assert check.allowed(check.Skip("tests.b::t2[x]", ""), allow) == "r2"
    assert check.allowed(check.Skip("tests.b::t3", ""), allow) is None


def test_a_classname_that_merely_contains_integration_is_not_integration(tmp_path):
    """Before: any dotted part named 'integration' counted (tests.unit.integration.test_x)."""
    path = junit(tmp_path, [("tests.unit.integration.test_x::t0", ""), ("tests.integration.test_run::t1", "")])
    assert check.count(path)[:2] == (1, 0)


def test_an_allow_list_entry_without_a_reason_fails(tmp_path):
    bad = tmp_path / "allowed_skips.txt"
    bad.write_text("tests.a::t1\n")
    path = junit(tmp_path, [("tests.integration.test_run::t0", "")])
    assert check.main([path, "--require"], bad) == 1
    with pytest.raises(ValueError, match=r"allowed_skips.txt:1: expected '<test id> \| <reason>'"):
        check.read_allow_list(bad)


def test_the_repositorys_allow_list_is_short_and_every_entry_has_a_reason():
    entries = check.read_allow_list()
    assert list(entries) == [f"{RETRY}::{RETRY_TEST}*"]
    assert all(len(reason) > 20 for reason in entries.values())


def test_unreadable_report_fails(tmp_path, allow):
    assert check.main([str(tmp_path / "missing.xml"), "--require"], allow) == 1
    (tmp_path / "bad.xml").write_text("<testsuites")
    assert check.main([str(tmp_path / "bad.xml")], allow) == 1
