"""One headline (testbed.report.headline): the terminal prints the report's own headline, PFC pauses and queue
drops have one key each, one repetition says the between-run spread is unknown, and ``testbed compare`` sets
several runs' headlines side by side and says whether they agree."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from html import unescape

import pytest

from common.errors import TestbedError
from testbed.cli import main
from testbed.report import build_report, headline, headline_lines, stats
from testbed.report.build import summarize
from testbed.report.comparison import agreement, compare_runs, differences, lines
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


# ------------------------------------------------------------------ compare
def _run(root, tokens: dict[str, list[float]], ttft_p99: dict[str, list[float]], rate: str = "3mbit",
         commit: str = "abc1234"):
    """A run directory of len(tokens['zcube']) repetitions whose summaries carry the given output tokens/s and
    TTFT P99 per repetition (a live run's keys), and an experiment.json with an experiment mapping."""
    reps = len(tokens["zcube"])
    write_experiment(root, reps=reps)
    for f in ("zcube", "roft"):
        for k in range(1, reps + 1):
            path = root / "runs" / f / f"rep{k}" / "summary.json"
            s = json.loads(path.read_text())
            s |= {"driver": "live", "throughput_tokens_per_s": tokens[f][k - 1],
                  "ttft_ms": {"p50": ttft_p99[f][k - 1] / 3, "p99": ttft_p99[f][k - 1]}}
            path.write_text(json.dumps(s))
    (root / "experiment.json").write_text(json.dumps({"experiment": {
        "name": "default", "repetitions": reps, "link": {"rate": rate, "represents": "200gbit"},
        "trace": {"path": f"/somewhere/{root.name}/azure.csv.gz"}}}))
    (root / "versions.json").write_text(json.dumps({"git": commit}))
    return root


ROFT = {"tokens": [1000.0, 1000.0, 1000.0], "ttft": [500.0, 500.0, 500.0]}


def _pair(root, tok_ratios, ttft_ratios, **kw):
    return _run(root, {"zcube": [1000.0 * q for q in tok_ratios], "roft": ROFT["tokens"]},
                {"zcube": [500.0 * q for q in ttft_ratios], "roft": ROFT["ttft"]}, **kw)


def test_two_runs_that_agree(tmp_path):
    a = _pair(tmp_path / "a", [1.05, 1.04, 1.06], [0.9, 1.1, 1.0])
    b = _pair(tmp_path / "b", [1.06, 1.05, 1.04], [1.0, 0.9, 1.1], rate="4mbit", commit="def5678")
    doc = compare_runs([a, b])
    assert doc["agree"] is True
    ra, rb = doc["runs"]
    assert (ra["label"], ra["commit"], rb["commit"]) == ("A", "abc1234", "def5678")
    assert ra["reps"] == {"zcube": 3, "roft": 3} and ra["pairs"] == 3 and ra["fidelity_ok"] is True
    tok = ra["figures"]["throughput_tokens_per_s"]
    assert tok["verdict"] == "better" and tok["per_rep"] == [1.05, 1.04, 1.06]
    assert ra["figures"]["ttft_ms.p99"]["verdict"] == "not resolved at this sample size"
    # the same trace file in another folder is the same trace; the link rate differs
    assert doc["differences"] == [{"key": "link.rate", "values": ["3mbit", "4mbit"], "workload": True}]
    assert doc["same_workload"] is False
    text = lines(doc)
    assert text[0].split()[:3] == ["run", "commit", "reps"] and "link.rate: 3mbit vs 4mbit" in " ".join(text)
    assert text[-1] == "the runs agree"


def test_two_runs_that_disagree_contradict_and_do_not_cover_each_other(tmp_path):
    a = _pair(tmp_path / "a", [1.05, 1.04, 1.06], [1.0, 1.0, 1.0])
    c = _pair(tmp_path / "c", [0.95, 0.94, 0.96], [1.0, 1.0, 1.0])
    doc = compare_runs([a, c])
    tok = doc["figures"]["throughput_tokens_per_s"]
    assert doc["agree"] is False and tok["agree"] is False and tok["contradicting"] == [["A", "B"]]
    assert {(x["run"], x["other"]) for x in tok["not_covered"]} == {("A", "B"), ("B", "A")}
    assert doc["figures"]["ttft_ms.p99"]["agree"] is True
    assert doc["differences"] == [] and lines(doc)[-1] == "the runs DISAGREE"


def test_overlapping_intervals_that_miss_a_ratio_disagree_and_one_repetition_cannot_tell(tmp_path):
    runs = [{"label": "A", "figures": {"k": {"ratio": 1.02, "ci95": [1.01, 1.03], "verdict": "better"}}},
            {"label": "B", "figures": {"k": {"ratio": 1.05, "ci95": [1.00, 1.10], "verdict": "not resolved"}}}]
    got = agreement(runs, "k")  # B covers A's 1.02, A does not cover B's 1.05: no contradiction, still apart
    assert got["agree"] is False and got["not_covered"] == [{"run": "A", "ci95": [1.01, 1.03], "other": "B",
                                                             "ratio": 1.05}]
    runs[0]["figures"]["k"] = {"ratio": 1.06, "ci95": None, "verdict": headline.SPREAD_UNKNOWN}
    got = agreement(runs, "k")
    assert got["agree"] is None and got["without_interval"] == ["A"] and "cannot tell" in got["why"]
    assert differences([{"a": {"b": 1}}, None, {"a": {"b": 1, "c": 2}}]) == [{"key": "a.c",
                                                                          "values": ["(absent)", 2],
                                                                          "workload": True}]
    # a key one run lacks and the other leaves empty is no difference; the seed is one, but not the workload's
    assert differences([{"a": {"b": 1}, "seed": 0}, {"a": {"b": 1, "c": None}, "seed": 1}]) == [
        {"key": "seed", "values": [0, 1], "workload": False}]


def test_the_verb_prints_json_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    a = _pair(tmp_path / "a", [1.05, 1.04, 1.06], [1.0, 1.0, 1.0])
    b = _pair(tmp_path / "b", [0.95, 0.94, 0.96], [1.0, 1.0, 1.0])
    assert main(["compare", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"runs", "differences", "same_workload", "experiment_missing", "figures", "agree"}
    assert doc["agree"] is False
    assert set(doc["runs"][0]) == {"label", "dir", "run_id", "commit", "reps", "pairs", "requests_measured",
                                   "fidelity_ok", "fidelity_problems", "figures"}
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    for argv, named in ((["compare", str(a), str(nothing)], str(nothing)), (["compare", str(a)], str(a)),
                        (["compare", str(a), str(tmp_path / "a")], str(a))):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and named in err and err.startswith("testbed: error: ")
    with pytest.raises(TestbedError, match="only one run directory"):
        compare_runs([a])


def test_runs_differing_only_in_keys_that_do_not_define_a_workload_are_the_same_workload(tmp_path):
    a = _pair(tmp_path / "a", [1.05, 1.04, 1.06], [1.0, 1.1, 0.9])
    b = _pair(tmp_path / "b", [1.05, 1.04, 1.06], [1.0, 1.1, 0.9])
    doc = json.loads((b / "experiment.json").read_text())
    doc["experiment"] |= {"name": "other", "repetitions": 5, "sweep_paired": True}
    (b / "experiment.json").write_text(json.dumps(doc))
    got = compare_runs([a, b])
    assert got["same_workload"] is True and [d["key"] for d in got["differences"]] == ["name", "repetitions",
                                                                                      "sweep_paired"]
    text = lines(got)
    assert "  repetitions: 3 vs 5 (not the workload)" in text
    assert "their workloads are the same (only keys that do not define one differ)" in text


def test_a_copied_run_compares_equal_to_itself(tmp_path):
    a = _pair(tmp_path / "a", [1.05, 1.04, 1.06], [1.0, 1.1, 0.9])
    b = shutil.copytree(a, tmp_path / "b")
    doc = compare_runs([a, b])
    assert doc["agree"] is True and doc["differences"] == []
    assert doc["runs"][0]["figures"] == doc["runs"][1]["figures"]


def test_a_run_with_fewer_than_a_thousand_requests_a_fabric_says_what_it_lacks():
    from testbed.report.headline import lacking_requests

    few = {"requests_measured": {"zcube": [36, 40, 36], "roft": [36, 40, 35]}}
    line = lacking_requests(few)
    # 111 requests: the nearest-rank P99 is the 110th of 111, the 2nd slowest
    assert line.startswith("LACKS REQUESTS: ZCube 112, ROFT 111 measured, of the 1,000 a fabric")
    assert "the 2nd slowest of 111" in line
    assert lacking_requests({"requests_measured": {"zcube": [500, 600], "roft": [700, 300]}}) is None
    assert lacking_requests({"requests_measured": None}) is None


def test_a_simulated_networks_figures_say_which_engine_made_them():
    assert headline.engine_line("fluid").startswith("engine: FLOW-LEVEL") and "no PFC" in headline.engine_line("fluid")
    assert headline.engine_line("ns3") == "engine: packet-level: the ns-3 twin (docs/twin.md)"
    assert headline.engine_line("emulated") is None and headline.engine_line(None) is None
