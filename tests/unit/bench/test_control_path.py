"""bench control-path's pure pieces: flags refused in one line, the synthetic load's shape, the stages read back
from agents' records, the table; and the CLI's errors before root."""

from __future__ import annotations

import json

import pytest

from common.errors import TestbedError
from testbed.bench import control_path as cp
from testbed.cli.bench import control_path as cli_control_path
from traffic.model.serving_events import Send, Timer
from traffic.runtime.pulse import PulseCluster, PulseSpec


def test_paths_and_values_are_checked_in_one_line():
    assert cp.parse_paths(None) == list(cp.PATHS)
    assert cp.parse_paths("hosted,processes") == ["hosted", "processes"]
    with pytest.raises(TestbedError, match="--path 'x'"):
        cp.parse_paths("x")
    with pytest.raises(TestbedError, match="--rate"):
        cp.check(0, 128, 64, 10)
    with pytest.raises(TestbedError, match="--burst"):
        cp.check(1000, 0, 64, 10)
    with pytest.raises(TestbedError, match="--duration 1 s holds no step"):
        cp.check(10, 128, 64, 1)
    cp.check(1200, 128, 64, 20)


def test_the_pulse_sends_a_timed_burst_then_the_burst_back_when_it_arrived():
    spec = PulseSpec(tuple(range(17, 33)), 8, burst=4, bytes=64, period_s=0.1, duration_s=0.25, seed=1)
    c = PulseCluster(spec)
    start = c.start(0.0)
    assert [a.key for a in start] == [("end",), ("step", 0)]
    out = c.timer(("step", 0), 0.0)
    sends = [a.message for a in out if isinstance(a, Send)]
    assert len(sends) == 4 and all(m.kind == "dispatch" for m in sends)
    assert all((m.src_gpu - 1) // 8 != (m.dst_gpu - 1) // 8 for m in sends)  # every pair crosses servers
    assert [a.key for a in out if isinstance(a, Timer)] == [("step", 1)]
    back = []
    for m in sends:
        back += c.delivered(m.id, 0.01)
    combine = [a.message for a in back]
    assert [(m.src_gpu, m.dst_gpu) for m in combine] == [(m.dst_gpu, m.src_gpu) for m in sends]
    assert c.in_flight == 4 and not c.quiet
    for m in combine:
        assert c.delivered(m.id, 0.02) == []
    c.timer(("end",), 0.25)
    assert c.quiet and c.results()["orders"] == 8 and c.request_rows() == c.step_rows() == []


def test_the_pulse_writes_the_live_driver_result_files(tmp_path):
    """The coordinator writes a pulse's results with the serving cluster's writer: every attribute it reads."""
    from traffic.runtime.serving_results import write_results

    c = PulseCluster(PulseSpec(tuple(range(17, 33)), 8, burst=4, bytes=64, period_s=0.1, duration_s=0.25, seed=1))
    c.start(0.0)
    c.timer(("step", 0), 0.0)
    c.timer(("end",), 0.25)
    out = write_results(tmp_path, c, t0=0.0, dilation=1.0, cpu_s=None, failed={}, lag_s=[])
    assert out["messages"] == 4 and out["in_flight_at_end"] == 4
    assert json.loads((tmp_path / "serving.json").read_text())["orders"] == 4


def _write(tmp, name, lines):
    (tmp / name).write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_stages_come_from_the_plan_the_sent_and_the_received_records(tmp_path):
    t0 = 100.0
    plan = [{"id": i, "src": "gpu17", "dst": "gpu25", "src_ip": "10.1.0.17", "dst_ip": "10.1.0.25", "dst_port": 7000,
             "bytes": 64, "start": 3.0 + (i // 2) * 0.1, "kind": "dispatch" if i % 2 == 0 else "combine",
             "step": i // 2} for i in range(4)]
    plan.append(dict(plan[0], id=9, start=0.5))  # before the warm-up: left out
    _write(tmp_path, "gpu17.plan.jsonl", plan)
    sent = [{"id": p["id"], "start": t0 + p["start"] + 0.002, "connected": t0 + p["start"] + 0.0025, "end": t0 + 5,
             "ok": True, "error": None} for p in plan]
    _write(tmp_path, "gpu17.sent.jsonl", sent)
    recv = [{"id": p["id"], "bytes": 64, "first_byte": t0 + p["start"] + 0.0065, "last_byte": t0 + p["start"] + 0.007,
             "verified": True, "error": None} for p in plan]
    _write(tmp_path, "gpu25.recv.jsonl", recv)
    out = cp.analyze(tmp_path, t0, {"control_lag_ms": {"p50": 0.1, "p99": 0.2}})
    assert out["ordered"] == out["delivered"] == 4
    assert out["order_ms"]["all"]["p50"] == pytest.approx(2.0, abs=1e-6)
    assert out["send_ms"]["timer"]["n"] == 2 and out["send_ms"]["all"]["p99"] == pytest.approx(0.5, abs=1e-6)
    assert out["order_to_wire_ms"]["arrival"]["p50"] == pytest.approx(2.5, abs=1e-6)
    assert out["wire_ms"]["all"]["p50"] == pytest.approx(4.0, abs=1e-6)
    assert out["report_ms"] == {"p50": 0.1, "p99": 0.2}
    assert out["burst_first_ms"]["n"] == 4 and out["burst_spread_ms"]["p99"] == pytest.approx(0.0, abs=1e-6)
    doc = {"fabric": "roft", "gpus": 32, "burst": 2, "bytes": 64, "orders_per_s": 20, "duration_s": 5,
           "load": "load average 0.1", "paths": {"hosted": dict(out, cpu={"host": 0.1, "busy": 0.5, "cpus": 2})}}
    text = "\n".join(cp.table(doc))
    assert "order_to_wire_ms" in text and "delivered 4/4" in text and "host 0.10" in text


def test_the_cli_refuses_bad_flags_in_one_line_before_root(capsys):
    from testbed.cli import main

    assert main(["bench", "control-path", "--rate", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rate" in err[0]


def test_the_verb_is_registered_with_its_flags():
    import argparse

    p = argparse.ArgumentParser()
    cli_control_path.register(p.add_subparsers())
    args = p.parse_args(["control-path", "roft", "--rate", "500", "--path", "hosted"])
    assert (args.fabric, args.rate, args.path, args.burst) == ("roft", 500.0, "hosted", cp.BURST)
