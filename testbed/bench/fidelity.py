"""Fidelity benchmark: does the emulated fabric deliver what the model says?

Two TCP patterns, each for a fixed time on the same fabric: a permutation
(every GPU sends to one other GPU, on both NIC ports: p1 -> dst p2 and
p2 -> dst p1, so 2n flows, with iperf3) and an all-to-all (every GPU to
every other on both ports, 2n(n-1) flows, with ``bulk.py``, one process per
GPU). Every flow's goodput is compared with its ideal max-min fair share
computed from the model's link capacities and routes (payload efficiency of
the MTU included). CPU is sampled during the run: a run in which ovs-vswitchd or the
whole machine saturated is flagged (Mininet-HiFi style), not reported as a
result.

ROFT's ECMP bucket is picked by OVS's datapath hash, which the model cannot
predict. For the permutation the benchmark learns it: every flow has a fixed
5-tuple (iperf3 --cport), and before the flow starts one SYN with that
5-tuple is sent and OVS's port counters show which candidate path it took;
the ideal is then the max-min share over the paths actually taken
(``ideal_known: true``). For the all-to-all (too many flows to probe one by
one) the ideal is the collision-free share over the edge links, the bound a
perfect hash would give (``ideal_known: false``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from statistics import median

from common import scale
from common.errors import TestbedError
from common.paths import REPO
from fabrics import Fabric, addressing, build_fabric
from fabrics.datapath import DatapathConfig, netns_of
from fabrics.maxmin import all_link_capacities, flow_links, max_min
from fabrics.routing import forwarding_tables, walk
from testbed.bench import iperf3_result
from testbed.emulation import ecmp_probe, fabricctl
from testbed.emulation.state import FabricState

BASE_PORT = 5201
CLIENT_PORT = 42000  # iperf3 --cport base: fixed 5-tuples, so ECMP paths can be learnt first
BULK_PORT = 5300
BULK = REPO / "traffic" / "runtime" / "bulk.py"  # a plain script: no project import, any python3 runs it
OVS_SATURATED = 0.95  # of one core (the PMD thread does all forwarding)
HOST_IDLE_MIN = 0.03  # of the whole machine


def payload_efficiency(mtu: int) -> float:
    """TCP payload per byte on the wire (IPv4 + TCP with timestamps: 52 B; Ethernet 14 B)."""
    return scale.payload_bytes(mtu) / (mtu + scale.ETHERNET_HEADER_BYTES)


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


def edge_links(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int], tables) -> list[str]:
    """The links a flow crosses that no routing can avoid: its NIC's transmit
    and the last switch port before the destination. With a perfect ECMP hash
    ROFT's core is non-blocking, so these give its collision-free ideal."""
    links = flow_links(fabric, src, dst, tables)
    return [links[0], links[-1]]


def ideal_rates(fabric: Fabric, flows: dict[str, tuple[tuple[int, int], tuple[int, int]]], rate_bps: float) -> dict:
    """Max-min fair share of every flow: exact for ZCube's unique paths,
    collision-free for ECMP fabrics (``ideal_known`` false)."""
    tables = forwarding_tables(fabric)
    links_of = flow_links if fabric.kind == "zcube" else edge_links
    return max_min({k: links_of(fabric, s, d, tables) for k, (s, d) in flows.items()},
                   all_link_capacities(fabric, rate_bps))


ECMP_MODES = ("spread", "hashed")


