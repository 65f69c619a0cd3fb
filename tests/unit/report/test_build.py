"""The experiment report (issue 6) on synthetic run directories: files, the
summary.json contract, numbers recomputed from the raw files, the fidelity
banner, PFC parts, compare, and bad input."""

from __future__ import annotations

import json
import re
import shutil
import statistics

import pandas as pd
import pytest

from common.errors import TestbedError
from testbed.cli import main
from testbed.report import build_report, compare, compare_html, plots_net, stats, verdict
from testbed.report.build import summarize
from testbed.report.load import load_experiment
from tests.support.report_fixture import write_experiment, write_rep

BANNER = "Fidelity check failed"


def rep_value(run, fabric: str, k: int, key: str):
    """One repetition's headline number, as the report computes it from that repetition's raw files (pinned
    by hand in test_numbers_recomputed_from_raw_files_by_hand): what the aggregation tests combine."""
    return stats.flat_get(stats.rep_metrics(load_experiment(run).reps[fabric][k - 1]), key)


@pytest.fixture
def one_rep(tmp_path):
    return write_experiment(tmp_path / "exp1", reps=1)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One clean two-fabric experiment, built once (a build draws a dozen figures)."""
    run = write_experiment(tmp_path_factory.mktemp("built") / "exp1", reps=1)
    return run, build_report(run), json.loads((run / "summary.json").read_text())


def test_files_written(built):
    run, page, _ = built
    assert page == run / "report.html" and page.is_file()
    for name in ("summary.json", "headline.csv", "figures/fct_cdf.png", "figures/slowdown_bins.png",
                 "figures/goodput_time.png", "figures/nic_load.png", "figures/queue_backlog.png",
                 "figures/util_heatmap_zcube.png", "figures/util_heatmap_roft.png",
                 "figures/topology_zcube.png", "figures/topology_roft.png"):
        assert (run / name).is_file(), name
        if name.endswith(".png"):
            assert (run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_page_is_self_contained(built):
    _, page, _ = built
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    assert "<script" not in text.lower() and "<link" not in text.lower()
    assert text.count('src="data:image/png;base64,') >= 9
    assert 'id="headline"' in text and "KV-transfer FCT P99" in text


def test_summary_contract(built):
    _, _, doc = built
    assert {"zcube", "roft", "ratios", "fidelity_ok", "seed_figures", "reps"} <= set(doc)
    assert doc["reps"] == 1
    for f in ("zcube", "roft"):
        e = doc[f]
        for key in ("goodput_bps", "requests_per_s", "queue_drops", "transfers", "verified", "pfc_pauses", "spread"):
            assert key in e, (f, key)
        assert set(e["fct_ms"]) >= {"p50", "p99", "p999"} and set(e["ttft_ms"]) >= {"p50", "p99"}
        assert "p99" in e["start_lateness_ms"]
        assert e["spread"]["fct_ms.p99"] == [e["fct_ms"]["p99"]] * 2
    assert set(doc["ratios"]) == {"goodput_bps", "fct_ms.p50", "fct_ms.p99", "fct_ms.p999", "ttft_ms.p50",
                                  "ttft_ms.p99", "requests_per_s", "throughput_tokens_per_s", "ep_exchange_ms.p99"}
    assert doc["seed_figures"]["goodput_bps"]["ratio"] == 1.15
    assert doc["seed_figures"]["ttft_ms.p99"]["ratio"] == 0.594
    assert doc["seed_figures"]["capex_units"]["ratio"] == 0.67


HAND = [  # (request, bytes, scheduled, start, end, verified): five transfers whose numbers are worked out below
    (0, 1000, 0.00, 0.0, 0.1, True), (0, 2000, 0.49, 0.5, 0.8, True), (1, 3000, 0.98, 1.0, 1.2, True),
    (2, 4000, 1.47, 1.5, 2.0, True), (3, 5000, 1.90, None, None, False)]


def test_numbers_recomputed_from_raw_files_by_hand(tmp_path):
    """Verified: the first four. FCTs 100, 300, 200, 500 ms, sorted 100 200 300 500: nearest rank
    ceil(p/100 x 4) gives p50 = 2nd = 200, p99 = p99.9 = 4th = 500. Span: first start 0.0 to last end 2.0
    = 2 s: goodput (1000+2000+3000+4000) B x 8 / 2 s = 40 000 bit/s, 3 requests / 2 s = 1.5 per s.
    Lateness (start - scheduled) of the started ones: 0, 10, 20, 30 ms: p50 = 10, p99 = 30. Real
    equivalent: 40 000 x 400e9 / 3e6 = 5 333 333 333 bit/s."""
    run = write_experiment(tmp_path / "exp", reps=1)
    path = run / "runs" / "zcube" / "rep1" / "transfers.csv"
    t = pd.read_csv(path).head(len(HAND)).copy()
    for i, (req, size, sched, start, end, ok) in enumerate(HAND):
        t.loc[i, ["request_id", "bytes", "scheduled_start", "start", "end", "verified"]] = \
            [req, size, sched, start, end, ok]
    t.to_csv(path, index=False)
    m = stats.rep_metrics(load_experiment(run).reps["zcube"][0])
    assert (m["transfers"], m["verified"], m["failed"], m["bytes"]) == (5, 4, 1, 10000)
    assert m["fct_ms"] == {"p50": 200.0, "p99": 500.0, "p999": 500.0}
    assert m["start_lateness_ms"] == {"p50": 10.0, "p99": 30.0}
    assert (m["goodput_bps"], m["requests_per_s"]) == (40000, 1.5)
    assert m["goodput_real_equivalent_bps"] == 5_333_333_333


def test_the_report_takes_its_numbers_from_the_raw_files(built):
    run, _, doc = built
    for f in ("zcube", "roft"):
        m = stats.rep_metrics(load_experiment(run).reps[f][0])
        for key in ("transfers", "verified", "fct_ms.p50", "fct_ms.p99", "goodput_bps", "requests_per_s"):
            assert stats.flat_get(doc[f], key) == stats.flat_get(m, key), (f, key)
        queues = pd.read_csv(run / "runs" / f / "rep1" / "queues.csv").sort_values("time", kind="stable")
        g = queues.groupby("queue")["drops"]
        assert doc[f]["queue_drops"] == int((g.last() - g.first()).sum()) > 0
        assert doc[f]["pfc_pauses"] == 0
        ttft = json.loads((run / "runs" / f / "rep1" / "summary.json").read_text())["ttft_ms"]["p99"]
        assert doc[f]["ttft_ms"]["p99"] == ttft
    assert (doc["zcube"]["transfers"], doc["zcube"]["verified"]) == (150, 150)  # the fixture's 150, none failed


def test_ratios_are_zcube_over_roft(built):
    _, _, doc = built
    for key, r in doc["ratios"].items():
        z, o = stats.flat_get(doc["zcube"], key), stats.flat_get(doc["roft"], key)
        if z is None or o is None:  # a planned replay has no serving throughput: no ratio either
            assert r is None, key
            continue
        assert r == pytest.approx(z / o, abs=1e-4), key
    assert doc["ratios"]["ttft_ms.p99"] == pytest.approx(0.9)  # fixture: 900 vs 1000 ms
    assert doc["ratios"]["fct_ms.p50"] < 1  # fixture: ROFT transfers are 1.6x slower


def test_headline_csv_matches_summary(built):
    run, _, doc = built
    rows = {r["metric"]: r for r in pd.read_csv(run / "headline.csv").to_dict("records")}
    assert rows["fct_ms.p99"]["zcube"] == doc["zcube"]["fct_ms"]["p99"]
    assert rows["verified"]["roft"] == doc["roft"]["verified"]
    assert rows["goodput_bps"]["ratio"] == pytest.approx(doc["ratios"]["goodput_bps"])


def test_clean_run_has_no_banner_and_says_pfc_off(built):
    _, page, doc = built
    text = page.read_text()
    assert doc["fidelity_ok"] is True and doc["fidelity_problems"] == []
    assert BANNER not in text
    assert "PFC was off" in text


def test_two_reps_take_medians_and_spread(tmp_path):
    run = write_experiment(tmp_path / "exp2", reps=2)
    build_report(run)
    doc = json.loads((run / "summary.json").read_text())
    assert doc["reps"] == 2
    for f in ("zcube", "roft"):
        for key in ("fct_ms.p99", "goodput_bps", "requests_per_s"):
            vals = [rep_value(run, f, k, key) for k in (1, 2)]
            assert vals[0] != vals[1], "fixture reps should differ"
            assert stats.flat_get(doc[f], key) == pytest.approx(statistics.median(vals))
            assert doc[f]["spread"][key] == [min(vals), max(vals)]
    html = (run / "report.html").read_text()
    assert "Medians over 2 repetitions" in html


def test_three_reps_take_the_median_not_the_mean(tmp_path):
    run = write_experiment(tmp_path / "exp3", reps=3, rep_options={("zcube", 3): {"slow": 4.0}})
    doc = summarize(load_experiment(run))
    vals = [rep_value(run, "zcube", k, "fct_ms.p99") for k in (1, 2, 3)]
    assert statistics.median(vals) != pytest.approx(statistics.mean(vals))
    assert doc["zcube"]["fct_ms"]["p99"] == statistics.median(vals)
    assert doc["reps"] == 3


def test_pfc_files_are_counted_and_drawn(tmp_path):
    run = write_experiment(tmp_path / "pfc", reps=1, rep_options={("zcube", 1): {"pfc": True},
                                                                  ("roft", 1): {"pfc": True}})
    (run / "runs" / "roft" / "rep1" / "pfc_ports.csv").unlink()  # fractions then come from pfc.txt
    page = build_report(run)
    doc = json.loads((run / "summary.json").read_text())
    for f in ("zcube", "roft"):
        lines = (run / "runs" / f / "rep1" / "pfc.txt").read_text().split("\n")
        pauses = sum(1 for line in lines if line.split()[4:5] == ["1"])
        assert doc[f]["pfc_pauses"] == pauses == 12
    assert (run / "figures" / "pfc_raster.png").is_file()
    assert (run / "figures" / "pfc_paused_fraction.png").is_file()
    text = page.read_text()
    assert "PFC was off" not in text and "PFC pause raster" in text
    rep = load_experiment(run).reps["zcube"][0]
    assert plots_net.pfc_clock(rep) == (100.0, "time since first queue sample (s)")


def test_bad_pfc_line_names_the_file(tmp_path):
    run = write_experiment(tmp_path / "badpfc", rep_options={("zcube", 1): {"pfc": True}})
    pfc = run / "runs" / "zcube" / "rep1" / "pfc.txt"
    pfc.write_text(pfc.read_text() + "garbage line\n")
    with pytest.raises(TestbedError, match=re.escape(str(pfc))):
        build_report(run)


FAILING = {
    "failed transfers": ({"failed": 3}, "3 of 150 transfers failed"),
    "replay fell behind": ({"warnings": ["start lateness P99 9.0 ms is over 5 ms: the replay fell behind the trace"]},
                           "fell behind"),
    "crashed agents": ({"crashed": {"gpu3": -9}}, "agents exited early"),
    "cpu saturated": ({"cpu": {"ovs_vswitchd_cores": 1.9, "machine_busy_fraction": 0.99, "saturated": True}},
                      "CPU saturated"),
    "pfc lossy": ({"pfc": True, "lossless_ok": False}, "not lossless"),
}


@pytest.mark.parametrize("case", list(FAILING))
def test_fidelity_problems(tmp_path, case):
    opts, reason = FAILING[case]
    run = write_experiment(tmp_path / "bad", reps=1, rep_options={("roft", 1): opts})
    doc = summarize(load_experiment(run))
    assert doc["fidelity_ok"] is False
    assert [p for p in doc["fidelity_problems"] if reason in p and p.startswith("roft rep1")]
    assert not [p for p in doc["fidelity_problems"] if p.startswith("zcube")]


def test_fidelity_banner_at_the_top(tmp_path):
    opts, reason = FAILING["crashed agents"]
    run = write_experiment(tmp_path / "bad", reps=1, rep_options={("roft", 1): opts})
    text = build_report(run).read_text()
    banner_at = text.find(BANNER)
    assert 0 <= banner_at < text.find("<h1>")
    assert re.search(r'<body>\s*<div class="banner"', text)  # the very first thing on the page
    assert reason in text[banner_at:text.find("</div>", banner_at)]
    assert json.loads((run / "summary.json").read_text())["fidelity_ok"] is False


def test_healthy_cpu_is_not_a_problem(tmp_path):
    cpu = {"ovs_vswitchd_cores": 0.7, "machine_busy_fraction": 0.6, "saturated": False}
    run = write_experiment(tmp_path / "cpu", rep_options={("zcube", 1): {"cpu": cpu}, ("roft", 1): {"cpu": cpu}})
    doc = summarize(load_experiment(run))
    assert doc["fidelity_ok"] is True and doc["zcube"]["cpu"]["ovs_vswitchd_cores"] == 0.7


def test_one_fabric_only(tmp_path):
    run = write_experiment(tmp_path / "solo", fabrics=("zcube",))
    page = build_report(run)
    doc = json.loads((run / "summary.json").read_text())
    assert "roft" not in doc and doc["ratios"] == {}
    assert "No ROFT run" in page.read_text()
    assert {c["figure"]: c["status"] for c in doc["seed_comparison"]}["goodput_bps"] == "not measured"


def test_plan_files_are_used_when_present(one_rep, built):
    plan = one_rep / "plan"
    plan.mkdir()
    cost = {"fabrics": {"zcube": {"switches": 2, "capex_units": 50.0}, "roft": {"switches": 4, "capex_units": 100.0}},
            "ratios_zcube_over_roft": {"switches": 0.5, "capex_units": 0.5}}  # what 'testbed run' writes
    (plan / "cost.json").write_text(json.dumps(cost))
    shutil.copyfile(built[0] / "figures" / "nic_load.png", plan / "zcube.png")
    build_report(one_rep)
    doc = json.loads((one_rep / "summary.json").read_text())
    assert doc["cost"]["source"] == "plan/cost.json" and doc["cost"]["ratios"]["capex_units"] == 0.5
    assert (one_rep / "figures" / "topology_zcube.png").read_bytes() == (plan / "zcube.png").read_bytes()


def test_a_failed_replay_is_a_fidelity_problem_not_a_crash(tmp_path):
    run = write_experiment(tmp_path / "lost", reps=2)
    lost = run / "runs" / "roft" / "rep2"
    shutil.rmtree(lost)
    lost.mkdir()
    (lost / "error.txt").write_text("EnvironmentProblem: 3 agents were not listening\n\nTraceback ...\n")
    doc = summarize(load_experiment(run))
    assert doc["roft"]["reps"] == 1 and doc["zcube"]["reps"] == 2
    assert doc["fidelity_ok"] is False
    assert "roft rep2: the replay failed (EnvironmentProblem: 3 agents were not listening)" in doc["fidelity_problems"]
    shutil.rmtree(run / "runs" / "roft" / "rep1")
    doc = summarize(load_experiment(run))
    assert "roft" not in doc and doc["ratios"] == {}


def test_missing_versions_and_optional_csvs(tmp_path):
    run = write_experiment(tmp_path / "sparse", versions=False)
    for name in ("queues.csv", "links.csv", "nics.csv", "goodput.csv"):
        (run / "runs" / "roft" / "rep1" / name).unlink()
    page = build_report(run)
    text = page.read_text()
    assert "versions.json is missing" in text
    doc = json.loads((run / "summary.json").read_text())
    assert doc["roft"]["queue_drops"] == 7  # from the replay summary when queues.csv is gone


def test_compare_text_and_html(tmp_path):
    a = write_experiment(tmp_path / "run-a", reps=1)
    b = write_experiment(tmp_path / "run-b", reps=2)
    text = compare(a, b)
    assert str(a) in text and str(b) in text
    assert "A: ZCube" in text and "B: ROFT" in text and "ZC/ROFT" in text
    line = next(x for x in text.splitlines() if x.startswith("TTFT proxy P99"))
    assert "0.900" in line  # both runs' ratio
    out = compare_html(a, b, tmp_path / "cmp.html")
    page = out.read_text()
    assert "run-a" in page and "run-b" in page and page.count("<table") >= 4


def test_cli_report_and_compare(tmp_path, one_rep, capsys):
    assert main(["report", str(one_rep)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(one_rep / "report.html")
    other = shutil.copytree(one_rep, tmp_path / "again")
    assert main(["compare", str(one_rep), str(other), "--html", str(tmp_path / "c.html")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (tmp_path / "c.html").is_file() and "Goodput" in (tmp_path / "c.html").read_text()
    assert out[0].split()[:3] == ["run", "commit", "reps"] and out[-1] == str(tmp_path / "c.html")
    # one run, or the same one twice, is not a comparison: one line naming it, exit 2
    assert main(["compare", str(one_rep)]) == 2
    assert main(["compare", str(one_rep), str(one_rep)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(str(one_rep) in e for e in err)


def _bad_layouts(tmp_path):
    nodir = tmp_path / "nope"
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    noruns = tmp_path / "noruns"
    noruns.mkdir()
    empty = tmp_path / "empty"
    (empty / "runs" / "zcube").mkdir(parents=True)
    nosummary = write_experiment(tmp_path / "nosum")
    (nosummary / "runs" / "roft" / "rep1" / "summary.json").unlink()
    allfailed = tmp_path / "allfailed"
    (allfailed / "runs" / "zcube" / "rep1").mkdir(parents=True)
    (allfailed / "runs" / "zcube" / "rep1" / "error.txt").write_text("boom\n")
    badjson = write_experiment(tmp_path / "badjson")
    (badjson / "runs" / "zcube" / "rep1" / "summary.json").write_text("{not json")
    return [(nodir, str(nodir)), (afile, str(afile)), (noruns, str(noruns)), (empty, str(empty / "runs")),
            (nosummary, str(nosummary / "runs" / "roft" / "rep1" / "summary.json")),
            (allfailed, str(allfailed / "runs")),
            (badjson, str(badjson / "runs" / "zcube" / "rep1" / "summary.json"))]


def test_bad_inputs_raise_with_the_path(tmp_path, capsys):
    for path, named in _bad_layouts(tmp_path):
        with pytest.raises(TestbedError) as exc:
            build_report(path)
        assert named in str(exc.value) and "expected" in str(exc.value) and "\n" not in str(exc.value)
        with pytest.raises(TestbedError):
            compare(path, path)
        assert main(["report", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and named in err


def test_quantile_ci():
    vals = list(range(1, 1001))
    lo, hi = stats.quantile_ci(vals, 50)
    assert lo < 500 < hi and hi - lo < 80
    assert stats.quantile_ci(vals, 99.9)[1] is None  # nothing bounds the P99.9 of 1000 samples from above
    assert stats.quantile_ci([], 50) is None


def _summary(ratios: dict, reps: int = 1, util: float = 0.9) -> dict:
    fab = {"spread": {}, "ci95": {}, "max_link_utilization": util, "fct_ms": {"p99": 10}, "ttft_ms": {"p99": 20}}
    return {"zcube": fab, "roft": fab, "ratios": ratios, "reps": reps}


@pytest.mark.parametrize("r,status", [(1.16, "matches"), (1.25, "matches"), (1.02, "not reproduced"),
                                      (0.85, "contradicts"), (1.05, "same direction, smaller"),
                                      (1.5, "same direction, larger")])
def test_goodput_verdicts(r, status):
    row = verdict.judge(_summary({"goodput_bps": r}), "goodput_bps")
    assert row["status"] == status
    assert f"{r:.3f}x" in row["sentence"]


def test_verdict_of_takes_the_intervals_verdict_else_the_spread_rule_and_needs_a_ratio():
    from testbed.report import headline

    assert verdict.verdict_of(_summary({}), "throughput_tokens_per_s") == headline.NOT_MEASURED
    conf = {"confidence": {"ratios": {"throughput_tokens_per_s": {"ci95": [1.02, 1.08]},
                                      "ttft_ms.p99": {"ci95": [0.9, 1.1]}}}}
    doc = _summary({"throughput_tokens_per_s": 1.05, "ttft_ms.p99": 1.0}) | conf
    assert verdict.verdict_of(doc, "throughput_tokens_per_s") == headline.BETTER  # the interval excludes 1
    assert verdict.verdict_of(doc, "ttft_ms.p99") == headline.NOT_RESOLVED
    doc["confidence"]["ratios"]["ttft_ms.p99"] = {"verdict": headline.WORSE}  # a verdict recorded wins
    assert verdict.verdict_of(doc, "ttft_ms.p99") == headline.WORSE


def test_ttft_verdict_and_context():
    row = verdict.judge(_summary({"ttft_ms.p99": 0.6}), "ttft_ms.p99")
    assert row["status"] == "matches"
    row = verdict.judge(_summary({"ttft_ms.p99": 1.0}, util=0.01), "ttft_ms.p99")
    assert row["status"] == "not reproduced"
    lazy = verdict.judge(_summary({"goodput_bps": 1.0}, util=0.01), "goodput_bps")
    assert "Neither fabric was loaded" in lazy["sentence"]


def test_overlapping_repetitions_are_not_a_difference():
    doc = _summary({"goodput_bps": 1.2}, reps=3)
    doc["zcube"] = dict(doc["zcube"], spread={"goodput_bps": [10, 14]})
    doc["roft"] = dict(doc["roft"], spread={"goodput_bps": [9, 11]})
    assert verdict.judge(doc, "goodput_bps")["status"] == "not reproduced"
    doc["roft"]["spread"] = {"goodput_bps": [8, 9]}
    assert verdict.judge(doc, "goodput_bps")["status"] == "matches"


def test_title_verdict():
    assert verdict.title_verdict(_summary({"goodput_bps": 1.0, "fct_ms.p99": 1.0, "ttft_ms.p99": 1.01})).startswith(
        "no measurable difference")
    assert verdict.title_verdict(_summary({"goodput_bps": 1.2, "fct_ms.p99": 0.5, "ttft_ms.p99": 1.0})).startswith(
        "ZCube ahead")
    assert verdict.title_verdict(_summary({"goodput_bps": 0.8, "fct_ms.p99": 1.0, "ttft_ms.p99": 1.0})).startswith(
        "ROFT ahead")
    assert verdict.title_verdict({"zcube": {}, "ratios": {}}).startswith("only ZCube")


def test_write_rep_fixture_is_consistent_with_itself(tmp_path):
    s = write_rep(tmp_path / "r", "zcube", failed=2)
    rows = pd.read_csv(tmp_path / "r" / "transfers.csv")
    assert s["failed"] == 2 and int(rows["verified"].sum()) == s["verified"] == 148 and len(rows) == 150


def test_package_functions_survive_their_modules_being_imported(built):
    """Importing the submodules must not replace the package's functions with them: the package's compare is
    still the function, and gives the submodule's text."""
    import testbed.report.build  # noqa: F401
    import testbed.report.side_by_side as side_by_side
    from testbed import report

    run, _, _ = built
    assert report.compare.__module__ == report.build_report.__module__ == "testbed.report"
    assert report.compare(run, run) == side_by_side.compare(run, run)


