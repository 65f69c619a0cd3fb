"""Fault targets as users spell them, and the devices whose carrier a cut takes away."""

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from fabrics.datapath import cut_devices, plan_datapath
from fabrics.failover import parse_target


@pytest.fixture(scope="module")
def zcube():
    return build_fabric("zcube", gpus=16, gpus_per_switch=8)


def _fabric_cable(fabric):
    sw = next(iter(fabric.switches))
    port, (peer, peer_port) = next((p, e) for p, e in sorted(fabric.switches[sw].ports.items())
                                   if not e[0].startswith("gpu"))
    return (sw, port), (peer, peer_port)


def test_either_end_names_the_same_cable(zcube):
    (a, pa), (b, pb) = _fabric_cable(zcube)
    one = parse_target(zcube, f"link {a}:{pa}")
    other = parse_target(zcube, f"link {b}-eth{pb}")
    both = parse_target(zcube, f"link {b}:{pb} {a}:{pa}")
    assert one == other == both
    assert set(one.ends) == {(a, pa), (b, pb)}


def test_nic_end_spellings(zcube):
    sw, port = zcube.attachment[(3, 1)]
    t = parse_target(zcube, "link gpu3:p1")
    assert t == parse_target(zcube, "link gpu3-p1") == parse_target(zcube, f"link {sw}:{port} gpu3:1")
    assert t.ends == ((sw, port), ("gpu3", 1))  # switch side first
    assert t.text == f"link {sw}:{port} gpu3:p1"


@pytest.mark.parametrize("text, says", [
    ("link sw99:1", "switches: sw1"),
    ("link sw1:999", "has ports"),
    ("link gpu99:p1", "NIC ports gpu1..gpu16"),
    ("link gpu3:p3", "ports p1 and p2"),
    ("switch sw99", "no switch 'sw99'"),
    ("rack 3", "expected 'link sw1:9'"),
    ("controller now", "expected 'link sw1:9'"),
])
def test_bad_targets_say_what_exists(zcube, text, says):
    with pytest.raises(TestbedError) as exc:
        parse_target(zcube, text)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_two_ends_of_different_cables_are_refused(zcube):
    (a, pa), _ = _fabric_cable(zcube)
    sw, port = zcube.attachment[(3, 1)]
    with pytest.raises(TestbedError, match="is cabled to"):
        parse_target(zcube, f"link {a}:{pa} {sw}:{port}")


def test_cut_devices_take_both_ends_of_a_fabric_cable(zcube):
    (a, pa), (b, pb) = _fabric_cable(zcube)
    assert cut_devices(zcube, [(a, pa)]) == [f"{a}-eth{pa}r", f"{b}-eth{pb}r"]


def test_cut_devices_of_a_nic_link(zcube):
    sw, port = zcube.attachment[(3, 1)]
    assert cut_devices(zcube, [("gpu3", 1)]) == ["gpu3-p1u", f"{sw}-eth{port}r"]


def test_cut_devices_are_devices_the_datapath_builds(zcube):
    plan = plan_datapath(zcube)
    built = set(plan.root_devices)
    for sw, s in zcube.switches.items():
        for dev in cut_devices(zcube, [(sw, p) for p in s.ports]):
            assert dev in built


def test_a_switch_target_is_dead_as_a_switch(zcube):
    t = parse_target(zcube, "switch sw2")
    assert t.kind == "switch" and "sw2" in t.dead(zcube).switches
    assert parse_target(zcube, "controller").dead(zcube).ends == frozenset()


def test_cut_switches_are_the_ends_of_what_went_down(zcube):
    from testbed.repetition.writeup import cut_switches

    events = [{"action": "down", "target": "link sw1:9 sw2:9"}, {"action": "up", "target": "link sw1:9 sw2:9"},
              {"action": "restart", "target": "controller"}]
    assert cut_switches(zcube, events) == {"sw1", "sw2"}
    sw, _ = zcube.attachment[(3, 1)]
    assert cut_switches(zcube, [{"action": "down", "target": "link gpu3:p1"}]) == {sw}
    assert cut_switches(zcube, [{"action": "down", "target": "switch sw2"}]) == {"sw1", "sw2", "sw3"}


def test_a_target_cuts_one_end_of_its_cable_every_port_of_its_switch_or_nothing(zcube):
    (a, pa), (b, pb) = _fabric_cable(zcube)
    assert parse_target(zcube, f"link {a}:{pa}").cut_ends(zcube) == [parse_target(zcube, f"link {a}:{pa}").ends[0]]
    assert parse_target(zcube, f"switch {a}").cut_ends(zcube) == [(a, p) for p in sorted(zcube.switches[a].ports)]
    assert parse_target(zcube, "controller").cut_ends(zcube) == []
