"""A fabric over several hosts without root or hosts: the node spec and controller config each host gets,
the refusals before anything is built, the pause logs merged, records moved between clocks, the clock
check in summary.json, and a lost host's mark (values worked out by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import EnvironmentProblem, TestbedError
from fabrics.datapath import DatapathConfig
from testbed.backends.base import Conditions
from testbed.backends.emulated import multihost, multihost_serving, remote_agents
from testbed.emulation.hosts import cluster, hostsfile, node, remote
from testbed.repetition import writeup


def _hosts(tmp_path: Path, n: int = 2) -> hostsfile.Hosts:
    rows = [{"name": f"ph{i}", "address": f"10.250.0.{i}", "user": "root", "key": "k"} for i in range(1, n + 1)]
    p = tmp_path / "hosts.yaml"
    p.write_text(hostsfile.dump(rows))
    return hostsfile.load(p)


def test_node_spec_names_this_host_and_the_first_hosts_controller(tmp_path):
    hosts = _hosts(tmp_path)
    spec = cluster.node_spec({"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}, DatapathConfig(), None, hosts,
                             "ph2", 6633, "vxlan")
    assert spec["host"] == "ph2" and spec["hosts"] == ["ph1", "ph2"]
    assert spec["controller"] == {"host": "10.250.0.1", "port": 6633}  # the underlay address, not 0.0.0.0
    assert spec["fabric"]["kind"] == "zcube" and spec["fabric"]["gpus"] == 16
    assert spec["pfc"] == {"enabled": False}
    json.dumps(spec)  # goes over SFTP as JSON
    cfg = node.controller_config(spec, Path("/run/zcube-testbed"))
    assert cfg["listen_host"] == "10.250.0.1"
    assert cfg["pfc"] == {"enabled": False}  # every host runs its own pause daemon


def test_each_host_builds_its_own_part(tmp_path):
    hosts = _hosts(tmp_path)
    spec = cluster.node_spec({"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}, DatapathConfig(), None, hosts,
                             "ph1", 0, "vxlan")
    parts = {}
    for h in ("ph1", "ph2"):
        _, _, where, parts[h] = node.part_of(spec | {"host": h})
    switches = [set(p.plan.ovs_ports) for p in parts.values()]
    assert switches[0].isdisjoint(switches[1]) and len(switches[0] | switches[1]) == 4
    # one tunnel end per host per cross-host cable, the same keys on both
    assert sorted(t.key for t in parts["ph1"].tunnels) == sorted(t.key for t in parts["ph2"].tunnels)
    assert len(parts["ph1"].tunnels) == len(where.cross)


def test_plan_refusals_come_before_any_host_is_touched(tmp_path):
    hosts = _hosts(tmp_path, 3)
    with pytest.raises(TestbedError, match="at most 2 hosts, not 3"):
        cluster.check_plan({"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}, DatapathConfig(), hosts, "vxlan")
    with pytest.raises(TestbedError, match="tunnel kind 'ipip'"):
        cluster.check_plan({"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}, DatapathConfig(),
                           _hosts(tmp_path, 2), "ipip")


def test_an_underlay_refusal_is_one_line_exit_1(tmp_path, monkeypatch):
    hosts = _hosts(tmp_path)

    monkeypatch.setattr(remote, "Session", lambda h: _Reachable(h.model_copy(update={"address": "x"})))

    def preflight(h, *a, **k):
        if h.name == "ph2":
            from testbed.emulation.hosts import tunnels

            tunnels.check_underlay_mtu("ph2", 1500, 3000, "vxlan", "eth0")
        return {}

    monkeypatch.setattr(remote, "preflight", preflight)
    monkeypatch.setattr(remote, "fingerprint", lambda: "f")
    with pytest.raises(EnvironmentProblem) as err:
        cluster.preflight_all(hosts, 3000, "vxlan")
    assert str(err.value) == ("host ph2: underlay MTU 1500 (eth0) is too small for cross-host cables: needs 3050 "
                              "(emulated MTU 3000 + 50 B of vxlan)")
    assert err.value.exit_status == 1 and "\n" not in str(err.value)


class _Reachable:
    def __init__(self, h):
        if h.address == "10.250.0.2":
            raise remote.HostProblem(h.name, f"cannot reach {h.address}:22 over SSH: No route to host")

    def close(self):
        pass


def test_unreachable_host_is_named_not_its_peers_probe(tmp_path, monkeypatch):
    hosts = _hosts(tmp_path)

    def preflight(h, *a, **k):  # what ph1's underlay probe towards the missing ph2 would say
        raise remote.HostProblem(h.name, "packets of 3050 B do not reach host ph2")

    monkeypatch.setattr(remote, "preflight", preflight)
    monkeypatch.setattr(remote, "fingerprint", lambda: "f")
    monkeypatch.setattr(remote, "Session", _Reachable)
    with pytest.raises(EnvironmentProblem, match=r"^host ph2: cannot reach 10.250.0.2:22 over SSH: No route"):
        cluster.preflight_all(hosts, 3000, "vxlan")


def test_pause_logs_merge_over_hosts():
    per_host = {"ph1": {"log": ["2 a"], "latency": ["pause x"], "status": {"pauses": 3, "resumes": 2}},
                "ph2": {"log": ["1 b"], "latency": [], "status": {"pauses": 4, "resumes": None}}}
    lines, lat, status = cluster.merge_pfc(per_host)
    assert lines == ["2 a", "1 b"] and lat == ["pause x"] and status == {"pauses": 7, "resumes": 2}


def test_records_move_onto_the_first_hosts_clock():
    text = '{"id": 1, "start": 10.5, "end": 11.0, "bytes": 9}\nnot json\n{"id": 2, "first_byte": 3}\n'
    out = remote_agents.shift_times(text, 0.5).splitlines()
    assert json.loads(out[0]) == {"id": 1, "start": 10.0, "end": 10.5, "bytes": 9}
    assert out[1] == "not json" and json.loads(out[2])["first_byte"] == 2.5


def test_an_uncertain_clock_makes_the_run_not_fidelity_ok():
    summary = {"invariants": {"ok": True, "violations": []}}
    writeup._clock_check(summary, {"offsets": {"ph1": {"offset_ms": 0.0, "uncertainty_ms": 0.0},
                                               "ph2": {"offset_ms": 0.3, "uncertainty_ms": 0.2}}, "goal_ms": 2.0})
    assert summary["invariants"]["ok"] and summary["clock_offsets_ms"]["ph2"]["offset_ms"] == 0.3
    writeup._clock_check(summary, {"offsets": {"ph2": {"offset_ms": 7.0, "uncertainty_ms": 2.5}}, "goal_ms": 2.0})
    assert not summary["invariants"]["ok"]
    assert "host ph2's offset is uncertain by 2.5 ms, over the 2 ms" in summary["invariants"]["violations"][0]


def test_a_lost_host_marks_the_run_directory(tmp_path):
    multihost.mark_lost(tmp_path / "rep1", "host ph2: lost during the run (SSH connection to 10.250.0.2 closed)",
                        None)
    assert (tmp_path / "rep1" / multihost.LOST_FILE).read_text().startswith("host ph2: lost during the run")


def test_agents_on_a_host_take_orders_through_its_relay_on_its_clock():
    argv = multihost_serving.agent_orders("ph2", 0.0123)("gpu5")
    assert argv[:2] == ["--control", f"{cluster.node_dir('ph2')}/control.sock"]
    assert argv[2] == "--clock-offset" and float(argv[3]) == pytest.approx(0.0123)
    assert multihost_serving.relay_socket_on("ph1") != multihost_serving.relay_socket_on("ph2")


@pytest.mark.parametrize("verb", ["carry", "serve"])
def test_cross_traffic_and_faults_over_hosts_are_refused_before_anything_is_built(verb):
    b = multihost.MultiHostBackend("/nonexistent/hosts.yaml")  # never read: refused first
    with pytest.raises(TestbedError, match="the emulated backend over a hosts file carries no cross traffic"):
        getattr(b, verb)(None, None, Conditions(cross_flows=2), Path("."), print)
    with pytest.raises(TestbedError, match="the emulated backend over a hosts file cannot inject faults"):
        getattr(b, verb)(None, None, Conditions(faults=({"at": 1},)), Path("."), print)


def test_cross_traffic_and_faults_over_hosts_are_refused_by_the_experiments_check(tmp_path):
    from testbed.experiment.schema import validate

    _hosts(tmp_path)
    for key, extra in (("cross_flows", {"cross_flows": 1}),
                       ("faults", {"faults": [{"at": 1, "target": "controller", "action": "restart"}]})):
        with pytest.raises(TestbedError) as info:
            validate({"hosts": str(tmp_path / "hosts.yaml"), **extra}, "x")
        assert info.value.key == key and "over a hosts file" in str(info.value)


def test_a_multi_host_verb_without_a_hosts_file_is_one_line():
    with pytest.raises(TestbedError, match="^--hosts FILE is required$"):
        cluster.refuse_no_hosts(None)
    assert cluster.refuse_no_hosts("hosts.yaml") is None