def test_one_repetition_uses_the_fct_confidence_intervals():
    doc = _summary({"fct_ms.p99": 0.7})
    doc["zcube"] = dict(doc["zcube"], ci95={"fct_ms.p99": [5.0, 8.0]})
    doc["roft"] = dict(doc["roft"], ci95={"fct_ms.p99": [7.5, None]})
    ok, why = verdict.resolvable(doc, "fct_ms.p99")
    assert not ok and "confidence intervals overlap" in why and "7.5..open" in why
    doc["roft"]["ci95"] = {"fct_ms.p99": [9.0, 12.0]}
    assert verdict.resolvable(doc, "fct_ms.p99") == (True, "")
    doc["reps"] = 2  # with repetitions their ranges decide, not the intervals
    doc["zcube"]["spread"] = {"fct_ms.p99": [6.0, 7.0]}
    doc["roft"]["spread"] = {"fct_ms.p99": [6.5, 11.0]}
    assert verdict.resolvable(doc, "fct_ms.p99")[0] is False
    doc["zcube"]["spread"] = {"fct_ms.p99": [6.0, 6.0]}  # identical repetitions: back to the intervals
    doc["roft"]["spread"] = {"fct_ms.p99": [10.0, 10.0]}
    doc["roft"]["ci95"] = {"fct_ms.p99": [7.0, 12.0]}
    assert verdict.resolvable(doc, "fct_ms.p99")[0] is False