def ecmp_paths(fabric: Fabric, pairs: list[tuple[int, int]], rate: float, ecmp: str,
               log=print) -> tuple[dict, dict, bool]:
    """Client ports and ideal shares for a permutation on an ECMP fabric.

    ``spread``: client ports are chosen by probing so that no two flows share
    a switch port (every ideal is the link rate); flows the probing could not
    place in time keep a learnt, possibly shared path. ``hashed``: fixed
    client ports, paths learnt as OVS's hash gives them (ideal: max-min over
    the learnt paths). Returns ({(src, sp): cport}, {flow: ideal}, ideal_known)."""
    if ecmp not in ECMP_MODES:
        raise TestbedError(f"ecmp mode {ecmp!r} is unknown: expected {', '.join(ECMP_MODES)}")
    tables = forwarding_tables(fabric)
    flows = {f"{s}>{d}:p{sp}": ((s, sp), (d, 3 - sp), BASE_PORT + sp) for s, d in pairs for sp in (1, 2)}
    candidates = {k: walk(fabric, tables, src, dst) for k, (src, dst, _) in flows.items()}
    prober = ecmp_probe.Prober(flows, candidates)
    fresh = iter(range(CLIENT_PORT, 65000))
    try:
        placed = {}
        if ecmp == "spread":
            placed, rounds = ecmp_probe.spread(candidates, prober, fresh)
            log(f"ecmp spread: {len(placed)} of {len(flows)} flows on disjoint paths after {rounds} probe rounds")
        rest = {k: next(fresh) for k in flows if k not in placed}
        learnt = placed | ecmp_probe.learn({k: candidates[k] for k in rest}, prober, rest)
    finally:
        prober.close()
    cport = {flows[k][0]: port for k, (port, _) in learnt.items()} | {flows[k][0]: p for k, p in rest.items()
                                                                      if k not in learnt}
    if len(learnt) < len(flows):  # some probe never showed a single path: fall back to the collision-free bound
        return cport, permutation(fabric, rate)[1], False
    links = {k: ecmp_probe.path_links(flows[k][0], path) for k, (_, path) in learnt.items()}
    return cport, max_min(links, all_link_capacities(fabric, rate)), True


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


def _cpu_between(a: tuple, b: tuple) -> dict:
    ticks = os.sysconf("SC_CLK_TCK")
    span = b[0] - a[0]
    return {"ovs_vswitchd_cores": round((b[2] - a[2]) / span, 3),
            "machine_busy_fraction": round((b[1] - a[1]) / ticks / span / os.cpu_count(), 3)}


def _saturated(cpu: dict) -> bool:
    return cpu["ovs_vswitchd_cores"] >= OVS_SATURATED or cpu["machine_busy_fraction"] >= 1 - HOST_IDLE_MIN


def _flow_row(fabric: Fabric, pattern: str, src: int, sp: int, dst: int, goodput: float, ideal_bps: float,
              retrans, ideal_known: bool) -> dict:
    return {"src": f"gpu{src}", "dst": f"gpu{dst}", "src_port": sp, "dst_port": 3 - sp, "pattern": pattern,
            "goodput_bps": round(goodput), "ideal_bps": round(ideal_bps),
            "ratio": round(goodput / ideal_bps, 4) if ideal_bps else 0.0, "retransmits": retrans,
            "ideal_known": ideal_known}


def _pattern_summary(flows: list[dict], cpu: dict, retransmits: int | None) -> dict:
    """Per-pattern figures; ``retransmits`` None: the sum of the flows' own counts."""
    ratios = [f["ratio"] for f in flows]
    return {"median_ratio": round(median(ratios), 4), "min_ratio": round(min(ratios), 4),
            "aggregate_goodput_bps": round(sum(f["goodput_bps"] for f in flows)), "flows": len(flows),
            "retransmits": retransmits if retransmits is not None else sum(f["retransmits"] or 0 for f in flows),
            "ideal_known": all(f["ideal_known"] for f in flows),
            "cpu": cpu, "cpu_saturated": _saturated(cpu)}


