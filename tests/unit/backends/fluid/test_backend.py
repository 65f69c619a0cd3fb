"""The fluid backend: a whole repetition at n=16 on both fabrics (the serving cluster's batched path, every
message a flow), a planned replay, its links and paths against the twin's, what it refuses."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from common import scale
from common.errors import TestbedError
from common.paths import AZURE_TRACE
from fabrics import addressing, build_fabric
from fabrics.routing import forwarding_tables, port_pairs
from testbed import backends
from testbed.backends import paths
from testbed.backends.base import Conditions, LinkSettings, PlannedTraffic
from testbed.backends.fluid import rows as fluid_rows
from testbed.backends.fluid.backend import FluidBackend
from testbed.backends.fluid.loop import EnginePorts, batch_s
from testbed.backends.fluid.network import Paths, queues, wire_bytes
from testbed.backends.ns3 import plan
from testbed.backends.ns3.apps import PortPicker
from testbed.experiment.schema import Resolved, repetition_spec, validate
from testbed.repetition.orchestrate import run_repetition
from tests.support.no_fabric import no_fabric  # noqa: F401 (autouse: nothing here reaches the fabric)

LIVE = {"backend": "fluid", "gpus": 16, "gpus_per_server": 4, "trace": {"path": str(AZURE_TRACE), "duration_s": 1.5},
        "link": {"time_dilation": 4},
        "serving": {"model": "glm-5", "driver": "live", "arrivals": "closed", "concurrency": 16}}


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_a_live_run_at_n16_delivers_every_message_into_the_twins_run_directory(tmp_path, kind):
    exp = validate(LIVE, "t")
    run_dir = run_repetition(repetition_spec(exp, kind), Resolved(exp, None).backend, run_dir=tmp_path / "rep",
                             log=lambda m: None)
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["backend"] == "fluid" and s["throughput_tokens_per_s"] > 0 and s["invariants"]["ok"]
    assert s["ep_messages"] == s["ep_messages_verified"] > 0 and s["transfers"] == s["verified"] > 0
    assert s["pfc"]["enabled"] is False and s["queue_drops"] == 0
    serving = json.loads((run_dir / "serving.json").read_text())
    assert serving["in_flight_at_end"] == 0 and serving["failed_messages"] == 0
    names = {p.name for p in run_dir.iterdir()}
    assert {"summary.json", "transfers.csv", "messages.csv", "links.csv", "link_traffic.csv", "queues.csv",
            "requests.csv", "steps.csv", "fluid.json"} <= names
    fluid = json.loads((run_dir / "fluid.json").read_text())
    assert fluid["fabric"] == kind and fluid["solves"] > 0 and fluid["rows"]["ep_rows"] == s["ep_messages"]
    assert fluid["ecmp"]["connections"] == fluid["connections"] > 0 and fluid["ecmp"]["recorded_from"] is None
    # every byte crossed every link of its path: a NIC port sent its messages' wire bytes and the acknowledgements
    # of those it received
    messages = list(csv.DictReader(open(run_dir / "messages.csv"))) + list(csv.DictReader(open(run_dir /
                                                                                                "transfers.csv")))
    sent: dict[str, int] = {}
    fwd, _, back, _, _ = wire_bytes(np.array([int(m["bytes"]) for m in messages]), scale.DEFAULT_MTU)
    for m, f, b in zip(messages, fwd, back):
        for ip, n in ((m["src_ip"], f), (m["dst_ip"], b)):
            g, p = addressing.parse_ip(ip)
            sent[f"gpu{g}:p{p}"] = sent.get(f"gpu{g}:p{p}", 0) + int(n)
    links = {r["queue"]: int(r["bytes"]) for r in csv.DictReader(open(run_dir / "links.csv"))}
    assert sent and all(links[nic] == pytest.approx(b, abs=2) for nic, b in sent.items())
    # a step ends when the last message of its phase arrived (times: cluster x dilation)
    last: dict[tuple, float] = {}
    for m in messages:
        if m.get("step"):
            key = (m["engine"], m["step"])
            last[key] = max(last.get(key, 0.0), float(m["end"]))
    steps = {(r["engine"], r["step"]): r for r in csv.DictReader(open(run_dir / "steps.csv"))}
    assert last and all(float(steps[k]["end_s"]) * 4 == pytest.approx(end, abs=1e-5) for k, end in last.items())


def test_a_planned_replay_is_carried_and_a_lone_transfer_takes_its_bytes_at_the_link_rate(tmp_path):
    b = backends.get("fluid")
    exp = validate({"backend": "fluid", "gpus": 16, "trace": {"duration_s": 10}}, "t")
    spec = repetition_spec(exp, "zcube").fabric
    lone = {"id": 7, "request_id": 1, "src": "gpu1", "dst": "gpu9", "src_ip": addressing.ip_of(1, 1),
            "dst_ip": addressing.ip_of(9, 2), "bytes": 100_000, "start": 1.0}
    carried = b.carry(spec, PlannedTraffic([lone]), Conditions(), tmp_path, lambda m: None)
    (row,) = carried.rows
    link = b.network(spec).link
    wire, _, _, _, last = wire_bytes(np.array([100_000]), link.mtu)
    model = b.network(spec).model
    hops = len(paths.route(model, forwarding_tables(model), (1, 1), (9, 2), 40000, paths.LISTEN_PORT))
    expect = 1.0 + wire[0] * 8 / link.rate_bps + hops * (last[0] * 8 / link.rate_bps + plan.CABLE_DELAY_S) \
        + plan.CABLE_DELAY_S
    assert row["verified"] and row["end"] == pytest.approx(expect, abs=1e-6)
    assert carried.counters.link_bytes()["gpu1:p1"][1] == wire[0]
    assert (tmp_path / "fluid.json").is_file()


def test_its_links_are_the_twins_queues_and_its_paths_the_twins_routes():
    fabric = build_fabric("roft", 16, 4, None, 8, None)
    link = LinkSettings(3e6, 3000, 18000, 60000, 3_000_000, 200e9)
    p = Paths(fabric, link, port_seed=5)
    assert p.book.seed == 5 and p.book.recording is None
    assert [q.qid for q in p.queues] == [q.qid for q in queues(fabric)]
    assert len(p.queues) == sum(len(s.ports) for s in fabric.switches.values()) + 2 * fabric.n_gpus
    c = p.connection(1, 1, 12, 2)
    sport = p.sports[c]
    tables = forwarding_tables(fabric)
    fwd = ["gpu1:p1"] + [f"{sw}:{port}" for sw, port in paths.route(fabric, tables, (1, 1), (12, 2), sport,
                                                                      paths.LISTEN_PORT)]
    back = ["gpu12:p2"] + [f"{sw}:{port}" for sw, port in paths.route(fabric, tables, (12, 2), (1, 1),
                                                                     paths.LISTEN_PORT, sport)]
    got = [p.queues[i].qid for i in p.links[c, :p.nlinks[c]]]
    assert got == fwd + back and p.nfwd[c] == len(fwd)
    assert p.connection(1, 1, 12, 2) == c  # persistent: one connection per NIC port pair


def test_a_message_costs_its_headers_and_its_acknowledgements():
    fwd, pk_fwd, back, pk_back, last = wire_bytes(np.array([29, 2948, 2949]), 3000)
    # the 24 B frame header in a packet of its own, then the payload in 2948 B segments, 66 B of headers each
    assert pk_fwd.tolist() == [2, 2, 3] and fwd.tolist() == [29 + 24 + 132, 2948 + 24 + 132, 2949 + 24 + 198]
    assert back.tolist() == [21 + 66 * 2, 21 + 66 * 2, 21 + 66 * 2] and pk_back.tolist() == [2, 2, 2]
    assert last.tolist() == [29 + 66, 2948 + 66, 1 + 66]


def test_the_rows_keep_every_phase_or_every_kth_step():
    assert fluid_rows.every_kth_step([(0, [1] * 10, None)] * 10, 1000) == 1
    assert fluid_rows.every_kth_step([(0, [1] * 10, None)] * 10, 30) == 4


def test_the_backend_is_registered_and_refuses_what_it_cannot_do(tmp_path):
    b = backends.get("fluid")
    assert isinstance(b, FluidBackend) and not b.realtime and "fluid" in backends.NAMES
    with pytest.raises(TestbedError, match="the fluid backend carries no cross traffic"):
        b.carry(None, PlannedTraffic([]), Conditions(cross_flows=2), tmp_path, print)
    with pytest.raises(TestbedError, match="faults: the fluid backend cannot inject faults"):
        validate(LIVE | {"faults": [{"at": 1, "target": {"zcube": "link sw1:1", "roft": "link leaf1:1"}}]}, "t")


def test_an_engines_port_choices_are_the_port_pickers_in_turn():
    fabric = build_fabric("zcube", 16, 4, None, 8, None)
    link = LinkSettings(3e6, 3000, 18000, 60000, 3_000_000, 200e9)
    book = Paths(fabric, link, port_seed=0)
    ports = EnginePorts((9, 10, 11, 12), "striped")
    picker = PortPicker("striped")
    assert max(len(port_pairs(9, d, "striped")) for d in (10, 11, 12)) > 1  # several choices to take in turn
    src, dst = np.array([9, 9, 9, 10, 12]), np.array([10, 10, 11, 9, 9])  # a pair's slices are contiguous
    for _ in range(3):
        sp, dp, conn = ports.choose(src, dst, book)
        expect = [picker.pick(0, int(s), int(d), 1) for s, d in zip(src, dst)]
        assert list(zip(sp.tolist(), dp.tolist())) == expect
        assert conn.tolist() == [book.connection(int(s), a, int(d), b) for s, d, (a, b) in zip(src, dst, expect)]
    assert batch_s(book) == pytest.approx(0.25 * 90 * 8 / 3e6)


def test_the_estimate_grows_with_n_and_the_cluster_seconds_and_only_a_closed_loop_has_one():
    from testbed.backends.fluid import estimate

    live = validate({"backend": "fluid", "gpus": 32, "trace": {"workload": "agentic-coding", "duration_s": 28},
                     "serving": {"model": "glm-5", "driver": "live", "arrivals": "closed", "concurrency": 28}}, "t")
    seconds, how = FluidBackend().estimate(live)
    # the run's repetitions (every fabric's) carry the report once between them
    runs = len(live.fabrics) * live.repetitions
    assert seconds == pytest.approx(estimate.repetition_s(32, 28) + estimate.report_s(32) / runs)
    assert "28 cluster s at n=32" in how and "share of the report" in how
    assert estimate.report_s(16384) > estimate.report_s(512) > 0
    assert estimate.repetition_s(512, 28) > 10 * estimate.repetition_s(32, 28) / 2 > 0
    assert estimate.repetition_s(32, 56) > estimate.repetition_s(32, 28)
    assert FluidBackend().estimate(validate({"backend": "fluid", "gpus": 16}, "t")) is None


def test_messages_on_one_connection_go_one_after_another_and_wait_in_the_sender(tmp_path):
    b = backends.get("fluid")
    spec = repetition_spec(validate({"backend": "fluid", "gpus": 16, "trace": {"duration_s": 10}}, "t"), "zcube").fabric
    one = {"request_id": 1, "src": "gpu1", "dst": "gpu9", "src_ip": addressing.ip_of(1, 1),
           "dst_ip": addressing.ip_of(9, 2), "bytes": 30_000, "start": 1.0}
    other = one | {"dst": "gpu10", "dst_ip": addressing.ip_of(10, 2)}
    rows = b.carry(spec, PlannedTraffic([one | {"id": 1}, one | {"id": 2}, other | {"id": 3}]), Conditions(),
                   tmp_path, lambda m: None).rows
    end = {r["id"]: r["end"] for r in rows}
    wire = wire_bytes(np.array([30_000]), b.network(spec).link.mtu)[0][0] * 8 / 3e6
    # 1 and 3 share gpu1:p1 (two connections) while 2 waits behind 1 on its connection: 1 and 3 leave together at
    # twice one message's time, then 2 has the port alone (sent when 1 is delivered: one path latency later)
    assert end[1] == pytest.approx(end[3], abs=1e-6) and end[1] - 1.0 == pytest.approx(2 * wire, rel=0.02)
    assert wire < end[2] - end[1] < 1.05 * wire
    assert all(r["start"] == 1.0 for r in rows)  # the wait in the sender counts in the FCT, as on TCP
