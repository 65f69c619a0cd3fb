"""A whole repetition on the ns-3 twin at n=16, both fabrics: the serving cluster finishes with every message
delivered, into the same run directory the emulator writes (plus twin.json), with no root and no fabric."""

from __future__ import annotations

import csv
import json

import pytest

from common.errors import TestbedError
from common.paths import AZURE_TRACE
from testbed import backends
from testbed.backends.base import Conditions, PlannedTraffic
from testbed.backends.ns3.backend import Ns3Backend
from testbed.experiment.schema import Resolved, repetition_spec, validate
from testbed.repetition.orchestrate import run_repetition
from tests.support.no_fabric import no_fabric  # noqa: F401 (autouse: nothing here reaches the fabric)


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_a_live_run_at_n16_delivers_every_message(tmp_path, kind):
    exp = validate({"backend": "ns3", "gpus": 16, "gpus_per_server": 4, "trace": {"path": str(AZURE_TRACE),
                                                                                    "duration_s": 1.5},
                    "link": {"time_dilation": 4},
                    "serving": {"model": "glm-5", "driver": "live", "arrivals": "closed", "concurrency": 16}}, "t")
    run_dir = run_repetition(repetition_spec(exp, kind), Resolved(exp, None).backend, run_dir=tmp_path / "rep",
                             log=lambda m: None)
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["backend"] == "ns3" and s["throughput_tokens_per_s"] > 0
    assert s["ep_messages"] == s["ep_messages_verified"] > 0 and s["transfers"] == s["verified"] > 0
    serving = json.loads((run_dir / "serving.json").read_text())
    assert serving["in_flight_at_end"] == 0 and serving["failed_messages"] == 0
    names = {p.name for p in run_dir.iterdir()}
    assert {"summary.json", "transfers.csv", "messages.csv", "links.csv", "link_traffic.csv", "pfc.txt",
            "queues.csv", "twin.json"} <= names
    assert s["pfc"]["enabled"] and s["pfc"]["lossless_ok"] and s["queue_drops"] == 0
    links = list(csv.DictReader(open(run_dir / "links.csv")))
    assert sum(float(r["bytes"]) for r in links) > 0
    twin = json.loads((run_dir / "twin.json").read_text())
    assert twin["fabric"] == kind and twin["wall_per_cluster_s"] > 0 and twin["events"] > 0


def test_the_backend_is_registered_and_refuses_what_it_cannot_do(tmp_path):
    b = backends.get("ns3")
    assert isinstance(b, Ns3Backend) and not b.realtime and "ns3" in backends.NAMES
    b.check(build_own=True)
    with pytest.raises(TestbedError, match="no cross traffic"):
        b.carry(None, PlannedTraffic([]), Conditions(cross_flows=2), tmp_path, print)
