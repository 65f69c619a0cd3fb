"""Fidelity benchmark: does the emulated fabric deliver what the model says?

Runs a TCP permutation (every GPU sends to one other GPU, on both NIC ports:
p1 -> dst p2 and p2 -> dst p1, so 2n flows) with iperf3 for a fixed time and
compares every flow's goodput with its ideal max-min fair share computed from
the model's link capacities and routes (payload efficiency of the MTU
included). CPU is sampled during the run: a run in which ovs-vswitchd or the
whole machine saturated is flagged (Mininet-HiFi style), not reported as a
result.

ROFT's ECMP bucket is picked by OVS's datapath hash, which the model cannot
predict, so its ideal is the collision-free share (the bound a perfect hash
would give) and is marked ``ideal_known: false``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from statistics import median

from testbed.emulation import fabricctl
from testbed.emulation.plan import DatapathConfig, netns_of
from testbed.errors import TestbedError
from testbed.fabric import Fabric, addressing, build_fabric
from testbed.fabric.maxmin import all_link_capacities, flow_links, max_min
from testbed.fabric.routing import forwarding_tables

BASE_PORT = 5201
OVS_SATURATED = 0.95  # of one core (the PMD thread does all forwarding)
HOST_IDLE_MIN = 0.03  # of the whole machine


def payload_efficiency(mtu: int) -> float:
    """TCP payload per byte on the wire (IPv4 + TCP with timestamps: 52 B; Ethernet 14 B)."""
    return (mtu - 52) / (mtu + 14)


def permutation(fabric: Fabric, rate_bps: float) -> tuple[list[tuple[int, int]], dict]:
    """A derangement i -> ((i-1+s) mod n)+1 whose flows all get the full link
    rate in the model when the fabric is non-blocking (the smallest such s)."""
    n = fabric.n_gpus
    if fabric.kind != "zcube":  # same pairs as the ZCube of this size; ideal: collision-free ECMP
        k = fabric.params.get("gpus_per_server", 8)
        pairs, _ = permutation(build_fabric("zcube", gpus=n, gpus_per_switch=k), rate_bps)
        return pairs, {f"{s}>{d}:p{sp}": rate_bps for s, d in pairs for sp in (1, 2)}
    tables = forwarding_tables(fabric)
    caps = all_link_capacities(fabric, rate_bps)
    best = None
    for shift in range(1, n):
        pairs = [(i, (i - 1 + shift) % n + 1) for i in fabric.gpus()]
        flows = {f"{s}>{d}:p{sp}": flow_links(fabric, (s, sp), (d, 3 - sp), tables) for s, d in pairs for sp in (1, 2)}
        ideal = max_min(flows, caps)
        worst = min(ideal.values())
        if best is None or worst > best[2]:
            best = (pairs, ideal, worst)
        if worst >= rate_bps * 0.999:
            break
    return best[0], best[1]


def _cpu_sample() -> tuple[float, float, float]:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    ovs = 0.0
    pids = subprocess.run(["pidof", "ovs-vswitchd"], capture_output=True, text=True).stdout.split()
    if pids:
        with open(f"/proc/{pids[0]}/stat") as fh:
            parts = fh.read().rsplit(")", 1)[1].split()
        ovs = (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    return time.monotonic(), total - idle, ovs


def run_permutation(st: dict, duration: int, omit: int) -> dict:
    fabric = fabricctl.fabric_of_state(st)
    rate = st["config"]["rate_bps"]
    pairs, ideal = permutation(fabric, rate)
    eff = payload_efficiency(st["config"]["mtu"])
    servers, clients = [], []
    try:
        for src, dst in pairs:
            for sp in (1, 2):
                servers.append(subprocess.Popen(
                    ["ip", "netns", "exec", netns_of(dst), "iperf3", "-s", "-1", "-p", str(BASE_PORT + sp)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)
        t0, busy0, ovs0 = _cpu_sample()
        for src, dst in pairs:
            for sp in (1, 2):
                dst_ip = addressing.ip_of(dst, 3 - sp)
                clients.append(((src, dst, sp), subprocess.Popen(
                    ["ip", "netns", "exec", netns_of(src), "iperf3", "-c", dst_ip, "-p", str(BASE_PORT + sp),
                     "-B", addressing.ip_of(src, sp), "-t", str(duration), "-O", str(omit), "-J"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)))
        time.sleep(omit + 1)
        t1, busy1, ovs1 = _cpu_sample()
        outputs = [(key, proc.communicate(timeout=duration + 60)[0]) for key, proc in clients]
        t2, busy2, ovs2 = _cpu_sample()
    finally:
        for proc in servers + [p for _, p in clients]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ticks = os.sysconf("SC_CLK_TCK")
    span = t2 - t1
    machine_busy = (busy2 - busy1) / ticks / span / os.cpu_count()
    ovs_cpu = (ovs2 - ovs1) / span
    flows = []
    for (src, dst, sp), out in outputs:
        try:
            end = json.loads(out)["end"]
            goodput = end["sum_received"]["bits_per_second"]
            retrans = end["sum_sent"].get("retransmits", 0)
        except (json.JSONDecodeError, KeyError):
            goodput, retrans = 0.0, None
        ideal_bps = ideal[f"{src}>{dst}:p{sp}"] * eff
        flows.append({"src": f"gpu{src}", "dst": f"gpu{dst}", "src_port": sp, "dst_port": 3 - sp,
                      "pattern": "permutation", "goodput_bps": round(goodput), "ideal_bps": round(ideal_bps),
                      "ratio": round(goodput / ideal_bps, 4), "retransmits": retrans,
                      "ideal_known": fabric.kind == "zcube"})
    ratios = [f["ratio"] for f in flows]
    saturated = ovs_cpu >= OVS_SATURATED or machine_busy >= 1 - HOST_IDLE_MIN
    return {
        "flows": flows,
        "summary": {
            "permutation": {"median_ratio": round(median(ratios), 4), "min_ratio": round(min(ratios), 4),
                            "aggregate_goodput_bps": round(sum(f["goodput_bps"] for f in flows)),
                            "flows": len(flows), "retransmits": sum(f["retransmits"] or 0 for f in flows)},
            "rate_bps": rate,
            "mtu": st["config"]["mtu"],
            "cpu": {"ovs_vswitchd_cores": round(ovs_cpu, 3), "machine_busy_fraction": round(machine_busy, 3)},
            "cpu_saturated": saturated,
            "duration_s": duration,
        },
    }


def targets_met(result: dict) -> bool:
    s = result["summary"]["permutation"]
    return (not result["summary"]["cpu_saturated"]) and s["median_ratio"] >= 0.95 and s["min_ratio"] >= 0.85


def bench(fabric_args: dict, config: DatapathConfig, duration: int = 16, omit: int = 3, log=print) -> dict:
    """Bring a fabric up (or use the one that is up, if it matches), measure, bring it down."""
    st = fabricctl.load_state()
    own = st is None
    if not own:
        if st["fabric"]["kind"] != fabric_args["kind"] or st["fabric"]["gpus"] != fabric_args["gpus"]:
            raise TestbedError(f"a different fabric is up ({st['fabric']['kind']}, {st['fabric']['gpus']} GPUs): "
                               "run 'testbed down' first")
    try:
        if own:
            st = fabricctl.up(fabric_args, config, log=log)
        result = run_permutation(st, duration, omit)
        result["summary"]["bringup_s"] = st["timings"].get("up_s")
        result["summary"]["fabric"] = st["fabric"]
        result["summary"]["drops"] = sum(q.get("drops", 0) for q in fabricctl.read_queues(st))
        result["summary"]["targets_met"] = targets_met(result)
    finally:
        if own:
            t = fabricctl.down()
            if "result" in locals():
                result["summary"]["teardown_s"] = t["down_s"]
    return result


def sweep(fabric_args: dict, base: DatapathConfig, rates_bps: list[float], duration: int, omit: int, log=print) -> dict:
    from dataclasses import replace

    rows = []
    for rate in rates_bps:
        res = bench(fabric_args, replace(base, rate_bps=rate, tcp_limit_output_bytes=0), duration, omit, log)
        s = res["summary"]
        rows.append({"rate_bps": rate, **s["permutation"], "cpu_saturated": s["cpu_saturated"],
                     "targets_met": s["targets_met"], "cpu": s["cpu"]})
        log(f"  {rate / 1e6:g} Mbit/s: median {s['permutation']['median_ratio']:.3f} min {s['permutation']['min_ratio']:.3f} "
            f"aggregate {s['permutation']['aggregate_goodput_bps'] / 1e6:.1f} Mbit/s "
            f"{'OK' if s['targets_met'] else 'MISSED'}{' (CPU saturated)' if s['cpu_saturated'] else ''}")
    passing = [r for r in rows if r["targets_met"]]
    best = max(passing, key=lambda r: r["rate_bps"]) if passing else None
    return {"sweep": rows, "capacity_at_fidelity_bps": best["aggregate_goodput_bps"] if best else 0,
            "highest_rate_at_fidelity_bps": best["rate_bps"] if best else None}
