"""The ns-3 twin's network is the fabric model's: nodes, devices and queues per switch and NIC port, and the
route each connection gets equals the model's path (ZCube's unique one; ROFT's ECMP member by the model's
hash with the seed)."""

from __future__ import annotations

import contextlib

import pytest

from fabrics import build_fabric
from fabrics.datapath import DatapathConfig
from fabrics.routing import forwarding_tables, select_ports, walk
from pfc import policy
from pfc.policy import PfcConfig
from testbed.backends import paths
from testbed.backends.base import LinkSettings
from testbed.backends.ns3 import engine, pfc, plan
from traffic.runtime.ports import EPHEMERAL, source_port

LINK = LinkSettings.of(DatapathConfig().validate(), 200e9)


@contextlib.contextmanager
def built(fabric, seed=0, pfc_cfg=None, recording=None):
    engine.load()
    engine.configure(LINK.mtu, seed)
    b = plan.build(fabric, LINK, pfc.resolve(pfc_cfg, LINK, plan.CABLE_DELAY_S), seed, recording=recording)
    try:
        yield b
    finally:
        del b.twin
        engine.load().Destroy()


@pytest.mark.parametrize("kind,n", [("zcube", 16), ("roft", 16), ("zcube", 32), ("roft", 32)])
def test_every_gpu_pair_is_routed_on_the_models_path(kind, n):
    fabric = build_fabric(kind, gpus=n)
    tables = forwarding_tables(fabric)
    with built(fabric, seed=3, pfc_cfg=PfcConfig()) as b:
        twin = b.twin
        assert twin.gpus.size() == n and twin.switches.size() == len(fabric.switches)
        n_ports = sum(len(sw.ports) for sw in fabric.switches.values())
        assert twin.ports.size() == n_ports and twin.gates.size() == 2 * n
        assert [q.qid for q in b.queues if q.kind == "nic"] == [f"gpu{g}:p{p}" for (g, p) in
                                                                sorted(fabric.attachment, key=lambda a: (
                                                                    fabric.switch_of(*a), fabric.attachment[a][1]))]
        assert {q.qid for q in b.queues if q.kind == "switch"} == {f"{s}:{p}" for s, sw in fabric.switches.items()
                                                                   for p in sw.ports}
        for src in fabric.gpus():
            for dst in fabric.gpus():
                if src == dst:
                    continue
                for c in select_ports(src, dst):
                    a, z = (src, c.src_port), (dst, c.dst_port)
                    b.connection(src, c.src_port, dst, c.dst_port)
                    got = plan.installed_path(b, a, z)
                    options = {tuple(zip(h, o)) for h, o in walk(fabric, tables, a, z)}
                    assert tuple(got) in options
                    if kind == "zcube":
                        assert len(options) == 1
                    sport = b.sports[(src, c.src_port, dst, c.dst_port)]
                    assert got == list(paths.route(fabric, tables, a, z, sport, paths.LISTEN_PORT))
                    back = plan.installed_path(b, z, a) if (dst, c.dst_port, src, c.src_port) in b.sports else None
                    assert back is None or tuple(back) in {tuple(zip(h, o)) for h, o in walk(fabric, tables, z, a)}


def test_a_recording_routes_each_direction_on_the_recorded_path_not_the_hashed_one(tmp_path):
    import json

    from fabrics import addressing
    from testbed.backends.emulated import ecmp

    fabric = build_fabric("roft", gpus=32)
    tables = forwarding_tables(fabric)
    a, z = (1, 1), (18, 1)  # another rail: a spine to choose, each way
    hashed = paths.PathBook(fabric, 0).connection(a, z)
    fwd = next(tuple(zip(h, o)) for h, o in walk(fabric, tables, a, z) if tuple(zip(h, o)) != hashed.forward)
    rev = next(tuple(zip(h, o)) for h, o in walk(fabric, tables, z, a) if tuple(zip(h, o)) != hashed.reverse)
    conn = [addressing.ip_of(*a), 41000, addressing.ip_of(*z), paths.LISTEN_PORT]
    doc = ecmp.outcome(fabric, [conn], {tuple(conn): tuple(zip(*fwd)), (tuple(conn), ecmp.REVERSE): tuple(zip(*rev))},
                       0, False)
    (tmp_path / "ecmp.json").write_text(json.dumps(doc))
    with built(fabric, recording=paths.Recording.load(tmp_path / "ecmp.json", fabric)) as b:
        b.connection(a[0], a[1], z[0], z[1])
        assert b.sports[(1, 1, 18, 1)] == 41000
        assert tuple(plan.installed_path(b, a, z)) == fwd and tuple(plan.installed_path(b, a, z, reverse=True)) == rev
        assert plan.ecmp_outcome(b)["hashed_multipath"] == 0


def test_the_seed_moves_roft_flows_between_spines_and_the_hash_spreads_them():
    fabric = build_fabric("roft", gpus=32)
    tables = forwarding_tables(fabric)
    spines = {}
    for seed in range(4):
        used: set = set()
        chosen = []
        for src in (1, 2, 3, 4):
            for dst in (9, 17, 25):
                sport = source_port(seed, "10.1.0.%d" % src, "10.2.0.%d" % dst, used)
                hops = paths.route(fabric, tables, (src, 1), (dst, 2), sport, paths.LISTEN_PORT)
                chosen.append(fabric.peer(*hops[0])[0])
        spines[seed] = chosen
        assert len(set(chosen)) > 1  # the hash spreads 12 flows over more than one spine
    assert len({tuple(v) for v in spines.values()}) > 1  # and another seed is another lottery


def test_source_ports_are_unique_per_address_and_in_linux_range():
    used: set = set()
    ports = [source_port(7, "10.1.0.1", f"10.2.0.{d}", used) for d in range(2, 200)]
    assert len(set(ports)) == len(ports) and all(EPHEMERAL[0] <= p <= EPHEMERAL[1] for p in ports)


def test_queue_limits_and_thresholds_are_the_pfc_policys():
    fabric = build_fabric("zcube", gpus=16)
    resolved = pfc.resolve(PfcConfig(), LINK, plan.CABLE_DELAY_S)
    params = pfc.queue_params(fabric, LINK, resolved)
    th = policy.thresholds(fabric, resolved)
    assert {q: (p.limit, p.xoff, p.xon) for q, p in params.items()} == {q: (t["limit"], t["xoff"], t["xon"])
                                                                        for q, t in th.items()}
    assert all(p.xoff == resolved.xoff_bytes for p in params.values())
    off = pfc.queue_params(fabric, LINK, pfc.resolve(PfcConfig(enabled=False), LINK, plan.CABLE_DELAY_S))
    assert {p.limit for p in off.values()} == {LINK.buffer_bytes} and pfc.record(None) == {"enabled": False}
    assert pfc.shared_pool(fabric, "sw1", resolved) == 0
    dyn = pfc.resolve(PfcConfig(dynamic_alpha=1.0), LINK, plan.CABLE_DELAY_S)
    assert pfc.shared_pool(fabric, "sw1", dyn) == len(fabric.switches["sw1"].ports) * LINK.buffer_bytes