def test_traffic_sentence_states_the_asymmetry():
    from testbed.report.build import traffic_sentence

    def cfg(model, p, d):
        return {"experiment": {"trace": {"path": "/x/mooncake.jsonl", "start_s": 0, "duration_s": 120, "speed": 2},
                               "serving": {"model": model, "dtype": "bf16", "prefill_tp": p, "decode_tp": d,
                                           "mode": "whole", "policy": "striped"}}}
    assert "gathers its heads from 4 prefill ranks" in traffic_sentence(cfg("llama-3.1-70b", 8, 2))
    assert "speed 2" in traffic_sentence(cfg("llama-3.1-70b", 8, 2))
    assert "one prefill rank sends a full copy" in traffic_sentence(cfg("deepseek-v3", 8, 8))
    assert "rank i sends to rank i" in traffic_sentence(cfg("llama-3.1-70b", 8, 8))
    assert "splits its heads over 2" in traffic_sentence(cfg("llama-3.1-70b", 4, 8))
    assert traffic_sentence({}) == ""


# ---------------------------------------------------------------- live runs and calibration
CALIBRATION = {"fabric": "roft", "knob": "serving.concurrency", "seed": {"throughput_ratio": 1.19, "ttft_ratio": 0.78},
               "levels": [{"level": 64, "throughput_ratio": 1.05, "ttft_p99_ratio": 0.95, "ttft_p50_ratio": 0.97,
                           "distance": 0.22},
                          {"level": 128, "throughput_ratio": 1.17, "ttft_p99_ratio": 0.71, "ttft_p50_ratio": 0.75,
                           "distance": 0.07}],
               "distance": 0.07, "within_resolution": False}


