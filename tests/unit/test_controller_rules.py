"""controller.rules: what the controller installs, run through a fake flow table switch by switch.

Packets are walked hop by hop through the fake tables of the switches, following the
fabric's cabling (switch port -> peer), and compared with the routing model's own walk.
"""

import itertools

import pytest

from controller.rules import (
    ETH_IPV4,
    PRIO_MISS,
    PRIO_PROBE,
    PROBE_DST_MAC,
    PROBE_ETHERTYPE,
    fabric_programs,
)
from testbed.fabric import addressing, build_fabric
from testbed.fabric.routing import forwarding_tables, walk
from tests.fakes.flow_table import FakeFlowTable

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


@pytest.mark.parametrize("name", ["zcube16", "zcube32"])
def test_zcube_has_no_groups(name):
    for prog in fabric_programs(fabric_of(name)).values():
        assert prog.groups == []
        assert all(kind == "output" for fl in prog.flows for kind, _ in fl.actions if kind != "controller")


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
