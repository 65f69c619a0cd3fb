"""A report built from a live run's saved files says what that run did (issue 24, part 6), shows where
TTFT went, and how sure each ratio is (parts 2 and 5). The run directories come from the serving model
run against an ideal network (tests/support/report_fixture.py: write_live_experiment), written as the live
driver writes them."""

from __future__ import annotations

import json
import re
from html import unescape

import pandas as pd
import pytest

from testbed.report import build_report, confidence
from testbed.report.load import load_experiment
from tests.support.report_fixture import live_experiment_doc, write_live_experiment
from traffic.model.serving_events import TTFT_PARTS


def section(html: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert m, f"no section {sid}"
    return unescape(re.sub(r"<[^>]+>", " ", m.group(1)))


def calibration_of(exp: dict, level: int = 16) -> dict:
    """calibration.json as `calibrate` writes it for this experiment (on ROFT, at other loads, represents
    100 and 200 Gbit/s), made before the schema had `faults` and `load_curve`."""
    cal_exp = json.loads(json.dumps(exp))
    cal_exp.update(fabrics=["roft"], repetitions=2, name="default")
    cal_exp["serving"]["concurrency"] = 32
    for key in ("faults", "load_curve"):
        cal_exp.pop(key)
    levels = [{"level": lv, "throughput_ratio": 1.2, "ttft_p99_ratio": 0.7, "ttft_p50_ratio": 0.7, "distance": d}
              for lv, d in ((16, 0.1), (32, 0.2))]
    return {"fabric": "roft", "knob": "serving.concurrency", "levels": levels, "chosen": levels[0] | {"level": level},
            "seed": {"throughput_ratio": 1.19, "ttft_ratio": 0.78}, "distance": 0.1, "within_resolution": False,
            "experiment": cal_exp}


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("live") / "run"
    write_live_experiment(root, reps=2, calibration=calibration_of(live_experiment_doc()))
    html = build_report(root).read_text()
    return root, html, json.loads((root / "summary.json").read_text())


def test_the_subtitle_says_what_a_link_stands_for(live_run):
    _, html, _ = live_run
    sub = re.search(r'class="sub">(.*?)</p>', html).group(1)
    assert "links 3 Mbit/s standing for 200 Gbit/s" in sub  # represents_bps 2e11, not a fixed 400


def test_the_calibrated_workload_gets_no_warning_that_its_calibration_does_not_apply(live_run):
    _, html, _ = live_run
    assert "the calibration does not apply" not in html
    assert "16 (chosen)" in section(html, "calibration")


def test_a_calibration_of_another_layout_is_named_as_not_applying(tmp_path):
    other = calibration_of(live_experiment_doc("two-server-ep"))
    root = write_live_experiment(tmp_path / "run", calibration=other)
    text = section(build_report(root).read_text(), "calibration")
    assert "differs from the calibrated one in more than the knob (serving.layout, serving.prefill_chunk_tokens)" \
        in " ".join(text.split())


def test_the_traffic_line_describes_the_live_layout_that_ran(live_run):
    _, html, _ = live_run
    head = " ".join(section(html, "headline").split())
    assert "glm-5 served live with the network in the loop: closed loop, 16 requests in flight" in head
    assert ("Engines (layout glm5-recipe): prefill 2 engines, each one TP4 instance inside one server (no "
            "all-to-all on the fabric); decode 1 EP8 group with data-parallel attention, over 2 servers each") in head
    assert "decode EP dispatch and combine between the servers of each group" in head
    assert "replayed at speed" not in head and "prefill TP 8 -> decode TP 2" not in head


def test_live_ttft_is_not_a_proxy_and_the_first_row_is_the_served_throughput(live_run):
    _, html, _ = live_run
    head, every = re.findall(r'<section id="headline">.*?<tbody>(.*?)</tbody>.*?<h3>Every figure</h3>.*?<tbody>(.*?)'
                             r'</tbody>', html, re.S)[0]
    for table, first in ((head, ["Output", "tokens/s"]), (every, ["Output", "tokens", "per", "second"])):
        rows = [unescape(re.sub(r"<[^>]+>", " ", r)).split() for r in re.findall(r"<tr>(.*?)</tr>", table)]
        assert rows[0][:len(first)] == first
        assert not any(r[0] == "Goodput" for r in rows[:3])  # KV goodput in emulated Mbit/s is not the headline
    assert "proxy" not in section(html, "headline")


def test_the_operating_point_is_the_live_drivers_own(live_run):
    root, html, doc = live_run
    text = " ".join(section(html, "operating").split())
    assert "The live driver's target: a closed loop of 16 requests in flight, the level calibrate chose" in text
    assert "intended: 0.7-0.8" not in text
    assert not any("instances.csv" in n or "queue.csv" in n for n in doc["notes"])
    assert not any("instances.csv" in n for n in load_experiment(root).notes)


def test_every_repetition_records_where_ttft_went_and_the_report_draws_it(live_run):
    root, html, _ = live_run
    for rep in ("zcube/rep1", "roft/rep2"):
        s = json.loads((root / "runs" / rep / "summary.json").read_text())
        b = s["ttft_breakdown_ms"]
        assert b["requests"] == s["requests"] - s["first_token_missing"]
        for which in ("p50", "p99"):
            assert sum(b[which][k] for k in TTFT_PARTS) == pytest.approx(b[which]["ttft"], abs=0.01)
        assert b["p99"]["ttft"] == s["ttft_ms"]["p99"] and b["p50"]["ttft"] == s["ttft_ms"]["p50"]
        assert b["p50"]["prefill_exchange"] == 0  # TP prefill: no all-to-all on the fabric
        d = s["decode_step_breakdown_ms"]
        assert d["steps"] > 0 and d["slowest"]["dispatch"]["pairs"][0]["steps"] > 0
    assert (root / "figures" / "ttft_breakdown.png").is_file()
    assert (root / "figures" / "decode_step_breakdown.png").is_file()
    text = " ".join(section(html, "breakdown").split())
    assert "P99 request" in text and "The slowest message's link" in text
    assert re.search(r"ZCube dispatch: gpu\d+:p\d -> gpu\d+:p\d in \d+ of \d+ steps: gpu\d+:p\d->", text)


def test_the_headline_says_how_many_requests_stand_behind_it_and_how_sure_each_ratio_is(live_run):
    _, html, doc = live_run
    conf = doc["confidence"]
    reqs = conf["samples"]["zcube"]["requests"]
    assert len(reqs) == 2 and all(n > 0 for n in reqs)
    for key in ("throughput_tokens_per_s", "ttft_ms.p50", "ttft_ms.p99"):
        lo, hi = conf["ratios"][key]["ci95"]
        assert lo <= conf["ratios"][key]["ratio"] <= hi
    head = " ".join(section(html, "headline").split())
    assert f"measured requests: ZCube {reqs[0]} + {reqs[1]}" in head
    assert f"requests measured (TTFT): ZCube {reqs[0]} + {reqs[1]}" in head
    assert "95% interval" in head and "Every repetition: ZCube rep k / ROFT rep k" in head


# ------------------------------------------------------------ the interval itself, on files made by hand
def write_rep(path, ttft_ms: list[float], steps: list[tuple[int, float]], warmup: float = 1.0, end: float = 11.5):
    """requests.csv with one request a TTFT, all measured; steps.csv with (tokens, duration) decode steps
    ending inside [warmup, end], back to back from the warm-up."""
    path.mkdir(parents=True)
    pd.DataFrame({"request_id": range(len(ttft_ms)), "arrival_s": warmup + 0.01,
                  "first_token_s": [warmup + 0.01 + t / 1e3 for t in ttft_ms],
                  "ttft_s": [t / 1e3 for t in ttft_ms]}).to_csv(path / "requests.csv", index=False)
    t, rows = warmup, []
    for k, (tokens, dur) in enumerate(steps):
        rows.append({"engine": "decode0", "step": k, "start_s": t, "end_s": t + dur, "requests": tokens})
        t += dur
    pd.DataFrame(rows).to_csv(path / "steps.csv", index=False)
    (path / "summary.json").write_text(json.dumps({"driver": "live"}))
    (path / "config.json").write_text(json.dumps({"replay": {"warmup_s": warmup, "duration_s": end,
                                                             "arrivals": "closed"}}))


def hand_run(tmp_path, zcube: dict, roft: dict):
    for f, reps in (("zcube", zcube), ("roft", roft)):
        for k, (ttft, steps) in enumerate(reps, start=1):
            write_rep(tmp_path / "runs" / f / f"rep{k}", ttft, steps)
    return confidence.confidence(load_experiment(tmp_path))


def test_one_repetition_has_no_interval_over_repetitions_only_its_own(tmp_path):
    # every ZCube request 800 ms, every ROFT one 1000 ms; steps of 64 tokens, 40 ms (ZCube) and 50 ms (ROFT),
    # back to back from the warm-up: 250 and 200 steps in the 10.5 s window, 16,000 and 12,800 tokens
    conf = hand_run(tmp_path, [([800.0] * 50, [(64, 0.04)] * 250)], [([1000.0] * 50, [(64, 0.05)] * 200)])
    for key, ratio in (("ttft_ms.p99", 0.8), ("throughput_tokens_per_s", 1.25)):
        got = conf["ratios"][key]
        assert (got["ratio"], got["ci95"], got["pairs"]) == (ratio, None, 1)
        assert got["verdict"] == confidence.SPREAD_UNKNOWN  # however sure the run is of itself
        assert got["per_rep"][0]["ratio"] == ratio and got["per_rep"][0]["within_ci95"] == [ratio, ratio]
    assert conf["pairs"] == [1] and conf["between_run"] is False
    assert conf["samples"] == {"zcube": {"requests": [50], "decode_steps": [250]},
                               "roft": {"requests": [50], "decode_steps": [200]}}


def test_the_same_distribution_on_both_fabrics_straddles_1_within_the_run(tmp_path):
    same = [float(x) for x in range(100, 1100, 10)]  # 100 requests
    steps = [(64, 0.03 + 0.01 * (k % 3)) for k in range(250)]
    conf = hand_run(tmp_path, [(same, steps)], [(list(reversed(same)), list(reversed(steps)))])
    for key in ("ttft_ms.p50", "ttft_ms.p99", "throughput_tokens_per_s"):
        (rep,) = conf["ratios"][key]["per_rep"]
        assert rep["ratio"] == 1.0 and rep["within_ci95"][0] < 1 < rep["within_ci95"][1], key


def test_two_repetitions_that_disagree_resolve_nothing(tmp_path):
    # ZCube's reps: P50 200 and 400 ms; ROFT's: 600 and 600: per-repetition ratios 1/3 and 2/3, each exact
    # within its run; their geometric mean is sqrt(2)/3, and two pairs leave t(0.975, 1) = 12.7
    z = [([200.0] * 10, [(8, 0.05)] * 200), ([400.0] * 10, [(8, 0.05)] * 200)]
    r = [([600.0] * 10, [(8, 0.05)] * 200), ([600.0] * 10, [(8, 0.05)] * 200)]
    conf = hand_run(tmp_path, z, r)
    got = conf["ratios"]["ttft_ms.p50"]
    assert got["ratio"] == round(2 ** 0.5 / 3, 4) and got["pairs"] == 2
    assert [p["within_ci95"] for p in got["per_rep"]] == [[0.3333, 0.3333], [0.6667, 0.6667]]
    assert got["ci95"][0] < 1 < got["ci95"][1] and got["verdict"] == "not resolved at this sample size"
    assert conf["samples"]["zcube"]["requests"] == [10, 10]


def _tokens_ratio_run(tmp_path, ratios: list[float]):
    """Repetitions whose output tokens/s ratio ZCube / ROFT is exactly each of ``ratios``: 200 equal ROFT steps
    in the window and 200 x ratio ZCube ones (the window's tokens over the window), the same TTFT on both."""
    ttft = [500.0] * 20
    z = [(ttft, [(64, 10.4 / round(200 * q))] * round(200 * q)) for q in ratios]
    r = [(ttft, [(64, 10.4 / 200)] * 200) for _ in ratios]
    return hand_run(tmp_path, z, r)


def test_repetitions_that_disagree_are_not_resolved_though_every_run_excludes_1(tmp_path):
    """Reruns gave 1.05, 0.98 and 1.03, each run sure of itself (its within-run interval a point): the interval
    over the repetitions spans 1, so the headline does not call it."""
    got = _tokens_ratio_run(tmp_path, [1.05, 0.98, 1.03])["ratios"]["throughput_tokens_per_s"]
    assert [p["ratio"] for p in got["per_rep"]] == [1.05, 0.98, 1.03]
    assert all(not p["within_ci95"][0] <= 1 <= p["within_ci95"][1] for p in got["per_rep"])
    # log ratios 0.0488, -0.0202, 0.0296: mean 0.0194, sd 0.0356, half-width 4.303 x 0.0356 / sqrt(3) = 0.0885
    assert got["ci95"] == pytest.approx([0.9332, 1.1139], abs=2e-4) and got["pairs"] == 3
    assert got["verdict"] == "not resolved at this sample size"
    assert got["ratio"] == pytest.approx((1.05 * 0.98 * 1.03) ** (1 / 3), abs=1e-4)


def test_repetitions_that_agree_tightly_resolve(tmp_path):
    got = _tokens_ratio_run(tmp_path, [1.05, 1.04, 1.06])["ratios"]["throughput_tokens_per_s"]
    assert 1 < got["ci95"][0] < got["ratio"] < got["ci95"][1] < 1.08 and got["verdict"] == "better"
    ttft = _tokens_ratio_run(tmp_path / "again", [1.05, 1.04, 1.06])["ratios"]["ttft_ms.p99"]
    assert ttft["ci95"] == [1.0, 1.0] and ttft["verdict"] == "not resolved at this sample size"  # equal: not better


def test_the_interval_over_repetitions_by_hand():
    assert confidence.t975(1) == 12.706 and confidence.t975(4) == 2.776 and confidence.t975(30) == 2.042
    assert 2.0 < confidence.t975(60) == pytest.approx(2.000, abs=1e-3) and confidence.t975(10**6) == pytest.approx(
        1.96, abs=1e-3)
    assert confidence.between_runs([]) == {"ratio": None, "ci95": None, "pairs": 0, "log_sd": None}
    assert confidence.between_runs([1.2]) == {"ratio": 1.2, "ci95": None, "pairs": 1, "log_sd": None}
    # ratios 2 and 0.5: log mean 0, so the centre is 1 whatever the spread
    b = confidence.between_runs([2.0, 0.5, None])
    assert b["ratio"] == 1.0 and b["pairs"] == 2 and b["ci95"][0] < 1 < b["ci95"][1]
    assert confidence.between_runs([1.1, 1.1, 1.1])["ci95"] == [1.1, 1.1]


def test_verdicts_and_what_stands_behind_a_percentile():
    assert confidence.verdict([1.02, 1.3], higher_is_better=True, pairs=1) == confidence.SPREAD_UNKNOWN
    assert confidence.verdict(None, higher_is_better=True, pairs=0) == "not measured"
    assert confidence.verdict([1.02, 1.3], higher_is_better=False) == "worse"
    assert confidence.verdict([1.02, 1.3], higher_is_better=True) == "better"
    assert confidence.verdict([0.7, 0.98], higher_is_better=False) == "better"
    assert confidence.verdict([0.9, 1.1], higher_is_better=False) == "not resolved at this sample size"
    conf = {"samples": {"zcube": {"requests": [72, 74]}, "roft": {"requests": [150, 151]}}}
    # 72 requests: the nearest-rank P99 is rank ceil(71.28) = 72, the slowest
    assert confidence.behind(conf, "ttft_ms.p99") == (
        "measured requests: ZCube 72 + 74, ROFT 150 + 151 (per repetition); the P99 of 72 requests is the slowest "
        "one (rank 72 of 72), so its within-run interval cannot reach above it")
    conf["samples"]["zcube"]["requests"] = [300, 300]
    conf["samples"]["roft"]["requests"] = [300, 300]
    # 300 requests: rank ceil(297) = 297, the 4th slowest
    assert confidence.behind(conf, "ttft_ms.p99").endswith("the P99 is the 4th slowest")


def test_the_requests_a_p99_needs_before_its_interval_closes_above():
    # ceil(0.99 n + 1.96 sqrt(0.0099 n)) + 1 <= n first holds at n = 563 (562: 556.38 + 4.62 -> 562 + 1 = 563)
    assert confidence.requests_to_bound_p99() == 563


def test_nothing_on_a_live_page_speaks_of_the_planned_replay(live_run):
    _, html, doc = live_run
    text = " ".join(unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<img[^>]*>", "", html))).split())
    for stale in ("proxy", "400 Gbit/s", "intended: 0.7", "instances.csv", "replayed at speed"):
        assert stale not in text, stale
    ttft = next(c for c in doc["seed_comparison"] if c["figure"] == "ttft_ms.p99")
    assert "The network's part of the P99 request's TTFT (its prefill EP exchange, KV transfer and first decode " \
           "step's exchange) is" in ttft["sentence"]
    assumptions = section(html, "assumptions")
    assert "layout glm5-recipe (NVIDIA Dynamo's GLM-5 recipe" in " ".join(assumptions.split())


def test_compare_lists_a_live_runs_served_throughput_first(live_run, tmp_path):
    from testbed.report import compare

    root, _, _ = live_run
    lines = compare(root, root).splitlines()
    assert lines[5].startswith("Output tokens per second (1/s)") and lines[7].startswith("TTFT P99 (ms)")


def test_the_prefix_caches_hit_per_repetition_and_per_fabric_token_weighted(tmp_path):
    """Each repetition's summary.json counts its measured requests' tokens (set by hand here); a fabric pools its
    repetitions' tokens: ZCube (600 + 1,200) / (1,000 + 3,000) = 45 %, 40 % from the GPU and 5 % from the host
    tier; the terminal, summary.json and the serving section show the same."""
    from testbed.report import headline_lines

    root = write_live_experiment(tmp_path / "run", reps=2)
    counts = {("zcube", 1): (1000, 600, 200), ("zcube", 2): (3000, 1200, 0), ("roft", 1): (2000, 1000, 500),
              ("roft", 2): (2000, 1000, 500)}
    for (f, k), (inp, cached, host) in counts.items():
        path = root / "runs" / f / f"rep{k}" / "summary.json"
        s = json.loads(path.read_text())
        s["prefix_cache"] |= {"requests": 10, "input_tokens": inp, "cached_tokens": cached, "host_tokens": host,
                              "hit_rate": cached / inp, "device_hit_rate": (cached - host) / inp,
                              "host_hit_rate": host / inp, "cache": True, "hicache_ratio": 2.0}
        path.write_text(json.dumps(s))
    html = build_report(root).read_text()
    doc = json.loads((root / "summary.json").read_text())
    z = doc["zcube"]["prefix_cache"]
    assert (z["requests"], z["input_tokens"], z["cached_tokens"], z["host_tokens"]) == (20, 4000, 1800, 200)
    assert (z["hit_rate"], z["device_hit_rate"], z["host_hit_rate"]) == (0.45, 0.4, 0.05)
    assert [r["hit_rate"] for r in z["per_rep"]] == [0.6, 0.4]
    assert doc["headline"]["prefix_cache"]["roft"]["hit_rate"] == 0.5
    assert ("prefix-cache hit, token-weighted over the measured requests (TTFT's): ZCube 45.0 % (GPU 40.0 % + host "
            "5.0 %; repetitions 60.0, 40.0 %), ROFT 50.0 % (GPU 25.0 % + host 25.0 %; repetitions 50.0, 50.0 %)") \
        in headline_lines(root)
    text = " ".join(section(html, "serving").split())
    assert "ZCube all, pooled 20 4,000 1,800 40.0 % 5.0 % 45.0 %" in text
    assert "ROFT rep2 10 2,000 1,000 25.0 % 25.0 % 50.0 %" in text
    assert "token-weighted over the measured requests (arriving in [warmup, duration), as TTFT's)" in text


def test_a_run_without_a_prefix_cache_says_so(live_run):
    root, html, doc = live_run  # the fixture serves Azure's requests with prefix_cache false
    assert doc["zcube"]["prefix_cache"]["hit_rate"] == 0.0 and doc["zcube"]["prefix_cache"]["cache"] is False
    assert "This run had no prefix cache: none (serving.prefix_cache false)." in " ".join(section(html, "serving")
                                                                                           .split())
