"""fabrics.maxmin (max-min fair shares by progressive filling) and fabrics.topology (the
wiring every layer agrees on), against values worked out by hand."""

from __future__ import annotations

import pytest

from fabrics import build_fabric
from fabrics.maxmin import all_link_capacities, flow_links, max_min
from fabrics.topology import Cable, FabricBuilder


def test_progressive_filling_by_hand():
    """a:10 b:10 c:4; f1=[a,b] f2=[a] f3=[b,c] f4=[c].
    Round 1: every link has 2 users; shares a 10/2=5, b 10/2=5, c 4/2=2 -> c is the bottleneck: all get 2,
    left a=6 b=6 c=0, f3 f4 frozen. Round 2: a has f1 f2 (6/2=3), b has f1 (6/1=6) -> a: f1 f2 get 3 more."""
    flows = {"f1": ["a", "b"], "f2": ["a"], "f3": ["b", "c"], "f4": ["c"], "idle": []}
    assert max_min(flows, {"a": 10.0, "b": 10.0, "c": 4.0}) == {"f1": 5.0, "f2": 5.0, "f3": 2.0, "f4": 2.0,
                                                                 "idle": 0.0}


def test_one_shared_link_splits_evenly_and_a_lone_flow_takes_its_link():
    assert max_min({"x": ["l"], "y": ["l"], "z": ["l"]}, {"l": 9.0}) == {"x": 3.0, "y": 3.0, "z": 3.0}
    assert max_min({"x": ["l", "m"]}, {"l": 9.0, "m": 4.0}) == {"x": 4.0}


# ZCube n=16, k=8, c=k^2/n=4, radix k+(n/k)c=16. Ports are handed out in build order: GPU port 1s first
# (odd GPUs on sw1 ports 1..8, even GPUs on sw3 ports 1..8), then port 2s (gpu1..8 on sw2 ports 1..8,
# gpu9..16 on sw4 ports 1..8), then cables: sw1-sw2 on sw1 9..12 / sw2 9..12, sw1-sw4 on sw1 13..16 / sw4 9..12,
# sw3-sw2 on sw3 9..12 / sw2 13..16, sw3-sw4 on sw3 13..16 / sw4 13..16. The cable towards GPU d is number
# ((d-1) mod 8) // 2 of the four.
Z16 = build_fabric("zcube", gpus=16, gpus_per_switch=8)


def test_the_wiring_of_zcube_16_by_hand():
    assert Z16.attachment[(1, 1)] == ("sw1", 1) and Z16.attachment[(15, 1)] == ("sw1", 8)
    assert Z16.attachment[(2, 1)] == ("sw3", 1) and Z16.attachment[(9, 2)] == ("sw4", 1)
    assert Z16.ports_towards("sw1", "sw4") == [13, 14, 15, 16] and Z16.ports_towards("sw4", "sw1") == [9, 10, 11, 12]
    assert Z16.peer("sw3", 9) == ("sw2", 13)
    assert [s.radix for s in Z16.switches.values()] == [16, 16, 16, 16]
    assert len(Z16.host_cables) == 32 and len(Z16.fabric_cables) == 16  # 4 odd-even pairs x 4 cables
    assert Z16.fabric_cables[4] == Cable("sw1", 13, "sw4", 9, "fabric", 0)
    assert Z16.host_cables[0].endpoint("a") == "gpu1:p1" and Z16.host_cables[0].endpoint("b") == "sw1"
    assert Z16.describe() == "ZCube(gpus=16, gpus_per_switch=8, cables=4)" and Z16.oversubscription == 1.0
    g = Z16.graph()
    assert g.number_of_nodes() == 4 + 32 and g.number_of_edges() == 48


def test_flow_links_follow_the_cable_picked_by_destination():
    # gpu9: cable ((9-1) mod 8)//2 = 0 -> sw1:13; gpu9 p2 is sw4 port 1
    assert flow_links(Z16, (1, 1), (9, 2)) == ["gpu1:p1", "sw1:13", "sw4:1"]
    # gpu15: cable (14 mod 8)//2 = 3 -> sw1:16; gpu15 p2 is sw4 port 7
    assert flow_links(Z16, (1, 1), (15, 2)) == ["gpu1:p1", "sw1:16", "sw4:7"]


def test_zcube_flows_to_one_nic_share_its_cable_and_port():
    """gpu1 and gpu3 (both on sw1) to gpu9:p2 share sw1:13 and sw4:1: 1.5 Mbit/s each; gpu5 to gpu11:p2 rides
    cable (10 mod 8)//2 = 1 (sw1:14) to sw4:3 alone: the full 3 Mbit/s."""
    flows = {"a": flow_links(Z16, (1, 1), (9, 2)), "b": flow_links(Z16, (3, 1), (9, 2)),
             "c": flow_links(Z16, (5, 1), (11, 2))}
    assert flows["c"] == ["gpu5:p1", "sw1:14", "sw4:3"]
    assert max_min(flows, all_link_capacities(Z16, 3e6)) == {"a": 1.5e6, "b": 1.5e6, "c": 3e6}


def test_every_nic_and_switch_port_has_the_link_rate():
    caps = all_link_capacities(Z16, 3e6)
    assert len(caps) == 2 * 16 + 4 * 16  # two NIC ports per GPU, 16 ports on each of 4 switches
    assert set(caps.values()) == {3e6} and caps["gpu16:p2"] == 3e6 and caps["sw4:16"] == 3e6


def test_the_builder_hands_out_ports_in_order():
    b = FabricBuilder()
    b.add_switch("s1", dpid=1, role="leaf", radix=4)
    b.add_switch("s2", dpid=2, role="spine", radix=4)
    b.connect_gpu(1, 1, "s1")
    b.connect_switches("s1", "s2", 2)
    assert b.switches["s1"].ports == {1: ("gpu1", 1), 2: ("s2", 1), 3: ("s2", 2)}
    assert b.cables[1:] == [Cable("s1", 2, "s2", 1, "fabric", 0), Cable("s1", 3, "s2", 2, "fabric", 1)]


@pytest.mark.parametrize("kind,kwargs,text", [("roft", {"gpus": 16}, "ROFT(gpus=16, gpus_per_server=8, radix=16)")])
def test_describe_names_the_builder_parameters(kind, kwargs, text):
    assert build_fabric(kind, **kwargs).describe() == text
