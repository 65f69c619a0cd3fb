"""A running fabric does what its model says: reachability, exact paths, ECMP
spread, observable queues, table-miss accounting. Real OVS, real controller."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from fabrics import addressing
from fabrics.datapath import netns_of
from fabrics.routing import forwarding_tables, walk
from testbed.emulation.ecmp_probe import port_tx
from tests.support.integration import run_testbed, unreachable_pairs

ALL = ["zcube16", "roft16", "zcube32", "roft32"]
HERE = Path(__file__).resolve().parent


def model(st):
    return st.model()


def send_udp(src_gpu: int, src_port: int, dst_ip: str, count: int, sports: list[int]) -> None:
    code = ("import socket,sys\n"
            "src,dst,n=sys.argv[1],sys.argv[2],int(sys.argv[3])\n"
            "for sp in map(int,sys.argv[4:]):\n"
            " s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind((src,sp))\n"
            " for _ in range(n): s.sendto(b'x'*64,(dst,9))\n"
            " s.close()\n")
    subprocess.run(["ip", "netns", "exec", netns_of(src_gpu), "python3", "-c", code,
                    addressing.ip_of(src_gpu, src_port), dst_ip, str(count), *map(str, sports)], check=True)


def deltas(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


@pytest.mark.parametrize("fabric", ALL, indirect=True)
def test_every_gpu_port_reaches_every_other(fabric):
    unreachable = unreachable_pairs(model(fabric))
    assert unreachable == [], f"{len(unreachable)} unreachable, e.g. {unreachable[:5]}"


@pytest.mark.parametrize("fabric", ALL, indirect=True)
def test_exec_runs_ping_inside_a_gpu(fabric):
    f = model(fabric)
    proc = run_testbed("exec", "gpu3", "--", "ping", "-c1", "-W3", addressing.ip_of(f.n_gpus, 2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 received" in proc.stdout


@pytest.mark.parametrize("fabric", ALL, indirect=True)
def test_packets_take_exactly_the_planned_path(fabric):
    """Per-port counters of OVS: the ports a 5-tuple's packets leave by are
    the model's path (ZCube: the one path; ROFT: one of its ECMP paths)."""
    f = model(fabric)
    tables = forwarding_tables(f)
    n = 200
    pairs = [(1, f.n_gpus, 1), (2, f.n_gpus // 2 + 3, 2), (f.n_gpus, 5, 1), (4, 5, 2)]
    for src, dst, sp in pairs:
        planned = {tuple(zip(hops, outs)) for hops, outs in walk(f, tables, (src, sp), (dst, 3 - sp))}
        before = port_tx(f.switches)
        send_udp(src, sp, addressing.ip_of(dst, 3 - sp), n, [40000])
        time.sleep(0.3)
        moved = deltas(before, port_tx(f.switches))
        carried = tuple(sorted(k for k, v in moved.items() if v >= n))
        assert carried in {tuple(sorted(p)) for p in planned}, \
            f"gpu{src}:p{sp} -> gpu{dst}:p{3 - sp}: ports {carried}, planned {sorted(planned)}"
        assert all(v < n // 2 for k, v in moved.items() if k not in carried), moved


def tcp_syns(src_gpu: int, src_port: int, dst_ip: str, sports: list[int]) -> None:
    """One connection attempt per source port to a closed port (SYN out, RST back)."""
    code = ("import socket,sys\n"
            "src,dst=sys.argv[1],sys.argv[2]\n"
            "for sp in map(int,sys.argv[3:]):\n"
            " s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind((src,sp))\n"
            " s.settimeout(2);s.connect_ex((dst,9));s.close()\n")
    subprocess.run(["ip", "netns", "exec", netns_of(src_gpu), "python3", "-c", code,
                    addressing.ip_of(src_gpu, src_port), dst_ip, *map(str, sports)], check=True)


@pytest.mark.parametrize("fabric", ["roft16", "roft32"], indirect=True)
def test_roft_spreads_five_tuples_over_spines(fabric):
    """TCP connections differing only in source port leave the leaf by
    different uplinks (OVS's select group hashes the L4 ports of TCP; for UDP
    its symmetric hash leaves the ports out, so this test uses TCP)."""
    f = model(fabric)
    src, dst = 1, 2  # different rails: up to a spine and back
    leaf = f.switch_of(src, 1)
    uplinks = [p for p, (peer, _) in f.switches[leaf].ports.items() if peer.startswith("spine")]
    flows = 48
    before = port_tx([leaf])
    tcp_syns(src, 1, addressing.ip_of(dst, 2), list(range(41000, 41000 + flows)))
    time.sleep(0.3)
    moved = deltas(before, port_tx([leaf]))
    used = {p: moved.get((leaf, p), 0) for p in uplinks}
    assert sum(used.values()) >= flows
    assert sum(1 for v in used.values() if v) >= 2, f"all {flows} TCP flows took one uplink: {used}"


@pytest.mark.parametrize("fabric", ["zcube16", "roft16"], indirect=True)
def test_status_shows_queues_and_counts_unexpected_packets(fabric):
    f = model(fabric)
    doc = json.loads(run_testbed("status", "--json", check=True).stdout)
    n_switch_ports = sum(len(sw.ports) for sw in f.switches.values())
    assert len(doc["queues"]) == 2 * f.n_gpus + n_switch_ports
    assert all("backlog" in q and "drops" in q for q in doc["queues"])
    assert doc["controller"]["alive"] and doc["controller"]["switches_verified"] == len(f.switches)
    assert doc["pfc"] == {"enabled": False}
    before = doc["controller"]["miss_packets"]
    assert before == 0, f"{before} packets hit table-miss on a healthy fabric (host chatter such as IGMP?)"
    # an address no GPU has: its ARP request reaches a switch and hits table-miss
    subprocess.run(["ip", "netns", "exec", netns_of(1), "ping", "-c1", "-W1", "10.2.0.250"], capture_output=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = json.loads(run_testbed("status", "--json", check=True).stdout)["controller"]["miss_packets"]
        if after > before:
            break
        time.sleep(0.5)
    assert after > before, "a packet nobody routes was not counted as table-miss"


@pytest.mark.parametrize("fabric", ["zcube16"], indirect=True)
def test_fidelity_bench_measures_every_flow_of_both_patterns(fabric):
    """On the running fabric, short: every flow is measured against the ideal worked out by hand (the
    goodputs are measured, not asserted: timing targets would flake here).

    ZCube n=16, k=8, c=4 at 3 Mbit/s. Permutation i -> i+1 (shift 1): p1 flows leave sw1 (odd GPUs) or sw3
    (even GPUs) on cable ((dst-1) mod 8) // 2 towards the destination's even switch, p2 flows likewise from
    sw2/sw4; the 8 flows between one odd and one even switch pick cables 0,1,2,3 once per direction, so no
    link carries two flows: every ideal is the full 3 Mbit/s. All-to-all: each NIC sends to 15 others and
    receives from 15, and each odd-even cable carries the flows to its 2 destinations (7 + 8 = 15 sources),
    so every link is shared 15 ways: 3e6 / 15 = 200 kbit/s each. Both as TCP payload at MTU 3000:
    x (3000 - 52) / (3000 + 14) = 2948/3014, i.e. 2 934 307 and 195 620 bit/s (rounded)."""
    proc = run_testbed("bench", "fidelity", "zcube", "--gpus", "16", "--duration", "5", "--omit", "1", "--json",
                       timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    n = 16
    by_pattern = {p: [f for f in doc["flows"] if f["pattern"] == p] for p in ("permutation", "all-to-all")}
    perm, a2a = by_pattern["permutation"], by_pattern["all-to-all"]
    assert sorted((f["src"], f["src_port"], f["dst"], f["dst_port"]) for f in perm) == sorted(
        (f"gpu{i}", sp, f"gpu{i % n + 1}", 3 - sp) for i in range(1, n + 1) for sp in (1, 2))
    assert len(a2a) == 2 * n * (n - 1) == 480
    assert {f["ideal_bps"] for f in perm} == {2_934_307} and {f["ideal_bps"] for f in a2a} == {195_620}
    for flows, ideal in ((perm, 3e6 * 2948 / 3014), (a2a, 2e5 * 2948 / 3014)):
        assert sum(f["goodput_bps"] for f in flows) > 0
        assert all(abs(f["ratio"] - f["goodput_bps"] / ideal) <= 1e-4 and f["ideal_known"] for f in flows)
    for pattern, flows in (("permutation", perm), ("all-to-all", a2a)):
        s = doc["summary"][pattern]
        assert s["flows"] == len(flows) and s["ideal_known"] is True
        assert s["min_ratio"] == min(f["ratio"] for f in flows) <= s["median_ratio"] <= max(f["ratio"] for f in flows)
    assert isinstance(doc["summary"]["cpu_saturated"], bool) and doc["summary"]["rate_bps"] == 3e6
