"""ECMP probing logic, against a fake hash instead of OVS."""

import random
import socket
import struct

from fabrics import build_fabric
from fabrics.routing import forwarding_tables, walk
from testbed.emulation import ecmp_probe


def test_rst_segment_checksum_verifies_and_sets_only_rst():
    seg = ecmp_probe.rst_segment("10.1.0.1", "10.2.0.3", 42001, 5202)
    sport, dport, _, _, off, flags = struct.unpack("!HHIIBB", seg[:14])
    assert (sport, dport, off >> 4, flags) == (42001, 5202, 5, 0x04)
    pseudo = socket.inet_aton("10.1.0.1") + socket.inet_aton("10.2.0.3") + struct.pack("!BBH", 0, 6, 20)
    assert ecmp_probe.checksum(pseudo + seg) == 0  # a correct checksum sums to 0xffff


def test_which_path_needs_exactly_one_candidate_fully_counted():
    a = (("leaf1", "spine1", "leaf2"), (9, 3, 1))
    b = (("leaf1", "spine2", "leaf2"), (11, 3, 1))
    before = {("leaf1", 9): 5, ("spine1", 3): 5, ("leaf2", 1): 5, ("leaf1", 11): 0, ("spine2", 3): 0}
    after = dict(before) | {("leaf1", 9): 6, ("spine1", 3): 6, ("leaf2", 1): 6}
    assert ecmp_probe.which_path([a, b], before, after) == a
    assert ecmp_probe.which_path([a, b], before, before) is None
    both = after | {("leaf1", 11): 1, ("spine2", 3): 1}
    assert ecmp_probe.which_path([a, b], before, both) is None


def _roft_permutation():
    fabric = build_fabric("roft", gpus=32)
    tables = forwarding_tables(fabric)
    flows = {f"{i}:{sp}": ((i, sp), (i % 32 + 1, 3 - sp)) for i in range(1, 33) for sp in (1, 2)}
    return {k: walk(fabric, tables, s, d) for k, (s, d) in flows.items()}


def fake_hash(candidates, seed=7):
    """A prober whose 'OVS' picks a candidate path by hashing (flow, port)."""
    calls = []

    def probe(batch):
        calls.append(dict(batch))
        return {k: candidates[k][random.Random(f"{seed}/{k}/{p}").randrange(len(candidates[k]))]
                for k, p in batch.items()}
    return probe, calls


def test_spread_places_every_roft_flow_on_disjoint_ports():
    cands = _roft_permutation()
    assert all(len(c) > 1 for c in cands.values())  # cross-rail: real ECMP choices
    probe, calls = fake_hash(cands)
    placed, rounds = ecmp_probe.spread(cands, probe, iter(range(42000, 65000)))
    assert len(placed) == len(cands)
    ports = [(sw, p) for _, path in placed.values() for sw, p in zip(*path)]
    assert len(ports) == len(set(ports))
    for batch in calls:  # flows probed together never share a candidate port (the counters stay unambiguous)
        seen = set()
        for k in batch:
            mine = {(sw, p) for hops, outs in cands[k] for sw, p in zip(hops, outs)}
            assert not mine & seen
            seen |= mine
    used = [p for b in calls for p in b.values()]
    assert len(used) == len(set(used)) and rounds == len(calls)


def test_spread_gives_up_after_max_rounds():
    cands = _roft_permutation()
    probe, _ = fake_hash(cands)
    placed, rounds = ecmp_probe.spread(cands, probe, iter(range(42000, 65000)), max_rounds=1)
    assert rounds == 1 and 0 < len(placed) < len(cands)


def test_learn_keeps_each_flows_own_port_and_allows_collisions():
    cands = _roft_permutation()
    probe, calls = fake_hash(cands)
    ports = {k: 42000 + i for i, k in enumerate(cands)}
    learnt = ecmp_probe.learn(cands, probe, ports)
    assert set(learnt) == set(cands)
    assert all(learnt[k][0] == ports[k] and learnt[k][1] in cands[k] for k in cands)
    assert all(b[k] == ports[k] for b in calls for k in b)


def test_path_links_names_the_nic_then_every_switch_egress_port_as_maxmin_does():
    path = (("leaf1", "spine2", "leaf3"), (11, 4, 2))
    assert ecmp_probe.path_links((5, 2), path) == ["gpu5:p2", "leaf1:11", "spine2:4", "leaf3:2"]