@pytest.fixture(scope="module")
def live_built(tmp_path_factory):
    root = tmp_path_factory.mktemp("live") / "run"
    write_experiment(root, reps=2, rep_options={(f, k): {"live": 3000.0 if f == "zcube" else 2400.0}
                                                for f in ("zcube", "roft") for k in (1, 2)})
    cal = CALIBRATION | {"chosen": CALIBRATION["levels"][1]}
    (root / "calibration.json").write_text(json.dumps(cal))
    page = build_report(root)
    return root, page.read_text(), json.loads((root / "summary.json").read_text())


def test_live_runs_are_judged_on_output_tokens_per_second(live_built):
    _, html, doc = live_built
    assert doc["ratios"]["throughput_tokens_per_s"] == pytest.approx(1.25)
    seed = {c["figure"]: c for c in doc["seed_comparison"]}
    assert "throughput_tokens_per_s" in seed and "goodput_bps" not in seed
    assert seed["throughput_tokens_per_s"]["status"] == "matches"  # +25% against the seed's +15%
    assert "Serving with the network in the loop" in html and "Output tokens/s" in html
    assert (live_built[0] / "figures" / "serving.png").is_file()


def test_the_calibration_comes_first_with_the_chosen_level(live_built):
    root, html, doc = live_built
    assert doc["calibration"]["chosen"]["level"] == 128
    assert html.index("Calibration: where the network matters") < html.index('id="headline"')
    assert "128 (chosen)" in html and "a prediction at that level, not a fit" in html
    assert (root / "figures" / "calibration.png").is_file()


