"""The twin's ECMP hash seed (plan.build's ``hash_seed``): the connections' source ports, hence which spine a
flow hashes to on ROFT, follow it; None keeps the repetition's seed (results as before); twin.json records the
outcome (plan.ecmp_outcome). A stand-in for the C++ twin records the routes installed: no ns-3 needed."""

from __future__ import annotations

from fabrics import build_fabric
from fabrics.routing import forwarding_tables
from testbed.backends import paths
from testbed.backends.ns3 import plan

FABRIC = build_fabric("roft", gpus=32)
TABLES = forwarding_tables(FABRIC)
PAIRS = [(a, 1, b, 2) for a in range(1, 33, 3) for b in range(2, 33, 5) if a != b]


class FakeTwin:
    def __init__(self):
        self.routes, self.opened = [], 0

    def Route(self, *args):  # noqa: N802 - the C++ name
        self.routes.append(args)

    def Open(self, *args):  # noqa: N802
        self.opened += 1
        return self.opened - 1


def opened(seed, hash_seed=None):
    book = paths.PathBook(FABRIC, seed if hash_seed is None else hash_seed, tables=TABLES)
    built = plan.Built(FakeTwin(), FABRIC, book, {n: i for i, n in enumerate(FABRIC.switches)}, [], hash_seed)
    for p in PAIRS:
        built.connection(*p)
    return built


def test_none_keeps_the_repetition_s_seed():
    assert opened(3).sports == opened(3, hash_seed=None).sports == opened(7, hash_seed=3).sports
    assert opened(3).paths.seed == 3 and opened(3, 9).paths.seed == 9


def test_two_hash_seeds_give_two_port_assignments_and_the_same_one_the_same():
    a, b, again = opened(0, hash_seed=1), opened(0, hash_seed=2), opened(0, hash_seed=1)
    assert a.sports == again.sports and a.twin.routes == again.twin.routes
    assert a.sports != b.sports
    assert plan.ecmp_outcome(a) == plan.ecmp_outcome(again)
    assert plan.ecmp_outcome(a)["ports_sha256"] != plan.ecmp_outcome(b)["ports_sha256"]
    # and the paths differ: some flow takes another spine
    assert a.link_flows != b.link_flows


def test_the_outcome_counts_flows_on_switch_to_switch_links():
    built = opened(0, hash_seed=5)
    out = plan.ecmp_outcome(built)
    assert out["hash_seed"] == 5 and out["hash_seed_given"] and out["connections"] == len(PAIRS)
    # one count per flow (each direction of a connection) per switch-to-switch hop it was routed on
    to_switch = sum(1 for sw, _a, _b, _pa, _pb, port in built.twin.routes
                    if not FABRIC.peer(list(FABRIC.switches)[sw], port)[0].startswith("gpu"))
    assert sum(built.link_flows.values()) == to_switch > 0
    assert out["flows_per_switch_link_max"] == max(built.link_flows.values())
