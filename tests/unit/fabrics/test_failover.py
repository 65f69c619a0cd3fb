"""fabrics.failover: live buckets, ZCube's detour and the port pairs hosts may still use.

The expected values are worked out by hand from the wiring rule (docs/fabrics.md, zcube.py), for
ZCube n=16, k=8: odd GPUs' port 1 on sw1, even GPUs' port 1 on sw3 (GPU i on port (i+1)//2),
port 2 of GPUs 1-8 on sw2 and of 9-16 on sw4 (GPU i on port i, resp. i-8). OpenFlow ports
are handed out GPU ports first, then the odd-even cables in the order sw1-sw2, sw1-sw4,
sw3-sw2, sw3-sw4. With one cable per pair: sw1 9->sw2, 10->sw4; sw2 9->sw1, 10->sw3;
sw3 9->sw2, 10->sw4; sw4 9->sw1, 10->sw3. With two: sw1 9,10->sw2 and 11,12->sw4; sw2
9,10->sw1. The planned cable to GPU g is ((g-1) mod 8) // 2 mod 2: index 0 for GPUs 1, 2,
5, 6, 9, 10, 13, 14, index 1 for the others.
"""

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from fabrics.failover import (
    Dead,
    Route,
    bucket_order,
    detour,
    failover_tables,
    live_buckets,
    live_tables,
    usable_ports,
)
from fabrics.routing import NextHop, PortChoice, Send, forwarding_tables, plan_ports, select_ports

BOTH = [PortChoice(1, 2, 0.5), PortChoice(2, 1, 0.5)]
ONLY_P2 = [PortChoice(2, 1, 1.0)]  # p2 -> destination p1
ONLY_P1 = [PortChoice(1, 2, 1.0)]  # p1 -> destination p2


@pytest.fixture(scope="module")
def z1():
    return build_fabric("zcube", gpus=16, gpus_per_switch=8, cables=1)


@pytest.fixture(scope="module")
def z2():
    return build_fabric("zcube", gpus=16, gpus_per_switch=8, cables=2)


@pytest.fixture(scope="module")
def roft():
    return build_fabric("roft", gpus=16)


def test_the_wiring_the_expected_values_rest_on(z1, z2):
    assert {p: z1.peer("sw1", p)[0] for p in (9, 10)} == {9: "sw2", 10: "sw4"}
    assert z1.peer("sw2", 9) == ("sw1", 9) and z1.peer("sw4", 9) == ("sw1", 10)
    assert z1.attachment[(9, 1)] == ("sw1", 5) and z1.attachment[(9, 2)] == ("sw4", 1)
    assert z1.attachment[(1, 2)] == ("sw2", 1) and z1.attachment[(10, 2)] == ("sw4", 2)
    assert z2.ports_towards("sw1", "sw2") == [9, 10] and z2.ports_towards("sw1", "sw4") == [11, 12]
    assert z2.ports_towards("sw2", "sw1") == [9, 10]


# ------------------------------------------------------------------ ZCube, one cable per pair

def test_a_dead_cable_moves_the_pair_to_the_other_nic_ports(z1):
    dead = Dead.of(z1, [("sw4", 9)])  # the sw1-sw4 cable, named by its sw4 end
    assert dead.ends == {("sw1", 10), ("sw4", 9)}
    # gpu1 p1 -> gpu9 p2 was sw1 -(10)-> sw4 -(1)-> gpu9; now p2 -> gpu9 p1: sw2 -(9)-> sw1 -(5)-> gpu9
    assert detour(z1, dead, (1, 1), (9, 2)) == Route(2, 1, ("sw2", "sw1"), (9, 5))
    assert usable_ports(z1, dead, 1, 9) == ONLY_P2
    assert usable_ports(z1, dead, 9, 1) == ONLY_P1  # gpu9 p2 on sw4 would need the dead cable back
    # a pair the cable does not carry keeps both port pairs and its own path
    assert usable_ports(z1, dead, 2, 10) == BOTH
    assert detour(z1, dead, (2, 1), (10, 2)) == Route(1, 2, ("sw3", "sw4"), (10, 2))


