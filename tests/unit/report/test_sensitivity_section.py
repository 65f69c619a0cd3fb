"""The report's sensitivity section (no root): the sentence naming what the verdict depends on, from a
hand-made sensitivity.json; failed and not fidelity-ok alternatives shown; 'none shipped' when the experiment
declares alternatives and names no result; a shipped result copied in by `run`, placed first after the
headline, and called older than the code when it is."""

from __future__ import annotations

import html
import json
from pathlib import Path

import yaml

from testbed.cli import main
from testbed.report import sensitivity_section as R
from testbed.report.load import ExperimentRun
from tests.unit.experiment.test_sensitivity import SMALL

NR = "not resolved at this sample size"


def entry(name, assumption, tokens, p99, same, status="ok", fidelity_ok=True, verdicts=None):
    return {"name": name, "assumption": assumption, "overrides": {"k": name}, "status": status,
            "error": None if status == "ok" else "RuntimeError: boom",
            "ratios": {"throughput_tokens_per_s": tokens, "ttft_ms.p50": 1.0, "ttft_ms.p99": p99},
            "ci95": {"throughput_tokens_per_s": [tokens - 0.05, tokens + 0.05] if tokens else None,
                     "ttft_ms.p50": None, "ttft_ms.p99": [p99 - 0.2, p99 + 0.2] if p99 else None},
            "verdicts": verdicts or {}, "spread": {}, "same_verdict": same, "fidelity_ok": fidelity_ok,
            "fidelity_problems": [] if fidelity_ok else ["zcube rep1: agents exited early: {3: 1}"]}


def doc(**base_changes) -> dict:
    base = entry("baseline", None, 1.08, 1.16, None,
                 verdicts={"throughput_tokens_per_s": "better", "ttft_ms.p99": NR}) | {"overrides": {}}
    return {"dir": "/r/20261204-sensitivity-default", "created": "2026-12-04T10:00:00+0000",
            "versions": {"git": "abc1234"}, "backend": "emulated", "repetitions": 1,
            "verdict_keys": ["throughput_tokens_per_s", "ttft_ms.p99"],
            "baseline": base | base_changes | {"dir": "/r/20261204-sensitivity-default/baseline",
                                               "experiment": {"serving": {"concurrency": 64},
                                                              "trace": {"path": "/elsewhere/azure.csv.gz"}}},
            "alternatives": [entry("pair-hash", "port policy", 1.01, 0.80, False),
                             entry("adaptive", "port policy", 1.10, 1.05, True),
                             entry("single-node", "layout", 0.99, 1.00, False),
                             entry("mooncake", "request sizes", None, None, False, status="failed",
                                   fidelity_ok=False),
                             entry("zipf", None, 1.09, 1.2, True, fidelity_ok=False)]}


def test_the_sentence_names_what_the_verdict_depends_on_and_what_is_unknown():
    assert R.sentence(doc()) == (
        "The verdict (output tokens/s: ZCube better; TTFT P99: not resolved at this sample size) depends on the "
        "port policy (pair-hash) and the layout (single-node): each changes it on its own; it holds under the port "
        "policy (adaptive) and zipf; unknown under mooncake (the run failed); not fidelity-ok: zipf.")
    held = doc()
    held["alternatives"] = [a for a in held["alternatives"] if a["same_verdict"] and a["fidelity_ok"]]
    assert R.sentence(held) == ("The verdict (output tokens/s: ZCube better; TTFT P99: not resolved at this sample "
                                "size) depends on none of the assumptions tried; it holds under the port policy "
                                "(adaptive).")
    assert R.sentence(doc(status="failed", error="RuntimeError: no fabric")) == (
        "The baseline did not run to a verdict (RuntimeError: no fabric): nothing to compare the alternatives with.")


