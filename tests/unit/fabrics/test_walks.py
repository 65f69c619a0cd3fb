"""Remembered walks: the same walks, in the same order, as ``routing.walk``, and its errors on broken tables."""

import itertools

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from fabrics.routing import NextHop, forwarding_tables, links_on_path, path_links, walk
from fabrics.walks import Walks

FABRICS = [("zcube", 32, 8), ("zcube", 64, 8), ("roft", 32, 8), ("roft", 64, 8)]


def _nic_ports(f):
    return sorted(f.attachment)


@pytest.mark.parametrize("kind,n,k", FABRICS)
def test_every_pair_walks_as_routing_walk_does(kind, n, k):
    f = build_fabric(kind, gpus=n, gpus_per_switch=k)
    tables = forwarding_tables(f)
    walks = Walks(f, tables)
    pairs = [(a, b) for a, b in itertools.product(_nic_ports(f), repeat=2) if a[0] != b[0] and a[1] != b[1]]
    assert any(len(walk(f, tables, a, b)) > 1 for a, b in pairs) == (kind == "roft")  # ROFT's ECMP is covered
    for a, b in pairs:
        expected = walk(f, tables, a, b)
        assert walks(a, b) == expected
        assert walks(a, b) == expected  # and again, from the memo
        # the same floats, not merely close ones: a write-up's CSVs stay byte-identical
        assert path_links(f, a, b, tables, walks) == path_links(f, a, b, tables)
        assert links_on_path(f, a, b, tables, walks) == links_on_path(f, a, b, tables)


def _roft_with_loop():
    """ROFT of 32 GPUs whose destination leaf sends gpu17:p1's packets back up to the spine they came from."""
    f = build_fabric("roft", gpus=32, gpus_per_switch=8)
    tables = dict(forwarding_tables(f))
    dst = (17, 1)
    leaf = f.switch_of(*dst)
    spine = next(p for p in f._ports_by_peer[leaf] if p.startswith("spine"))
    table = dict(tables[leaf])
    table[addressing.ip_of(*dst)] = NextHop(tuple(f.ports_towards(leaf, spine)))
    tables[leaf] = table
    return f, tables, dst


def test_a_loop_raises_as_routing_walk_names_it():
    f, tables, dst = _roft_with_loop()
    src = next(nic for nic in _nic_ports(f) if f.switch_of(*nic) != f.switch_of(*dst))
    with pytest.raises(RuntimeError) as direct:
        walk(f, tables, src, dst)
    walks = Walks(f, tables)
    with pytest.raises(RuntimeError) as remembered:
        walks(src, dst)
    assert "forwarding loop" in str(direct.value) and str(remembered.value) == str(direct.value)
    with pytest.raises(TestbedError, match="no path from"):
        path_links(f, src, dst, tables, walks)
    with pytest.raises(TestbedError) as counted_direct:
        links_on_path(f, src, dst, tables)
    with pytest.raises(TestbedError) as counted:
        links_on_path(f, src, dst, tables, Walks(f, tables))  # counted alone, before any walk was listed
    assert str(counted.value) == str(counted_direct.value)
    other = next(nic for nic in _nic_ports(f) if nic[0] != dst[0] and f.switch_of(*nic) != f.switch_of(*dst))
    assert walks(src, other) == walk(f, tables, src, other)  # a good pair still walks after the broken one


def test_a_black_hole_raises_as_routing_walk_names_it():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    tables = dict(forwarding_tables(f))
    src, dst = (1, 1), (20, 2)
    tables[f.switch_of(*src)] = {}
    with pytest.raises(RuntimeError, match="has no route") as direct:
        walk(f, tables, src, dst)
    with pytest.raises(RuntimeError) as remembered:
        Walks(f, tables)(src, dst)
    assert str(remembered.value) == str(direct.value)
    with pytest.raises(RuntimeError) as counted:
        Walks(f, tables).longest(src, dst)
    assert str(counted.value) == str(direct.value)
