"""What the twin hands the write-up: merged rows, queue counters, and its own speed (twin.json)."""

from __future__ import annotations

import json
import resource
from pathlib import Path

from testbed.backends.base import QueueCounters
from testbed.backends.ns3.apps import Sampler, plan_row
from traffic.runtime.records import NEVER_COMPLETED


def _time(value: float) -> float | None:
    return None if value < 0 else round(float(value), 6)


def merged_rows(plan_rows: list[dict], twin, key=lambda i, r: r["id"]) -> list[dict]:
    """The rows (``traffic.runtime.records.COLUMNS`` + kind, engine, step) of the messages in ``plan_rows``
    (plan rows, or ``apps.serve``'s ``Sent`` tuples), with their arrivals as the twin recorded them;
    ``key(i, row)``: the id the twin knew the message by."""
    out = []
    for i, p in enumerate(plan_rows):
        if isinstance(p, tuple):
            p = plan_row(p)
        k = int(key(i, p))
        first, end, sent = _time(twin.FirstByte(k)), _time(twin.End(k)), _time(twin.SenderEnd(k))
        done = end is not None
        row = {"id": p["id"], "request_id": p.get("request_id"), "src": p["src"], "dst": p["dst"],
               "src_ip": p["src_ip"], "dst_ip": p["dst_ip"], "bytes": p["bytes"],
               "received_bytes": p["bytes"] if done else None, "scheduled_start": p["start"], "start": p["start"],
               "first_byte": first, "end": end, "sender_end": sent, "verified": done,
               "error": None if done else NEVER_COMPLETED}
        row.update((c, p[c]) for c in ("kind", "engine", "step") if c in p)
        out.append(row)
    out.sort(key=lambda r: (r["scheduled_start"], str(r["id"])))
    return out


def counters(built, sampler: Sampler) -> QueueCounters:
    """Every queue's counters over the run (first and last sample, and those between)."""
    samples = sampler.samples
    (t_first, first), (t_last, last) = samples[0], samples[-1]
    return QueueCounters(list(built.queues), first, last, t_first, t_last, list(samples))


def speed(*, wall_s: float, build_s: float, load_s: float, sim_s: float, cluster_s: float, events: int,
          packets: int, gpus: int, kind: str) -> dict:
    """twin.json: how fast the twin ran (wall seconds of the simulation loop per cluster second, events and
    packets per wall second, peak resident memory)."""
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"fabric": kind, "gpus": gpus, "wall_s": round(wall_s, 2), "build_s": round(build_s, 2),
            "ns3_load_s": load_s, "simulated_s": round(sim_s, 3), "cluster_s": round(cluster_s, 3),
            "wall_per_cluster_s": round(wall_s / cluster_s, 3) if cluster_s > 0 else None,
            "events": events, "events_per_wall_s": round(events / wall_s) if wall_s > 0 else None,
            "packets": packets, "packets_per_wall_s": round(packets / wall_s) if wall_s > 0 else None,
            "peak_rss_mb": round(rss_mb, 1)}


def write_speed(run_dir: Path, figures: dict) -> None:
    (Path(run_dir) / "twin.json").write_text(json.dumps(figures, indent=1) + "\n")


def packets(sampler: Sampler) -> int:
    """Packets every queue sent (each hop counts once: a packet crossing three links counts three)."""
    (_, first), (_, last) = sampler.samples[0], sampler.samples[-1]
    return sum(last[q]["packets"] - first[q]["packets"] for q in last)
