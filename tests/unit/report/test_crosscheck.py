"""testbed.report.crosscheck: two engines' run directories compared repetition by repetition, on hand-made runs
whose answers are known by construction (no engine runs)."""

from __future__ import annotations

import csv
import json

import pytest

from common.errors import TestbedError
from testbed.experiment import crosscheck as run_xc
from testbed.report import crosscheck as xc
from testbed.report import crosscheck_section

EXPERIMENT = {"serving": {"warmup_s": 1.0}, "trace": {"duration_s": 10.0}, "seed": 0, "hash_seed": None,
              "paths_from": None}


def _csv(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def make_run(root, backend, *, tokens, fct_scale=1.0, per_s=4.0, link=None, reps=1, paths_from=None,
             pauses=None, ttft_p50=300.0):
    """A run directory as `testbed run` writes it, as far as the cross-check reads it: ``tokens`` fabric ->
    output tokens/s; KV transfers of 10..100 cluster ms and EP messages of 1..10 ms, times ``fct_scale``, on a
    clock of ``per_s`` wall seconds per cluster second; links.csv from ``link`` (queue -> bytes)."""
    root.mkdir(parents=True)
    (root / "experiment.json").write_text(json.dumps({"experiment": EXPERIMENT | {"backend": backend,
                                                                                  "paths_from": paths_from}}))
    for fabric, tp in tokens.items():
        for k in range(1, reps + 1):
            d = root / "runs" / fabric / f"rep{k}"
            d.mkdir(parents=True)
            (d / "summary.json").write_text(json.dumps({
                "throughput_tokens_per_s": tp, "ttft_ms": {"p50": ttft_p50, "p99": 900.0}, "wall_per_run_s": per_s,
                "pfc": {"enabled": True, "pauses": sum((pauses or {}).values())}, "queue_drops": 0}))
            _csv(d / "transfers.csv", [{"id": i, "start": 0.0, "end": (10 + 10 * i) * fct_scale * per_s / 1e3}
                                       for i in range(10)])
            _csv(d / "messages.csv", [{"id": 100 + i, "kind": kind, "start": 1.0,
                                       "end": 1.0 + (1 + i) * fct_scale * per_s / 1e3}
                                      for kind in ("dispatch", "combine") for i in range(10)])
            _csv(d / "links.csv", [{"queue": q, "towards": "x", "bytes": b, "utilization": 0}
                                   for q, b in (link or {"sw1:1": 1000.0}).items()])
            _csv(d / "pfc_ports.csv", [{"queue": q, "pauses": n} for q, n in (pauses or {"gpu1:p1": 0}).items()])
            _csv(d / "steps.csv", [{"engine": "decode0", "start_s": 2.0 + s, "compute_end_s": 2.03 + s,
                                    "dispatch_end_s": 2.032 + s, "end_s": 2.035 + s} for s in range(3)])
            _csv(d / "requests.csv", [{"arrival_s": 2.0, "ttft_s": 0.3, "prefill_queue_s": 0.1, "kv_transfer_s": 0.05}])
    return root


def test_identical_runs_agree_on_every_goal_and_a_dilated_clock_is_taken_out(tmp_path):
    a = make_run(tmp_path / "a", "emulated", tokens={"zcube": 105.0, "roft": 100.0}, per_s=4.0)
    b = make_run(tmp_path / "b", "ns3", tokens={"zcube": 105.0, "roft": 100.0}, per_s=1.0, paths_from=str(a))
    doc = xc.compare_runs(a, b)
    rep = doc["repetitions"][0]
    assert doc["same_paths"] == "recorded" and doc["agreement"]["all"] and not doc["agreement"]["missed"]
    kv = rep["fabrics"]["zcube"]["fct"]["kv"]
    assert kv["a"]["p50"] == pytest.approx(55.0) and kv["p50_b_over_a"] == 1.0 and kv["ks"] == 0.0
    assert rep["ratios"]["a"]["throughput_tokens_per_s"] == rep["ratios"]["b"]["throughput_tokens_per_s"] == 1.05
    assert rep["fabrics"]["roft"]["decode_step_ms"]["a"]["p50"] == pytest.approx(35.0)
    assert "agree within every goal" in xc.line(doc)


def test_each_goal_fails_when_its_figure_moves_past_it(tmp_path):
    a = make_run(tmp_path / "a", "emulated", tokens={"zcube": 105.0, "roft": 100.0},
                 link={"sw1:1": 1000.0, "sw1:2": 500.0, "sw1:3": 1.0}, pauses={"sw1:1": 3})
    # ZCube's lead 2 % on B against 5 % on A, every FCT x1.5, one link 10 % off, TTFT P50 10 % off
    b = make_run(tmp_path / "b", "ns3", tokens={"zcube": 102.0, "roft": 100.0}, fct_scale=1.5,
                 link={"sw1:1": 1000.0, "sw1:2": 550.0, "sw1:3": 9.0}, pauses={"sw1:1": 2, "sw2:1": 5}, ttft_p50=330.0)
    doc = xc.compare_runs(a, b)
    goals = doc["repetitions"][0]["goals"]
    assert goals["ratio_throughput"] is False and goals["zcube_ttft_p50"] is False
    assert goals["zcube_kv_fct_p50"] is False and goals["roft_dispatch_fct_p99"] is False
    lb = doc["repetitions"][0]["fabrics"]["zcube"]["link_bytes"]
    assert lb["links"] == 2 and lb["outside"] == {"sw1:2": 1.1} and goals["zcube_link_bytes"] is False  # sw1:3 < 1 %
    pp = doc["repetitions"][0]["fabrics"]["zcube"]["pauses_per_port"]
    assert (pp["a"], pp["b"], pp["ports_both"]) == (3, 7, 1)
    assert doc["same_paths"] == "own" and not doc["agreement"]["all"]
    assert "do not agree on: ratio_throughput" in xc.line(doc)
    assert doc["repetitions"][0]["fabrics"]["zcube"]["fct"]["kv"]["ks"] > 0.3


def test_ks_distance_is_zero_for_one_sample_and_one_for_disjoint_ones():
    assert xc.ks_distance([1, 2, 3], [3, 2, 1]) == 0.0
    assert xc.ks_distance([1, 2, 3], [10, 11]) == 1.0
    assert xc.ks_distance([1, 2, 3, 4], [3, 4, 5, 6]) == 0.5
    assert xc.ks_distance([], [1]) is None


def test_the_100g_ablation_is_compared_on_roft(tmp_path, monkeypatch):
    import testbed.report

    built = []
    monkeypatch.setattr(testbed.report, "build_report", built.append)  # B's page is built again: not here
    runs = {name: make_run(tmp_path / name, backend, tokens={"zcube": 110.0, "roft": tp})
            for name, backend, tp in (("a200", "emulated", 120.0), ("b200", "ns3", 125.0), ("a100", "emulated", 100.0),
                                      ("b100", "ns3", 100.0))}
    doc = run_xc.compare_only(runs["a200"], runs["b200"], (runs["a100"], runs["b100"]))
    ab = doc["roft_200g_over_100g"]
    assert xc.bandwidth_ablation(runs["a200"], runs["b200"], runs["a100"], runs["b100"]) == ab
    assert (ab["a"]["throughput"], ab["b"]["throughput"]) == (1.2, 1.25) and ab["within"]["throughput"] is False
    assert ab["within"]["ttft_p99"] is True and "roft_200g_over_100g_throughput" in doc["agreement"]["missed"]
    written = json.loads((runs["b200"] / "crosscheck.json").read_text())
    assert "_fcts" not in written["repetitions"][0] and written["agreement"] == doc["agreement"]
    assert built == [runs["b200"]]


def test_runs_with_nothing_in_common_are_refused_in_one_line(tmp_path):
    a = make_run(tmp_path / "a", "emulated", tokens={"zcube": 1.0, "roft": 1.0})
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "experiment.json").write_text(json.dumps({"experiment": EXPERIMENT}))
    with pytest.raises(TestbedError, match="no repetition in common"):
        xc.compare_runs(a, tmp_path / "b")
    with pytest.raises(TestbedError, match="--engines 'ns3': expected two different backends"):
        run_xc.engines_of("ns3")
    assert run_xc.engines_of("ns3,ideal") == ("ns3", "ideal")


def test_the_section_shows_the_line_the_tables_and_the_plot(tmp_path):
    a = make_run(tmp_path / "a", "emulated", tokens={"zcube": 105.0, "roft": 100.0}, reps=2)
    b = make_run(tmp_path / "b", "ns3", tokens={"zcube": 105.0, "roft": 100.0}, reps=2)
    doc = xc.strip(xc.compare_runs(a, b))
    (b / "crosscheck.json").write_text(json.dumps(doc))
    (tmp_path / "fig").mkdir()
    html = crosscheck_section.report_section(b, tmp_path / "fig")
    assert "agree within every goal" in html and "rep2" in html and "kv FCT p99" in html
    assert (tmp_path / "fig" / "crosscheck_fct.png").stat().st_size > 1000
    assert crosscheck_section.report_section(a, tmp_path / "fig") is None
