"""The cross-check's comparison: per-link ratios, twin/emulator figures, the ZCube/ROFT ratios of both
backends and the goals; reading run directories; the verb's wiring."""

from __future__ import annotations

import json

import pytest

from common.errors import TestbedError
from testbed.cli import build_parser
from testbed.cli import crosscheck as crosscheck_verb
from testbed.experiment import crosscheck


def _fig(tput, p99, links=None, pauses=3):
    return {"throughput_tokens_per_s": tput, "ttft_p50_ms": p99 / 2, "ttft_p99_ms": p99, "kv_fct_p50_ms": 10.0,
            "kv_fct_p99_ms": 40.0, "ep_exchange_p99_ms": 20.0, "pfc_pauses": pauses, "links": links or {}}


LINKS = {"sw1:1": 1000.0, "sw1:2": 2000.0, "gpu1:p1": 500.0, "idle": 1.0}


def test_a_twin_that_matches_meets_every_goal():
    emu = {"zcube": _fig(100.0, 200.0, LINKS), "roft": _fig(95.0, 220.0, LINKS)}
    twin = {"zcube": _fig(104.0, 190.0, {q: b * 1.02 for q, b in LINKS.items()}),
            "roft": _fig(99.0, 212.0, {q: b * 0.97 for q, b in LINKS.items()})}
    doc = crosscheck.compare(emu, twin)
    z = doc["fabrics"]["zcube"]
    assert z["twin_over_emulator"]["throughput_tokens_per_s"] == 1.04
    assert z["link_bytes"]["links"] == 3  # the idle link (under 1 % of the busiest) is not counted
    assert z["link_bytes"]["within_5pct"] == 1.0 and z["link_bytes"]["median"] == 1.02
    assert doc["ratios"]["emulator"]["throughput_tokens_per_s"] == round(100 / 95, 4)
    assert doc["within_goals"]["all"] is True
    lines = crosscheck.table(doc)
    assert any("zcube/roft" in ln and "ttft_p99_ms" in ln for ln in lines) and lines[-1].startswith("within goals")


def test_each_goal_fails_on_its_own():
    emu = {"zcube": _fig(100.0, 200.0, LINKS), "roft": _fig(100.0, 200.0, LINKS)}
    twin = {"zcube": _fig(115.0, 300.0, dict(LINKS, **{"sw1:1": 1100.0})), "roft": _fig(100.0, 200.0, LINKS)}
    w = crosscheck.compare(emu, twin)["within_goals"]
    assert w["zcube_link_bytes"] is False and w["roft_link_bytes"] is True
    assert w["zcube_throughput"] is False and w["roft_throughput"] is True
    assert w["ratio_throughput"] is False and w["ratio_ttft_p99"] is False and w["all"] is False


def test_link_overhead_separates_the_counting_from_the_work():
    emu = {"zcube": _fig(100.0, 200.0, LINKS) | {"overhead": {"sw1:1": 1.7, "sw1:2": 1.75, "idle": 3.0}}}
    twin = {"zcube": _fig(110.0, 200.0, {q: b * 1.1 for q, b in LINKS.items()}) |
            {"overhead": {"sw1:1": 1.7, "sw1:2": 1.4, "idle": 1.0}}}
    z = crosscheck.compare(emu, twin)["fabrics"]["zcube"]
    assert z["link_bytes"]["median"] == 1.1 and z["link_bytes"]["within_5pct"] == 0.0
    assert z["link_overhead"] == {"links": 2, "median": 0.9, "within_5pct": 0.5}  # gpu1:p1 has none, idle not counted
    assert any("wire/payload" in ln for ln in crosscheck.table(crosscheck.compare(emu, twin)))


def test_the_twin_alone_has_its_ratios_and_no_verdict():
    doc = crosscheck.compare(None, {"zcube": _fig(100.0, 200.0), "roft": _fig(50.0, 400.0)})
    assert doc["ratios"] == {"twin": doc["ratios"]["twin"]} and doc["ratios"]["twin"]["ttft_p99_ms"] == 0.5
    assert "emulator" not in doc["fabrics"]["zcube"] and doc["within_goals"]["all"] is None


def test_figures_come_from_the_repetition_directory(tmp_path):
    rep = tmp_path / "runs" / "zcube" / "rep1"
    rep.mkdir(parents=True)
    (rep / "summary.json").write_text(json.dumps({
        "throughput_tokens_per_s": 10.0, "ttft_ms": {"p50": 1.0, "p99": 2.0}, "fct_ms": {"p50": 3.0, "p99": 4.0},
        "ep_exchange_ms": {"p50": 1.0, "p99": 5.0}, "pfc": {"enabled": True, "pauses": 7}}))
    (rep / "links.csv").write_text("queue,towards,bytes,utilization\nsw1:1,sw2,1200,0.1\n")
    (rep / "link_traffic.csv").write_text("queue,towards,kv_bytes,ep_bytes,share,top,measured_bytes,model_vs_measured\n"
                                          "sw1:1,sw2,400,200,exact,,1200,0.5\nsw1:2,sw3,0,0,exact,,0,\n")
    got = crosscheck.side(tmp_path)
    assert list(got) == ["zcube"] and got["zcube"]["kv_fct_p99_ms"] == 4.0 and got["zcube"]["pfc_pauses"] == 7
    assert got["zcube"]["links"] == {"sw1:1": 1200.0} and got["zcube"]["overhead"] == {"sw1:1": 2.0}
    with pytest.raises(TestbedError, match="no runs/<fabric>/rep1/summary.json"):
        crosscheck.side(tmp_path / "nothing")


def test_the_verb_runs_the_library_and_prints_the_json(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake(experiment, overrides, out_root, against, log):
        seen.update(experiment=experiment, against=against, keys=[o.key for o in overrides])
        return crosscheck.compare(None, {"zcube": _fig(1.0, 1.0), "roft": _fig(1.0, 1.0)}), tmp_path

    monkeypatch.setattr(crosscheck, "run_crosscheck", fake)
    args = build_parser().parse_args(["crosscheck", "--against", str(tmp_path), "--gpus", "16", "--json",
                                      "--out", str(tmp_path)])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"fabrics", "ratios", "within_goals"} and seen["against"] == tmp_path
    assert "gpus" in seen["keys"] and args.func is crosscheck_verb.cmd_crosscheck
