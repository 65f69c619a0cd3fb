"""The network backends' own modules, directly: the ideal network's timing of a message (by hand), what the
emulated backend refuses before it builds anything, what it reads of a pause daemon, and how cross traffic's
results add up (issue 28: every product module has a direct test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common.errors import TestbedError
from fabrics.datapath import DatapathConfig
from testbed.backends import base, ideal
from testbed.backends.emulated import backend as emulated
from testbed.backends.emulated import cross, serving
from testbed.emulation import fabricctl
from testbed.emulation.state import FabricState

SPEC = base.FabricSpec({"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}, DatapathConfig())
PLAN = {"id": 7, "request_id": 3, "src": "gpu1", "dst": "gpu9", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.9",
        "bytes": 3000, "start": 0.5}


def test_the_ideal_network_delivers_each_message_at_its_ideal_fct(tmp_path):
    """3000 B at MTU 3000: a full packet carries 3000 - 52 = 2948 B, so 2 packets, each with 66 B of headers:
    3000 + 132 = 3132 B = 25 056 bits at 3 Mbit/s = 8.352 ms after its start at 0.5 s."""
    carried = ideal.IdealBackend().carry(SPEC, base.PlannedTraffic([PLAN]), base.Conditions(), tmp_path, print)
    [row] = carried.rows
    assert row["end"] == pytest.approx(0.508352, abs=1e-12) and row["first_byte"] == 0.5
    assert (row["verified"], row["received_bytes"], row["error"], row["scheduled_start"]) == (True, 3000, None, 0.5)
    assert (carried.t0, carried.t_end, carried.counters) == (0.0, row["end"], None)
    assert carried.fabric.pfc == {"enabled": False}


def test_the_ideal_network_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(TestbedError, match="the ideal backend carries no cross traffic: expected 0"):
        ideal.IdealBackend().carry(SPEC, base.PlannedTraffic([PLAN]), base.Conditions(cross_flows=2), tmp_path, print)
    with pytest.raises(TestbedError, match="the ideal backend cannot inject faults: expected none"):
        ideal.IdealBackend().carry(SPEC, base.PlannedTraffic([]), base.Conditions(faults=({"at": 1},)), tmp_path,
                                   print)


def test_planned_traffic_ends_with_its_last_start_and_conditions_take_the_agents_timeout():
    from traffic.runtime.agent import DEFAULT_TRANSFER_TIMEOUT_S

    assert base.PlannedTraffic([{"start": 0.5}, {"start": 2.0}, {"start": 1.0}]).last_start_s == 2.0
    assert base.PlannedTraffic([]).last_start_s == 0.0
    assert base.Conditions().timeout_s == DEFAULT_TRANSFER_TIMEOUT_S


def test_an_unfinished_message_is_never_completed():
    row = ideal._row(PLAN | {"kind": "kv"}, 0.5, None)
    assert (row["verified"], row["received_bytes"], row["error"], row["kind"]) == (False, None, "never completed", "kv")


@pytest.fixture
def up(monkeypatch, tmp_path):
    monkeypatch.setattr(fabricctl, "require_root", lambda: None)
    monkeypatch.setattr(fabricctl, "require_ovs", lambda: None)
    st = FabricState(fabric={"kind": "roft", "gpus": 32}, state_dir=str(tmp_path), pfc={"enabled": True})
    monkeypatch.setattr(fabricctl, "load_state", lambda: st)
    return st


def test_the_emulated_backend_refuses_a_fabric_it_did_not_build(up):
    with pytest.raises(TestbedError, match=r"^a fabric is up \(roft, 32 GPUs\): run 'testbed down' first"):
        emulated.EmulatedBackend().check(build_own=True)
    emulated.EmulatedBackend().check(build_own=False)  # a replay on the running fabric: fine
    with pytest.raises(TestbedError, match=r"a different fabric is up \(roft, 32 GPUs\)"):
        emulated.EmulatedBackend().network(SPEC)


def test_the_pause_daemons_figures_are_read_from_its_files(up, tmp_path, monkeypatch):
    monkeypatch.setattr(emulated, "PFC_FLUSH_S", 0)
    (tmp_path / "pfc_status.json").write_text(json.dumps({"pause_latency_ms": {"p99": 1.5}, "netlink_errors": 0}))
    (tmp_path / "pfc.txt").write_text("1 sw1 switch 9 1 sw2:3\n2 sw1 switch 9 0 sw2:3\n")
    log = emulated.pause_log(up)
    assert (log.enabled, log.lines, log.pause_latency_ms, log.netlink_errors) == (
        True, ("1 sw1 switch 9 1 sw2:3", "2 sw1 switch 9 0 sw2:3"), {"p99": 1.5}, 0)
    assert emulated.pause_log(FabricState(pfc={"enabled": False})) == base.PauseLog()


def test_a_repetition_on_a_held_fabric_gets_the_latencies_and_errors_of_its_own_time(up, tmp_path, monkeypatch):
    """The daemon's status is cumulative over the fabric's life: a repetition on a fabric held for several
    reads the latency lines written during it and the netlink errors since it began."""
    monkeypatch.setattr(emulated, "PFC_FLUSH_S", 0)
    lat = tmp_path / "pfc_latency.txt"
    lat.write_text("pause sw1:9 xoff 1 2 3 9.000 0\nresume sw1:9 xon 4 5 6 9.000 0\n")  # an earlier repetition's
    (tmp_path / "pfc_status.json").write_text(json.dumps({"pause_latency_ms": {"p99": 9.0}, "netlink_errors": 2}))
    marks = emulated.pause_marks(up)
    assert marks == {"latency_bytes": lat.stat().st_size, "netlink_errors": 2}
    with open(lat, "a") as fh:
        fh.write("pause sw1:9 xoff 7 8 9 0.500 0\npause sw2:3 xoff 7 8 9 0.700 0\nresume sw1:9 xon 1 2 3 0.200 0\n")
    (tmp_path / "pfc_status.json").write_text(json.dumps({"pause_latency_ms": {"p99": 9.0}, "netlink_errors": 5}))
    log = emulated.pause_log(up, marks)
    assert log.pause_latency_ms["max"] == 0.7 and log.resume_latency_ms["max"] == 0.2 and log.netlink_errors == 3


def _done(out: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"print({out!r})"], stdout=subprocess.PIPE, text=True)


def test_cross_traffic_results_add_up_and_a_broken_client_counts_zero():
    flows = [{"src": "gpu1", "dst": "gpu2", "client": _done(json.dumps({"bps": 1.25e6})), "server": _done("")},
             {"src": "gpu3", "dst": "gpu4", "client": _done("not json"), "server": _done("")},
             {"src": "gpu5", "dst": "gpu6", "client": _done(json.dumps({"bps": 0.0, "error": "refused"})),
              "server": _done("")}]
    out = cross.stop_cross_traffic(flows)
    assert out == {"flows": 3, "goodput_bps": 1_250_000, "per_flow": [
        {"src": "gpu1", "dst": "gpu2", "bps": 1.25e6, "error": None},
        {"src": "gpu3", "dst": "gpu4", "bps": 0.0, "error": None},
        {"src": "gpu5", "dst": "gpu6", "bps": 0.0, "error": "refused"}]}


def test_a_coordinators_last_words_are_its_logs_last_two_lines(tmp_path):
    (tmp_path / "c.log").write_text("one\ntwo\nthree\n")
    assert serving._tail(tmp_path / "c.log") == "two three" and serving._tail(tmp_path / "none") == ""
