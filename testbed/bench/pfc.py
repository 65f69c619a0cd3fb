"""PFC benchmark: how fast pause and resume act, and what PFC buys under incast.

One incast, run twice on the same fabric settings: with PFC on, then off.
N GPUs (spread over the odd switches) send TCP (iperf3) into one GPU's port
for a fixed time, so the last-hop queue towards it is the congestion point.

With PFC on, every pause and resume the helper makes is measured from kernel
timestamps (``controller/pfc/pfcd.py``, one line each in pfc_latency.txt):

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

from testbed.emulation import fabricctl
from testbed.emulation.plan import DatapathConfig, netns_of
from testbed.errors import TestbedError
from testbed.fabric import addressing

IPERF_PORT = 5400
TARGET_CAP_MS = 5.0


def incast_senders(fabric, victim: tuple[int, int], count: int) -> list[int]:
    """``count`` GPUs other than the victim, taken round robin over the switches
    their sending port (the victim's other port number) sits on, so the
    incast arrives over as many different cables as it can."""
    port = 3 - victim[1]
    others = [g for g in fabric.gpus() if g != victim[0]]
    if not 1 <= count <= len(others):
        raise TestbedError(f"incast senders {count} is out of range: expected 1 .. {len(others)}")
    groups: dict[str, list[int]] = {}
    for g in others:
        groups.setdefault(fabric.switch_of(g, port), []).append(g)
    order = [grp[i] for i in range(max(map(len, groups.values()))) for grp in groups.values() if i < len(grp)]
    return sorted(order[:count])


def target_ms(rate_bps: float, mtu: int) -> float:
    """Two full-size frames at the link rate, capped at 5 ms."""
    return min(2 * (mtu + 14) * 8 / rate_bps * 1e3, TARGET_CAP_MS)


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {"n": len(values), "p50": round(float(np.percentile(a, 50)), 3),
            "p99": round(float(np.percentile(a, 99)), 3), "max": round(float(a.max()), 3)}


def read_latencies(path: Path) -> dict:
    """pfc_latency.txt -> pause / resume latencies and the helper's reaction, in ms."""
    pause, resume, reaction = [], [], []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 7:
                continue
            kind, crossed, noticed, lat = parts[0], int(parts[3]), int(parts[4]), float(parts[6])
            (pause if kind == "pause" else resume).append(lat)
            if kind == "pause" and crossed:
                reaction.append(max(0, noticed - crossed) / 1e6)
    return {"pause_latency_ms": percentiles(pause), "resume_latency_ms": percentiles(resume),
            "reaction_ms": percentiles(reaction)}


def paused_nodes(pfc_txt: Path) -> list[str]:
    nodes = set()
    if pfc_txt.exists():
        for line in pfc_txt.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[4] == "1":
                nodes.add(parts[1])
    return sorted(nodes)


def run_incast(victim: tuple[int, int], senders: list[int], seconds: int) -> dict:
    """iperf3 from every sender's port 1 (the other port when the victim is
    port 1) into the victim's port; goodput and retransmissions of each."""
    dst_ip = addressing.ip_of(*victim)
    for i, _ in enumerate(senders):
        subprocess.run(["ip", "netns", "exec", netns_of(victim[0]), "iperf3", "-s", "-1", "-D", "-p",
                        str(IPERF_PORT + i)], check=True)
    time.sleep(0.5)
    src_port = 3 - victim[1]
    clients = [subprocess.Popen(["ip", "netns", "exec", netns_of(g), "iperf3", "-c", dst_ip, "-p",
                                 str(IPERF_PORT + i), "-B", addressing.ip_of(g, src_port), "-t", str(seconds), "-J"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
               for i, g in enumerate(senders)]
    goodput, retrans = [], 0
    for c in clients:
        out, _ = c.communicate(timeout=seconds + 30)
        try:
            end = json.loads(out)["end"]
            goodput.append(end["sum_received"]["bits_per_second"])
            retrans += end["sum_sent"].get("retransmits", 0)
        except (json.JSONDecodeError, KeyError):
            goodput.append(0.0)
    return {"goodput_bps": round(sum(goodput)), "per_sender_bps": [round(g) for g in goodput],
            "retransmits": retrans}


def _drops(st: dict) -> int:
    return sum(q.get("drops", 0) for q in fabricctl.read_queues(st))


def phase(fabric_args: dict, config: DatapathConfig, pfc, victim: tuple[int, int], senders: list[int],
          seconds: int, log=print) -> dict:
    """Bring the fabric up with ``pfc``, run the incast, read counters and logs, bring it down."""
    st = fabricctl.up(fabric_args, config, log=log, pfc=pfc)
    try:
        sdir = Path(st["state_dir"])
        before = _drops(st)
        result = run_incast(victim, senders, seconds)
        time.sleep(1.5)  # the helper writes its status and logs once a second
        result["drops"] = _drops(st) - before
        status = json.loads((sdir / "pfc_status.json").read_text()) if pfc.enabled else {}
        result.update(pauses=status.get("pauses", 0), resumes=status.get("resumes", 0),
                      resume_stalls=status.get("resume_stalls", 0), netlink_errors=status.get("netlink_errors", 0),
                      paused_nodes=paused_nodes(sdir / "pfc.txt") if pfc.enabled else [])
        if pfc.enabled:
            result["latency"] = read_latencies(sdir / "pfc_latency.txt")
        result["bringup_s"] = st["timings"].get("up_s")
    finally:
        fabricctl.down()
    return result


def bench(fabric_args: dict, config: DatapathConfig, pfc, senders: int = 8, seconds: int = 15,
          victim: tuple[int, int] = (1, 2), log=print) -> dict:
    """The incast with PFC on (the given settings), then off; the figures the issue asks for."""
    from dataclasses import replace

    if fabricctl.load_state() is not None:
        raise TestbedError("a fabric is up: bench pfc brings its own up twice; run 'testbed down' first")
    config = config.validate()
    from testbed.fabric import build_fabric

    who = incast_senders(build_fabric(**fabric_args), victim, senders)
    log(f"incast: gpu{', gpu'.join(map(str, who))} -> gpu{victim[0]}:p{victim[1]}, {seconds} s, PFC on")
    on = phase(fabric_args, config, replace(pfc, enabled=True), victim, who, seconds, log)
    log(f"incast: the same with PFC off")
    off = phase(fabric_args, config, replace(pfc, enabled=False), victim, who, seconds, log)
    lat = on.pop("latency")
    target = target_ms(config.rate_bps, config.mtu)
    p99 = max((lat[k]["p99"] or 0.0) for k in ("pause_latency_ms", "resume_latency_ms"))
    worst = max((lat[k]["max"] or 0.0) for k in ("pause_latency_ms", "resume_latency_ms"))
    return {**lat, "target_ms": round(target, 3),
            "within_target": bool(on["pauses"]) and p99 <= target and worst <= TARGET_CAP_MS,
            "lossless": on["drops"] == 0,
            "incast": {"victim": f"gpu{victim[0]}:p{victim[1]}", "senders": [f"gpu{g}" for g in who],
                       "seconds": seconds, "pfc_on": on, "pfc_off": off},
            "fabric": {"kind": fabric_args["kind"], "gpus": fabric_args["gpus"]},
            "rate_bps": config.rate_bps, "mtu": config.mtu}
