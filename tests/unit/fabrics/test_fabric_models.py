"""ZCube and ROFT wiring against the formulas, for every valid (n, k) up to 64."""

import math

import networkx as nx
import pytest

from common.errors import TestbedError
from fabrics import build_fabric, fabric_args
from fabrics.roft import roft_shape
from fabrics.zcube import default_cables

VALID_NK = [(n, k) for n in range(1, 65) for k in range(1, n + 1) if n % k == 0]


@pytest.mark.parametrize("n,k", VALID_NK)
def test_zcube_follows_the_formula(n, k):
    f = build_fabric("zcube", gpus=n, gpus_per_switch=k)
    groups = n // k
    assert sorted(f.switches) == sorted(f"sw{j}" for j in range(1, 2 * groups + 1))
    for i in range(1, n + 1):
        assert f.switch_of(i, 1) == f"sw{((i - 1) % groups) * 2 + 1}"
        assert f.switch_of(i, 2) == f"sw{math.ceil(i / k) * 2}"
    c = f.params["cables"]
    for odd in range(1, 2 * groups, 2):
        for even in range(2, 2 * groups + 1, 2):
            assert len(f.ports_towards(f"sw{odd}", f"sw{even}")) == c
    for sw in f.switches.values():
        hosts = sum(1 for peer, _ in sw.ports.values() if peer.startswith("gpu"))
        assert hosts == k  # every switch serves exactly k NIC ports
        assert len(sw.ports) == sw.radix == k + groups * c
    assert f.oversubscription == pytest.approx(k / (groups * c))


@pytest.mark.parametrize("n,k,cables,radix", [(32, 8, 2, 16), (16, 4, 1, 8), (64, 8, 1, 16), (16, 8, 4, 16)])
def test_zcube_default_cables_make_it_non_blocking(n, k, cables, radix):
    f = build_fabric("zcube", gpus=n, gpus_per_switch=k)
    assert f.params["cables"] == cables == default_cables(n, k)
    assert f.oversubscription == 1.0
    assert {sw.radix for sw in f.switches.values()} == {radix}


def test_zcube_reports_oversubscription_when_k2_over_n_is_not_whole():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=4)  # k^2/n = 0.5
    assert f.params["cables"] == 1
    assert f.oversubscription == pytest.approx(4 / 8)
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8, cables=1)
    assert f.oversubscription == pytest.approx(2.0)


def test_zcube_n64_k8_odd_switches_are_rails_and_even_switches_servers():
    f = build_fabric("zcube", gpus=64, gpus_per_switch=8)
    for i in range(1, 65):
        rail, server = (i - 1) % 8, (i - 1) // 8
        assert f.switch_of(i, 1) == f"sw{rail * 2 + 1}"
        assert f.switch_of(i, 2) == f"sw{(server + 1) * 2}"


@pytest.mark.parametrize("n,k", [(n, k) for n, k in VALID_NK if n >= 2 and n // k >= 1])
def test_zcube_diameter_is_two_switch_hops(n, k):
    g = build_fabric("zcube", gpus=n, gpus_per_switch=k).graph()
    switch_graph = nx.Graph(g.subgraph(nd for nd, d in g.nodes(data=True) if d["kind"] == "switch"))
    if switch_graph.number_of_nodes() > 1:
        assert nx.diameter(switch_graph) <= 2
    # NIC port to NIC port across planes: at most 2 switches in between
    nic = [nd for nd, d in g.nodes(data=True) if d["kind"] == "nic"]
    lengths = dict(nx.single_source_shortest_path_length(nx.Graph(g), nic[0]))
    for other in nic:
        if other.endswith(":p2") != nic[0].endswith(":p2"):
            assert lengths[other] <= 3  # nic-sw-sw-nic


@pytest.mark.parametrize(
    "n,leaves,spines,cables", [(32, 8, 4, 2), (64, 16, 8, 1), (16, 8, 4, 1)]
)
def test_roft_shape(n, leaves, spines, cables):
    k = {32: 8, 64: 8, 16: 4}[n]
    f = build_fabric("roft", gpus=n, gpus_per_switch=k)
    roles = [sw.role for sw in f.switches.values()]
    assert roles.count("leaf") == leaves and roles.count("spine") == spines
    for leaf in (s for s in f.switches if s.startswith("leaf")):
        for spine in (s for s in f.switches if s.startswith("spine")):
            assert len(f.ports_towards(leaf, spine)) == cables
        sw = f.switches[leaf]
        down = sum(1 for peer, _ in sw.ports.values() if peer.startswith("gpu"))
        up = len(sw.ports) - down
        assert down == up  # as many uplinks as downlinks


def test_roft_rails_and_both_ports_on_the_rail_leaf():
    f = build_fabric("roft", gpus=32)
    for i in range(1, 33):
        assert f.switch_of(i, 1) == f.switch_of(i, 2)
    # GPU r of every server is on the same leaf (one leaf per rail at n=32)
    for r in range(1, 9):
        assert len({f.switch_of(s * 8 + r, 1) for s in range(4)}) == 1


def test_roft_at_16384_gpus_with_radix_256():
    shape = roft_shape(16384, 8, 256)
    assert shape["leaves"] == 256 and shape["spines"] == 128 and shape["cables_per_leaf_spine"] == 1


def test_railonly_has_no_spines():
    f = build_fabric("railonly", gpus=32)
    assert all(sw.role == "leaf" for sw in f.switches.values())
    assert not f.fabric_cables


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(kind="zcube", gpus=30, gpus_per_switch=8), "gpus=30"),
        (dict(kind="zcube", gpus=0, gpus_per_switch=8), "gpus=0"),
        (dict(kind="zcube", gpus=32, gpus_per_switch=-8), "gpus-per-switch=-8"),
        (dict(kind="zcube", gpus=4, gpus_per_switch=8), "gpus=4"),
        (dict(kind="zcube", gpus=32, gpus_per_switch=8, cables=0), "cables=0"),
        (dict(kind="zcube", gpus=32, gpus_per_switch=8, cables=9), "cables=9"),
        (dict(kind="roft", gpus=36, gpus_per_switch=4), "gpus=36"),
        (dict(kind="roft", gpus=32, radix=15), "radix=15"),
        (dict(kind="roft", gpus=32, gpus_per_server=0), "gpus-per-server=0"),
        (dict(kind="roft", gpus=4096, radix=16), "gpus=4096"),
        (dict(kind="fattree"), "fattree"),
    ],
)
def test_bad_parameters_are_rejected_in_one_line(kwargs, words):
    with pytest.raises(TestbedError) as err:
        build_fabric(**kwargs)
    message = str(err.value)
    assert words in message and "\n" not in message


def test_fabric_args_name_only_the_knobs_that_shape_the_fabric():
    assert fabric_args("zcube", 32, 8, None, 8, 16) == {"kind": "zcube", "gpus": 32, "gpus_per_switch": 8,
                                                        "cables": None}
    assert fabric_args("roft", 32, 8, 4, 8, None) == {"kind": "roft", "gpus": 32, "gpus_per_switch": 8,
                                                      "gpus_per_server": 8, "radix": None}
    assert build_fabric(**fabric_args("roft", 32, 8, 4, 8, None)).n_gpus == 32
