"""`testbed cli` without root: what it attaches to (names, namespaces, ports) and its error paths."""

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("mininet.cli")

from common.errors import TestbedError  # noqa: E402
from fabrics import addressing, build_fabric  # noqa: E402
from fabrics.datapath import RX_OFPORT, netns_of  # noqa: E402
from testbed.cli import build_parser, main  # noqa: E402
from testbed.emulation import (  # noqa: E402
    attach,
    fabricctl,
    netns,  # noqa: E402
)


@pytest.mark.parametrize("kind,kwargs", [("zcube", {"gpus": 32, "gpus_per_switch": 8}), ("roft", {"gpus": 32}),
                                         ("zcube", {"gpus": 16, "gpus_per_switch": 8})])
def test_spec_names_every_namespace_interface_bridge_and_port(kind, kwargs):
    f = build_fabric(kind, **kwargs)
    spec = attach.attach_spec(f)
    assert [h.name for h in spec.hosts] == [f"gpu{i}" for i in f.gpus()]
    for i, h in zip(f.gpus(), spec.hosts):
        assert h.netns == netns_of(i) == f"tb-gpu{i}" and h.dpid is None
        assert h.intfs == tuple(attach.IntfSpec(f"gpu{i}-p{p}", p, f"{addressing.ip_of(i, p)}/16",
                                                addressing.mac_of(i, p)) for p in (1, 2))
    assert [s.name for s in spec.switches] == list(f.switches)
    for s in spec.switches:
        model = f.switches[s.name]
        assert s.netns is None and int(s.dpid, 16) == model.dpid and len(s.dpid) == 16
        assert [(i.name, i.port) for i in s.intfs] == \
            [(f"{s.name}-eth{p}", p) for p in sorted(model.ports)] + [(f"{s.name}-rxp", RX_OFPORT)]
    assert len(spec.cables) == len(f.cables)
    for (gpu, p), (sw, of_port) in f.attachment.items():
        assert (f"gpu{gpu}", f"gpu{gpu}-p{p}", sw, f"{sw}-eth{of_port}") in spec.cables
    names = {(n.name, i.name) for n in spec.hosts + spec.switches for i in n.intfs}
    assert all((a, ai) in names and (b, bi) in names for a, ai, b, bi in spec.cables)


def test_roft_switch_dpids_are_16_hex_digits():
    spec = attach.attach_spec(build_fabric("roft", gpus=32))
    dpids = {s.name: s.dpid for s in spec.switches}
    assert dpids["leaf1"] == "0000000000000101" and dpids["spine4"] == "0000000000000204"


def test_net_object_answers_the_lookups_the_cli_makes():
    hosts = [SimpleNamespace(name=f"gpu{i}") for i in (1, 2)]
    switches = [SimpleNamespace(name="sw1")]
    net = attach.AttachedNet(hosts, switches, [])
    assert "gpu2" in net and "gpu9" not in net and net["sw1"] is switches[0]
    assert net.keys() == ["gpu1", "gpu2", "sw1"] and net.values() == hosts + switches
    assert dict(net.items())["gpu1"] is hosts[0] and net.get("gpu1", "sw1") == [hosts[0], switches[0]]
    assert sorted(net) == ["gpu1", "gpu2", "sw1"] and net.controllers == [] and len(net) == 3


def test_cmd_is_repeatable_and_kept_in_order():
    args = build_parser().parse_args(["cli", "--cmd", "nodes", "--cmd", "gpu1 ping -c1 10.2.0.2"])
    assert args.cmd == ["nodes", "gpu1 ping -c1 10.2.0.2"]
    assert build_parser().parse_args(["cli"]).cmd == []


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))

    def never(*_a, **_k):  # nothing may go on to touch the machine in these tests
        raise AssertionError("reached the root/OVS checks")

    monkeypatch.setattr(fabricctl, "require_root", never)
    monkeypatch.setattr(attach, "attach", never)
    return tmp_path


@pytest.mark.parametrize("argv", [["cli"], ["cli", "--cmd", "nodes"]])
def test_no_fabric_up_is_the_one_line_error(state_dir, capsys, argv):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "testbed: error: no fabric is up: start one with 'testbed up zcube' or 'testbed up roft'\n"


def test_recorded_fabric_whose_namespaces_are_gone_is_one_line(state_dir, capsys, monkeypatch):
    (state_dir / "state.json").write_text(json.dumps(
        {"fabric": {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4}}))
    monkeypatch.setattr(netns, "exists", lambda name: False)
    assert main(["cli", "--cmd", "nodes"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "is not running (tb-gpu1 is missing and 15 more)" in err and "testbed clean" in err


def test_check_running_names_the_first_namespace_or_bridge_missing_and_how_many_more(monkeypatch):
    spec = attach.attach_spec(build_fabric("zcube", gpus=16, gpus_per_switch=8))
    monkeypatch.setattr(netns, "exists", lambda name: True)
    assert attach.check_running(spec) is None and attach.check_running(spec, {s.name for s in spec.switches}) is None
    with pytest.raises(TestbedError, match=r"not running \(bridge sw1 is missing and 3 more\): run 'testbed clean'"):
        attach.check_running(spec, set())
    monkeypatch.setattr(netns, "exists", lambda name: name != "tb-gpu3")
    with pytest.raises(TestbedError, match=r"is not running \(tb-gpu3 is missing\)"):
        attach.check_running(spec)