def test_a_dead_nic_link_moves_the_pair_to_the_other_nic_ports(z1):
    dead = Dead.of(z1, [("gpu9", 2)])
    assert dead.ends == {("gpu9", 2), ("sw4", 1)}
    assert detour(z1, dead, (1, 1), (9, 2)) == Route(2, 1, ("sw2", "sw1"), (9, 5))
    assert usable_ports(z1, dead, 1, 9) == ONLY_P2
    assert usable_ports(z1, dead, 9, 1) == ONLY_P1  # gpu9 cannot send from p2 either
    assert detour(z1, dead, (9, 2), (1, 1)) == Route(1, 2, ("sw1", "sw2"), (9, 1))


def test_a_dead_switch_leaves_the_pairs_that_avoid_it(z1):
    dead = Dead.of(z1, switches=["sw4"])
    assert usable_ports(z1, dead, 1, 9) == ONLY_P2
    assert usable_ports(z1, dead, 1, 2) == BOTH  # sw1 -> sw2 and sw2 -> sw3
    assert usable_ports(z1, dead, 9, 10) == []  # port 2 of both on sw4, and p1 -> p2 ends there: cut off


def test_no_detour_when_both_port_pairs_are_down(z1):
    dead = Dead.of(z1, [("sw1", 10), ("sw1", 9)])  # sw1 loses both even switches
    assert detour(z1, dead, (1, 1), (9, 2)) is None
    assert usable_ports(z1, dead, 1, 9) == []


def test_gpus_of_one_server_on_one_odd_switch_share_their_cable(z1):
    """gpu1 and gpu3: sw1 and sw2 both; either port pair crosses sw1-sw2 (NVLink's traffic in practice)."""
    dead = Dead.of(z1, [("sw1", 9)])
    assert usable_ports(z1, dead, 1, 3) == []
    assert usable_ports(z1, dead, 1, 10) == BOTH  # another server: sw1-sw4 and sw2-sw3


def test_zcube_without_parallel_cables_has_no_groups(z1):
    assert all(live_buckets(z1, Dead(), sw) == {} for sw in z1.switches)


# ------------------------------------------------------------------ ZCube, two cables per pair

def test_parallel_cables_fail_over_planned_cable_first_then_its_sibling(z2):
    tables = forwarding_tables(z2)
    assert bucket_order(z2, "sw1", tables["sw1"]["10.2.0.9"]) == (11, 12)  # gpu9: cable 0
    assert bucket_order(z2, "sw1", tables["sw1"]["10.2.0.11"]) == (12, 11)  # gpu11: cable 1
    assert bucket_order(z2, "sw1", tables["sw1"]["10.2.0.3"]) == (10, 9)
    assert bucket_order(z2, "sw1", tables["sw1"]["10.1.0.9"]) == (5,)  # a GPU port: no group
    dead = Dead.of(z2, [("sw1", 11)])
    live = live_buckets(z2, dead, "sw1")
    assert (live["10.2.0.9"], live["10.2.0.11"], live["10.2.0.1"], live["10.2.0.3"]) == ((12,), (12,), (9, 10), (10, 9))
    # the pair keeps its NIC ports: only the cable changes
    assert detour(z2, dead, (1, 1), (9, 2)) == Route(1, 2, ("sw1", "sw4"), (12, 1))
    assert usable_ports(z2, dead, 1, 9) == BOTH


def test_with_every_parallel_cable_dead_the_pair_takes_the_other_nic_ports(z2):
    dead = Dead.of(z2, [("sw1", 11), ("sw1", 12)])
    assert live_buckets(z2, dead, "sw1")["10.2.0.9"] == ()
    # sw2 reaches gpu9 p1 over its cable 0 to sw1: port 9
    assert detour(z2, dead, (1, 1), (9, 2)) == Route(2, 1, ("sw2", "sw1"), (9, 5))
    assert usable_ports(z2, dead, 1, 9) == ONLY_P2