def test_an_uncalibrated_run_says_so(built):
    _, page, doc = built
    html = page.read_text()
    assert doc["calibration"] is None and "was not calibrated" in html
    assert "planned replay" in html  # no serving loop: the section says why there are no serving figures


def test_every_assumption_of_a_live_run_is_listed_with_its_figures():
    from types import SimpleNamespace

    from testbed.experiment.schema import EXAMPLES_DIR, Override, resolve
    from testbed.report import serving

    pinned = [Override("link.time_dilation", 8, "test"), Override("link.represents", "200gbit", "test"),
              Override("serving.concurrency", 128, "test")]
    exp = resolve(None, pinned).experiment.model_dump(mode="json")
    got = serving.assumptions(SimpleNamespace(config={"experiment": exp}))
    text = "\n".join(got)
    assert "32 GPUs" in text and "3 Mbit/s" in text and "200 Gbit/s" in text
    assert "bytes are scaled by 8,333" in text  # 200e9 / (3e6 x 8)
    assert "8x slower" in text and "glm-5" in text and "30 ms of compute" in text
    assert "128 requests in flight" in text and "ROFT" in got[-1]
    plan = serving.assumptions(SimpleNamespace(config={"experiment": resolve(
        EXAMPLES_DIR / "kv-replay.yaml").experiment.model_dump(mode="json")}))
    assert any("planned replay" in a for a in plan) and not any("slower" in a for a in plan)


