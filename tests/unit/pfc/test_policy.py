"""pfc.policy: thresholds, queue limits and the feeders of every switch queue."""

import itertools
import json

import pytest

from common.errors import TestbedError
from fabrics import addressing, build_fabric
from fabrics.routing import egress_port_for, forwarding_tables, walk
from pfc.policy import (
    PfcConfig,
    feeders,
    host_destinations,
    policy_doc,
    queue_limit,
    queue_limits,
    resolve,
    resolve_on,
    thresholds,
)

FABRICS = {
    "zcube16": ("zcube", {"gpus": 16, "gpus_per_switch": 8}),
    "zcube32": ("zcube", {"gpus": 32, "gpus_per_switch": 8}),
    "roft16": ("roft", {"gpus": 16}),
    "roft32": ("roft", {"gpus": 32}),
}
RATE, MTU, BUFFER = 3e6, 3000, 60000


def fabric_of(name):
    kind, kwargs = FABRICS[name]
    return build_fabric(kind, **kwargs)


def traffic_edges(f):
    """(upstream queue, downstream queue) for every consecutive pair of queues on every walk of
    every host-routed transfer (each GPU port to every other GPU's address of the other plane)."""
    tables = forwarding_tables(f)
    edges = set()
    for src, dst in itertools.permutations(f.gpus(), 2):
        for dp in (1, 2):
            sp = egress_port_for(dp)
            for hops, outs in walk(f, tables, (src, sp), (dst, dp)):
                queues = [f"gpu{src}:p{sp}"] + [f"{sw}:{p}" for sw, p in zip(hops, outs)]
                edges.update(zip(queues, queues[1:]))
    return edges


# ------------------------------------------------------------------ feeders
@pytest.mark.parametrize("name", FABRICS)
def test_feeders_cover_every_switch_queue_sorted_and_adjacent(name):
    f = fabric_of(name)
    fd = feeders(f)
    assert set(fd) == {f"{sw}:{p}" for sw, s in f.switches.items() for p in s.ports}
    for qid, ups in fd.items():
        sw, port = qid.split(":")
        adjacent = {f"{peer}:p{pp}" if peer.startswith("gpu") else f"{peer}:{pp}"
                    for peer, pp in f.switches[sw].ports.values()}
        assert set(ups) <= adjacent, qid
        assert len(set(ups)) == len(ups)
        # a queue never feeds itself back through its own cable
        peer, peer_port = f.peer(sw, int(port))
        assert f"{peer}:{peer_port}" not in ups


@pytest.mark.parametrize("name", FABRICS)
def test_feeders_are_exactly_the_links_host_traffic_uses(name):
    """Every feeder link carries some transfer into the queue, and every transfer's
    consecutive queues are a feeder pair: soundness and completeness against walk()."""
    f = fabric_of(name)
    fd = feeders(f)
    from_model = {(u, d) for d, ups in fd.items() for u in ups}
    assert from_model == traffic_edges(f)


def test_zcube32_odd_to_even_queue_is_fed_by_its_own_rail_gpus_only():
    f = fabric_of("zcube32")
    fd = feeders(f)
    # sw1 holds port 1 of GPUs 1, 5, ..., 29; ports 9 and 10 are its two cables to sw2
    assert f.peer("sw1", 9)[0] == "sw2" and f.peer("sw1", 10)[0] == "sw2"
    expected = [f"gpu{g}:p1" for g in range(1, 33, 4)]
    assert fd["sw1:9"] == expected
    assert fd["sw1:10"] == expected
    # every odd->even queue: only port-1 NIC queues of GPUs on that odd switch
    for sw in ("sw1", "sw3", "sw5", "sw7"):
        for p, (peer, _) in f.switches[sw].ports.items():
            if peer.startswith("sw"):
                ups = fd[f"{sw}:{p}"]
                assert ups, f"{sw}:{p}"
                assert all(u.endswith(":p1") and f.switch_of(int(u[3:].split(":")[0]), 1) == sw for u in ups)


