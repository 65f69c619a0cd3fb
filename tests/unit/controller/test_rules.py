"""controller.rules: what the controller installs, run through a fake flow table switch by switch.

Packets are walked hop by hop through the fake tables of the switches, following the
fabric's cabling (switch port -> peer), and compared with the routing model's own walk.
"""

import itertools

import pytest

from controller.rules import (
    ETH_IPV4,
    FAST_FAILOVER,
    PRIO_MISS,
    PRIO_PROBE,
    PRIO_ROUTE,
    PROBE_DST_MAC,
    PROBE_ETHERTYPE,
    SELECT,
    GroupSpec,
)
from fabrics import addressing, build_fabric
from fabrics.failover import Dead
from fabrics.routing import forwarding_tables, walk
from tests.support.fakes.flow_table import FakeFlowTable
from tests.support.programs import fabric_programs

FABRICS = {
    "zcube16": ("zcube", {"gpus": 16, "gpus_per_switch": 8}),
    "zcube32": ("zcube", {"gpus": 32, "gpus_per_switch": 8}),
    "roft16": ("roft", {"gpus": 16}),
    "roft32": ("roft", {"gpus": 32}),
}
MAX_HOPS = {"zcube": 2, "roft": 3}


def fabric_of(name):
    kind, kwargs = FABRICS[name]
    return build_fabric(kind, **kwargs)


def fake_tables(fabric):
    return {name: FakeFlowTable(prog) for name, prog in fabric_programs(fabric).items()}


def ip_packet(src, dst, tp_src=40000, tp_dst=5201):
    return {"eth_type": ETH_IPV4, "ipv4_src": addressing.ip_of(*src), "ipv4_dst": addressing.ip_of(*dst),
            "ip_proto": 6, "tp_src": tp_src, "tp_dst": tp_dst}


def send(fabric, tables, src, pkt):
    """Carry ``pkt`` from NIC port ``src`` through the switches: (hops, output ports, (gpu, port) reached)."""
    switch, _ = fabric.attachment[src]
    hops, outs = [], []
    while len(hops) <= len(fabric.switches):
        out = tables[switch].forward(pkt)
        assert len(out) == 1 and isinstance(out[0], int), f"{switch} gives {out} for {pkt['ipv4_dst']}"
        hops.append(switch)
        outs.append(out[0])
        peer, peer_port = fabric.switches[switch].ports[out[0]]
        if peer.startswith("gpu"):
            return tuple(hops), tuple(outs), (int(peer[3:]), peer_port)
        switch = peer
    raise AssertionError(f"forwarding loop: {hops}")


def miss_rule(table):
    (miss,) = [f for f in table.program.flows if f.priority == PRIO_MISS]
    return miss


@pytest.mark.parametrize("name", FABRICS)
def test_every_gpu_port_pair_is_delivered_on_the_models_path(name):
    f = fabric_of(name)
    tables, model = fake_tables(f), forwarding_tables(f)
    for (src, dst), p in itertools.product(itertools.product(f.gpus(), repeat=2), (1, 2)):
        s, d = (src, p), (dst, 3 - p)
        # vary the 5-tuple so ROFT's select groups use many buckets
        hops, outs, reached = send(f, tables, s, ip_packet(s, d, tp_src=10000 + 97 * src + dst))
        assert reached == d, (s, d, hops)
        assert len(hops) <= MAX_HOPS[f.kind], (s, d, hops)
        planned = walk(f, model, s, d)
        assert (hops, outs) in planned, (s, d, hops, outs)
        if f.kind == "zcube":  # unique path: the source port's switch, then the destination port's
            assert len(planned) == 1 and hops == (f.switch_of(*s), f.switch_of(*d))
    assert all(t.packets[miss_rule(t)] == 0 for t in tables.values())


@pytest.mark.parametrize("name", FABRICS)
def test_every_program_has_one_miss_rule_and_one_probe_rule(name):
    f = fabric_of(name)
    for switch, t in fake_tables(f).items():
        flows = t.program.flows
        assert miss_rule(t).match == () and miss_rule(t).actions == ()
        probes = [fl for fl in flows if fl.match_dict.get("eth_type") == PROBE_ETHERTYPE]
        assert len(probes) == 1
        assert probes[0].priority == PRIO_PROBE and probes[0].actions == (("controller", 0),)
        assert t.forward({"eth_type": PROBE_ETHERTYPE, "eth_dst": PROBE_DST_MAC}) == ["controller"]
        routes = [fl for fl in flows if fl.priority not in (PRIO_MISS, PRIO_PROBE)]
        assert len(routes) == len(flows) - 2 == 2 * f.n_gpus, switch  # one per NIC port address
        assert t.program.dpid == f.switches[switch].dpid


