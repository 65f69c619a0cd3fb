"""testbed.cli.hosts, directly: what the hosts verb hands the pseudo-hosts and the remote checks, and what it
prints (they stand in here; tests/integration/test_pseudo_hosts.py runs them for real)."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from testbed.cli import hosts as verb
from testbed.emulation.hosts import pseudo, remote

HOSTS = ("hosts:\n  - {name: ph1, address: 10.250.0.1, user: root, key: k}\n"
         "  - {name: ph2, address: 10.250.0.2, user: root, key: k}\n")


def args(**kw) -> Namespace:
    base = dict(action="status", name=None, count=2, mtu=9000, subnet="10.250.0.0/24", pmd_cores="0",
                pmd_maxsleep=500, json=False)
    return Namespace(**(base | kw))


def test_up_passes_the_cores_and_sleep_asked_for(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(pseudo, "up", lambda n, **kw: seen.update(n=n, **{k: v for k, v in kw.items()
                                                                            if k != "log"}) or "/run/hosts.yaml")
    assert verb.cmd_pseudo(args(action="up", count=3, pmd_cores="any", pmd_maxsleep=-1)) == 0
    assert seen == {"n": 3, "mtu": 9000, "subnet": "10.250.0.0/24", "pmd_cores": None, "pmd_maxsleep_us": None}
    assert capsys.readouterr().out == "/run/hosts.yaml\n"


def test_down_reports_what_it_removed_and_fails_on_leftovers(monkeypatch, capsys):
    monkeypatch.setattr(pseudo, "down", lambda: [f"netns ph{i}" for i in range(1, 9)])
    monkeypatch.setattr(pseudo, "leftovers", lambda: ["bridge tb-ph0"])
    assert verb.cmd_pseudo(args(action="down")) == 1
    out = capsys.readouterr()
    assert out.out == "removed 8 things: " + ", ".join(f"netns ph{i}" for i in range(1, 7)) + ", ...\n"
    assert out.err == "testbed: error: still there after down: bridge tb-ph0\n"


def test_kill_needs_a_name_and_status_lists_the_hosts(monkeypatch, capsys):
    with pytest.raises(TestbedError, match="hosts pseudo kill needs a pseudo-host's name, e.g. ph2"):
        verb.cmd_pseudo(args(action="kill"))
    state = {"hosts": [{"name": "ph1", "address": "10.250.0.1", "netns": "tb-ph1", "pid": 41}]}
    monkeypatch.setattr(pseudo, "load_state", lambda: state)
    monkeypatch.setattr(pseudo, "leftovers", lambda: [])
    monkeypatch.setattr(pseudo, "hosts_path", lambda: "/run/hosts.yaml")
    verb.cmd_pseudo(args())
    assert capsys.readouterr().out == "ph1 10.250.0.1 netns tb-ph1 pid 41\n/run/hosts.yaml\n"
    monkeypatch.setattr(pseudo, "load_state", lambda: None)
    monkeypatch.setattr(pseudo, "leftovers", lambda: ["veth x"])
    verb.cmd_pseudo(args())
    assert capsys.readouterr().out == "no pseudo-hosts (left behind: veth x)\n"


def test_check_runs_the_preflight_on_every_host(tmp_path, monkeypatch, capsys):
    f = tmp_path / "hosts.yaml"
    f.write_text(HOSTS)
    calls = []
    monkeypatch.setattr(remote, "fingerprint", lambda: "abc123")
    monkeypatch.setattr(remote, "on_all", lambda hosts, fn: {h.name: fn(h) for h in hosts.hosts})

    def preflight(h, local, peers, mtu, tunnel):
        calls.append((h.name, local, peers, mtu, tunnel))
        return {"hostname": h.name, "ovs": "3.1", "kernel": "6.1", "cores": 2}

    monkeypatch.setattr(remote, "preflight", preflight)
    assert verb.cmd_check(Namespace(hosts=str(f), mtu=3000, tunnel="vxlan", json=True)) == 0
    peers = {"ph1": "10.250.0.1", "ph2": "10.250.0.2"}
    assert calls == [("ph1", "abc123", peers, 3000, "vxlan"), ("ph2", "abc123", peers, 3000, "vxlan")]
    assert json.loads(capsys.readouterr().out)["fingerprint"] == "abc123"


def test_plan_with_hosts_prints_each_fabrics_placement(tmp_path, capsys):
    """ZCube n=16 on 2 hosts: GPUs live with their port-1 switch, so odd GPUs and sw1 on ph1, even GPUs and sw3
    on ph2; sw2 and sw4 one each (sw2 with ph1). Crossing: sw1-sw4 and sw3-sw2 (4 cables each: 8), and the
    port-2 cables of the GPUs whose even switch is on the other host (2,4,6,8 on sw2; 9,11,13,15 on sw4: 8):
    16 of the 48 cables."""
    f = tmp_path / "hosts.yaml"
    f.write_text(HOSTS)
    z = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    doc = verb.print_placement(Namespace(hosts=str(f), json=True), [z])["zcube"]
    assert [(h["host"], h["switches"], h["gpus"]) for h in doc["hosts"]] == [
        ("ph1", ["sw1", "sw2"], list(range(1, 17, 2))), ("ph2", ["sw3", "sw4"], list(range(2, 17, 2)))]
    assert (doc["cables"], doc["cross_cables"], doc["cross_fabric_cables"], doc["cross_host_cables"]) == (48, 16, 8, 8)
    assert verb.print_placement(Namespace(hosts=str(f), json=False), [z]) is None
    assert capsys.readouterr().out.splitlines()[-2] == \
        "cross-host cables: 16 of 48 (8 switch-switch, 8 GPU-switch): one tunnel each"
