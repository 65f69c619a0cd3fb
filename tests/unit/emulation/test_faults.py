"""testbed.emulation.faults without a fabric: which devices a fault takes down and gives back, what it
refuses, what it records (a netlink stand-in; the real fabric is tests/integration/test_faults.py).

ZCube n=16: sw1 port 13 is cable 0 of sw1-sw4, whose other end is sw4 port 9 (sw1 13..16 <-> sw4 9..12);
a cable is cut at both ends: the switch ports' far ends sw1-eth13r and sw4-eth9r go down."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest

from common.errors import EnvironmentProblem, TestbedError
from testbed.cli import fault as fault_verb
from testbed.emulation import fabricctl, faults
from testbed.emulation.state import FabricState

FABRIC = {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4}


class Netlink:
    """The root namespace's devices: name -> admin state, and every change in order."""

    def __init__(self, names):
        self.names = list(names)
        self.state = {n: "up" for n in names}
        self.changes: list[tuple[str, str]] = []

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def link_lookup(self, ifname):
        return [self.names.index(ifname) + 1] if ifname in self.state else []

    def link(self, op, index, state):
        name = self.names[index - 1]
        self.state[name] = state
        self.changes.append((name, state))


@pytest.fixture
def fab(tmp_path, monkeypatch):
    st = FabricState(fabric=dict(FABRIC), state_dir=str(tmp_path))
    monkeypatch.setattr(fabricctl, "require_root", lambda: None)
    monkeypatch.setattr(fabricctl, "require_state", lambda: st)
    # sw4's devices and the far ends of its cables: its GPUs' NICs, sw1 and sw3 ports 13..16
    devs = ([f"sw4-eth{p}r" for p in range(1, 17)] + [f"gpu{g}-p2u" for g in range(9, 17)]
            + [f"sw{s}-eth{p}r" for s in (1, 3) for p in range(13, 17)])
    nl = Netlink(devs)
    monkeypatch.setattr(faults, "IPRoute", nl)
    return st, nl


def test_a_cable_goes_down_at_both_ends_and_is_recorded(fab, tmp_path):
    st, nl = fab
    event = faults.inject("link sw1:13", "down")
    assert nl.changes == [("sw1-eth13r", "down"), ("sw4-eth9r", "down")]
    assert (event["target"], event["action"]) == ("link sw1:13 sw4:9", "down")
    assert json.loads((tmp_path / "faults.json").read_text()) == {"link sw1:13 sw4:9": event["t"]}
    assert [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()] == [event]
    # the carrier loss is stamped around the state changes alone, after the verb's own start
    assert event["t"] <= event["t_carrier"] and 0 <= event["carrier_s"] <= event["took_s"]
    assert list(event["t_devices"]) == ["sw1-eth13r", "sw4-eth9r"]
    assert event["t_carrier"] == event["t_devices"]["sw1-eth13r"] <= event["t_devices"]["sw4-eth9r"]


def test_a_device_another_fault_holds_stays_down(fab, tmp_path):
    """A switch down cuts all 16 of its cables at both ends: 32 devices (sw4-eth1..16r, gpu9..16-p2u, and
    sw1/sw3 ports 13..16). A cable of it given back while the switch is down stays down."""
    st, nl = fab
    faults.inject("switch sw4", "down")
    assert len(nl.changes) == 32 and {s for _, s in nl.changes} == {"down"}
    faults.inject("link sw1:13", "down")  # already without carrier: recorded, set again
    nl.changes.clear()
    faults.inject("link sw4:9", "up", wait=False)  # the same cable, named from its other end
    assert nl.changes == []  # both its devices are the switch fault's too
    assert list(json.loads((tmp_path / "faults.json").read_text())) == ["switch sw4"]
    faults.inject("switch sw4", "up", wait=False)
    assert len(nl.changes) == 32 and ("sw1-eth13r", "up") in nl.changes and set(nl.state.values()) == {"up"}


@pytest.mark.parametrize("text,action,message", [
    ("link sw1:13", "up", "link sw1:13 sw4:9 is not down; down now: nothing"),
    ("switch sw1", "restart", "fault action 'restart' for switch: expected down or up"),
    ("controller", "down", "fault action 'down' for controller: expected stop or start or restart"),
    ("controller", "stop", "the controller is not running: 'testbed fault controller start' starts it"),
])
def test_refusals_are_one_line_and_change_nothing(fab, tmp_path, text, action, message):
    st, nl = fab
    with pytest.raises(TestbedError) as info:
        faults.inject(text, action)
    assert str(info.value) == message and nl.changes == [] and not (tmp_path / "faults.jsonl").exists()


def test_a_second_down_and_a_missing_device_are_refused(fab):
    st, nl = fab
    faults.inject("link sw1:13", "down")
    with pytest.raises(TestbedError, match=r"^link sw1:13 sw4:9 is already down \(since "):
        faults.inject("link sw4:9", "down")
    with pytest.raises(EnvironmentProblem, match="device sw1-eth1r of link sw1:1 gpu1:p1 is gone: is the fabric whole"):
        faults.inject("link gpu1:p1", "down")


@pytest.mark.parametrize("words,kind,message", [
    (["down"], "link", "fault link: expected one or both cable ends and down|up"),
    (["sw1", "sw2", "sw3", "down"], "link", "fault link: expected one or both cable ends"),
    (["down"], "switch", "fault switch: expected 'fault switch NAME down|up'"),
    (["now", "stop"], "controller", "fault controller: expected 'fault controller stop|start|restart'"),
])
def test_the_verb_checks_its_words(words, kind, message):
    with pytest.raises(TestbedError) as info:
        fault_verb.cmd_fault(Namespace(kind=kind, words=words, no_wait=False, json=False))
    assert str(info.value).startswith(message)


def test_the_verb_passes_the_target_and_prints_the_event(monkeypatch, capsys):
    calls = []

    def inject(target, action, log, wait):
        calls.append((target, action, wait))
        return {"target": "link sw1:13 sw4:9", "action": action, "took_s": 0.0042, "restored_s": 0.25}

    monkeypatch.setattr(faults, "inject", inject)
    assert fault_verb.cmd_fault(Namespace(kind="link", words=["sw1:13", "up"], no_wait=True, json=False)) == 0
    assert calls == [("link sw1:13", "up", False)]
    assert capsys.readouterr().out == "link sw1:13 sw4:9 up in 4.2 ms; planned paths back after 250 ms\n"
    fault_verb.cmd_fault(Namespace(kind="switch", words=["sw3", "down"], no_wait=False, json=True))
    assert calls[-1] == ("switch sw3", "down", True)
    assert json.loads(capsys.readouterr().out)["took_s"] == 0.0042