@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("pkt", [
    {"eth_type": ETH_IPV4, "ipv4_dst": "10.1.3.7"},  # a plan address of a GPU this fabric lacks
    {"eth_type": ETH_IPV4, "ipv4_dst": "192.168.1.1"},
    {"eth_type": 0x0806},  # ARP: hosts have static neighbours, so it is unexpected
], ids=["absent-gpu", "foreign", "arp"])
def test_unknown_destination_hits_the_miss_rule(name, pkt):
    for t in fake_tables(fabric_of(name)).values():
        assert t.forward(pkt) == []
        miss = miss_rule(t)
        assert t.packets[miss] == 1
        assert sum(t.packets.values()) == 1  # nothing else matched


@pytest.mark.parametrize("n", [16, 32])
def test_zcube_with_one_cable_per_pair_has_no_groups(n):
    for prog in fabric_programs(build_fabric("zcube", gpus=n, gpus_per_switch=8, cables=1)).values():
        assert prog.groups == []
        assert all(kind == "output" for fl in prog.flows for kind, _ in fl.actions if kind != "controller")


def test_zcube_parallel_cables_are_fast_failover_groups_planned_cable_first():
    """n=16, k=8, 2 cables: sw1 reaches sw2 over ports 9, 10 and sw4 over 11, 12; GPUs 1, 2, 5, 6, 9, 10, 13, 14
    are planned on cable 0, the others on cable 1. sw1's destinations in address order: 10.1.0.10 (gpu10, via
    sw4, cable 0), 10.1.0.12 (via sw4, cable 1), 10.1.0.2 (gpu2, via sw2, cable 0), 10.1.0.4 (via sw2, cable 1)."""
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8, cables=2)
    prog = fabric_programs(f)["sw1"]
    assert prog.groups == [GroupSpec(1, (11, 12), FAST_FAILOVER), GroupSpec(2, (12, 11), FAST_FAILOVER),
                           GroupSpec(3, (9, 10), FAST_FAILOVER), GroupSpec(4, (10, 9), FAST_FAILOVER)]
    actions = {fl.match_dict["ipv4_dst"]: fl.actions for fl in prog.flows if fl.priority == PRIO_ROUTE}
    assert actions["10.2.0.9"] == (("group", 1),) and actions["10.2.0.11"] == (("group", 2),)
    assert actions["10.2.0.1"] == (("group", 3),) and actions["10.2.0.3"] == (("group", 4),)
    assert actions["10.1.0.9"] == (("output", 5),)  # its own GPU port


@pytest.mark.parametrize("name", ["zcube16", "zcube32", "roft16", "roft32"])
def test_groups_replace_only_the_planned_port_and_every_bucket_watches_its_port(name):
    """The planned program is today's, but for the groups: a fast-failover group's first bucket is the port the
    flow used to output to; ROFT's select groups keep their buckets."""
    f = fabric_of(name)
    tables = forwarding_tables(f)
    for switch, prog in fabric_programs(f).items():
        groups = {g.group_id: g for g in prog.groups}
        assert all(g.watched for g in prog.groups)
        for fl in prog.flows:
            if fl.priority != PRIO_ROUTE:
                continue
            (kind, arg), = fl.actions
            hop = tables[switch][fl.match_dict["ipv4_dst"]]
            if kind == "output":
                assert hop.ports == (arg,)
            elif f.kind == "roft":
                assert groups[arg].kind == SELECT and groups[arg].ports == hop.ports
            else:
                assert groups[arg].kind == FAST_FAILOVER and groups[arg].ports[0] == hop.ports[0]
                assert sorted(groups[arg].ports) == f.ports_towards(switch, f.peer(switch, hop.ports[0])[0])


@pytest.mark.parametrize("name", FABRICS)
def test_nothing_dead_is_the_planned_program(name):
    f = fabric_of(name)
    assert fabric_programs(f, Dead()) == fabric_programs(f)


def test_a_repaired_roft_program_modifies_groups_and_keeps_every_flow():
    f = fabric_of("roft16")
    planned, repaired = fabric_programs(f), fabric_programs(f, Dead.of(f, [("leaf1", 5)]))
    assert repaired["leaf1"].groups == [GroupSpec(1, (6, 7, 8))]
    assert repaired["spine1"].groups[0] == GroupSpec(1, (2,))  # spine1's group to leaf1
    assert repaired["spine1"].groups[1:] == planned["spine1"].groups[1:]
    assert all(repaired[s].flows == planned[s].flows for s in f.switches)
    assert all(repaired[s] == planned[s] for s in f.switches if s not in ("leaf1", "spine1"))


