"""HostAssignment of a fabric on several hosts: values worked out by hand, and brute force over every
balanced placement where that is small enough to enumerate."""

from __future__ import annotations

import itertools

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from testbed.emulation.hosts import assign as P


def _brute_min(fabric, port=1) -> int:
    """Fewest cross-host cables over every balanced placement on two hosts (anchors split as evenly
    as possible, then switches), GPUs with the switch of their NIC ``port``."""
    anc = P.anchors(fabric, port)
    others = [s for s in fabric.switches if s not in anc]
    a0 = P._shares(len(anc), 2)[0]
    t0 = P._shares(len(fabric.switches), 2)[0]
    best = None
    for a in itertools.combinations(anc, a0):
        for o in itertools.combinations(others, t0 - a0):
            on_first = set(a) | set(o)
            sh = {s: "h1" if s in on_first else "h2" for s in fabric.switches}
            c = P.cross_count(fabric, sh, port)
            best = c if best is None else min(best, c)
    return best


def test_zcube_32_on_two_hosts_worked_out():
    """n=32, k=8: odd switches sw1,3,5,7 (8 GPUs each by port 1), even sw2,4,6,8, 2 cables per odd-even
    pair (64 GPU cables + 32 switch cables). Balance puts two odd switches (16 GPUs) on each host.
    Then for any a even switches on host 1: switch cables crossing = 2 x (2(4-a) + 2a) = 16, and
    each odd switch's 8 GPUs reach each even switch twice by port 2, so GPU cables crossing =
    2 x 2 x (4-a) + 2 x 2 x a = 16. Every balanced placement crosses 32; the cut takes a=2."""
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    p = P.assign(f, ["ph1", "ph2"])
    assert p.switches_on("ph1") == ["sw1", "sw2", "sw3", "sw4"]
    assert p.switches_on("ph2") == ["sw5", "sw6", "sw7", "sw8"]
    assert P.ranges(p.gpus_on("ph1")) == "1-2,5-6,9-10,13-14,17-18,21-22,25-26,29-30"
    assert (len(p.cross), p.cross_fabric, p.cross_host) == (32, 16, 16)
    assert _brute_min(f) == 32
    for a in range(5):  # the formula above: independent of how the even switches are split
        evens_first = ["sw2", "sw4", "sw6", "sw8"][:a]
        sh = {s: "h1" if s in ("sw1", "sw3", *evens_first) else "h2" for s in f.switches}
        assert P.cross_count(f, sh) == 32


def test_roft_32_on_two_hosts_cuts_at_rails():
    """ROFT n=32: 8 leaves (one per rail, both ports of a GPU on it), 4 spines, 2 cables per
    leaf-spine pair. Four leaves per host; with s spines on host 1, 2 x (4(4-s) + 4s) = 32 cables
    cross whatever s, and no GPU cable crosses."""
    f = build_fabric("roft", gpus=32, gpus_per_switch=8)
    p = P.assign(f, ["a", "b"])
    assert p.switches_on("a") == ["leaf1", "leaf2", "leaf3", "leaf4", "spine1", "spine2"]
    assert P.ranges(p.gpus_on("a")) == "1-4,9-12,17-20,25-28"  # rails 1-4
    assert (len(p.cross), p.cross_fabric, p.cross_host) == (32, 32, 0)
    assert _brute_min(f) == 32


@pytest.mark.parametrize("n,k", [(16, 4), (16, 8), (24, 4), (32, 4), (48, 8), (64, 8)])
def test_zcube_cut_is_the_fewest_crossings_of_any_balanced_placement(n, k):
    f = build_fabric("zcube", gpus=n, gpus_per_switch=k)
    assert len(P.assign(f, ["h1", "h2"]).cross) == _brute_min(f)