# ------------------------------------------------------------------ ROFT

def test_roft_groups_keep_their_live_buckets(roft):
    """ROFT n=16: leaf1 has GPUs 1 and 9 on ports 1-4, uplinks 5, 6 to spine1 and 7, 8 to spine2;
    spine1 reaches leaf j over ports 2j-1 and 2j."""
    assert roft.peer("leaf1", 5) == ("spine1", 1) and roft.peer("leaf1", 8) == ("spine2", 2)
    planned = live_buckets(roft, Dead(), "leaf1")
    assert set(planned.values()) == {(5, 6, 7, 8)}
    dead = Dead.of(roft, [("leaf1", 5)])
    assert set(live_buckets(roft, dead, "leaf1").values()) == {(6, 7, 8)}
    spine1 = live_buckets(roft, dead, "spine1")
    assert spine1["10.1.0.1"] == (2,) and spine1["10.2.0.9"] == (2,) and spine1["10.1.0.2"] == (3, 4)
    assert live_buckets(roft, dead, "leaf2") == live_buckets(roft, Dead(), "leaf2")


def test_a_spine_that_lost_a_leaf_is_left_out_for_that_leaf_only(roft):
    dead = Dead.of(roft, [("leaf1", 5), ("leaf1", 6)])
    assert live_buckets(roft, dead, "spine1")["10.1.0.1"] == ()
    leaf2 = live_buckets(roft, dead, "leaf2")
    assert {dst: leaf2[dst] for dst in ("10.1.0.1", "10.2.0.1", "10.1.0.9", "10.2.0.9")} == dict.fromkeys(
        ("10.1.0.1", "10.2.0.1", "10.1.0.9", "10.2.0.9"), (7, 8))
    assert leaf2["10.1.0.3"] == (5, 6, 7, 8)


def test_a_dead_spine_leaves_every_group(roft):
    dead = Dead.of(roft, switches=["spine1"])
    assert all(set(live_buckets(roft, dead, f"leaf{j}").values()) == {(7, 8)} for j in range(1, 9))


def test_roft_hosts_move_off_a_dead_nic_link(roft):
    dead = Dead.of(roft, [("gpu1", 1)])
    assert usable_ports(roft, dead, 1, 2) == ONLY_P2
    assert usable_ports(roft, dead, 2, 1) == ONLY_P1
    assert usable_ports(roft, dead, 2, 3) == BOTH
    with pytest.raises(TestbedError, match="ECMP"):
        detour(roft, dead, (1, 1), (2, 2))


# ------------------------------------------------------------------ the model itself

@pytest.mark.parametrize("kind,kw", [("zcube", {"gpus": 16, "gpus_per_switch": 8, "cables": 2}),
                                     ("zcube", {"gpus": 32, "gpus_per_switch": 8}), ("roft", {"gpus": 32})])
def test_with_nothing_dead_the_live_tables_are_the_planned_ones(kind, kw):
    f = build_fabric(kind, **kw)
    assert live_tables(f, Dead()) == forwarding_tables(f)


def test_live_tables_drop_where_nothing_is_left(z1):
    live = live_tables(z1, Dead.of(z1, [("sw1", 10)]))
    assert live["sw1"]["10.2.0.9"] == NextHop(()) and live["sw1"]["10.2.0.1"] == NextHop((9,))


@pytest.mark.parametrize("links,switches,message", [
    ([("sw1", 99)], [], "sw1:99 is not a cable end"),
    ([("gpu99", 1)], [], "gpu99:1 is not a cable end"),
    ([("spine1", 1)], [], "spine1:1 is not a cable end"),
    ([], ["sw9"], "sw9 is not a switch"),
])
def test_dead_sets_are_checked_against_the_fabric(z1, links, switches, message):
    with pytest.raises(TestbedError, match=message):
        Dead.of(z1, links, switches)


# ------------------------------------------------------------------ the hosts' port choice

