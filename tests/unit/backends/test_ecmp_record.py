"""testbed.backends.emulated.ecmp.outcome: a repetition's ECMP outcome as ecmp.json records it (no fabric): every
connection with its ports and learnt path, the flows on each switch-to-switch link, and digests that are the
same for the same ports and paths."""

from __future__ import annotations

from fabrics import addressing, build_fabric
from fabrics.routing import forwarding_tables, walk
from testbed.backends.emulated import ecmp


def test_outcome_counts_flows_per_switch_link_and_digests_the_lottery():
    fabric = build_fabric("roft", gpus=32)
    tables = forwarding_tables(fabric)
    conns = [[addressing.ip_of(1, 1), 40001, addressing.ip_of(18, 1), 7000],  # another rail: through a spine
             [addressing.ip_of(2, 1), 40002, addressing.ip_of(19, 1), 7000],
             [addressing.ip_of(1, 1), 40003, addressing.ip_of(17, 1), 7000]]  # the same rail: one leaf
    learnt = {}
    for c in conns[:2]:
        paths = walk(fabric, tables, addressing.parse_ip(c[0]), addressing.parse_ip(c[2]))
        assert len(paths) > 1  # cross-rail on ROFT: a spine to choose
        learnt[tuple(c)] = paths[0]
    doc = ecmp.outcome(fabric, conns, learnt, 5, True)
    assert doc["hash_seed"] == 5 and doc["hash_seed_given"] and doc["connections"] == 3
    assert [f["src"] for f in doc["flows"]] == ["gpu1:p1", "gpu2:p1", "gpu1:p1"]
    assert doc["flows"][2]["path"] is None and doc["flows"][0]["path"][0].startswith("leaf")
    assert sum(doc["flows_per_switch_link"].values()) >= 2 and doc["flows_per_switch_link_max"] >= 1
    again = ecmp.outcome(fabric, list(reversed(conns)), learnt, 5, True)
    assert (again["ports_sha256"], again["flows_per_switch_link_sha256"]) == \
        (doc["ports_sha256"], doc["flows_per_switch_link_sha256"])
    other = ecmp.outcome(fabric, [[c[0], c[1] + 1, c[2], c[3]] for c in conns], {}, 6, False)
    assert other["ports_sha256"] != doc["ports_sha256"] and other["flows_per_switch_link"] == {}


def test_the_seed_is_the_conditions_or_the_repetitions():
    from testbed.backends.base import Conditions
    from testbed.backends.emulated.backend import hash_seed

    assert hash_seed(Conditions(seed=3)) == 3 and hash_seed(Conditions(seed=3, hash_seed=9)) == 9