def test_port_one_keeps_servers_whole_when_n_is_at_least_k_squared():
    """n=128, k=8: 16 odd switches; a server's 8 GPUs (consecutive numbers) hang by port 1 from 8
    consecutive odd switches, so the runs sw1..sw15 / sw17..sw31 keep every server's port 2 at home:
    no GPU cable crosses, only the 8 x 8 x 2 = 128 odd-even cables of the cut. Anchored on port 2,
    runs of even switches (servers 1-8 | 9-16) put every odd switch's GPUs on both hosts."""
    f = build_fabric("zcube", gpus=128, gpus_per_switch=8)
    p1 = P.assign(f, ["h1", "h2"], anchor_port=1)
    assert (p1.cross_fabric, p1.cross_host) == (128, 0)
    p2 = P.assign(f, ["h1", "h2"], anchor_port=2)
    assert (p2.cross_fabric, p2.cross_host) == (128, 64)


def test_both_ports_reach_the_same_optimum_by_brute_force():
    """The wiring is symmetric in the two ports: the best balanced placements cross as many cables
    either way (port 1 is chosen for the cut's shape, not for a lower optimum)."""
    for n, k in ((32, 4), (48, 8)):
        f = build_fabric("zcube", gpus=n, gpus_per_switch=k)
        assert _brute_min(f, 1) == _brute_min(f, 2)


def test_three_hosts_on_zcube_32():
    """4 odd switches over 3 hosts: 2, 1, 1 (16, 8, 8 GPUs); 8 switches: 3, 3, 2, so room for 1, 2 and
    1 even switch. An even switch beside two odd ones keeps 2 odd-even pairs inside a host, beside one
    keeps 1: at most 2x1 + 1x2 + 1x1 = 5 of the 16 pairs stay, 11 cross, each pair being 2 switch
    cables and 2 GPU cables: 22 + 22."""
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    p = P.assign(f, ["a", "b", "c"])
    assert [p.switches_on(h) for h in "abc"] == [["sw1", "sw2", "sw3"], ["sw4", "sw5", "sw6"], ["sw7", "sw8"]]
    assert [len(p.gpus_on(h)) for h in "abc"] == [16, 8, 8]
    assert (p.cross_fabric, p.cross_host) == (22, 22)


@pytest.mark.parametrize("kind,n,hosts", [("zcube", 32, 2), ("zcube", 64, 3), ("roft", 64, 4), ("roft", 32, 3)])
def test_invariants(kind, n, hosts):
    f = build_fabric(kind, gpus=n, gpus_per_switch=8)
    names = [f"h{i}" for i in range(hosts)]
    p = P.assign(f, names)
    assert set(p.switch_host) == set(f.switches)  # every switch on exactly one host
    for g in f.gpus():
        assert p.gpu_host[g] == p.switch_host[f.attachment[(g, 1)][0]]
    counts = [len(p.switches_on(h)) for h in names]
    assert max(counts) - min(counts) <= 1
    assert p.cross == [c for c in f.cables if p.host_of(c.a) != p.host_of(c.b)]
    assert P.assign(f, names).switch_host == p.switch_host  # deterministic


def test_one_host_crosses_nothing():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    assert P.assign(f, ["only"]).cross == []


def test_more_hosts_than_gpu_switches_is_one_line():
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    with pytest.raises(TestbedError, match=r"at most 2 hosts, not 3"):
        P.assign(f, ["a", "b", "c"])


def test_text_names_the_controller_host_and_the_count():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    lines = P.text(P.assign(f, ["ph1", "ph2"]), {"ph1": "10.250.0.1", "ph2": "10.250.0.2"})
    assert lines[1].startswith("  ph1 10.250.0.1: 4 switches (sw1 sw2 sw3 sw4), 16 GPUs")
    assert lines[1].endswith("controller, coordinator")
    assert lines[-1] == "cross-host cables: 32 of 96 (16 switch-switch, 16 GPU-switch): one tunnel each"


def test_ranges():
    assert P.ranges([1, 2, 3, 5, 9, 10]) == "1-3,5,9-10"
    assert P.ranges([]) == ""