def test_policies_keep_to_the_usable_port_pairs(z1):
    usable = usable_ports(z1, Dead.of(z1, [("sw1", 10)]), 1, 9)
    for policy in ("striped", "rail-out", "server-out", "pair-hash", "adaptive"):
        assert select_ports(1, 9, policy, usable=usable) == ONLY_P2, policy
    assert select_ports(1, 9, "striped", usable=BOTH) == select_ports(1, 9, "striped")
    assert select_ports(1, 9, "rail-out", usable=BOTH) == ONLY_P1
    with pytest.raises(TestbedError, match="no usable NIC port pair from gpu1 to gpu9"):
        select_ports(1, 9, "striped", usable=[])


@pytest.mark.parametrize("policy", ["striped", "rail-out", "pair-hash", "adaptive"])
def test_planned_transfers_take_the_detour(z1, policy):
    dead = Dead.of(z1, [("sw1", 10)])
    live = live_tables(z1, dead)
    sends = [Send(1, 9, 1000.0, 0.1 * i) for i in range(4)] + [Send(2, 10, 1000.0, 0.0)]
    picks = plan_ports(sends, policy, fabric=z1, rate_bps=1e6, tables=live,
                       usable=lambda s, d: usable_ports(z1, dead, s, d, live))
    assert picks[:4] == [PortChoice(2, 1, 1.0)] * 4
    assert picks[4] == plan_ports(sends[4:], policy, fabric=z1, rate_bps=1e6)[0]  # untouched pair: as before
    with pytest.raises(TestbedError, match="no usable NIC port pair"):
        plan_ports([Send(1, 9, 1.0, 0.0)], policy, fabric=z1, rate_bps=1e6, usable=lambda s, d: [])


def test_pause_daemon_can_pause_whoever_a_failed_over_sibling_cable_carries():
    """Ingress accounting covers the parallel siblings: a fast-failover group moves a cable's traffic to a
    sibling without asking the controller, so the NICs a feeding cable may carry cannot wait for a repair."""
    from pfc.policy import failover_sources_via, sources_via

    z = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    planned, reach = sources_via(z), failover_sources_via(z)
    sw = "sw1"
    even = next(p for p, _ in z.switches[sw].ports.values() if not p.startswith("gpu"))
    cables = z.ports_towards(sw, even)
    into = [f"{even}:{p}" for p, (peer, _) in sorted(z.switches[even].ports.items()) if peer.startswith("gpu")]
    for q in into:
        feeds = [f"{sw}:{c}" for c in cables if f"{sw}:{c}" in reach[q]]
        union = set().union(*(planned[q].get(f, set()) for f in feeds))
        assert any(planned[q].get(f, set()) < union for f in feeds)  # planned: each cable its own NICs
        assert all(reach[q][f] == union for f in feeds)  # failed over: any of them on any cable
    roft = build_fabric("roft", gpus=16, gpus_per_switch=8)
    assert failover_sources_via(roft) == sources_via(roft)  # ECMP sets are already every port


def test_failover_tables_add_a_cables_parallel_siblings_and_keep_ecmp_sets(z1, z2, roft):
    """What the switches may forward on without asking anyone: a ZCube cable then its siblings (none at one
    cable a pair), every other next hop as planned."""
    for fabric in (z1, z2, roft):
        tables, over = forwarding_tables(fabric), failover_tables(fabric)
        assert over.keys() == tables.keys()
        for sw, table in tables.items():
            for dst, hop in table.items():
                got = over[sw][dst].ports
                peer = fabric.peer(sw, hop.ports[0])[0]
                if fabric.kind == "zcube" and not peer.startswith("gpu"):
                    assert got[0] == hop.ports[0] and sorted(got) == sorted(fabric.ports_towards(sw, peer))
                else:
                    assert got == hop.ports
    assert any(len(h.ports) == 2 for t in failover_tables(z2).values() for h in t.values())
    assert all(len(h.ports) == 1 for t in failover_tables(z1).values() for h in t.values())
