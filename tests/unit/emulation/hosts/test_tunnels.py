"""Each host's part of the datapath plan, and the tunnels of the cables between hosts."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from fabrics import build_fabric
from fabrics.datapath import plan_datapath
from testbed.emulation.hosts import assign as P
from testbed.emulation.hosts import tunnels as T


@pytest.fixture(scope="module")
def zcube32():
    f = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    p = P.assign(f, ["ph1", "ph2"])
    plan = plan_datapath(f)
    return f, p, plan, {h: T.split(plan, p, h) for h in ("ph1", "ph2")}


def test_every_device_queue_and_port_on_exactly_one_host(zcube32):
    f, p, plan, parts = zcube32
    for attr, key in (("queues", lambda q: q.qid), ("veths", lambda v: v[0]), ("hosts", lambda h: h.gpu)):
        whole = sorted(key(x) for x in getattr(plan, attr))
        split = sorted(key(x) for part in parts.values() for x in getattr(part.plan, attr))
        assert whole == split, attr
    assert sorted(s for part in parts.values() for s in part.plan.ovs_ports) == sorted(plan.ovs_ports)
    assert len(parts["ph1"].plan.queues) == 4 * 16 + 16 * 2  # 4 switches x 16 ports, 16 GPUs x 2 NICs


def test_a_bridge_keeps_its_port_count_with_tunnels_in_place_of_remote_far_ends(zcube32):
    f, p, plan, parts = zcube32
    for part in parts.values():
        for br, slaves in part.plan.bridges.items():
            assert len(slaves) == len(plan.bridges[br])
            assert slaves[-1] == f"{br[:-3]}-rxa"  # the feed into the switch stays last


def test_one_tunnel_pair_per_cross_cable_same_key(zcube32):
    f, p, plan, parts = zcube32
    ends = {h: {t.key: t for t in part.tunnels} for h, part in parts.items()}
    assert len(ends["ph1"]) == len(ends["ph2"]) == 32 == len(p.cross)
    assert set(ends["ph1"]) == set(ends["ph2"]) == {f.cables.index(c) + 1 for c in p.cross}
    for key, t in ends["ph1"].items():
        u = ends["ph2"][key]
        assert (t.local_end, t.remote_end) == (u.remote_end, u.local_end)
        assert t.dev == u.dev == f"tbt{key}" and len(t.dev) <= 15


def test_worked_example_gpu_cable_and_switch_cable(zcube32):
    """GPU 17 hangs from sw1 (port 1, on ph1); its port 2 goes to sw6 (ceil(17/8)*2), on ph2."""
    f, p, plan, parts = zcube32
    sw6_port = next(port for port, peer in f.switches["sw6"].ports.items() if peer == ("gpu17", 2))
    t1 = next(t for t in parts["ph1"].tunnels if t.local_end == ("gpu17", 2))
    t2 = next(t for t in parts["ph2"].tunnels if t.local_end == ("sw6", sw6_port))
    assert t1.key == t2.key
    assert (t1.tx_from, t1.rx_mirred, t1.rx_bridge) == ("gpu17-p2u", "gpu17-p2u", None)
    assert (t2.tx_from, t2.rx_mirred, t2.rx_bridge) == (f"sw6-eth{sw6_port}r", None, "sw6-rx")
    m1, m2 = set(parts["ph1"].plan.mirreds), set(parts["ph2"].plan.mirreds)
    assert ("gpu17-p2u", t1.dev) in m1 and (t1.dev, "gpu17-p2u") in m1
    assert (f"sw6-eth{sw6_port}r", t2.dev) in m2
    assert t2.dev in parts["ph2"].plan.bridges["sw6-rx"]
    assert "gpu17-p2u" not in parts["ph1"].plan.bridges.get("sw6-rx", [])
    # a local GPU cable is planned as on one host: GPU 1 port 2 -> sw2, both on ph1
    assert "gpu1-p2u" in parts["ph1"].plan.bridges["sw2-rx"]


def test_a_local_mirred_stays_a_remote_one_becomes_two(zcube32):
    f, p, plan, parts = zcube32
    kept = sum(1 for part in parts.values() for a, b in part.plan.mirreds if not (a.startswith("tbt")
                                                                                or b.startswith("tbt")))
    cross_nic = sum(1 for c in p.cross if c.kind == "host")
    assert kept == len(plan.mirreds) - cross_nic  # switch -> GPU redirects of crossing GPU cables are gone


def test_mtu_check_names_host_and_need():
    T.check_underlay_mtu("ph2", 9000, 3000)
    T.check_underlay_mtu("ph2", 3050, 3000)  # VXLAN: outer IP 20 + UDP 8 + VXLAN 8 + inner Ethernet 14
    with pytest.raises(TestbedError) as exc:
        T.check_underlay_mtu("ph2", 1500, 3000, device="eth0")
    assert str(exc.value) == ("host ph2: underlay MTU 1500 (eth0) is too small for cross-host cables: needs 3050 "
                              "(emulated MTU 3000 + 50 B of vxlan)")
    with pytest.raises(TestbedError, match="needs 3042"):
        T.check_underlay_mtu("ph1", 3041, 3000, "gretap")  # GRE with key: 20 + 8 + 14


def test_link_lines_one_key_per_cable():
    f = build_fabric("zcube", gpus=16, gpus_per_switch=8)
    p = P.assign(f, ["a", "b"])
    ts = T.tunnels_of(p, "a")
    lines = T.link_lines(ts, "10.250.0.1", {"b": "10.250.0.2"}, 3000, alias="x", group=7)
    assert lines[0] == (f"link add {ts[0].dev} type vxlan id {ts[0].key} local 10.250.0.1 remote 10.250.0.2 "
                        "dstport 4789 ttl 64 df set nolearning noudpcsum")
    assert lines[1] == f"link set dev {ts[0].dev} mtu 3000 alias x group 7"
    assert len({ln.split(" id ")[1].split()[0] for ln in lines if ln.startswith("link add")}) == len(ts)
    gre = T.link_lines(ts[:1], "10.250.0.1", {"b": "10.250.0.2"}, 3000, "gretap")
    assert gre[0] == (f"link add {ts[0].dev} type gretap local 10.250.0.1 remote 10.250.0.2 key {ts[0].key} ttl 64 "
                      "pmtudisc")


def test_underlay_of_reads_ip_json():
    dev, mtu = T.underlay_of([{"dst": "10.250.0.2", "dev": "eth0", "prefsrc": "10.250.0.1"}],
                             [{"ifname": "lo", "mtu": 65536}, {"ifname": "eth0", "mtu": 9000}])
    assert (dev, mtu) == ("eth0", 9000)
    assert T.underlay_of([{"dev": "eth0", "metrics": [{"mtu": 1400}]}], [{"ifname": "eth0", "mtu": 9000}])[1] == 1400


def test_pfc_policy_per_host_sends_remote_feeders_through_their_cable(zcube32):
    from fabrics.datapath import DatapathConfig
    from pfc.policy import PfcConfig, daemon_policy

    f, p, plan, parts = zcube32
    whole = daemon_policy(f, DatapathConfig(rate_bps=3e6, mtu=3000, buffer_bytes=60000), PfcConfig(), "/run/x")
    pol = {h: T.pfc_policy_for(whole, part) for h, part in parts.items()}
    assert sorted(pol["ph1"]["queues"]) + sorted(pol["ph2"]["queues"]) != []
    assert set(pol["ph1"]["queues"]).isdisjoint(pol["ph2"]["queues"])
    assert len(pol["ph1"]["queues"]) + len(pol["ph2"]["queues"]) == len(whole["queues"])
    # sw6 (ph2) is fed by sw1 (ph1) over 2 cables: each sw1 port towards sw6 is a remote feeder on ph2,
    # reached through that cable's tunnel, and on ph1 that tunnel pauses exactly that port
    for port in f.ports_towards("sw1", "sw6"):
        dev = pol["ph2"]["remote_feeders"][f"sw1:{port}"]
        assert pol["ph1"]["pause_rx"][dev] == f"sw1:{port}"
    # GPU 17 (ph1) sends by port 2 into sw6 (ph2): its NIC queue is a remote feeder there
    dev = pol["ph2"]["remote_feeders"]["gpu17:p2"]
    assert pol["ph1"]["pause_rx"][dev] == "gpu17:p2"
    assert not any(fd in pol["ph1"]["queues"] for fd in pol["ph1"]["remote_feeders"])


def test_latencies_split_by_whether_the_pause_crossed_hosts(zcube32):
    from testbed.emulation.hosts.pfcstats import split_latencies

    f, p, plan, parts = zcube32
    port = f.ports_towards("sw1", "sw6")[0]  # sw1 on ph1 feeds sw6 on ph2
    local_port = f.ports_towards("sw1", "sw2")[0]  # sw2 on ph1 too
    lines = [f"pause sw1:{port} sw6:13 1000000 1100000 1300000 0.300 0\n",
             f"pause sw1:{port} sw6:13 1000000 1200000 1400000 0.400 0\n",
             f"resume sw1:{port} sw6:13 2000000 2100000 2500000 0.500 0\n",
             f"pause sw1:{local_port} sw2:9 1000000 1020000 1000000 0.000 0\n",
             "pause gpu17:p2 sw6:4 0 50000 0 0.000 0\n",  # GPU 17 on ph1, sw6 on ph2: crosses
             "resume sw1:9 expired 0 0 0 1.0 0\n"]
    s = split_latencies(lines, p)
    assert s["cross"]["pause"] == {"n": 3, "p50": 0.3, "p99": 0.4, "max": 0.4}
    assert s["cross"]["reaction"]["p50"] == 0.1 and s["cross"]["reaction"]["max"] == 0.2
    assert s["cross"]["resume"]["n"] == 1
    assert s["local"]["pause"] == {"n": 1, "p50": 0.0, "p99": 0.0, "max": 0.0}
    assert s["local"]["resume"]["n"] == 0
