"""The write-up of a repetition: from the merged rows and the fabric's counters to the run directory.

``transfers.csv`` (KV), ``messages.csv`` (EP, live driver), ``fct.txt`` (HPCC style),
``summary.json``, ``config.json``, ``queues.csv`` (every queue sampled about once a second),
``links.csv`` (per-queue bytes and utilization), ``nics.csv`` (per NIC port), ``goodput.csv``
(per second), ``slowdown_bins.json`` (by size quantile bins), ``pfc.txt`` and ``pfc_ports.csv``
(the pause log), ``instances.csv`` and ``queue.csv`` (the planned replay's operating point),
``link_traffic.csv`` (per link, the KV and EP bytes the fabric model routes over it and who
they belong to: ``testbed.repetition.link_traffic``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed import scale
from testbed.emulation import fabricctl
from testbed.emulation.state import FabricState
from testbed.repetition import link_traffic
from testbed.repetition.config import RepetitionConfig
from testbed.repetition.replay import AgentsRun, Prepared
from testbed.repetition.sampler import QueueSampler

HEADER_BYTES = 66  # Ethernet 14 + IPv4 20 + TCP with timestamps 32, per packet


def summarize(fabric_name: str, rows: list[dict], prepared: Prepared, rate_bps: float, mtu: int,
              drops: int, crashed: dict, warnings: list[str]) -> dict:
    """The replay summary (its keys are a contract: README, tests and the report read them) from merged rows."""
    from traffic.model import metrics, schedule
    from traffic.runtime import records

    ok = [r for r in rows if r["verified"]]
    retried, moved = records.retry_counts(rows)
    fct_s = [r["end"] - r["start"] for r in ok]
    lateness = [r["start"] - r["scheduled_start"] for r in rows if r["start"] is not None]
    first = min((r["start"] for r in ok), default=0.0)
    last = max((r["end"] for r in ok), default=0.0)
    nbytes = sum(r["bytes"] for r in ok)
    ends: dict[int, float] = {}
    for r in rows:
        if r["end"] is not None:
            ends[r["request_id"]] = max(ends.get(r["request_id"], 0.0), r["end"] + prepared.offset_s)
    ttft = list(schedule.ttft_proxies(prepared.schedule, ends, allow_missing=True).values()) \
        if prepared.schedule is not None else []
    b_scale = scale.bytes_scale(rate_bps, prepared.represents_bps)

    def pct(values: list[float], keys=("p50", "p99", "p999"), factor: float = 1e3) -> dict:
        """Nearest-rank percentiles (times in ms by default); None when nothing was measured."""
        return metrics.rounded_percentiles(values, keys, factor)

    slowdowns = [metrics.fct_slowdown(f, r["bytes"], rate_bps, mtu_payload=mtu - 52, header_bytes=HEADER_BYTES)
                 for f, r in zip(fct_s, ok)]
    goodput = nbytes * 8 / (last - first) if last > first else 0.0
    return {
        "fabric": fabric_name,
        "transfers": len(rows),
        "verified": len(ok),
        "failed": len(rows) - len(ok),
        "transfers_retried": retried,  # resent once after a dead connection (traffic.runtime.agent)
        "transfers_moved": moved,  # sent over the other NIC port pair
        "requests": prepared.requests,
        "bytes": nbytes,
        "goodput_bps": round(goodput),
        "goodput_real_equivalent_bps": round(goodput * b_scale),
        "fct_ms": pct(fct_s),
        "slowdown": pct(slowdowns, ("p50", "p95", "p99", "p999"), factor=1.0),
        "ttft_ms": pct(ttft, ("p50", "p99")),
        "start_lateness_ms": pct(lateness, ("p50", "p99")),
        "requests_per_s": round(len({r["request_id"] for r in ok}) / (last - first), 3) if last > first else 0.0,
        "queue_drops": drops,
        "crashed_agents": crashed,
        "rate_bps": rate_bps,
        "bytes_scale": b_scale,
        "represents_bps": prepared.represents_bps,
        # the live driver's keys, as a planned replay has them: no serving loop, no expert traffic
        "driver": "plan", "time_dilation": 1.0, "closed_loop": False, "throughput_tokens_per_s": None,
        "ep_bytes": 0,
        "kv_bytes": sum(t.kv_bytes for t in prepared.schedule.requests) if prepared.schedule is not None else None,
        "transfer_packets": {"p50": metrics.percentile([-(-r["bytes"] // max(1, mtu - 52)) for r in ok], 50)
                             if ok else None},
        "warnings": warnings,
    }


def write_breakdowns(run_dir: Path, rows: list[dict], sampler: QueueSampler, rate_bps: float, mtu: int) -> dict:
    """Per-link utilization (hotspots), per-NIC-port bytes (a server's NIC
    imbalance), goodput per second, FCT slowdown by size bin."""
    from traffic.model import metrics
    from traffic.runtime import records

    span = max(sampler.t_last - sampler.t_first, 1e-9)
    util = {q: (towards, nbytes, nbytes * 8 / span / rate_bps) for q, (towards, nbytes) in sampler.link_bytes().items()}
    with open(run_dir / "links.csv", "w") as fh:
        fh.write("queue,towards,bytes,utilization\n")
        for q, (towards, nbytes, u) in sorted(util.items()):
            fh.write(f"{q},{towards},{nbytes},{u:.4f}\n")
    nic: dict[str, list[int]] = {}  # ip -> sent, received, of which expert-parallel: sent, received
    for r in rows:
        if r["verified"]:
            ep = r.get("kind") in ("dispatch", "combine")
            for ip, i in zip(records.sent_pair(r), (0, 1)):  # the NIC ports it went over
                loads = nic.setdefault(ip, [0, 0, 0, 0])
                loads[i] += r["bytes"]
                loads[i + 2] += r["bytes"] if ep else 0
    with open(run_dir / "nics.csv", "w") as fh:
        fh.write("gpu,port,ip,sent_bytes,received_bytes,ep_sent_bytes,ep_received_bytes\n")
        for ip, (tx, rx, ep_tx, ep_rx) in sorted(nic.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("."))):
            port, gpu = int(ip.split(".")[1]), int(ip.split(".")[2]) * 256 + int(ip.split(".")[3])
            fh.write(f"gpu{gpu},{port},{ip},{tx},{rx},{ep_tx},{ep_rx}\n")
    per_s: dict[int, int] = {}
    for r in rows:
        if r["verified"]:
            per_s[int(r["end"])] = per_s.get(int(r["end"]), 0) + r["bytes"]
    with open(run_dir / "goodput.csv", "w") as fh:
        fh.write("second,bytes,goodput_bps\n")
        for sec in range(0, max(per_s, default=-1) + 1):
            fh.write(f"{sec},{per_s.get(sec, 0)},{per_s.get(sec, 0) * 8}\n")
    ok = [r for r in rows if r["verified"]]
    if ok:
        slow = [metrics.fct_slowdown(r["end"] - r["start"], r["bytes"], rate_bps, mtu_payload=mtu - 52,
                                     header_bytes=HEADER_BYTES) for r in ok]
        bins = metrics.binned_slowdowns([r["bytes"] for r in ok], slow)
        (run_dir / "slowdown_bins.json").write_text(json.dumps(bins, indent=1))
    hot = max(util.items(), key=lambda kv: kv[1][2], default=None)
    return {"hottest_queue": hot[0] if hot else None,
            "max_link_utilization": round(hot[1][2], 4) if hot else None}


def check_invariants(run_dir: Path, st: dict, sampler: QueueSampler, rows: list[dict], pfc_enabled: bool,
                     faults: list[dict] | None = None) -> dict:
    """The measurement invariants (testbed.repetition.invariants) on this run's samples, transfers and pause log;
    ``faults``: the fault actions applied (a switch with a cable cut loses bytes no counter sees)."""
    from testbed.repetition import invariants

    events = []
    if pfc_enabled and (run_dir / "pfc.txt").is_file():
        from pfc import analysis

        events = [(e.time_ns, e.queue, e.event) for e in analysis.read_events(run_dir / "pfc.txt")]
    cfg = st["config"]
    return invariants.check_all(st["queues"], sampler.first, sampler.last, span_s=sampler.t_last - sampler.t_first,
                                rate_bps=cfg["rate_bps"], burst_bytes=cfg["burst_bytes"], frame_bytes=cfg["mtu"] + 14,
                                rows=rows, pfc_enabled=pfc_enabled, pause_events=events,
                                regressions=sampler.regressions, sampler_error=sampler.error, read_s=sampler.read_s,
                                cut_switches=cut_switches(fabricctl.fabric_of_state(st), faults or []))


def cut_switches(fabric, faults: list[dict]) -> frozenset[str]:
    """Switches at an end of a cable that a fault took down (a dead switch: it and its neighbours)."""
    from testbed.fabric.failover import far_end, parse_target

    out: set[str] = set()
    for ev in faults:
        if ev["action"] == "down":
            for end in parse_target(fabric, ev["target"]).cut_ends(fabric):
                out |= {node for node, _ in (end, far_end(fabric, end)) if node in fabric.switches}
    return frozenset(out)


def write_operating_point(run_dir: Path, op) -> dict:
    """instances.csv (utilization, offered load, queue per serving instance) and queue.csv (each
    instance's queue over time): whether the cluster kept up, so TTFT is not the queue unnoticed."""
    import csv

    for name, rows in (("instances.csv", op.instance_rows()), ("queue.csv", op.queue_rows())):
        with open(run_dir / name, "w", newline="") as fh:
            if rows:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    return {"prefill_utilization": {str(k): round(v, 4) for k, v in op.utilization("prefill").items()},
            "decode_utilization": {str(k): round(v, 4) for k, v in op.utilization("decode").items()}}


def write_pfc_outputs(run_dir: Path, st: dict, snap: dict | None, rows: list[dict], t0: float, t_end: float,
                      drops: int) -> dict:
    """pfc.txt (the run's slice of the pause log), pfc_ports.csv, and the summary's "pfc" block:
    pauses, per-port figures, how far pauses spread, victim flows, the lossless verdict."""
    if snap is None:
        return {"enabled": False, "pauses": 0, "resumes": 0, "lossless_ok": None}
    from pfc import analysis

    t0_ns, t_end_ns = int(t0 * 1e9), int(t_end * 1e9)
    lines = [ln for ln in snap["log"].splitlines() if ln.strip() and t0_ns - 5e9 <= int(ln.split()[0]) <= t_end_ns]
    (run_dir / "pfc.txt").write_text("".join(ln + "\n" for ln in lines))
    events = analysis.read_events(run_dir / "pfc.txt")
    ports = analysis.port_stats(events, t0_ns, t_end_ns)
    analysis.write_port_stats_csv(run_dir / "pfc_ports.csv", ports)
    spread = analysis.spread(events)
    transfers = [{"request_id": r["request_id"], "src": r["src"], "dst": r["dst"], "src_ip": r["src_ip"],
                  "dst_ip": r["dst_ip"], "start_ns": int((t0 + r["start"]) * 1e9),
                  "end_ns": int((t0 + r["end"]) * 1e9)}
                 for r in rows if r["start"] is not None and r["end"] is not None]
    fabric = fabricctl.fabric_of_state(st)
    victims = analysis.victim_flows(events, transfers, fabric)
    status = snap["status"]
    return {
        "enabled": True,
        "pauses": sum(1 for e in events if e.event == 1),
        "resumes": sum(1 for e in events if e.event == 0),
        "ports_paused": len(ports),
        "paused_fraction_max": max((p["paused_fraction"] for p in ports), default=0.0),
        "max_spread_hops": spread["max_hops"],
        "congestion_roots": spread["roots"],
        "victim_flows": len(victims),
        "flows": len(transfers),
        "pause_latency_ms": status.get("pause_latency_ms"),
        "resume_latency_ms": status.get("resume_latency_ms"),
        "helper_netlink_errors": status.get("netlink_errors"),
        "lossless_ok": drops == 0,
    }


@dataclass
class Measured:
    """What a repetition on the fabric left to write up: the agents' outcome and the fabric's counters."""

    st: FabricState
    res: AgentsRun
    sampler: QueueSampler
    drops: int
    fabric_drops: int
    t_end: float
    pfc_state: dict | None
    cross_result: dict | None
    faults: list[dict] | None = None  # the fault actions as applied (None: the experiment has none)
    fault_errors: list[str] | None = None  # fault actions that could not be applied


def write_up(run_dir: Path, cfg: RepetitionConfig, prepared: Prepared, live, m: Measured, rate: float,
             mtu: int) -> None:
    """transfers.csv (KV), messages.csv (EP), fct.txt, the breakdowns, summary.json, config.json and
    link_traffic.csv."""
    from traffic.model import metrics
    from traffic.runtime import records

    st, res = m.st, m.res
    all_rows = records.merge_results(res.agents_dir, t0=res.t0)
    rows = [r for r in all_rows if r.get("kind") in (None, "kv")]  # KV transfers; EP messages apart
    messages = [r for r in all_rows if r.get("kind") not in (None, "kv")]
    records.write_transfers_csv(rows, run_dir / "transfers.csv")
    if live:
        records.write_transfers_csv(messages, run_dir / "messages.csv", extra=("kind", "engine", "step"))
    fct_records = [metrics.FctRecord(int(r["src"][3:]), int(r["dst"][3:]), int(r["bytes"]),
                                 int(round(r["start"] * 1e9)), int(round((r["end"] - r["start"]) * 1e9)),
                                 int(round(metrics.ideal_fct_s(r["bytes"], rate, mtu_payload=mtu - 52,
                                                               header_bytes=HEADER_BYTES) * 1e9)))
               for r in rows if r["verified"]]
    metrics.write_fct_txt(run_dir / "fct.txt", fct_records)
    warnings = list(prepared.warnings) + list(st.get("warnings", []))
    if res.crashed:
        warnings.append(f"agents exited early: {res.crashed}")
    summary = summarize(st["fabric"]["kind"], rows, prepared, rate, mtu, m.drops, res.crashed, warnings)
    if live:
        from testbed.repetition.live_summary import serving_summary

        summary |= serving_summary(res, live, all_rows, messages, run_dir, mtu, rate, st["fabric"]["kind"])
        warnings += res.warnings
    summary["agents_ready_s"] = res.ready_s
    summary["agents_cpu_s"] = res.cpu_s  # all agents' CPU seconds, start to stop
    if prepared.operating_point is not None:
        summary |= write_operating_point(run_dir, prepared.operating_point)
    summary |= write_breakdowns(run_dir, all_rows, m.sampler, rate, mtu)
    summary["cross_traffic"] = m.cross_result
    if m.faults is not None:
        summary["faults"] = [{k: ev[k] for k in ("trace_s", "target", "action", "late_ms", "wall_s")}
                             for ev in m.faults]
        summary["fault_errors"] = m.fault_errors or []
    summary["pfc"] = write_pfc_outputs(run_dir, st, m.pfc_state, rows, res.t0, m.t_end, m.fabric_drops)
    summary["invariants"] = check_invariants(run_dir, st, m.sampler, all_rows, summary["pfc"]["enabled"], m.faults)
    _warn_on_checks(summary, m.fabric_drops)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    (run_dir / "config.json").write_text(json.dumps({"fabric": st["fabric"], "datapath": st["config"],
                                                     "pfc": st.get("pfc"), "replay": asdict(cfg)}, indent=1))
    link_traffic.write_run(run_dir, fabricctl.fabric_of_state(st), all_rows, cfg.gpus_per_server)  # after links.csv


FAULT_LATE_MS = 50.0  # a fault action later than this (wall) is named in the warnings


def _warn_on_checks(summary: dict, fabric_drops: int) -> None:
    """The summary's loud warnings: lossless PFC broken, a measurement invariant violated, lost bytes
    the drop counters missed, a replay that fell behind its schedule."""
    if summary["pfc"]["enabled"] and not summary["pfc"]["lossless_ok"]:
        summary["warnings"].insert(0, f"LOSSLESS INVARIANT VIOLATED: PFC was on and fabric queues dropped "
                                      f"{fabric_drops} packets")
    summary["warnings"] += [f"MEASUREMENT INVARIANT VIOLATED: {v}" for v in summary["invariants"]["violations"]]
    lost = summary["invariants"]["margins"]["uncounted_loss_bytes"]
    if lost:
        summary["warnings"].append(f"the switches lost {lost} B more than one frame per counted drop: Open vSwitch "
                                   "frees the rest of a send batch when a queue drops, so queue_drops undercounts")
    summary["warnings"] += [f"FAULT NOT APPLIED: {e}" for e in summary.get("fault_errors") or []]
    for ev in summary.get("faults") or []:
        if (ev.get("late_ms") or 0) > FAULT_LATE_MS:
            summary["warnings"].append(f"fault {ev['action']} {ev['target']} came {ev['late_ms']:.0f} ms of wall "
                                       f"time after its run time {ev['trace_s']:g} s")
    cut = summary["invariants"]["margins"].get("lost_at_cut_bytes")
    if cut:
        summary["warnings"].append(f"{cut} B were lost at cables a fault cut (the queue in front of a port that "
                                   "loses carrier is flushed uncounted); those switches' conservation is not checked")
    summary["pfc_pauses"] = summary["pfc"]["pauses"]
    lat = summary["start_lateness_ms"]["p99"]
    if lat is not None and lat > 5:
        summary["warnings"].append(f"start lateness P99 {lat:.1f} ms is over 5 ms: the replay fell behind the trace")