def test_a_calibration_applies_to_its_workload_whatever_the_knob_fabrics_and_paths():
    from types import SimpleNamespace

    from testbed.experiment.schema import resolve
    from testbed.report.build import calibration_applies

    run = resolve(None).experiment.model_dump(mode="json")
    run["trace"]["path"] = "/clone/data/traces/azure2023_conv.csv.gz"  # the default generates its workload
    calibrated = json.loads(json.dumps(run))
    calibrated.update(fabrics=["roft"], repetitions=1, name="moe-live", calibration=None)
    calibrated.pop("sweep")  # a calibration written before a key existed still applies
    calibrated["serving"]["concurrency"] = 384
    calibrated["link"]["represents"] = 100e9
    calibrated["trace"]["path"] = "/elsewhere/" + run["trace"]["path"].rsplit("/", 1)[-1]
    exp = SimpleNamespace(config={"experiment": run})
    assert calibration_applies({"experiment": calibrated}, exp) is True
    calibrated["serving"]["model"] = "deepseek-v3"
    assert calibration_applies({"experiment": calibrated}, exp) is False
    assert calibration_applies(None, exp) is None


def _nav_and_sections(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    nav = re.search(r"<nav>(.*?)</nav>", text, re.S).group(1)
    return re.findall(r'<a href="#([a-z]+)">([^<]*)</a>', nav), re.findall(r'<section id="([a-z]+)">', text)


def test_the_nav_lists_exactly_the_sections_that_rendered_in_order(built, tmp_path):
    from html import unescape

    from common.paths import REPO
    from testbed.report.build import SECTIONS

    assert len({s.id for s in SECTIONS}) == len(SECTIONS)
    label = {s.id: s.nav for s in SECTIONS}
    order = [s.id for s in SECTIONS]
    extras = write_experiment(tmp_path / "extras", reps=1)  # the shipped sensitivity and load curve: two more
    for name in ("sensitivity.json", "load_curve.json"):
        shutil.copy(REPO / "experiments" / name, extras / name)
    seen = []
    for page in (built[1], build_report(extras)):
        nav, sections = _nav_and_sections(page.read_text())
        assert [i for i, _ in nav] == sections and sections == [i for i in order if i in sections]
        assert all(unescape(text) == label[i] for i, text in nav)
        seen.append(sections)
    assert set(seen[1]) - set(seen[0]) == {"sensitivity", "loadcurve"}
    assert "faults" not in seen[0] and "breakdown" not in seen[0]  # bodies of None: neither section nor link


def test_the_nic_load_figure_of_many_servers_draws_lines_without_per_server_marks(one_rep, tmp_path, monkeypatch):
    """Beyond NIC_LOAD_SERVERS servers (2,048 at n = 16,384) a bar and a label per server take minutes: the ports
    become two lines and the title says how many servers are drawn."""
    import matplotlib.pyplot as plt

    from testbed.report import plots

    exp = load_experiment(one_rep)
    drawn = {}
    monkeypatch.setattr(plots, "save", lambda fig, out: drawn.setdefault("fig", fig) and out)
    plots.nic_load(exp, tmp_path / "few.png")
    few = drawn.pop("fig").axes[0]
    assert few.patches and few.texts and "dashed = server mean" in few.get_title(loc="left")
    monkeypatch.setattr(plots, "NIC_LOAD_SERVERS", 0)
    plots.nic_load(exp, tmp_path / "many.png")
    many = drawn.pop("fig").axes[0]
    assert not many.patches and not many.texts and len(many.lines) == 2
    assert "servers in order" in many.get_title(loc="left")
    plt.close("all")
