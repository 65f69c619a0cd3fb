"""The ideal backend: a whole repetition (either driver) and a whole `testbed run` without root or a fabric,
into run directories the write-up and the report read as they read the emulator's."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from common.errors import TestbedError
from common.paths import AZURE_TRACE
from fabrics import build_fabric
from fabrics.datapath import DatapathConfig
from testbed import backends
from testbed.backends.base import Conditions, FabricSpec, PlannedTraffic
from testbed.cli import main
from testbed.experiment.schema import EXAMPLES_DIR, Resolved, repetition_spec, validate
from testbed.repetition.orchestrate import run_repetition
from tests.support.no_fabric import no_fabric  # noqa: F401 (autouse: nothing here reaches the fabric)


def _repetition(tmp_path, raw: dict, kind: str = "zcube"):
    exp = validate(raw | {"backend": "ideal", "gpus": 16}, "test")
    run_dir = run_repetition(repetition_spec(exp, kind), Resolved(exp, None).backend, run_dir=tmp_path / "rep",
                             log=lambda m: None)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def test_a_planned_replay_is_delivered_at_the_ideal_fct(tmp_path):
    run_dir, s = _repetition(tmp_path, {"trace": {"duration_s": 10}})
    assert s["backend"] == "ideal" and s["driver"] == "plan" and s["transfers"] == s["verified"] > 0
    assert s["slowdown"]["p50"] == s["slowdown"]["p99"] == 1.0  # each transfer took exactly its ideal
    assert s["start_lateness_ms"]["p99"] == 0.0 and s["queue_drops"] == 0 and s["pfc"]["enabled"] is False
    assert s["invariants"]["ok"] and s["invariants"]["checked"] == ["verified_bytes_match_plan"]
    names = {p.name for p in run_dir.iterdir()}
    assert {"transfers.csv", "fct.txt", "nics.csv", "goodput.csv", "link_traffic.csv", "config.json"} <= names
    assert not {"queues.csv", "links.csv", "pfc.txt"} & names  # no queues: nothing counted, nothing made up
    config = json.loads((run_dir / "config.json").read_text())
    assert config["backend"] == "ideal" and config["fabric"]["kind"] == "zcube" and config["replay"]["speed"] == 1.5


def test_the_live_driver_serves_the_cluster_in_process(tmp_path):
    run_dir, s = _repetition(tmp_path, {"trace": {"path": str(AZURE_TRACE), "duration_s": 2},
                                        "link": {"time_dilation": 4}, "gpus_per_server": 4,
                                        "serving": {"model": "glm-5", "driver": "live", "arrivals": "closed",
                                                    "concurrency": 16}})
    assert s["driver"] == "live" and s["time_dilation"] == 4 and s["throughput_tokens_per_s"] > 0
    assert s["ep_messages"] == s["ep_messages_verified"] > 0 and s["transfers"] == s["verified"] > 0
    serving = json.loads((run_dir / "serving.json").read_text())
    assert serving["t0"] == 0.0 and serving["failed_messages"] == 0 and serving["control_lag_ms"]["p99"] is None
    requests = list(csv.DictReader(open(run_dir / "requests.csv")))
    assert len(requests) >= s["requests"] > 0
    messages = list(csv.DictReader(open(run_dir / "messages.csv")))
    assert {m["kind"] for m in messages} == {"dispatch", "combine"}
    # times are the emulated fabric's (cluster time x dilation): a step ends when its last message arrived
    assert all(float(m["end"]) >= float(m["start"]) for m in messages)
    last: dict[tuple, float] = {}
    for m in messages:
        key = (m["engine"], m["step"])
        last[key] = max(last.get(key, 0.0), float(m["end"]))
    steps = {(r["engine"], r["step"]): r for r in csv.DictReader(open(run_dir / "steps.csv"))}
    assert last and all(float(steps[k]["end_s"]) * 4 == pytest.approx(end) for k, end in last.items())


def test_what_the_ideal_network_cannot_do_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(TestbedError, match="cross_flows: the ideal backend carries no cross traffic"):
        _repetition(tmp_path, {"trace": {"duration_s": 10}, "cross_flows": 2})
    with pytest.raises(TestbedError, match="faults: the ideal backend cannot inject faults"):
        _repetition(tmp_path, {"trace": {"duration_s": 10},
                               "faults": [{"at": 1, "target": {"zcube": "link sw1:1", "roft": "link leaf1:1"}}]})
    assert not (tmp_path / "rep").exists()
    spec = FabricSpec({"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}, DatapathConfig().validate())
    with pytest.raises(TestbedError, match="carries no cross traffic") as info:
        backends.get("ideal").carry(spec, PlannedTraffic([]), Conditions(cross_flows=1), tmp_path, print)
    assert info.value.key == "cross_flows"


def test_an_unknown_backend_is_one_line():
    with pytest.raises(TestbedError, match="backend 'ns2' is unknown: expected one of emulated, ideal"):
        backends.get("ns2")
    with pytest.raises(TestbedError, match="backend"):
        validate({"backend": "ns2"}, "test")


def test_testbed_run_on_the_ideal_backend_writes_a_run_directory_report_reads(tmp_path, capsys):
    assert main(["run", str(EXAMPLES_DIR / "smoke.yaml"), "--backend", "ideal", "--out", str(tmp_path)]) == 0
    run_dir = tmp_path / capsys.readouterr().out.strip().splitlines()[-1].rsplit("/", 1)[-1]
    assert (run_dir / "report.html").is_file() and not (run_dir / "report-error.txt").exists()
    exp = json.loads((run_dir / "experiment.json").read_text())
    assert exp["experiment"]["backend"] == "ideal" and exp["overrides"][0]["origin"] == "--backend"
    assert main(["report", str(run_dir)]) == 0


def test_the_ideal_network_is_the_fabrics_model():
    spec = FabricSpec({"kind": "roft", "gpus": 16, "gpus_per_switch": 8, "gpus_per_server": 8, "radix": None},
                      dataclasses.replace(DatapathConfig(), mtu=1500).validate(), represents_bps=200e9)
    net = backends.get("ideal").network(spec)
    assert net.model.describe() == build_fabric(**spec.args).describe()
    assert (net.link.mtu, net.link.payload_bytes, net.link.bytes_scale) == (1500, 1448, 200e9 / 3e6)


def test_a_live_repetitions_estimate_grows_with_the_gpus_and_the_cluster_seconds():
    """A run's estimate for the ideal network: the live driver's cost is per GPU and cluster second (16,384 GPUs
    for 28 cluster s is most of an hour here), the planned replay's the flat set-up."""
    from testbed.backends import ideal
    from testbed.experiment import run

    backend = backends.get("ideal")
    small = validate({"backend": "ideal"}, "t")  # the schema's defaults: a planned replay
    assert backend.estimate(small) is None
    live = validate({"backend": "ideal", "trace": {"workload": "agentic-coding", "duration_s": 28},
                     "serving": {"driver": "live", "arrivals": "closed", "model": "glm-5", "layout": "glm5-recipe",
                                 "concurrency": 28}}, "t")
    s32, how = backend.estimate(live)
    big = live.model_copy(update={"gpus": 16384})
    s16k, _ = backend.estimate(big)
    assert 2 < s32 < 20 and "32 GPUs x 28 cluster s" in how  # the default: seconds a repetition
    assert 1800 < s16k < 7200 and s16k - ideal.FIXED_S == pytest.approx(512 * (s32 - ideal.FIXED_S))
    one_at_a_time = big.model_copy(update={"jobs": 1})
    assert run.estimate_s(one_at_a_time, backend) == pytest.approx(2 * s16k)  # both fabrics, one repetition
    assert run.estimate_s(big.model_copy(update={"jobs": 2}), backend) == pytest.approx(s16k)  # ... at once
