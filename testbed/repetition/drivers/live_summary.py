"""The live driver's summary: the serving figures for summary.json, in real-cluster time, and the
expert-parallel exchanges against their ideal."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from common import scale
from fabrics import Fabric, addressing
from fabrics.routing import forwarding_tables, links_on_path
from fabrics.walks import Walks
from testbed.backends.base import LinkSettings, ServingOutcome, ServingTraffic
from testbed.repetition.writeup import ep_messages
from traffic.model.breakdown import decode_step_breakdown, ttft_breakdown
from traffic.model.metrics import percentile, rounded_percentiles
from traffic.runtime.records import retry_counts, sent_pair
from traffic.runtime.serving_results import read_requests
from traffic.runtime.wire import HEADER as FRAME_HEADER

# per packet on the wire: Ethernet, IPv4 and TCP headers, and the agent's frame header (counted per packet,
# though the agent sends one per message: the ideal errs long by up to 24 B a packet)
EP_WIRE_OVERHEAD_BYTES = scale.HEADER_BYTES + FRAME_HEADER.size


def _message_ports(messages: list[dict]) -> dict[int, tuple[str, str]]:
    """Message id -> ("gpu3:p1", "gpu17:p2"): the NIC ports it went between (the pair last used)."""
    out = {}
    for m in messages:
        ends = [addressing.parse_ip(a) if a else None for a in sent_pair(m)]
        if m.get("id") is not None and all(ends):
            out[int(m["id"])] = tuple(f"gpu{g}:p{p}" for g, p in ends)
    return out


def exchange_ideal_s(messages: list[dict], rate_bps: float, mtu: int, links: int, ports: int = 2) -> float:
    """An exchange's ideal span on an otherwise idle fabric: the busiest GPU's bytes (sent or received,
    headers included) at ``ports`` x the link rate, plus the last packet's store-and-forward over the
    other ``links - 1`` links of its path. ``messages``: dicts with src, dst and bytes."""
    payload = scale.payload_bytes(mtu)
    load: dict[tuple[str, str], int] = {}
    for m in messages:
        wire = m["bytes"] + EP_WIRE_OVERHEAD_BYTES * -(-m["bytes"] // payload)
        for end in (("tx", m["src"]), ("rx", m["dst"])):
            load[end] = load.get(end, 0) + wire
    last_packet = min(max(m["bytes"] for m in messages), payload) + EP_WIRE_OVERHEAD_BYTES
    return max(load.values()) * 8 / (ports * rate_bps) + (links - 1) * last_packet * 8 / rate_bps


def longest_path(fabric: Fabric, messages: list[dict], tables=None, known: dict | None = None,
                 walks: Walks | None = None) -> int:
    """The most links any of ``messages`` crosses, over the NIC port pair it went over (the routing model's);
    ``known``: (src ip, dst ip) -> links, filled as paths are walked (a run's phases share their pairs: at n=512
    walking them again for every phase took a minute of the write-up); ``walks``: remembered walks over ``tables``
    (pairs share their later switches' walks)."""
    tables = tables or forwarding_tables(fabric)
    known = {} if known is None else known
    out = 0
    for pair in {sent_pair(m) for m in messages}:
        n = known.get(pair)
        if n is None:
            src, dst = (addressing.parse_ip(ip) for ip in pair)
            n = known[pair] = links_on_path(fabric, src, dst, tables, walks)
        out = max(out, n)
    return out


def exchange_vs_ideal(messages: list[dict], rate_bps: float, mtu: int, fabric: Fabric, ports: int = 2) -> list[float]:
    """Per exchange phase (engine, step, dispatch or combine) of the verified messages: its measured
    span (first order to last byte) over its ideal (``exchange_ideal_s``, over the phase's longest path)."""
    phases: dict[tuple, list[dict]] = {}
    for m in messages:
        if m["verified"] and m.get("step") is not None:
            phases.setdefault((m.get("engine"), m["step"], m.get("kind")), []).append(m)
    tables = forwarding_tables(fabric) if phases else None
    known: dict = {}
    walks = Walks(fabric, tables) if phases else None
    return [(max(m["end"] for m in ms) - min(m["start"] for m in ms))
            / exchange_ideal_s(ms, rate_bps, mtu, longest_path(fabric, ms, tables, known, walks), ports)
            for ms in phases.values()]


def start_lateness(rows: list[dict]) -> list[float]:
    """Each started message's start minus its scheduled start (wall seconds), each message once:
    ``rows`` already holds the EP messages beside the KV transfers."""
    return [r["start"] - r["scheduled_start"] for r in rows
            if r["start"] is not None and r["scheduled_start"] is not None]


PREFIX_WINDOW = ("token-weighted over the measured requests (arriving in [warmup, duration), as TTFT's) whose "
                 "prefill finished by the end")


def prefix_cache(prefix: dict | None, spec: dict) -> dict | None:
    """summary.json's ``prefix_cache``: the cluster's own count over the measured requests (serving.json's
    ``prefix``: prompt, cached and host-tier tokens, ``traffic.model.prefix_cache.hit_ratios``), whether a cache
    was on (``serving.prefix_cache``, its host tier ``hicache_ratio``) or a hit assumed (``prefix_hit``, for
    requests without hash_ids), and which requests it counts."""
    if not prefix:
        return None
    return {**prefix, "cache": spec.get("prefix_cache"), "hicache_ratio": spec.get("hicache_ratio"),
            "assumed_hit": spec.get("prefix_hit"), "window": PREFIX_WINDOW}


def serving_summary(outcome: ServingOutcome, traffic: ServingTraffic, engines: dict, rows: list[dict], run_dir: Path,
                    link: LinkSettings, fabric: Fabric, layout: dict | None = None) -> dict:
    """The live run's serving figures for summary.json, in real-cluster time (wall time / dilation);
    ``rows``: every merged row (KV and EP); writes messages.csv (the EP messages)."""
    from traffic.runtime import records

    srv = outcome.results
    spec = traffic.config["spec"]
    dilation = traffic.dilation
    messages = ep_messages(rows)
    records.write_transfers_csv(messages, run_dir / "messages.csv", extra=("kind", "engine", "step"))

    def pct(values: list[float]) -> dict:
        return rounded_percentiles(values, factor=1e3)  # seconds -> ms

    lo, end = spec["warmup_s"], spec["duration_s"]
    reqs, measured = read_requests(run_dir, lo, end)
    ttft = [float(r["ttft_s"]) for r in measured if r["ttft_s"] and float(r["first_token_s"]) <= end]
    with open(run_dir / "steps.csv", newline="") as fh:
        steps = list(csv.DictReader(fh))
    exchange = [float(s["exchange_s"]) for s in steps if s["exchange_s"] and int(s["messages"])]
    decode_step = [float(s["end_s"]) - float(s["start_s"]) for s in steps
                   if s["engine"].startswith("decode") and s["end_s"]]
    lateness = start_lateness(rows)
    lateness_real = [x / dilation for x in lateness]
    packets = [math.ceil(r["bytes"] / link.payload_bytes) for r in rows if r["bytes"]]
    util = srv["utilization"]
    vs_ideal = exchange_vs_ideal(messages, link.rate_bps, link.mtu, fabric)
    return {
        "driver": "live",
        "closed_loop": spec["arrivals"] == "closed",
        "concurrency": spec["concurrency"] if spec["arrivals"] == "closed" else None,
        "time_dilation": dilation,
        "requests": srv["measured_requests"],
        "requests_completed": srv["completed_requests"],
        "first_token_missing": srv["first_token_missing"],
        "throughput_tokens_per_s": round(srv["throughput_tokens_per_s"], 2),
        "completed_requests_per_s": round(srv["completed_requests"] / (end - lo), 3) if end > lo else None,
        "ttft_ms": pct(ttft),
        "decode_step_ms": pct(decode_step),
        "ep_exchange_ms": pct(exchange),
        "ep_exchange_vs_ideal": rounded_percentiles(vs_ideal),
        "prefill_utilization": srv["prefill_token_utilization"],
        "prefill_busy": {k: v for k, v in util.items() if k.startswith("prefill")},
        "decode_utilization": {k: v for k, v in util.items() if k.startswith("decode")},
        "ep_bytes": srv["ep_bytes"],
        "nvlink_bytes": srv["nvlink_bytes"],
        "kv_bytes": srv["kv_bytes"],
        "ep_messages": len(messages),
        "ep_messages_verified": sum(1 for m in messages if m["verified"]),
        "ep_messages_retried": retry_counts(messages)[0],
        "ep_messages_moved": retry_counts(messages)[1],
        "transfer_packets": {"p50": percentile(packets, 50) if packets else None},
        "start_lateness_ms": pct(lateness_real),
        "start_lateness_wall_ms": pct(lateness),
        "control_lag_ms": srv["control_lag_ms"],
        "coordinator_cpu_s": srv.get("cpu_s"),
        "serving_failed_messages": srv["failed_messages"],
        "engines": engines,
        "serving_layout": layout,
        "prefix_cache": prefix_cache(srv.get("prefix"), spec),
        "ttft_breakdown_ms": ttft_breakdown(reqs, lo, end),
        "decode_step_breakdown_ms": decode_step_breakdown(steps, lo, end, _message_ports(messages)),
        "times_note": "ttft, steps, throughput and start lateness are real-cluster time; fct and "
                      f"start_lateness_wall_ms are emulated wall time (real-cluster x {dilation:g})",
    }

