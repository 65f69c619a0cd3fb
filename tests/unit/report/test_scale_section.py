"""The Scale section: ZCube/ROFT ratios per n from a sweep directory over gpus, the hottest links at the largest
n, and the files it writes."""

from __future__ import annotations

import json

import pytest

from testbed.report import scale_section


def _rep(root, point, fabric, tput, p99, pauses, links):
    rep = root / "points" / point / "runs" / fabric / "rep1"
    rep.mkdir(parents=True)
    (rep / "summary.json").write_text(json.dumps({"throughput_tokens_per_s": tput, "ttft_ms": {"p99": p99},
                                                  "pfc": {"enabled": True, "pauses": pauses}}))
    (rep / "links.csv").write_text("queue,towards,bytes,utilization\n" + "".join(
        f"{q},{t},{b},{u}\n" for q, t, b, u in links))


def _sweep(tmp_path, ns=(32, 64)):
    points = []
    for n in ns:
        name = f"gpus={n},serving.concurrency={4 * n}"
        points.append({"name": name, "values": {"gpus": str(n), "serving.concurrency": str(4 * n)},
                       "dir": f"points/{name}"})
        _rep(tmp_path, name, "zcube", 100.0 * n, 200.0, 10, [("sw1:1", "sw2", 900, 0.2), ("gpu1:p1", "sw1", 50, 0.01)])
        _rep(tmp_path, name, "roft", 50.0 * n, 400.0, 20, [("leaf1:9", "spine1", 1000, 0.4)])
    (tmp_path / "sweep.json").write_text(json.dumps({"params": {"gpus": [str(n) for n in ns],
                                                                "serving.concurrency": [str(4 * n) for n in ns]},
                                                     "paired": True, "points": points[::-1]}))
    return tmp_path


def test_the_ratios_per_n_and_the_hottest_links_at_the_largest(tmp_path):
    d = scale_section.doc(_sweep(tmp_path))
    assert [r["n"] for r in d["points"]] == [32, 64]  # sorted by n whatever the sweep's order
    r = d["points"][1]["ratios"]
    assert r == {"throughput_tokens_per_s": 2.0, "ttft_p99_ms": 0.5, "pfc_pauses": 0.5, "busiest_link": 0.5}
    assert d["hottest_at"] == 64 and [h["queue"] for h in d["hottest"]["zcube"]] == ["sw1:1", "gpu1:p1"]
    assert d["hottest"]["roft"][0] == {"queue": "leaf1:9", "towards": "spine1", "utilization": 0.4, "bytes": 1000}
    html = scale_section.section(d, None)
    assert "serving.concurrency" in html and "Hottest links at n = 64" in html and "leaf1:9 -&gt; spine1" in html
    # one repetition a fabric: the ratio without an interval; no plan/cost.json, no headline.json: no cost, no time
    p = d["points"][1]
    one = p["intervals"]["throughput_tokens_per_s"]
    assert (one["ratio"], one["ci95"], one["pairs"]) == (2.0, None, 1) and one["verdict"].startswith("not resolved")
    assert p["cost"] is None and p["wall_s"] is None and "2.000 (one pair: no interval)" in html
    assert "Cost at each size" not in html


def test_intervals_cost_and_wall_time_of_a_point(tmp_path):
    """Three pairs of repetitions whose throughput ratios are 1.1, 1.2, 1.3: their geometric mean and Student's t
    interval over the logs (the headline's), which holds 1; the point's plan/cost.json and the wall seconds its
    repetitions took."""
    root = _sweep(tmp_path, ns=(32,))
    point = root / "points" / "gpus=32,serving.concurrency=128"
    for k, z in ((2, 1.2), (3, 1.3)):
        for fabric, tput in (("zcube", 100 * z), ("roft", 100.0)):
            rep = point / "runs" / fabric / f"rep{k}"
            rep.mkdir(parents=True)
            (rep / "summary.json").write_text(json.dumps({"throughput_tokens_per_s": tput, "ttft_ms": {"p99": 1.0}}))
    for fabric, tput in (("zcube", 110.0), ("roft", 100.0)):  # rep1's
        (point / "runs" / fabric / "rep1" / "summary.json").write_text(json.dumps(
            {"throughput_tokens_per_s": tput, "ttft_ms": {"p99": 1.0}}))
    (point / "plan").mkdir()
    (point / "plan" / "cost.json").write_text(json.dumps({
        "fabrics": {"zcube": {"switches": 8, "transceivers": 192, "fabric_transceivers": 64, "capex_units": 315.2},
                    "roft": {"switches": 12, "transceivers": 256, "fabric_transceivers": 128, "capex_units": 438.4}},
        "ratios_zcube_over_roft": {"switches": 0.6667, "transceivers": 0.75, "fabric_transceivers": 0.5,
                                   "capex_units": 0.719}}))
    (point / "headline.json").write_text(json.dumps({"outcomes": [{"wall_s": 2.5}, {"wall_s": 4.0},
                                                                  {"status": "error"}]}))
    p = scale_section.doc(root)["points"][0]
    tput = p["intervals"]["throughput_tokens_per_s"]
    assert tput["ratio"] == pytest.approx((1.1 * 1.2 * 1.3) ** (1 / 3), abs=1e-4) and tput["pairs"] == 3
    # the logs' sd 0.0835 over 3 pairs: t(2) 4.303 x 0.0835 / sqrt(3) = 0.2075 either side: [0.973, 1.473]
    assert tput["ci95"] == [pytest.approx(0.9728, abs=2e-4), pytest.approx(1.4734, abs=2e-4)]
    assert tput["verdict"] == "not resolved at this sample size"
    assert p["cost"]["ratios"]["switches"] == 0.6667 and p["wall_s"] == 6.5
    html = scale_section.section(scale_section.doc(root), None)
    assert "Cost at each size" in html and "8 / 12 (0.67)" in html and "192 / 256 (0.75)" in html
    (point / "headline.json").write_text(json.dumps({"outcomes": [{"wall_s": 2.5}, {"wall_s": 4.0}],
                                                     "elapsed_s": 4.1}))  # two at once: their span, not the sum
    assert scale_section.doc(root)["points"][0]["wall_s"] == 4.1


def test_write_puts_json_figure_and_page_in_the_sweep(tmp_path):
    page = scale_section.write(_sweep(tmp_path))
    assert page.is_file() and (tmp_path / "scale.png").stat().st_size > 0
    assert json.loads((tmp_path / "scale.json").read_text())["paired"] is True
    assert "<img" in page.read_text()


def test_a_point_missing_a_fabric_is_left_out_and_a_sweep_without_gpus_is_refused(tmp_path):
    root = _sweep(tmp_path)
    for p in (root / "points" / "gpus=64,serving.concurrency=256" / "runs" / "roft" / "rep1").iterdir():
        p.unlink()
    assert [r["n"] for r in scale_section.doc(root)["points"]] == [32]
    (root / "sweep.json").write_text(json.dumps({"params": {"link.rate": ["3mbit"]}, "points": []}))
    with pytest.raises(ValueError, match="does not vary gpus"):
        scale_section.doc(root)
    with pytest.raises(ValueError, match="no sweep.json"):
        scale_section.doc(tmp_path / "nothing")
