"""The write-up reads only what a backend returns (testbed.backends.base): a backend with queues and a pause
log of its own (as the ns-3 twin will have) gets queues.csv, links.csv, pfc.txt and the summary's counts from
its typed objects, without the emulator's state or files."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from fabrics import build_fabric
from fabrics.datapath import DatapathConfig
from testbed.backends.base import (
    Carried,
    FabricRecord,
    LinkSettings,
    Network,
    PauseLog,
    QueueCounters,
    QueueInfo,
)
from testbed.repetition import link_traffic
from testbed.repetition.drivers.plan import PlanDriver, prepare_plan
from testbed.repetition.writeup import write_up
from tests.support.settings import repetition

T0 = 1000.0  # the backend's own clock (a simulator's: anything)


@pytest.fixture(autouse=True)
def no_emulator(monkeypatch):
    from testbed.emulation import fabricctl

    def never(*args, **kwargs):
        raise AssertionError("the write-up reached the emulator")

    for name in ("load_state", "require_state", "read_queues", "state_dir", "fabric_of_state"):
        monkeypatch.setattr(fabricctl, name, never)


def _carried(fabric, rows: list[dict], dp: DatapathConfig) -> Carried:
    """Every message delivered 10 ms after its start; each queue sent 1000 B per sample, the first switch
    queue dropped 3 packets; one pause before the window, one in it, one after it."""
    loads = link_traffic.all_links(fabric)
    queues = [QueueInfo(q, "nic" if q.startswith("gpu") else "switch", x.towards) for q, x in loads.items()]
    sw = next(q for q in queues if q.kind == "switch")
    samples = [(T0 - 1 + k, {q.qid: {"bytes": 1000 * k, "packets": 10 * k, "drops": 3 * k * (q == sw), "backlog": 0}
                             for q in queues}) for k in range(3)]
    ns = int(T0 * 1e9)
    lines = (f"{ns - 6_000_000_000} {sw.qid.split(':')[0]} 1 {sw.qid.split(':')[1]} 1 {sw.qid}",  # before the window
             f"{ns + 1_000_000_000} {sw.qid.split(':')[0]} 1 {sw.qid.split(':')[1]} 1 {sw.qid}",
             f"{ns + 1_100_000_000} {sw.qid.split(':')[0]} 1 {sw.qid.split(':')[1]} 0 {sw.qid}",
             f"{ns + 99_000_000_000} {sw.qid.split(':')[0]} 1 {sw.qid.split(':')[1]} 1 {sw.qid}")  # after t_end
    delivered = [{**r, "request_id": r["request_id"], "received_bytes": r["bytes"], "scheduled_start": r["start"],
                  "first_byte": r["start"], "end": r["start"] + 0.01, "sender_end": r["start"] + 0.01,
                  "verified": True, "error": None} for r in rows]
    counters = QueueCounters(queues, samples[0][1], samples[-1][1], samples[0][0], samples[-1][0], samples)
    record = FabricRecord({"kind": fabric.kind, "gpus": 16, "gpus_per_switch": 8}, dataclasses.asdict(dp),
                          {"enabled": True})
    return Carried(T0, T0 + 30, delivered, record, counters, PauseLog(True, lines, {"p99": 1.0}))


def test_the_write_up_takes_counters_and_pauses_from_the_backends_objects(tmp_path):
    fabric = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    dp = DatapathConfig().validate()
    cfg = repetition({"trace": {"duration_s": 10}})
    plan = prepare_plan(cfg, 16, dp.rate_bps, dp.mtu, fabric)
    carried = _carried(fabric, plan.plan_rows, dp)
    net = Network(fabric, LinkSettings.of(dp, cfg.represents_bps))
    s = write_up(tmp_path, cfg, PlanDriver(), plan, carried, net)

    n_queues = len(carried.counters.queues)
    queues_csv = list(csv.DictReader(open(tmp_path / "queues.csv")))
    assert len(queues_csv) == 3 * n_queues and queues_csv[0]["time"] == f"{T0 - 1:.3f}"
    links = {r["queue"]: r for r in csv.DictReader(open(tmp_path / "links.csv"))}
    assert len(links) == n_queues and {r["bytes"] for r in links.values()} == {"2000"}
    assert s["queue_drops"] == 6 and s["pfc"]["enabled"] and s["pfc"]["pause_latency_ms"] == {"p99": 1.0}
    assert (tmp_path / "pfc.txt").read_text().splitlines() == list(carried.pauses.lines[1:3])
    assert s["pfc"]["pauses"] == 1 and s["pfc"]["resumes"] == 1
    assert s["pfc"]["lossless_ok"] is False and s["warnings"][0].startswith("LOSSLESS INVARIANT VIOLATED")
    assert s["transfers"] == s["verified"] == len(plan.plan_rows) and s["fct_ms"]["p50"] == 10.0
    measured = {r["queue"]: r["measured_bytes"] for r in csv.DictReader(open(tmp_path / "link_traffic.csv"))}
    assert set(measured.values()) == {"2000"}  # link_traffic.csv joins the model's bytes with links.csv
