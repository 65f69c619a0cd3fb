"""bench lateness's figures, from hand-made replay directories (no fabric)."""

import json

import pytest

from common.errors import TestbedError
from testbed.bench import lateness as bench

HEADER = "id,request_id,src,dst,src_ip,dst_ip,bytes,received_bytes,scheduled_start,start,first_byte,end,sender_end," \
         "verified,error\n"


def _rep(tmp_path, name, lateness_p99, rows, messages=(), dilation=12, duration=8, cpu=9.6):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({
        "time_dilation": dilation, "start_lateness_ms": {"p50": 0.3, "p99": lateness_p99},
        "start_lateness_wall_ms": {"p99": lateness_p99 * dilation}, "control_lag_ms": {"p99": 14.0},
        "agents_cpu_s": cpu, "coordinator_cpu_s": 1.92, "ep_exchange_vs_ideal": {"p50": 1.05, "p99": 3.0},
        "throughput_tokens_per_s": 3000.0, "invariants": {"ok": True}}))
    (d / "serving_config.json").write_text(json.dumps({"spec": {"duration_s": duration}}))
    (d / "transfers.csv").write_text(HEADER + "".join(rows))
    (d / "messages.csv").write_text(HEADER + "".join(messages))
    return d


def _row(i, sent, got, verified=True):
    return f"{i},,gpu1,gpu9,10.1.0.1,10.2.0.9,{sent},{got},0,0,0,0,0,{verified},\n"


def test_level_figures_count_ordered_and_verified_bytes_and_cores(tmp_path):
    d = _rep(tmp_path, "a", 1.5, [_row(1, 1000, 1000), _row(2, 500, 200, verified=False)], [_row(3, 300, 300)])
    r = bench.level_figures(64, d)
    assert (r["ordered_bytes"], r["delivered_bytes"]) == (1800, 1300)
    assert r["delivered_fraction"] == pytest.approx(1300 / 1800, abs=1e-6)
    assert r["agents_cores"] == 0.1  # 9.6 CPU s over 8 cluster s x 12
    assert r["coordinator_cores"] == 0.02
    assert r["keeps_time"] is False  # a byte went missing


def test_keeps_time_needs_lateness_within_the_goal(tmp_path):
    ok = bench.level_figures(1, _rep(tmp_path, "a", 2.0, [_row(1, 10, 10)]))
    late = bench.level_figures(2, _rep(tmp_path, "b", 2.01, [_row(1, 10, 10)]))
    assert ok["keeps_time"] is True and late["keeps_time"] is False


def test_highest_level_stops_at_the_first_level_that_falls_behind(tmp_path):
    rows = [{"level": 1, "keeps_time": True}, {"level": 128, "keeps_time": False},
            {"level": 64, "keeps_time": True}, {"level": 192, "keeps_time": True}]
    assert bench.summarize("roft", rows, tmp_path)["highest_level_keeping_time"] == 64
    assert bench.summarize("roft", [{"level": 1, "keeps_time": False}], tmp_path)["highest_level_keeping_time"] is None


def test_a_failed_level_is_reported_with_its_error(tmp_path):
    d = tmp_path / "failed"
    d.mkdir()
    (d / "error.txt").write_text("EnvironmentProblem: the coordinator failed\ntraceback...\n")
    r = bench.level_figures(128, d)
    assert r == {"level": 128, "error": "EnvironmentProblem: the coordinator failed"}
    doc = bench.summarize("zcube", [r], tmp_path)
    text = "\n".join(bench.table(doc))
    assert "FAILED: EnvironmentProblem" in text and "kept time at no level" in text


@pytest.mark.parametrize("text", ["0,64", "a", "64,64", ""])
def test_bad_levels_name_the_value(text):
    with pytest.raises(TestbedError, match="--levels"):
        bench.parse_levels(text)


def test_default_levels_start_at_one_request_in_flight():
    assert bench.parse_levels(None)[0] == 1