def test_a_leaf_gets_a_group_of_its_own_for_a_leaf_a_spine_lost():
    f = fabric_of("roft16")
    repaired = fabric_programs(f, Dead.of(f, [("leaf1", 5), ("leaf1", 6)]))["leaf2"]
    assert repaired.groups == [GroupSpec(1, (5, 6, 7, 8)), GroupSpec(2, (7, 8))]
    on_group_2 = {fl.match_dict["ipv4_dst"] for fl in repaired.flows if fl.actions == (("group", 2),)}
    assert on_group_2 == {"10.1.0.1", "10.2.0.1", "10.1.0.9", "10.2.0.9"}  # GPUs 1 and 9, on leaf1
    dead_leaf = fabric_programs(f, Dead.of(f, switches=["leaf1"]))["leaf2"]
    assert {fl.match_dict["ipv4_dst"] for fl in dead_leaf.flows if fl.priority == PRIO_ROUTE and not fl.actions} == (
        on_group_2)  # nothing reaches leaf1: dropped at the first leaf
    assert dead_leaf.groups == [GroupSpec(1, (5, 6, 7, 8))]


@pytest.mark.parametrize("name,cable", [("roft16", ("leaf1", 5)), ("roft32", ("spine2", 3)),
                                        ("zcube16", ("sw1", 9)), ("zcube32", ("sw4", 12))])
def test_watch_ports_keep_traffic_off_a_dead_cable_before_and_after_the_repair(name, cable):
    """Before the controller acts the switches skip the dead buckets themselves; the repaired program does the
    same without them. Either way every pair arrives on one of the model's paths."""
    f = fabric_of(name)
    dead = Dead.of(f, [cable])
    down = {s: {p for s_, p in dead.ends if s_ == s} for s in f.switches}
    planned, repaired = fabric_programs(f), fabric_programs(f, dead)
    for programs, watch in ((planned, down), (repaired, {})):
        tables = {s: FakeFlowTable(p, down=watch.get(s, ())) for s, p in programs.items()}
        for (src, dst), p in itertools.product(itertools.product(f.gpus(), repeat=2), (1, 2)):
            s, d = (src, p), (dst, 3 - p)
            hops, outs, reached = send(f, tables, s, ip_packet(s, d, tp_src=10000 + 97 * src + dst))
            assert reached == d and not set(zip(hops, outs)) & dead.ends, (s, d, hops, outs)


@pytest.mark.parametrize("name", ["roft16", "roft32"])
def test_roft_select_group_spreads_flows_over_spines_and_keeps_each_flow_on_one(name):
    f = fabric_of(name)
    src, dst = (1, 1), (2, 2)  # rails 1 and 2: different leaves
    leaf = f.switch_of(*src)
    assert f.switch_of(*dst) != leaf
    uplinks = {p for p, (peer, _) in f.switches[leaf].ports.items() if peer.startswith("spine")}
    tables = fake_tables(f)
    (group,) = tables[leaf].program.groups
    assert set(group.ports) == uplinks
    spines = set()
    for tp_src in range(20000, 20256):
        hops, outs, reached = send(f, tables, src, ip_packet(src, dst, tp_src=tp_src))
        assert reached == dst and len(hops) == 3 and outs[0] in uplinks
        spines.add(hops[1])
    assert len(spines) > 1
    assert spines == {s for s in f.switches if s.startswith("spine")}
    # one 5-tuple: the same bucket every time, also in freshly built tables
    pkt = ip_packet(src, dst, tp_src=33333)
    first = tables[leaf].forward(pkt)
    assert all(tables[leaf].forward(pkt) == first for _ in range(50))
    assert all(fake_tables(f)[leaf].forward(dict(pkt)) == first for _ in range(3))


def test_controller_only_failover_has_no_watched_buckets_and_repairs_by_flow():
    """``watch=False``: ROFT's select groups do not watch their ports; ZCube's parallel cables are plain
    outputs, and the repaired program points the dead cable's destinations at the next live sibling."""
    from controller.rules import switch_program
    from fabrics import build_fabric
    from fabrics.failover import Dead

    roft = build_fabric("roft", gpus=16, gpus_per_switch=8)
    leaf = next(s for s in roft.switches if roft.switches[s].role == "leaf")
    groups = switch_program(roft, leaf, watch=False).groups
    assert groups and not any(g.watched for g in groups)

    z = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    sw = "sw1"
    planned = switch_program(z, sw, watch=False)
    assert planned.groups == []
    outputs = {f.match_dict["ipv4_dst"]: f.actions for f in planned.flows if f.priority == 100}
    cable = next(p for p, (peer, _) in sorted(z.switches[sw].ports.items())
                 if not peer.startswith("gpu") and len(z.ports_towards(sw, peer)) > 1)
    moved = [dst for dst, a in outputs.items() if a == (("output", cable),)]
    assert moved
    repaired = switch_program(z, sw, dead=Dead.of(z, [(sw, cable)]), watch=False)
    after = {f.match_dict["ipv4_dst"]: f.actions for f in repaired.flows if f.priority == 100}
    peer = z.peer(sw, cable)[0]
    siblings = set(z.ports_towards(sw, peer)) - {cable}
    for dst in moved:
        (kind, port), = after[dst]
        assert kind == "output" and port in siblings
    assert all(after[d] == a for d, a in outputs.items() if d not in moved)
