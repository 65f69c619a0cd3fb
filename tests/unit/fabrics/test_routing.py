"""Routing tables: unique paths in ZCube, ECMP sets in ROFT, the path query."""

import itertools

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from fabrics.routing import (
    POLICIES,
    ecmp_bucket,
    egress_port_for,
    forwarding_tables,
    links_on_path,
    paths,
    port_pairs,
    select_ports,
    walk,
)

SIZES = [(16, 4), (32, 8), (64, 8), (16, 8), (8, 8), (32, 4)]


@pytest.mark.parametrize("n,k", SIZES)
def test_zcube_cross_plane_paths_are_unique_and_two_hops(n, k):
    f = build_fabric("zcube", gpus=n, gpus_per_switch=k)
    tables = forwarding_tables(f)
    for src, dst in itertools.product(f.gpus(), repeat=2):
        for sp, dp in ((1, 2), (2, 1)):
            walks = walk(f, tables, (src, sp), (dst, dp))
            assert len(walks) == 1, (src, dst, sp, dp)
            hops, _ = walks[0]
            assert hops == (f.switch_of(src, sp), f.switch_of(dst, dp))


@pytest.mark.parametrize("n,k", SIZES)
def test_zcube_every_table_entry_is_a_single_port_and_all_ports_reach(n, k):
    f = build_fabric("zcube", gpus=n, gpus_per_switch=k)
    tables = forwarding_tables(f)
    assert all(len(hop.ports) == 1 for t in tables.values() for hop in t.values())
    # same-plane destinations are reachable too (fallback transit, at most 3 switches)
    for src, dst in [(1, n), (n, 1), (1, 1 + n // 2)]:
        for p in (1, 2):
            (hops, _), = walk(f, tables, (src, p), (dst, p))
            assert len(hops) <= 3


def test_zcube_parallel_cables_picked_by_destination_and_all_used():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    tables = forwarding_tables(f)
    used = set()
    for dst in f.gpus():
        ip = addressing.ip_of(dst, 2)
        home = f.switch_of(dst, 2)
        for odd in ("sw1", "sw3", "sw5", "sw7"):
            port = tables[odd][ip].ports[0]
            assert port in f.ports_towards(odd, home)
            used.add((odd, port))
    uplinks = {(s, p) for s in ("sw1", "sw3", "sw5", "sw7") for p, (peer, _) in f.switches[s].ports.items()
               if not peer.startswith("gpu")}
    assert used == uplinks  # no idle cable


def test_zcube_path_example_from_the_cli_contract():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    got = paths(f, 3, 17)
    assert [(p.src_port, p.dst_port, p.hops, p.ecmp) for p in got] == [
        (1, 2, ("sw5", "sw6"), False),
        (2, 1, ("sw2", "sw1"), False),
    ]


@pytest.mark.parametrize("n,k", [(32, 8), (64, 8), (16, 4)])
def test_roft_ecmp_over_every_spine_for_cross_rail(n, k):
    f = build_fabric("roft", gpus=n, gpus_per_switch=k)
    tables = forwarding_tables(f)
    spines = sorted(s for s in f.switches if s.startswith("spine"))
    for src, dst in [(1, 2), (3, n // 2 + 1), (8, n)]:
        ps = paths(f, src, dst, "rail-out", tables)
        if f.switch_of(src, 1) == f.switch_of(dst, 2):
            assert [p.hops for p in ps] == [(f.switch_of(src, 1),)]
            continue
        assert sorted(p.hops[1] for p in ps) == spines
        assert all(p.ecmp and len(p.hops) == 3 for p in ps)
        leaf = f.switch_of(src, 1)
        hop = tables[leaf][addressing.ip_of(dst, 2)]
        assert hop.is_ecmp and len(hop.ports) == len(f.switches[leaf].ports) // 2


def test_roft_same_rail_stays_on_the_leaf():
    f = build_fabric("roft", gpus=32)
    ps = paths(f, 1, 9)  # rank 0 of servers 1 and 2
    assert all(p.hops == ("leaf1",) and not p.ecmp for p in ps)


def test_railonly_has_no_cross_rail_path():
    f = build_fabric("railonly", gpus=32)
    with pytest.raises(TestbedError, match="no path"):
        paths(f, 1, 2)


def test_ecmp_hash_spreads_and_is_deterministic():
    buckets = [ecmp_bucket(("10.1.0.1", "10.2.0.2", 6, 40000 + i, 5201), 4) for i in range(400)]
    assert buckets == [ecmp_bucket(("10.1.0.1", "10.2.0.2", 6, 40000 + i, 5201), 4) for i in range(400)]
    counts = [buckets.count(b) for b in range(4)]
    assert min(counts) > 60  # roughly uniform, with collisions as in real hashing


def test_policies():
    for name in POLICIES:
        choices = select_ports(1, 2, name)
        assert sum(c.share for c in choices) == pytest.approx(1.0)
        assert all(egress_port_for(c.dst_port) == c.src_port for c in choices)
    with pytest.raises(TestbedError, match="expected one of"):
        select_ports(1, 2, "random")
    picks = {select_ports(s, d, "pair-hash")[0].src_port for s in range(1, 9) for d in range(1, 9)}
    assert picks == {1, 2}


def test_port_pairs_are_the_policys_static_choices_in_order():
    """What the serving cluster's senders alternate over per GPU pair: striped both halves (adaptive chooses
    among those), rail-out and server-out one each, pair-hash one of the two by the pair."""
    assert port_pairs(1, 2, "striped") == port_pairs(1, 2, "adaptive") == ((1, 2), (2, 1))
    assert port_pairs(7, 3, "rail-out") == ((1, 2),) and port_pairs(7, 3, "server-out") == ((2, 1),)
    hashed = {port_pairs(s, d, "pair-hash") for s in range(1, 9) for d in range(1, 9)}
    assert hashed == {((1, 2),), ((2, 1),)}
    assert port_pairs(16384, 1, "pair-hash") == port_pairs(16384, 1, "pair-hash")
    with pytest.raises(TestbedError, match="expected one of"):
        port_pairs(1, 2, "random")


def test_path_query_rejects_unknown_gpus():
    f = build_fabric("zcube", gpus=16, gpus_per_switch=4)
    with pytest.raises(TestbedError, match="dst=17"):
        paths(f, 1, 17)


def test_links_on_path_count_the_nic_link_and_one_per_switch_left():
    z = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    assert links_on_path(z, (3, 1), (17, 2)) == 3  # gpu3:p1 -> sw5 -> sw6 -> gpu17:p2 (the CLI contract's path)
    r = build_fabric("roft", gpus=32)
    assert links_on_path(r, (1, 1), (9, 1)) == 2  # the same rail: its leaf only
    assert links_on_path(r, (1, 1), (2, 1)) == 4  # across rails: leaf, spine, leaf
    with pytest.raises(TestbedError, match="no path from gpu1:p1 to gpu2:p1"):
        links_on_path(build_fabric("railonly", gpus=32), (1, 1), (2, 1))


def test_tables_read_as_dicts_of_every_destination_in_order():
    """A switch's table lists every NIC address in (gpu, port) order, a missing one is absent; a rail-only leaf
    lists only its own NIC ports."""
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    table = forwarding_tables(f)["sw1"]
    order = [addressing.ip_of(g, p) for g in f.gpus() for p in (1, 2)]
    assert list(table) == order and len(table) == 64 and [ip for ip, _ in table.items()] == order
    assert table.get("10.3.0.1") is None and "10.1.0.1" in table and "10.1.0.99" not in table
    with pytest.raises(KeyError):
        table["10.1.0.99"]
    r = build_fabric("railonly", gpus=32)
    leaf1 = forwarding_tables(r)["leaf1"]  # rail 1: GPUs 1, 9, 17, 25
    assert list(leaf1) == [addressing.ip_of(g, p) for g in (1, 9, 17, 25) for p in (1, 2)]
    assert addressing.ip_of(2, 1) not in leaf1


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_paths_at_16384_gpus_follow_the_wiring(kind):
    """The blog's size (k=128, 51.2T switches): ZCube's p1 -> dst p2 is the source's multi-rail switch, then
    the destination's server switch; ROFT crosses rails over a spine, one ECMP member per spine."""
    f = build_fabric(kind, gpus=16384, gpus_per_switch=128)
    tables = forwarding_tables(f)
    for src, dst in [(1, 16384), (5000, 129), (16384, 2)]:
        ps = paths(f, src, dst, "rail-out", tables)
        if kind == "zcube":
            odd = ((src - 1) % 128) * 2 + 1
            even = -(-dst // 128) * 2
            assert [p.hops for p in ps] == [(f"sw{odd}", f"sw{even}")]
        else:
            assert len(ps) == 128 and all(p.ecmp and len(p.hops) == 3 for p in ps)
            assert sorted(p.hops[1] for p in ps) == sorted(s for s in f.switches if s.startswith("spine"))