def test_zcube16_cable_feeders_follow_the_cable_choice():
    """n=16, k=8 with 8 cables per pair: destination h uses cable ((h-1) % 8) // 2, so
    cables 4..7 carry nothing and have no feeders; cable 0 to sw2 carries GPUs 1 and 2."""
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8, cables=8)
    fd = feeders(f)
    to_sw2 = f.ports_towards("sw1", "sw2")
    assert len(to_sw2) == 8
    for p in to_sw2[4:]:
        assert fd[f"sw1:{p}"] == []
    # sw1 has port 1 of the odd GPUs; gpu1 sends to 10.2.0.2 on cable 0, so all of them feed it
    assert fd[f"sw1:{to_sw2[0]}"] == [f"gpu{g}:p1" for g in range(1, 17, 2)]
    # cable 1 to sw4 carries only GPUs 11 and 12 (port 2): gpu11 still sends to gpu12
    to_sw4 = f.ports_towards("sw1", "sw4")
    assert fd[f"sw1:{to_sw4[1]}"] == [f"gpu{g}:p1" for g in range(1, 17, 2)]


def test_zcube_gpu_never_feeds_a_queue_only_its_own_address_uses():
    """n=8, k=8, 8 cables: each odd->even cable carries one or two destinations; a cable whose
    only destinations are a GPU's own port-2 address is not fed by that GPU."""
    f = build_fabric("zcube", gpus=8, gpus_per_switch=8, cables=8)
    fd = feeders(f)
    # one odd and one even switch; destination h goes over cable ((h-1) % 8) // 1: one each
    to_sw2 = f.ports_towards("sw1", "sw2")
    for h in range(1, 9):
        ups = fd[f"sw1:{to_sw2[h - 1]}"]
        assert f"gpu{h}:p1" not in ups
        assert ups == [f"gpu{g}:p1" for g in range(1, 9) if g != h]


def test_zcube32_even_queue_towards_gpu_port2_is_fed_by_odd_cables_carrying_it():
    f = fabric_of("zcube32")
    fd = feeders(f)
    assert f.peer("sw2", 1) == ("gpu1", 2) and f.peer("sw2", 5) == ("gpu5", 2)
    # gpu1 (local rank 0) is on cable 0 of each odd switch (its port 9), gpu5 on cable 1 (port 10)
    assert fd["sw2:1"] == ["sw1:9", "sw3:9", "sw5:9", "sw7:9"]
    assert fd["sw2:5"] == ["sw1:10", "sw3:10", "sw5:10", "sw7:10"]
    # the even switch's own GPUs send only to 10.1/16 from port 2: they never feed a port-2 queue
    assert not any(u.startswith("gpu") for u in fd["sw2:1"])
    # and even->odd queues are fed by the even switch's GPUs' port-2 queues only (no transit)
    assert f.peer("sw2", 9)[0] == "sw1"
    assert fd["sw2:9"] == [f"gpu{g}:p2" for g in range(1, 9)]


def test_roft_spine_to_leaf_queue_is_fed_by_the_other_leaves_uplinks():
    f = fabric_of("roft32")
    fd = feeders(f)
    for spine in (n for n, s in f.switches.items() if s.role == "spine"):
        for p, (leaf, _) in f.switches[spine].ports.items():
            expected = sorted(
                (f"{other}:{q}" for other, s in f.switches.items() if s.role == "leaf" and other != leaf
                 for q, (peer, _) in s.ports.items() if peer == spine),
                key=lambda x: (int(x.split(":")[0][4:]), int(x.split(":")[1])))
            assert fd[f"{spine}:{p}"] == expected, f"{spine}:{p}"
    assert f.peer("spine1", 1)[0] == "leaf1"
    assert "leaf1:9" not in fd["spine1:1"] and "leaf2:9" in fd["spine1:1"]


