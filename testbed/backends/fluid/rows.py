"""What the fluid engine hands the write-up: merged rows (every KV slice; the expert-parallel messages of every
phase up to ``EP_ROWS``, beyond it those of every k-th step), the links' counters, and its own figures
(fluid.json)."""

from __future__ import annotations

import json
import math
import resource
from pathlib import Path

import numpy as np

from fabrics import addressing
from testbed.backends.base import QueueCounters, QueueInfo
from testbed.backends.fluid.loop import Served
from testbed.backends.ns3.apps import plan_row
from traffic.runtime.records import NEVER_COMPLETED

EP_ROWS = 50_000  # expert-parallel message rows a repetition keeps (n=512: ~2M messages in 28 cluster s)


def _row(p: dict, end: float) -> dict:
    done = not math.isnan(end)
    end = round(float(end), 6) if done else None
    row = {"id": p["id"], "request_id": p.get("request_id"), "src": p["src"], "dst": p["dst"], "src_ip": p["src_ip"],
           "dst_ip": p["dst_ip"], "bytes": p["bytes"], "received_bytes": p["bytes"] if done else None,
           "scheduled_start": p["start"], "start": p["start"], "first_byte": p["start"] if done else None,
           "end": end, "sender_end": end, "verified": done, "error": None if done else NEVER_COMPLETED}
    row.update((c, p[c]) for c in ("kind", "engine", "step") if c in p)
    return row


def planned_row(plan: dict, end: float) -> dict:
    """A planned replay's row: the plan row's message, sent at its start, delivered at ``end`` (NaN: not)."""
    return _row(plan, end)


def every_kth_step(phases: list[tuple], limit: int) -> int:
    """k such that the messages of the phases of every k-th step (step % k == 0) number about ``limit``."""
    total = sum(len(p[1]) for p in phases)
    return max(1, math.ceil(total / limit)) if limit > 0 else 0


def merged_rows(served: Served, limit: int = EP_ROWS) -> tuple[list[dict], dict]:
    """The rows (``traffic.runtime.records.COLUMNS`` + kind, engine, step) and what was kept of them."""
    ends = served.ends
    rows = [_row(plan_row(m), ends[m[0]]) for m in served.kv]
    k = every_kth_step(served.phases, limit)
    kept = 0
    for first, src, dst, sp, dp, nbytes, start, kind, engine, step in served.phases:
        if not k or step % k:
            continue
        for i in range(len(src)):
            s, d = int(src[i]), int(dst[i])
            p = {"id": first + i, "request_id": None, "src": f"gpu{s}", "dst": f"gpu{d}",
                 "src_ip": addressing.ip_of(s, int(sp[i])), "dst_ip": addressing.ip_of(d, int(dp[i])),
                 "bytes": int(nbytes[i]), "start": start, "kind": kind, "engine": engine, "step": step}
            rows.append(_row(p, ends[first + i]))
            kept += 1
    rows.sort(key=lambda r: (r["scheduled_start"], str(r["id"])))
    ep_total = sum(len(p[1]) for p in served.phases)
    ep_delivered = int(sum(np.count_nonzero(~np.isnan(ends[p[0]:p[0] + len(p[1])])) for p in served.phases))
    note = {"kv_messages": len(served.kv), "ep_messages": ep_total, "ep_messages_delivered": ep_delivered,
            "ep_rows": kept, "ep_rows_every_kth_step": k,
            "note": (None if kept == ep_total else
                     f"messages.csv, link_traffic.csv, nics.csv and the EP exchange figures keep the expert-parallel "
                     f"messages of one step in {k} ({kept} of {ep_total}); steps.csv and the serving figures have "
                     "every step")}
    return rows, note


def counters(queues: list[QueueInfo], served: Served) -> QueueCounters:
    """Every link's bytes and packets sent, sampled (no queue: backlog and drops 0)."""
    samples = []
    for t, nbytes, npk in served.samples:
        b, p = np.rint(nbytes).astype(np.int64).tolist(), npk.tolist()
        samples.append((t, {q.qid: {"bytes": b[i], "packets": p[i], "drops": 0, "backlog": 0}
                            for i, q in enumerate(queues)}))
    (t_first, first), (t_last, last) = samples[0], samples[-1]
    return QueueCounters(list(queues), first, last, t_first, t_last, samples)


def speed(*, wall_s: float, cpu_s: float, setup_s: float, cluster_s: float, served: Served, gpus: int, kind: str,
          connections: int, kept: dict) -> dict:
    """fluid.json: how fast the engine ran and what it did."""
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    messages = kept["kv_messages"] + kept["ep_messages"]
    return {"fabric": kind, "gpus": gpus, "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2),
            "setup_s": round(setup_s, 2), "simulated_s": round(served.sim_s, 3), "cluster_s": round(cluster_s, 3),
            "wall_per_cluster_s": round(wall_s / cluster_s, 4) if cluster_s > 0 else None,
            "messages": messages, "messages_per_wall_s": round(messages / wall_s) if wall_s > 0 else None,
            "phases": len(served.phases), "solves": served.solves, "filling_rounds": served.rounds,
            "connections": connections, "peak_rss_mb": round(rss_mb, 1), "rows": kept}


def write_speed(run_dir: Path, figures: dict) -> None:
    (Path(run_dir) / "fluid.json").write_text(json.dumps(figures, indent=1) + "\n")


__all__ = ["merged_rows", "planned_row", "counters", "speed", "write_speed", "every_kth_step", "EP_ROWS"]
