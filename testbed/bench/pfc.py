"""PFC benchmark: how fast pause and resume act, and what PFC buys under incast.

One incast, run twice on the same fabric settings: with PFC on, then off.
N GPUs (spread over the odd switches) send TCP (iperf3) into one GPU's port
for a fixed time, so the last-hop queue towards it is the congestion point.

With PFC on, every pause and resume the helper makes is measured from kernel
timestamps (``pfc/pfcd.py``, one line each in pfc_latency.txt):

* pause latency: XOFF crossing of the congested queue -> last frame that
  left the paused upstream transmitter (0 if it sent nothing after it);
* resume latency: XON crossing -> first frame the resumed transmitter sent
  (only transmitters that still had a backlog; one that sent nothing for
  30 ms counts 30 ms);
* reaction: XOFF crossing -> the helper saw it (its poll loop), the part of
  the pause latency that is not the datapath's.

Target (the issue's): each within the time of two full-size frames at the
link rate, and never above 5 ms.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np

from common.errors import TestbedError
from fabrics import addressing
from fabrics.datapath import DatapathConfig, netns_of
from pfc import analysis
from pfc.analysis import percentiles
from pfc.files import GAPS_FILE, LATENCY_FILE, LOG_FILE, POLICY_FILE, STATUS_FILE
from testbed.bench import iperf3_result
from testbed.emulation import fabricctl

IPERF_PORT = 5400
TARGET_CAP_MS = 5.0
STEAL_WARN_PCT = 1.0  # vCPU steal above this during the incast makes the latencies the host's


def incast_senders(fabric, victim: tuple[int, int], count: int) -> list[int]:
    """``count`` GPUs other than the victim, taken round robin over the switches
    their sending port (the victim's other port number) sits on, so the
    incast arrives over as many different cables as it can. GPUs whose
    victim-side port shares the victim's switch come last: they are left for
    the bystanders that share the hot switch (see ``bystander_flows``)."""
    port = 3 - victim[1]
    hot = fabric.switch_of(*victim)
    others = [g for g in fabric.gpus() if g != victim[0]]
    if not 1 <= count <= len(others):
        raise TestbedError(f"incast senders {count} is out of range: expected 1 .. {len(others)}")
    order = []
    for pool in ([g for g in others if fabric.switch_of(g, victim[1]) != hot],
                 [g for g in others if fabric.switch_of(g, victim[1]) == hot]):
        groups: dict[str, list[int]] = {}
        for g in pool:
            groups.setdefault(fabric.switch_of(g, port), []).append(g)
        order += [grp[i] for i in range(max(map(len, groups.values()), default=0))
                  for grp in groups.values() if i < len(grp)]
    return sorted(order[:count])


def one_switch_senders(fabric, victim: tuple[int, int], count: int) -> list[int]:
    """``count`` GPUs whose sending port (the victim's other port number) sits on one switch, the first that
    has that many (not the victim's): the whole incast crosses one cable into the hot switch, and that
    switch's queue towards it is fed by ``count`` NICs at once, as layersplit's eight ranks of a prefill
    server sending into one decode port (``--one-switch``)."""
    port, hot = 3 - victim[1], fabric.switch_of(*victim)
    groups: dict[str, list[int]] = {}
    for g in fabric.gpus():
        if g != victim[0] and fabric.switch_of(g, port) != hot:
            groups.setdefault(fabric.switch_of(g, port), []).append(g)
    for switch in sorted(groups, key=lambda s: min(groups[s])):
        if len(groups[switch]) >= count >= 1:
            return sorted(groups[switch][:count])
    most = max((len(v) for v in groups.values()), default=0)
    raise TestbedError(f"incast senders {count} is out of range for --one-switch on this fabric: expected 1 .. "
                       f"{most} (the most sending ports one switch has)")


def target_ms(rate_bps: float, mtu: int) -> float:
    """Two full-size frames at the link rate, capped at 5 ms."""
    return min(2 * (mtu + 14) * 8 / rate_bps * 1e3, TARGET_CAP_MS)


def read_latencies(path: Path) -> dict:
    """pfc_latency.txt -> pause / resume latencies and the helper's reaction, in ms."""
    pause, resume, reaction = [], [], []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) < 7:
                continue
            kind, crossed, noticed, lat = parts[0], int(parts[3]), int(parts[4]), float(parts[6])
            (pause if kind == "pause" else resume).append(lat)
            if kind == "pause" and crossed:
                reaction.append(max(0, noticed - crossed) / 1e6)
    return {"pause_latency_ms": percentiles(pause), "resume_latency_ms": percentiles(resume),
            "reaction_ms": percentiles(reaction)}


def cpu_times() -> dict[str, list[int]]:
    """Per CPU, the /proc/stat counters (user .. steal, in clock ticks)."""
    out = {}
    with open("/proc/stat") as fh:
        for line in fh:
            f = line.split()
            if f[0].startswith("cpu") and f[0] != "cpu":
                out[f[0]] = [int(x) for x in f[1:9]]
    return out


def steal_pct(before: dict[str, list[int]], after: dict[str, list[int]]) -> float | None:
    """The highest share of time, over the CPUs, that the hypervisor ran
    something else while this VM's CPU wanted to run (field 8, steal): a
    stolen CPU stalls the helper and the datapath alike."""
    worst = None
    for cpu, a in after.items():
        d = [x - y for x, y in zip(a, before.get(cpu, a))]
        if sum(d) > 0:
            worst = max(worst or 0.0, 100.0 * d[7] / sum(d))
    return None if worst is None else round(worst, 2)


def host_warnings(steal: float | None) -> list[str]:
    """A loud line when the hypervisor took the VM's CPUs during the incast:
    the helper's core stood still then, whatever the testbed did."""
    if steal is None or steal <= STEAL_WARN_PCT:
        return []
    return [f"the host took {steal:g} % of a vCPU during the incast (steal; quiet runs here: ~0.2 %): the helper's "
            "core was stopped, so latency tails measure the host, not the testbed"]


def helper_health(status: dict) -> dict:
    """What pfcd says of its own loop: how it is scheduled, how often the
    kernel's doorbell woke it, how often it was held up over 2 ms (and the
    longest)."""
    gaps = status.get("loop_gaps", {})
    return {"scheduling": status.get("scheduling"), "doorbell_rings": status.get("doorbell_rings", 0),
            "loop_gaps": sum(gaps.values()), "loop_gap_max_ms": max(status.get("loop_gap_max_ms", {}).values(),
                                                                    default=0.0)}


def paused_nodes(events) -> list[str]:
    """Nodes (switches, GPUs) with a transmitter paused in these pfc.txt events."""
    return sorted({e.node for e in events if e.event == 1})


def paused_queues(events) -> set[str]:
    """Queue ids ("sw1:9", "gpu3:p1") paused in these pfc.txt events."""
    return {e.queue for e in events if e.event == 1}


def start_flows(flows: list[tuple[tuple[int, int], tuple[int, int]]], seconds: int, base_port: int) -> list:
    """One iperf3 TCP flow per ((src, port), (dst, port)); returns the client processes."""
    for i, (_, dst) in enumerate(flows):
        subprocess.run(["ip", "netns", "exec", netns_of(dst[0]), "iperf3", "-s", "-1", "-D", "-p",
                        str(base_port + i)], check=True)
    time.sleep(0.5)
    return [subprocess.Popen(["ip", "netns", "exec", netns_of(src[0]), "iperf3", "-c", addressing.ip_of(*dst), "-p",
                              str(base_port + i), "-B", addressing.ip_of(*src), "-t", str(seconds), "-J"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for i, (src, dst) in enumerate(flows)]


def collect(clients: list, seconds: int) -> dict:
    goodput, retrans = [], 0
    for c in clients:
        bps, r = iperf3_result(c.communicate(timeout=seconds + 30)[0])
        goodput.append(bps)
        retrans += r or 0
    return {"goodput_bps": round(sum(goodput)), "per_flow_bps": [round(g) for g in goodput],
            "retransmits": retrans}


def incast_flows(victim: tuple[int, int], senders: list[int]) -> list:
    """Every sender's port with the victim's other port number -> the victim's port."""
    return [((g, 3 - victim[1]), victim) for g in senders]


def run_incast(victim: tuple[int, int], senders: list[int], seconds: int) -> dict:
    """iperf3 from every sender into the victim's port; goodput and retransmissions."""
    return collect(start_flows(incast_flows(victim, senders), seconds, IPERF_PORT), seconds)


def bystander_flows(fabric, victim: tuple[int, int], senders: list[int], count: int = 8) -> list:
    """Flows that neither send to nor come from the incast: pairs of GPUs that
    take no part in it, with the incast's port numbers. First those whose
    destination sits on the victim's (hot) switch, so they cross the links the
    incast congests towards it (the classic PFC victims: another destination,
    the same paused queues), then pairs elsewhere in the fabric."""
    hot = fabric.switch_of(*victim)
    free = [g for g in fabric.gpus() if g != victim[0] and g not in senders]
    near = [g for g in free if fabric.switch_of(g, victim[1]) == hot][:count // 2]
    rest = [g for g in free if g not in near]
    flows = [((rest.pop(0), 3 - victim[1]), (d, victim[1])) for d in near if rest]
    half = min(count - len(flows), len(rest) // 2)
    flows += [((rest[i], 3 - victim[1]), (rest[half + i], victim[1])) for i in range(half)]
    return flows


def spreading(victim: tuple[int, int], senders: list[int], bystanders: list, seconds: int,
              hot_switch_dsts: set[int] = frozenset()) -> dict:
    """Bystander goodput alone, then next to the incast (PFC on): how much the
    incast's pauses take from flows to other destinations."""
    alone = collect(start_flows(bystanders, seconds, IPERF_PORT + 100), seconds)
    clients = start_flows(bystanders, seconds, IPERF_PORT + 100)
    incast = start_flows(incast_flows(victim, senders), seconds, IPERF_PORT)
    beside = collect(clients, seconds)
    collect(incast, seconds)
    ratios = [b / a if a else 0.0 for a, b in zip(alone["per_flow_bps"], beside["per_flow_bps"])]
    return {"flows": [f"gpu{s[0]}:p{s[1]}>gpu{d[0]}:p{d[1]}" for s, d in bystanders],
            "alone_bps": alone["per_flow_bps"], "beside_incast_bps": beside["per_flow_bps"],
            "ratio": [round(r, 3) for r in ratios],
            "ratio_median": round(float(np.median(ratios)), 3) if ratios else None,
            "ratio_min": round(min(ratios), 3) if ratios else None,
            "slowed": sum(1 for r in ratios if r < 0.8),
            "to_hot_switch": [d[0] in hot_switch_dsts for _, d in bystanders]}


def save_logs(sdir: Path, out: Path, t0_ns: int, t1_ns: int) -> dict:
    """The helper's logs of the incast into ``out`` (pfc.txt, pfc_latency.txt,
    pfc_status.json, pfc_policy.json) plus pfc_ports.csv over [t0, t1]; returns
    how far the pauses spread."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    for name in (LOG_FILE, LATENCY_FILE, GAPS_FILE, STATUS_FILE, POLICY_FILE):
        if (sdir / name).exists():
            shutil.copy(sdir / name, out / name)
    events = analysis.read_events(out / LOG_FILE)
    analysis.write_port_stats_csv(out / "pfc_ports.csv", analysis.port_stats(events, t0_ns, t1_ns))
    sp = analysis.spread(events)
    return {"max_hops": sp["max_hops"], "roots": sp["roots"]}


def phase(fabric_args: dict, config: DatapathConfig, pfc, victim: tuple[int, int], senders: list[int],
          seconds: int, log=print, bystanders: list | None = None, hot_dsts: frozenset = frozenset(),
          out: Path | None = None) -> dict:
    """Bring the fabric up with ``pfc``, run the incast, read counters and logs, bring it down."""
    st = fabricctl.up(fabric_args, config, log=log, pfc=pfc)
    try:
        sdir = st.directory
        before = fabricctl.total_drops(st)
        t0, cpu0 = time.monotonic_ns(), cpu_times()
        result = run_incast(victim, senders, seconds)
        t1 = time.monotonic_ns()
        result["vcpu_steal_pct"] = steal_pct(cpu0, cpu_times())
        time.sleep(1.5)  # the helper writes its status and logs once a second
        result["drops"] = fabricctl.total_drops(st) - before
        status = json.loads((sdir / STATUS_FILE).read_text()) if pfc.enabled else {}
        events = analysis.read_events(sdir / LOG_FILE) if pfc.enabled else []
        result.update(pauses=status.get("pauses", 0), resumes=status.get("resumes", 0),
                      resume_stalls=status.get("resume_stalls", 0), netlink_errors=status.get("netlink_errors", 0),
                      paused_nodes=paused_nodes(events))
        if pfc.enabled:  # the microbenchmark is the incast alone: latencies before the spreading demo
            result["latency"] = read_latencies(sdir / LATENCY_FILE)
            result["helper"] = helper_health(status)
            result["xoff_threshold_bytes"] = status.get("xoff_threshold_bytes")
            if out is not None:
                result["spread"] = save_logs(sdir, out / "incast", t0, t1)
        result["bringup_s"] = st.timings.get("up_s")
        if bystanders:
            log(f"congestion spreading: {len(bystanders)} bystander flows alone, then beside the incast")
            skip = len(events)
            result["spreading"] = spreading(victim, senders, bystanders, seconds, hot_dsts)
            time.sleep(1.5)
            paused = paused_queues(analysis.read_events(sdir / LOG_FILE)[skip:])
            if out is not None:
                save_logs(sdir, out / "spreading", t1, time.monotonic_ns())
            nics = {f"gpu{s[0]}:p{s[1]}" for s, _ in bystanders}
            result["spreading"]["bystander_nics_paused"] = sorted(nics & paused)
            result["spreading"]["queues_paused"] = len(paused)
    finally:
        fabricctl.down()
    return result


def bench(fabric_args: dict, config: DatapathConfig, pfc, senders: int = 8, seconds: int = 15,
          victim: tuple[int, int] = (1, 2), log=print, out: Path | None = None, one_switch: bool = False) -> dict:
    """The incast with PFC on (the given settings), then off; the figures the issue asks for. ``one_switch``:
    the senders share one switch (``one_switch_senders``) instead of spreading over them."""
    from dataclasses import replace

    if fabricctl.load_state() is not None:
        raise TestbedError("a fabric is up: bench pfc brings its own up twice; run 'testbed down' first")
    config = config.validate()
    from fabrics import build_fabric

    fabric = build_fabric(**fabric_args)
    who = (one_switch_senders if one_switch else incast_senders)(fabric, victim, senders)
    log(f"incast: gpu{', gpu'.join(map(str, who))} -> gpu{victim[0]}:p{victim[1]}, {seconds} s, PFC on")
    by = bystander_flows(fabric, victim, who)
    hot = frozenset(g for g in fabric.gpus() if fabric.switch_of(g, victim[1]) == fabric.switch_of(*victim))
    on = phase(fabric_args, config, replace(pfc, enabled=True), victim, who, seconds, log, bystanders=by,
               hot_dsts=hot, out=out)
    log("incast: the same with PFC off")
    off = phase(fabric_args, config, replace(pfc, enabled=False), victim, who, seconds, log)
    lat = on.pop("latency")
    spread_doc = on.pop("spreading", None)
    target = target_ms(config.rate_bps, config.mtu)
    p99 = max((lat[k]["p99"] or 0.0) for k in ("pause_latency_ms", "resume_latency_ms"))
    worst = max((lat[k]["max"] or 0.0) for k in ("pause_latency_ms", "resume_latency_ms"))
    warnings = host_warnings(on.get("vcpu_steal_pct"))
    return {**lat, "target_ms": round(target, 3),
            "within_target": bool(on["pauses"]) and p99 <= target and worst <= TARGET_CAP_MS,
            "lossless": on["drops"] == 0,
            "thresholds": "static" if pfc.dynamic_alpha is None else f"dynamic, alpha {pfc.dynamic_alpha:g}",
            "incast": {"victim": f"gpu{victim[0]}:p{victim[1]}", "senders": [f"gpu{g}" for g in who],
                       "one_switch": one_switch,
                       "seconds": seconds, "pfc_on": on, "pfc_off": off},
            "spreading": spread_doc,
            "fabric": {"kind": fabric_args["kind"], "gpus": fabric_args["gpus"]},
            "rate_bps": config.rate_bps, "mtu": config.mtu, "logs": str(out) if out else None,
            "warnings": warnings}