def test_roft_leaf_uplink_queue_is_fed_by_its_own_gpus_only():
    f = fabric_of("roft32")
    fd = feeders(f)
    leaf = f.switches["leaf1"]
    gpus = sorted({int(peer[3:]) for peer, _ in leaf.ports.values() if peer.startswith("gpu")})
    for p, (peer, _) in leaf.ports.items():
        if peer.startswith("spine"):
            assert fd[f"leaf1:{p}"] == [f"gpu{g}:p{q}" for g in gpus for q in (1, 2)]
        else:  # a host port: the other local GPUs' opposite-plane port, and every downlink from a spine
            g, q = int(peer[3:]), f.peer("leaf1", p)[1]
            local = [f"gpu{h}:p{3 - q}" for h in gpus if h != g]
            spines = [u for u in fd[f"leaf1:{p}"] if u.startswith("spine")]
            assert [u for u in fd[f"leaf1:{p}"] if u.startswith("gpu")] == local
            assert len(spines) == sum(1 for pe, _ in leaf.ports.values() if pe.startswith("spine"))


def test_host_destinations_follow_the_plane_routing():
    f = fabric_of("zcube16")
    d1 = host_destinations(f, 3, 1)
    assert d1 == {addressing.ip_of(h, 2) for h in f.gpus() if h != 3}
    assert host_destinations(f, 3, 2) == {addressing.ip_of(h, 1) for h in f.gpus() if h != 3}


@pytest.mark.parametrize("kind", ["zcube", "roft"])
def test_feeders_are_computed_once_per_fabric_and_copied(kind, monkeypatch):
    from pfc import policy

    f = build_fabric(kind, gpus=64, gpus_per_switch=8)
    calls = []
    real = policy._feeders
    monkeypatch.setattr(policy, "_feeders", lambda fabric: calls.append(fabric) or real(fabric))
    first = feeders(f)
    again = feeders(f)
    assert len(calls) == 1 and again == first
    again["sw1:1" if kind == "zcube" else "leaf1:1"].append("junk")  # copies: the cache is not changed
    assert feeders(f) == first


# --------------------------------------------------------------- thresholds
def test_defaults_at_3mbit_mtu3000_buffer60000():
    r = resolve(PfcConfig(), RATE, MTU, BUFFER)
    assert r.frame_bytes == 3014
    assert r.min_headroom_bytes == 6778  # 2 * 3014 + 3e6 * 2 ms / 8 = 6028 + 750
    assert r.headroom_bytes == 7000
    assert r.xoff_bytes == 30000
    assert r.xon_bytes == 30000 - 2 * 3014
    assert r.poll_us == 500 and r.reaction_ms == 2.0 and r.enabled
    assert queue_limit(r, 0) == 30000
    assert queue_limit(r, 4) == 30000 + 4 * 7000


def test_xon_default_is_at_least_one_frame_and_headroom_rounds_up():
    r = resolve(PfcConfig(xoff_bytes=6028, reaction_ms=1.0), 4e6, MTU, BUFFER)
    assert r.xon_bytes == 3014
    assert r.min_headroom_bytes == 6028 + 500 and r.headroom_bytes == 7000
    r = resolve(PfcConfig(headroom_bytes=6778), RATE, MTU, BUFFER)
    assert r.headroom_bytes == 6778  # exactly the minimum is allowed


def test_pfc_off_keeps_the_plain_buffer():
    r = resolve(PfcConfig(enabled=False), RATE, MTU, BUFFER)
    assert queue_limit(r, 7) == BUFFER
    th = thresholds(fabric_of("zcube16"), r)
    assert all(t["limit"] == BUFFER and t["xoff"] is None for t in th.values())