def run_permutation(st: FabricState, duration: int, omit: int, ecmp: str = "spread",
                    log=print) -> tuple[list[dict], dict, None]:
    """iperf3, one client and server per flow; returns (flows, cpu, None: retransmits are per flow)."""
    fabric = st.model()
    rate = st.config["rate_bps"]
    pairs, ideal = permutation(fabric, rate)
    eff = payload_efficiency(st.config["mtu"])
    cport = {(src, sp): CLIENT_PORT + 2 * i + sp for i, (src, _) in enumerate(pairs) for sp in (1, 2)}
    known = fabric.kind == "zcube"
    if not known:  # ECMP: choose (spread) or learn (hashed) each flow's path from OVS before the flow exists
        cport, ideal, known = ecmp_paths(fabric, pairs, rate, ecmp, log)
    servers, clients = [], []
    try:
        for src, dst in pairs:
            for sp in (1, 2):
                servers.append(subprocess.Popen(
                    ["ip", "netns", "exec", netns_of(dst), "iperf3", "-s", "-1", "-p", str(BASE_PORT + sp)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)
        for src, dst in pairs:
            for sp in (1, 2):
                dst_ip = addressing.ip_of(dst, 3 - sp)
                clients.append(((src, dst, sp), subprocess.Popen(
                    ["ip", "netns", "exec", netns_of(src), "iperf3", "-c", dst_ip, "-p", str(BASE_PORT + sp),
                     "-B", addressing.ip_of(src, sp), "--cport", str(cport[(src, sp)]), "-t", str(duration),
                     "-O", str(omit), "-J"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)))
        time.sleep(omit + 1)
        c1 = _cpu_sample()
        outputs = [(key, proc.communicate(timeout=duration + 60)[0]) for key, proc in clients]
        c2 = _cpu_sample()
    finally:
        for proc in servers + [p for _, p in clients]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    flows = []
    for (src, dst, sp), out in outputs:
        goodput, retrans = iperf3_result(out)
        flows.append(_flow_row(fabric, "permutation", src, sp, dst, goodput, ideal[f"{src}>{dst}:p{sp}"] * eff,
                               retrans, known))
    return flows, _cpu_between(c1, c2), None


def run_all_to_all(st: FabricState, duration: int, omit: int) -> tuple[list[dict], dict, int]:
    """Every GPU to every other on both NIC ports (2n(n-1) TCP flows), one
    bulk.py process per GPU; returns (flows, cpu, retransmits of all GPUs)."""
    fabric = st.model()
    gpus = list(fabric.gpus())
    flows = {f"{s}>{d}:p{sp}": ((s, sp), (d, 3 - sp)) for s in gpus for d in gpus if s != d for sp in (1, 2)}
    ideal = ideal_rates(fabric, flows, st.config["rate_bps"])
    eff = payload_efficiency(st.config["mtu"])
    start = time.monotonic() + 2.0 + 0.05 * len(gpus)
    procs = {}
    try:
        for g in gpus:
            argv = ["ip", "netns", "exec", netns_of(g), "python3", str(BULK), "--start", f"{start:.3f}",
                    "--duration", str(duration), "--omit", str(omit)]
            argv += [a for p in (1, 2) for a in ("--listen", f"{addressing.ip_of(g, p)}:{BULK_PORT}")]
            argv += [a for d in gpus if d != g for sp in (1, 2)
                     for a in ("--connect", f"{addressing.ip_of(g, sp)}>{addressing.ip_of(d, 3 - sp)}:{BULK_PORT}")]
            procs[g] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(max(0.0, start + omit - time.monotonic()))
        c1 = _cpu_sample()
        time.sleep(max(0.0, start + duration - time.monotonic()))
        c2 = _cpu_sample()
        results, retransmits = {}, 0
        for g, proc in procs.items():
            out, err = proc.communicate(timeout=60)
            if proc.returncode:
                raise TestbedError(f"bulk traffic in gpu{g} failed: {err.strip().splitlines()[-1:]}")
            doc = json.loads(out)
            results.update(doc["received"])
            retransmits += doc["retransmits"]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    window = duration - omit
    rows = []
    for key, ((s, sp), (d, dp)) in flows.items():
        got = results.get(f"{addressing.ip_of(s, sp)}>{addressing.ip_of(d, dp)}", 0)
        rows.append(_flow_row(fabric, "all-to-all", s, sp, d, got * 8 / window, ideal[key] * eff, None,
                              fabric.kind == "zcube"))
    return rows, _cpu_between(c1, c2), retransmits


PATTERNS = {"permutation": run_permutation, "all-to-all": run_all_to_all}


def targets_met(result: dict) -> bool | None:
    """The issue's targets, on the permutation; None when its ideal is not known."""
    s = result["summary"]["permutation"]
    if not s["ideal_known"]:
        return None
    return (not s["cpu_saturated"]) and s["median_ratio"] >= 0.95 and s["min_ratio"] >= 0.85


def bench(fabric_args: dict, config: DatapathConfig, duration: int = 16, omit: int = 3, log=print,
          patterns: tuple[str, ...] = ("permutation", "all-to-all"), ecmp: str = "spread") -> dict:
    """Bring a fabric up (or use the one that is up, if it matches), run each
    pattern in turn on it, bring it down if we brought it up."""
    unknown = [p for p in patterns if p not in PATTERNS]
    if unknown or not patterns:
        raise TestbedError(f"pattern {unknown[0] if unknown else ''!r} is unknown: expected {', '.join(PATTERNS)}")
    st = fabricctl.load_state()
    own = st is None
    if not own and (st.fabric["kind"] != fabric_args["kind"] or st.fabric["gpus"] != fabric_args["gpus"]):
        raise TestbedError(f"a different fabric is up ({st.fabric['kind']}, {st.fabric['gpus']} GPUs): "
                           "run 'testbed down' first")
    result: dict = {"flows": [], "summary": {}}
    summary = result["summary"]
    try:
        if own:
            st = fabricctl.up(fabric_args, config, log=log)
        summary.update(rate_bps=st.config["rate_bps"], mtu=st.config["mtu"], duration_s=duration,
                       fabric=st.fabric, bringup_s=st.timings.get("up_s"),
                       ecmp=ecmp if st.fabric["kind"] != "zcube" else None)
        for pattern in patterns:
            log(f"{pattern}: {duration} s of TCP traffic")
            before = fabricctl.total_drops(st)
            extra = {"ecmp": ecmp, "log": log} if pattern == "permutation" else {}
            flows, cpu, retransmits = PATTERNS[pattern](st, duration, omit, **extra)
            result["flows"] += flows
            summary[pattern] = _pattern_summary(flows, cpu, retransmits) | {"drops": fabricctl.total_drops(st) - before}
        summary["cpu_saturated"] = any(summary[p]["cpu_saturated"] for p in patterns)
        summary["cpu"] = summary[patterns[0]]["cpu"]
        summary["drops"] = sum(summary[p]["drops"] for p in patterns)
        summary["targets_met"] = targets_met(result) if "permutation" in patterns else None
    finally:
        if own:
            summary["teardown_s"] = fabricctl.down()["down_s"]
    return result


def sweep(fabric_args: dict, base: DatapathConfig, rates_bps: list[float], duration: int, omit: int, log=print,
          ecmp: str = "spread") -> dict:
    from dataclasses import replace

    rows = []
    for rate in rates_bps:
        res = bench(fabric_args, replace(base, rate_bps=rate, tcp_limit_output_bytes=0), duration, omit, log,
                    patterns=("permutation",), ecmp=ecmp)
        s = res["summary"]
        rows.append({"rate_bps": rate, **s["permutation"], "targets_met": s["targets_met"]})
        log(f"  {rate / 1e6:g} Mbit/s: median {s['permutation']['median_ratio']:.3f} "
            f"min {s['permutation']['min_ratio']:.3f} "
            f"aggregate {s['permutation']['aggregate_goodput_bps'] / 1e6:.1f} Mbit/s "
            f"{'OK' if s['targets_met'] else 'MISSED'}{' (CPU saturated)' if s['cpu_saturated'] else ''}")
    passing = [r for r in rows if r["targets_met"]]
    best = max(passing, key=lambda r: r["rate_bps"]) if passing else None
    return {"sweep": rows, "capacity_at_fidelity_bps": best["aggregate_goodput_bps"] if best else 0,
            "highest_rate_at_fidelity_bps": best["rate_bps"] if best else None}
