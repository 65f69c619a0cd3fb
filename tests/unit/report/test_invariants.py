"""The report side of the measurement invariants (issue 14): a violation in a replay's summary.json
fails fidelity with its numbers, in the banner and in the fidelity section; a run from before the
invariants is still checked for the negative links.csv bytes that started it."""

from __future__ import annotations

import html
import json
import re

from testbed.report import build_report
from testbed.report.build import summarize
from testbed.report.load import load_experiment
from tests.support.report_fixture import write_experiment

VIOLATION = ("switch_conservation: spine2: 2987666 B in, 3561387 B out, +0 B queued, 0 drops: -573721 B "
             "unaccounted, allowed -12056 .. +12056 B")
def page_text(page: str) -> str:
    """HTML as text (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


BAD = {"ok": False, "violations": [VIOLATION], "checked": ["counters_monotonic", "switch_conservation"]}


def test_a_violation_fails_fidelity_with_its_numbers(tmp_path):
    run = write_experiment(tmp_path / "bad", reps=1, rep_options={("roft", 1): {"invariants": BAD}})
    doc = summarize(load_experiment(run))
    assert doc["fidelity_ok"] is False
    assert f"roft rep1: measurement invariant violated: {VIOLATION}" in doc["fidelity_problems"]
    assert not [p for p in doc["fidelity_problems"] if p.startswith("zcube")]
    assert doc["roft"]["invariants"] == [{"rep": 1, **BAD}]
    assert doc["zcube"]["invariants"][0]["ok"] is True


def test_the_page_shows_the_violation_in_banner_and_fidelity_section(tmp_path):
    run = write_experiment(tmp_path / "bad", reps=1, rep_options={("roft", 1): {"invariants": BAD}})
    page = build_report(run).read_text()
    banner = page[page.find('<div class="banner"'):]
    assert "-573721 B unaccounted" in html.unescape(banner[:banner.find("</div>")])
    fidelity = page_text(page[page.find('id="fidelity"'):])
    assert "Measurement invariants" in fidelity
    assert "FAIL 1 violation (listed below)" in fidelity
    assert f"rep1: FAIL {VIOLATION}" in fidelity
    assert "ok all 2 checks hold in 1 repetition" in fidelity  # the ZCube row
    assert json.loads((run / "summary.json").read_text())["fidelity_ok"] is False


def test_healthy_invariants_keep_fidelity(tmp_path):
    run = write_experiment(tmp_path / "good", reps=2)
    doc = summarize(load_experiment(run))
    assert doc["fidelity_ok"] is True
    assert [i["ok"] for i in doc["roft"]["invariants"]] == [True, True]


def test_an_old_run_with_negative_link_bytes_fails(tmp_path):
    """A replay from before the invariants (no "invariants" in summary.json) whose links.csv has the
    negative spine bytes of issue 14."""
    run = write_experiment(tmp_path / "old", reps=1, rep_options={
        ("roft", 1): {"invariants": False, "negative_link": True}, ("zcube", 1): {"invariants": False}})
    doc = summarize(load_experiment(run))
    assert doc["fidelity_ok"] is False
    problem = [p for p in doc["fidelity_problems"] if "negative bytes" in p]
    assert problem == ["roft rep1: measurement invariant violated: links.csv has 1 queues with negative bytes "
                       "(e.g. leaf1:1 -> gpu1:p1: -4800 B, utilization -0.0016)"]
    assert doc["zcube"]["invariants"][0]["ok"] is None  # nothing to say about an old run without negatives
    text = page_text(build_report(run).read_text())
    assert "n/a not checked (a replay from before the invariants)" in text