@pytest.mark.parametrize("cfg,message", [
    (PfcConfig(xoff_bytes=30000, xon_bytes=30000), "pfc xon 30000 B must be below xoff 30000 B"),
    (PfcConfig(xon_bytes=40000), "pfc xon 40000 B must be below xoff 30000 B"),
    (PfcConfig(xoff_bytes=70000), "pfc xoff 70000 B is larger than the 60000 B buffer"),
    (PfcConfig(xoff_bytes=6000), "pfc xoff 6000 B is below two frames of 3014 B (6028 B)"),
    (PfcConfig(headroom_bytes=3000), "pfc headroom 3000 B is below the 6778 B in flight on one link "
                                     "(2 frames of 3014 B + 750 B at 3 Mbit/s in 2 ms)"),
    (PfcConfig(poll_us=10), "pfc poll_us 10 is out of range: expected 50 .. 5000 us"),
    (PfcConfig(poll_us=5001), "pfc poll_us 5001 is out of range: expected 50 .. 5000 us"),
    (PfcConfig(xoff_bytes=-1), "pfc xoff -1 B is negative"),
    (PfcConfig(xon_bytes=-2), "pfc xon -2 B is negative"),
    (PfcConfig(headroom_bytes=-3), "pfc headroom -3 B is negative"),
    (PfcConfig(reaction_ms=0), "pfc reaction_ms 0 must be > 0"),
    (PfcConfig(dynamic_alpha=0.0), "pfc dynamic_alpha 0.0 is out of range: expected 1/128 (0.0078125) <= alpha <= 8"),
    (PfcConfig(dynamic_alpha=0.005), "pfc dynamic_alpha 0.005 is out of range: expected 1/128"),
    (PfcConfig(dynamic_alpha=9), "pfc dynamic_alpha 9 is out of range: expected 1/128 (0.0078125) <= alpha <= 8"),
    (PfcConfig(dynamic_alpha=0.5, xoff_bytes=30000), "pfc xoff 30000 B conflicts with dynamic_alpha 0.5: the XOFF "
                                                     "threshold is then alpha x the switch's free buffer"),
    (PfcConfig(dynamic_alpha=2, xon_bytes=9000), "pfc xon 9000 B conflicts with dynamic_alpha 2"),
])
def test_every_validation_error_names_the_value_and_the_rule(cfg, message):
    with pytest.raises(TestbedError) as info:
        resolve(cfg, RATE, MTU, BUFFER)
    text = str(info.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_dynamic_alpha_in_range_is_accepted_when_pfc_is_off():
    r = resolve(PfcConfig(enabled=False, dynamic_alpha=8), RATE, MTU, BUFFER)
    assert not r.enabled


def test_dynamic_thresholds_have_two_and_one_frame_floors():
    r = resolve(PfcConfig(dynamic_alpha=0.5), RATE, MTU, BUFFER)
    assert (r.dynamic_alpha, r.xoff_bytes, r.xon_bytes) == (0.5, 6028, 3014)
    assert r.headroom_bytes == resolve(PfcConfig(), RATE, MTU, BUFFER).headroom_bytes


def test_dynamic_pool_is_the_switchs_ports_and_a_lone_queue_stops_at_alpha_over_one_plus_alpha():
    """ZCube n=32, k=8: sw1 has 8 GPU ports and 4 even switches x 2 cables = 16 ports; its pool is
    16 x 60 000 = 960 000 B. A lone queue stops where b = alpha (shared - b): b = 0.5/1.5 x 960 000 = 320 000 B.
    sw1:9 (the first cable to sw2) is fed by sw1's 8 GPUs' port 1 (gpu1, 5, ..., 29), each with the default
    headroom 2 x 3 014 + 3e6 x 2 ms / 8 = 6 778 B, rounded up to 7 000: limit 320 000 + 8 x 7 000 = 376 000 B."""
    f = fabric_of("zcube32")
    r = resolve(PfcConfig(dynamic_alpha=0.5), RATE, MTU, BUFFER)
    assert r.headroom_bytes == 7000
    th = thresholds(f, r)
    assert th["sw1:9"]["dynamic"] == {"alpha": 0.5, "shared": 960_000, "switch": "sw1", "xoff_max": 320_000}
    assert th["sw1:9"]["feeders"] == [f"gpu{g}:p1" for g in range(1, 32, 4)]
    assert th["sw1:9"]["limit"] == 376_000
    assert (th["sw1:9"]["xoff"], th["sw1:9"]["xon"]) == (6028, 3014)
    assert "dynamic" not in thresholds(f, resolve(PfcConfig(), RATE, MTU, BUFFER))["sw1:9"]
    # the smallest alpha, 1/128: 960 000 / 129 = 7 441.9 -> 7 441; with 20 000 B buffers the pool is 320 000 B
    # and 320 000 / 129 = 2 480, below the 2-frame floor of 6 028, which holds
    tiny = resolve(PfcConfig(dynamic_alpha=1 / 128), RATE, MTU, BUFFER)
    assert thresholds(f, tiny)["sw1:9"]["dynamic"]["xoff_max"] == 7441
    small = resolve(PfcConfig(dynamic_alpha=1 / 128), RATE, MTU, 20_000)
    assert thresholds(f, small)["sw1:9"]["dynamic"]["xoff_max"] == 6028


def test_from_dict_takes_experiment_settings():
    cfg = PfcConfig.from_dict({"enabled": True, "xoff_bytes": 20000, "xon_bytes": None, "headroom_bytes": None,
                               "dynamic_alpha": None, "poll_us": None})
    assert cfg.xoff_bytes == 20000 and cfg.poll_us == 500
    with pytest.raises(TestbedError, match="'xof' is unknown"):
        PfcConfig.from_dict({"xof": 1})


def test_thresholds_and_policy_doc():
    f = fabric_of("zcube32")
    r = resolve(PfcConfig(), RATE, MTU, BUFFER)
    th = thresholds(f, r)
    fd = feeders(f)
    assert th["sw1:9"] == {"xoff": 30000, "xon": 23972, "limit": 30000 + 8 * 7000, "feeders": fd["sw1:9"]}
    assert th["sw2:1"]["limit"] == 30000 + 4 * 7000
    doc = json.loads(json.dumps(policy_doc(f, r, nic_limit_bytes=3014000)))
    c = doc["config"]
    assert c["xoff_bytes"] == 30000 and c["xon_bytes"] == 23972 and c["headroom_bytes"] == 7000
    assert c["poll_us"] == 500 and c["min_headroom_bytes"] == 6778 and c["enabled"] is True
    assert doc["kind"] == "zcube" and doc["n_gpus"] == 32
    q = doc["queues"]
    assert q["sw1:9"]["kind"] == "switch" and q["sw1:9"]["feeders"] == fd["sw1:9"]
    assert q["gpu1:p1"] == {"kind": "nic", "xoff": None, "xon": None, "limit": 3014000, "feeders": []}
    # every feeder is a transmitter of the doc, and paused_by inverts feeders
    assert all(u in q for ups in fd.values() for u in ups)
    assert "sw1:9" in doc["paused_by"]["gpu1:p1"]
    inverse = {(u, d) for u, ds in doc["paused_by"].items() for d in ds}
    assert inverse == {(u, d) for d, ups in fd.items() for u in ups}


def test_queue_limits_are_the_thresholds_limits_on_the_links_and_none_with_pfc_off():
    from fabrics.datapath import DatapathConfig

    fabric, links = fabric_of("zcube16"), DatapathConfig(rate_bps=RATE, mtu=MTU, buffer_bytes=BUFFER)
    got = queue_limits(fabric, links, PfcConfig())
    th = thresholds(fabric, resolve_on(PfcConfig(), links))
    assert got == {q: t["limit"] for q, t in th.items()} and all(v >= th[q]["xoff"] for q, v in got.items())
    assert queue_limits(fabric, links, PfcConfig(enabled=False)) == {} and queue_limits(fabric, links, None) == {}
