"""Where the congestion is: every queue by its port class, and the KV each server sent out of each NIC port.

The seed's production report separates congestion no topology can avoid (several senders into one GPU's
port: the last hop, switch -> GPU) from congestion the topology and its mapping make (switch -> switch
cables under an ECMP hash or a rail mapping, and a server's KV piled on one of its NICs: GPU -> switch).
Per class a repetition records the queues' backlog (the sampler's snapshots: mean of each sample's
average queue, and the largest queue seen) and the paused time of its transmitters (pfc.txt, in cluster
seconds), and per server the KV bytes each NIC port sent (the production report's Figure 4).
"""

from __future__ import annotations

from fabrics import addressing
from testbed.backends.base import QueueCounters, QueueInfo
from testbed.report.port_classes import CLASSES  # the classes the report reads back
from traffic.runtime.records import sent_pair

LABELS = {"switch_to_gpu": "switch -> GPU (the last hop: unavoidable)",
          "gpu_to_switch": "GPU -> switch (NIC ports: a server's KV on one NIC)",
          "switch_to_switch": "switch -> switch (cables between switches: topology and multipath)"}


def port_class(q: QueueInfo) -> str:
    """The port class of a queue: a NIC port feeds a switch; a switch port feeds a GPU or a switch."""
    if q.kind == "nic":
        return "gpu_to_switch"
    return "switch_to_gpu" if q.towards.startswith("gpu") else "switch_to_switch"


def congested_spans(events, t_end_ns: int) -> dict[str, float]:
    """Per queue that caused pauses (pfc.txt's cause on a pause: the queue over XOFF), the seconds (backend
    clock) during which a transmitter it paused stayed paused: the union of those pause-to-resume spans, a
    transmitter's span going to the queue that paused it whatever released it last (a span still open at the
    end counts until ``t_end_ns``)."""
    open_at: dict[str, tuple[int, str]] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for e in sorted(events, key=lambda e: e.time_ns):
        if e.event == 1 and e.queue not in open_at:
            open_at[e.queue] = (e.time_ns, e.cause)
        elif e.event == 0 and e.queue in open_at:
            start, cause = open_at.pop(e.queue)
            spans.setdefault(cause, []).append((start, e.time_ns))
    for start, cause in open_at.values():
        spans.setdefault(cause, []).append((start, t_end_ns))
    out = {}
    for cause, ss in spans.items():
        total, end = 0, None
        for a, b in sorted(ss):
            if end is None or a > end:
                total += b - a
                end = b
            elif b > end:
                total += b - end
                end = b
        out[cause] = total / 1e9
    return out


def by_class(counters: QueueCounters | None, ports: list[dict] | None, wall_per_run_s: float,
             congested: dict[str, float] | None = None) -> dict:
    """Per class: queues, bytes they sent, backlog (bytes: mean over samples of the class's average queue,
    and the largest queue in any sample), the time its queues were congested (over XOFF, holding pauses:
    ``congested``, from ``congested_spans``; cluster seconds, summed over the class's queues: where the
    congestion is), and the paused time of its transmitters (the pauses' victims, cluster seconds, summed)
    with the most paused one's share of the window. ``ports``: pfc.analysis.port_stats rows (None: PFC off)."""
    if counters is None:
        return {}
    classes = {q.qid: port_class(q) for q in counters.queues}
    out = {c: {"queues": 0, "bytes": 0, "backlog_mean_bytes": 0.0, "backlog_max_bytes": 0, "congested_s": 0.0,
               "congested_queues": 0, "paused_s": 0.0, "paused_fraction_max": 0.0} for c in CLASSES}
    for qid, seconds in (congested or {}).items():
        c = classes.get(qid)
        if c is not None:
            out[c]["congested_s"] += seconds / wall_per_run_s
            out[c]["congested_queues"] += 1
    for q in counters.queues:
        out[classes[q.qid]]["queues"] += 1
    for qid, (_, nbytes) in counters.link_bytes().items():
        if qid in classes:
            out[classes[qid]]["bytes"] += nbytes
    samples = [snap for _, snap in counters.samples]
    for c in CLASSES:
        means, peak = [], 0
        for snap in samples:
            backlogs = [v["backlog"] for qid, v in snap.items() if classes.get(qid) == c and "backlog" in v]
            if backlogs:
                means.append(sum(backlogs) / len(backlogs))
                peak = max(peak, max(backlogs))
        out[c]["backlog_mean_bytes"] = round(sum(means) / len(means), 1) if means else 0.0
        out[c]["backlog_max_bytes"] = peak
    for p in ports or []:
        c = classes.get(p["queue"])
        if c is not None:
            out[c]["paused_s"] += p["paused_s"] / wall_per_run_s
            out[c]["paused_fraction_max"] = max(out[c]["paused_fraction_max"], p["paused_fraction"])
    for c in CLASSES:
        out[c]["congested_s"] = round(out[c]["congested_s"], 4)
        out[c]["paused_s"] = round(out[c]["paused_s"], 4)
        out[c]["paused_fraction_max"] = round(out[c]["paused_fraction_max"], 4)
    return out


def kv_by_nic(rows: list[dict], gpus_per_server: int, bytes_scale: float) -> dict:
    """Per server that sent KV: each NIC port's KV bytes (real bytes: the emulated ones x the scale), every
    port of the server listed (a port that sent nothing is 0), and max / mean over its ports."""
    sent: dict[int, dict[str, float]] = {}
    for r in rows:
        if r.get("kind") not in (None, "kv") or not r.get("verified"):
            continue
        gpu, port = addressing.parse_ip(sent_pair(r)[0])
        server = (gpu - 1) // gpus_per_server + 1
        ports = sent.setdefault(server, {f"gpu{g}:p{p}": 0.0 for g in range((server - 1) * gpus_per_server + 1,
                                                                          server * gpus_per_server + 1)
                                         for p in (1, 2)})
        ports[f"gpu{gpu}:p{port}"] += r["bytes"] * bytes_scale
    out = {}
    for server, ports in sorted(sent.items()):
        total = sum(ports.values())
        mean = total / len(ports)
        out[f"server{server}"] = {"ports": {k: round(v) for k, v in ports.items()}, "bytes": round(total),
                                  "max_over_mean": round(max(ports.values()) / mean, 3) if mean else None}
    return out


__all__ = ["CLASSES", "LABELS", "port_class", "congested_spans", "by_class", "kv_by_nic"]
