"""The headline's keys (testbed.report.headline): PFC pauses and queue drops have one key each, and the report
reads them rather than counting again."""

from __future__ import annotations

import json

from testbed.report import headline, stats
from testbed.report.load import load_experiment
from tests.support.report_fixture import write_experiment


# ------------------------------------------------------------------ one key each
def test_pauses_and_drops_have_one_key_and_old_run_directories_still_read():
    assert headline.pfc_pauses({"pfc": {"enabled": True, "pauses": 12}, "pfc_pauses": 99}) == 12
    assert headline.pfc_pauses({"pfc_pauses": 4}) == 4  # a run directory from before the copy was dropped
    assert headline.pfc_pauses({"pauses": {"total": 3}}) == 3 and headline.pfc_pauses({"pauses": 2}) == 2
    assert headline.pfc_pauses({}) is None and headline.pfc_pauses({"pfc": {"enabled": False}}) is None
    assert headline.queue_drops({"queue_drops": 7}) == 7 and headline.queue_drops({}) is None
    assert headline.pfc_enabled({"pfc": {"enabled": True}}) is True and headline.pfc_enabled({}) is None


def test_the_report_reads_the_counts_from_the_summary_not_a_second_count(tmp_path):
    root = write_experiment(tmp_path / "run", reps=1, rep_options={("zcube", 1): {"pfc": True}})
    rep = root / "runs" / "zcube" / "rep1"
    s = json.loads((rep / "summary.json").read_text())
    s["queue_drops"], s["pfc"]["pauses"] = 5, 11  # queues.csv still says 7 drops, pfc.txt 12 pauses
    (rep / "summary.json").write_text(json.dumps(s))
    m = stats.rep_metrics(load_experiment(root).reps["zcube"][0])
    assert (m["queue_drops"], m["pfc_pauses"]) == (5, 11)


# ------------------------------------------------------------------ the verdict rule, one repetition
def test_one_repetition_resolves_nothing_and_says_the_between_run_spread_is_unknown(tmp_path):
    from testbed.report.build import summarize

    doc = summarize(load_experiment(write_experiment(tmp_path / "one", reps=1)))  # TTFT proxy P99 900 vs 1000
    p99 = doc["confidence"]["ratios"]["ttft_ms.p99"]
    assert (p99["ratio"], p99["ci95"], p99["pairs"], p99["verdict"]) == (0.9, None, 1, headline.SPREAD_UNKNOWN)
    assert doc["ratios"]["ttft_ms.p99"] == 0.9 and doc["confidence"]["between_run"] is False
    seed = next(c for c in doc["seed_comparison"] if c["figure"] == "ttft_ms.p99")
    assert seed["status"] == "not reproduced" and "between-run spread is unknown" in seed["sentence"]
