"""One headline (testbed.report.headline): the terminal prints the report's own headline, PFC pauses and queue
drops have one key each, and one repetition says the between-run spread is unknown."""

from __future__ import annotations

import json
import re
import statistics
from html import unescape

import pytest

from testbed.report import build_report, headline, headline_lines, stats
from testbed.report.build import summarize
from testbed.report.fmt import num
from testbed.report.load import load_experiment
from tests.support.report_fixture import write_experiment, write_live_experiment


# ------------------------------------------------------------------ the terminal shows the report's figures
def _cells(row_html: str) -> list[str]:
    return [unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row_html)]


def _html_table(page: str, cls: str) -> list[list[str]]:
    table = re.search(rf'<table class="{cls}">(.*?)</table>', page, re.S).group(1)
    return [_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table)]


def _terminal_table(out: list[str], first_cell: str) -> list[list[str]]:
    """The text table whose header starts with ``first_cell``: its rows split at two or more spaces."""
    start = next(i for i, line in enumerate(out) if line.startswith(first_cell + "  "))
    rows = []
    for line in out[start:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


@pytest.fixture(scope="module")
def two_reps(tmp_path_factory):
    """A live run of 2 repetitions a fabric (the serving model against an ideal network; ROFT's ports slower),
    its report built: the page, and what `testbed run` prints for it."""
    root = write_live_experiment(tmp_path_factory.mktemp("two") / "run", reps=2)
    page = build_report(root).read_text()
    return root, page, headline_lines(root)


def test_the_terminal_prints_the_reports_headline_figure_for_figure(two_reps):
    root, page, out = two_reps
    head = _html_table(page, "headline")
    assert head[0] == ["figure", "ZCube", "ROFT", "ZCube / ROFT", "95% interval", "verdict"]
    assert [r[0] for r in head[1:]] == ["Output tokens/s", "TTFT P50 (ms)", "TTFT P99 (ms)"]
    assert _terminal_table(out, "figure") == head
    reps = _html_table(page, "headline-reps")
    assert [r[0] for r in reps[1:]] == ["rep1", "rep2"] and _terminal_table(out, "repetition") == reps
    section = re.search(r'<section id="headline">(.*?)</section>', page, re.S).group(1)
    facts = [unescape(x) for x in re.findall(r"<li>(.*?)</li>", section)]
    assert facts and all(f in out for f in facts)
    assert any(f.startswith("requests measured (TTFT): ZCube ") for f in facts)
    assert any(f.startswith("PFC pauses: ZCube ") and "queue drops: ZCube " in f for f in facts)
    assert any(f.startswith("fidelity: ") for f in facts)
    # the figures are the medians over the repetitions' own summaries, and the ratio their pairs' geometric mean
    s = {f: [json.loads((root / "runs" / f / f"rep{k}" / "summary.json").read_text()) for k in (1, 2)]
         for f in ("zcube", "roft")}
    p99 = {f: [x["ttft_ms"]["p99"] for x in s[f]] for f in s}
    row = next(r for r in head if r[0] == "TTFT P99 (ms)")
    assert row[1].split(" [")[0] == num(statistics.median(p99["zcube"]))
    gm = statistics.geometric_mean([z / r for z, r in zip(p99["zcube"], p99["roft"])])
    assert row[3] == f"{gm:.3f}"
    # the run's own terminal lines equal those computed again from the saved files alone
    assert headline.lines(summarize(load_experiment(root))["headline"]) == out


def test_the_summary_json_keeps_every_repetitions_ratio(two_reps):
    root, _, _ = two_reps
    doc = json.loads((root / "summary.json").read_text())
    h = doc["headline"]
    assert h["pairs"] == [1, 2] and h["between_run"] is True and h["warning"] is None
    for key in ("throughput_tokens_per_s", "ttft_ms.p50", "ttft_ms.p99"):
        fig, conf = h["figures"][key], doc["confidence"]["ratios"][key]
        assert [p["rep"] for p in fig["per_rep"]] == [1, 2] and fig["per_rep"] == conf["per_rep"]
        assert all(p["ratio"] == round(p["zcube"] / p["roft"], 4) for p in fig["per_rep"])
        assert fig["ratio"] == doc["ratios"][key] == conf["ratio"] and fig["ci95"] == conf["ci95"]
        assert fig["verdict"] == conf["verdict"] == headline.verdict(conf["ci95"], fig["higher_is_better"], 2)


def test_one_repetition_says_loudly_that_the_between_run_spread_is_unknown(tmp_path):
    root = write_experiment(tmp_path / "one", reps=1)  # TTFT proxy P99 900 vs 1000 ms: a ratio of 0.9
    page = build_report(root).read_text()
    doc = json.loads((root / "summary.json").read_text())
    h = doc["headline"]
    assert h["pairs"] == [1] and h["between_run"] is False and h["warning"] == headline.ONE_REPETITION
    p99 = h["figures"]["ttft_ms.p99"]
    assert (p99["ratio"], p99["ci95"], p99["verdict"]) == (0.9, None, headline.SPREAD_UNKNOWN)
    out = headline_lines(root)
    assert out[1] == headline.ONE_REPETITION and "unknown (1 repetition)" in out[4]
    assert "ONE REPETITION A FABRIC: the between-run spread is unknown" in unescape(page)
    seed = next(c for c in doc["seed_comparison"] if c["figure"] == "ttft_ms.p99")
    assert seed["status"] == "not reproduced" and "between-run spread is unknown" in seed["sentence"]


# ------------------------------------------------------------------ the verdict rule, one repetition
def test_one_repetition_resolves_nothing_and_says_the_between_run_spread_is_unknown(tmp_path):
    doc = summarize(load_experiment(write_experiment(tmp_path / "one", reps=1)))  # TTFT proxy P99 900 vs 1000
    p99 = doc["confidence"]["ratios"]["ttft_ms.p99"]
    assert (p99["ratio"], p99["ci95"], p99["pairs"], p99["verdict"]) == (0.9, None, 1, headline.SPREAD_UNKNOWN)
    assert doc["ratios"]["ttft_ms.p99"] == 0.9 and doc["confidence"]["between_run"] is False
    seed = next(c for c in doc["seed_comparison"] if c["figure"] == "ttft_ms.p99")
    assert seed["status"] == "not reproduced" and "between-run spread is unknown" in seed["sentence"]


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
    heads = headline.fabric_headlines(root)
    z = heads["zcube"]["repetitions"][0]
    assert (z["queue_drops"], z["pfc_pauses"]) == (5, 11) and "pauses" not in z and "drops" not in z
    assert heads["zcube"]["queue_drops"]["median"] == 5 and set(headline.HEADLINE_KEYS) <= set(heads["zcube"])
