"""The experiment report as a browser shows it: headless Chromium renders a report
built from a synthetic experiment; the page must paint (a screenshot with real
content), hold the headline table, and log no script or console error.

Needs /usr/bin/chromium (scripts/setup.sh installs it), not a fabric. Note that
this folder's conftest skips every test here when not root or when a fabric
is up; to run this one alone: pytest --noconftest tests/integration/test_report_browser.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.report_fixture import write_experiment

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed "
                                                               "(apt-get install chromium, or scripts/setup.sh)")



def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [str(CHROMIUM), "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from testbed.report import build_report

    root = tmp_path_factory.mktemp("browser")
    run = write_experiment(root / "exp", reps=2, rep_options={("zcube", 1): {"pfc": True}, ("roft", 1): {"pfc": True},
                                                              ("roft", 2): {"failed": 2}})
    return build_report(run)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Uncaught" in line or ":CONSOLE" in line]


def test_screenshot_paints_the_page(report, tmp_path):
    shot = tmp_path / "out.png"
    proc = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,4000", report.as_uri())
    assert shot.is_file(), proc.stderr[-2000:]
    assert shot.stat().st_size > 20_000, "the screenshot is nearly empty: the page did not paint"
    assert console_errors(proc.stderr) == []


def test_dom_has_the_headline_table(report, tmp_path):
    proc = chromium(tmp_path, "--dump-dom", report.as_uri())
    dom = proc.stdout
    assert '<section id="headline">' in dom
    assert "<table" in dom and "KV-transfer FCT P99" in dom and "ZCube / ROFT" in dom
    assert "Fidelity check failed" in dom  # the fixture has failed transfers
    assert dom.count("data:image/png;base64,") >= 9
    assert console_errors(proc.stderr) == []
