"""Pause and resume latencies of a fabric spread over hosts, split into local and cross-host pauses.

Every host's pause daemon writes ``pfc_latency.txt`` (``kind transmitter cause crossed noticed seen
latency_ms later``; a pause from another host is logged on the transmitter's host with the congested
queue of the other host as its cause). A pause *crosses hosts* when its transmitter and its cause sit
on different hosts of the placement. ``bench pfc --hosts`` reports the two groups apart.
"""

from __future__ import annotations

from testbed.emulation.hosts.assign import HostAssignment
from traffic.model.metrics import percentile


def _node(qid: str) -> str:
    return qid.split(":")[0]


def split_latencies(lines: list[str], placement: HostAssignment) -> dict:
    """{"local"|"cross": {"pause"|"resume"|"reaction": {"n", "p50", "p99", "max"}}} (ms)."""
    groups: dict[str, dict[str, list[float]]] = {g: {"pause": [], "resume": [], "reaction": []}
                                                 for g in ("local", "cross")}
    for line in lines:
        parts = line.split()
        if len(parts) < 7 or parts[0] not in ("pause", "resume"):
            continue
        kind, tx, cause, crossed, noticed = parts[:5]
        try:
            where = "local" if placement.host_of(_node(tx)) == placement.host_of(_node(cause)) else "cross"
        except KeyError:
            continue  # a cause of no queue (an expired remote pause): not a crossing to measure from
        groups[where][kind].append(float(parts[6]))
        if kind == "pause":
            groups[where]["reaction"].append((int(noticed) - int(crossed)) / 1e6)
    return {g: {k: _summary(v) for k, v in kinds.items()} for g, kinds in groups.items()}


def _summary(vals: list[float]) -> dict:
    if not vals:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(vals), "p50": round(percentile(vals, 50), 3), "p99": round(percentile(vals, 99), 3),
            "max": round(max(vals), 3)}