def test_every_row_is_shown_the_failed_and_the_shaky_ones_marked():
    page = R.section(doc())
    for name in ("pair-hash", "adaptive", "single-node", "mooncake", "zipf"):
        assert f"<td class=\"l\">{name}" in page
    assert "1.010 [0.960, 1.060]" in page and "0.800 [0.600, 1.000]" in page  # ratio [95% interval]
    assert page.count(">NO<") == 2 and "no verdict: the run failed" in page and "run failed" in page
    assert "yes (fidelity not ok)" in page and "NOT ok: zcube rep1: agents exited early" in page
    assert R.cell_ratio(doc()["alternatives"][3], "ttft_ms.p99") == "run failed"


def test_how_old_the_result_is_against_the_code():
    assert R.age_note("abc1234", "abc1234") is None
    assert R.age_note("abc1234-dirty", "abc1234") == "It was made on this run's commit abc1234 (with uncommitted " \
                                                      "changes)."
    assert R.age_note("abc1234", "def5678", count=lambda old, new: 3).startswith(
        "It is older than the code: made on commit abc1234, 3 commits before this run's def5678;")
    assert R.age_note("abc1234", "def5678", count=lambda old, new: None).startswith(
        "It was made on commit abc1234, this run on def5678: another version of the code")
    assert "cannot be told" in R.age_note(None, "def5678")


def _exp(tmp_path: Path, config: dict, versions: dict | None = None) -> ExperimentRun:
    return ExperimentRun(tmp_path, config, versions or {}, {})


def test_none_shipped_when_alternatives_are_declared_and_no_section_without_any(tmp_path):
    declared = {"source": "/x/default.yaml", "experiment": {"sensitivity": [{"name": "pair-hash"}, {"name": "zipf"}]}}
    text = R.report_section(_exp(tmp_path, declared))
    assert "No sensitivity result is shipped for this experiment" in text and "(pair-hash, zipf)" in text
    assert "testbed sensitivity /x/default.yaml --reps 1</code> runs them" in text
    assert R.report_section(_exp(tmp_path, {"experiment": {"sensitivity": []}})) is None
    (tmp_path / "sensitivity.json").write_text("[1, 2]")
    assert "could not be read" in R.report_section(_exp(tmp_path, declared))


def test_a_shipped_result_names_where_it_came_from_how_old_and_how_its_baseline_differs(tmp_path):
    (tmp_path / "sensitivity.json").write_text(json.dumps(doc()))
    mine = {"serving": {"concurrency": 128}, "repetitions": 2, "trace": {"path": "/here/azure.csv.gz"}}
    text = html.unescape(R.report_section(_exp(tmp_path, {"experiment": mine}, {"git": "0000000"})))
    assert "Its baseline is its own run of the experiment, not this page's" in text
    assert "It was made on commit abc1234, this run on 0000000: another version of the code" in text
    # the repetitions and where the same trace lies do not count as differences
    assert "Its baseline experiment differs from this run's in serving.concurrency." in text


def test_run_copies_the_shipped_result_and_its_report_shows_it_first_after_the_headline(tmp_path, capsys):
    shipped = tmp_path / "shipped.json"
    shipped.write_text(json.dumps(doc()))
    exp = tmp_path / "sens16.yaml"
    exp.write_text(yaml.safe_dump(SMALL | {"sensitivity_result": "shipped.json"}, sort_keys=False))
    assert main(["run", str(exp), "--out", str(tmp_path)]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads((run_dir / "sensitivity.json").read_text()) == doc()
    page = (run_dir / "report.html").read_text()
    ids = [s.split('"')[1] for s in page.split("<section id=")[1:]]
    assert ids[ids.index("headline") + 1] == "sensitivity"
    assert "depends on the port policy (pair-hash) and the layout (single-node)" in page
    assert "another version of the code" in page  # made on abc1234, which this repository does not know
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(SMALL | {"sensitivity_result": "missing.json"}))
    assert main(["run", str(bad), "--out", str(tmp_path)]) == 2
    assert "sensitivity_result: " in capsys.readouterr().err
