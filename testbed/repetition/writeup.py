"""The write-up of a repetition: from what the backend carried to the run directory.

It reads only the typed objects a backend returns (``testbed.backends.base.Carried``: the merged
rows, the fabric record, the queue counters, the pause log) and the driver's own summary, and writes:
``transfers.csv`` (KV), ``fct.txt`` (HPCC style), ``summary.json``, ``config.json``, ``queues.csv``
(every queue sampled about once a second), ``links.csv`` (per-queue bytes and utilization),
``nics.csv`` (per NIC port), ``goodput.csv`` (per second), ``slowdown_bins.json`` (by size quantile
bins), ``pfc.txt`` and ``pfc_ports.csv`` (the run's slice of the pause log), ``link_traffic.csv`` (per
link, the KV and EP bytes the fabric model routes over it and who they belong to:
``testbed.repetition.link_traffic``). The drivers add theirs (``messages.csv``, ``instances.csv``, ...).
"""

from __future__ import annotations

import json
from pathlib import Path

from common import scale
from fabrics import Fabric
from pfc.files import LOG_FILE
from testbed.backends.base import Carried, LinkSettings, Network, PauseLog, QueueCounters
from testbed.repetition import congestion, invariants, link_traffic
from testbed.repetition.drivers.base import Driver, Prepared
from testbed.repetition.spec import RepetitionSpec

PAUSE_LOG_LEAD_NS = 5_000_000_000  # pfc.txt keeps pauses from this long before t0 (a pause in force at the start)
FAULT_LATE_MS = 50.0  # a fault action later than this (wall) is named in the warnings


def kv_rows(rows: list[dict]) -> list[dict]:
    """The KV transfers among merged rows (a planned replay's rows have no kind)."""
    return [r for r in rows if r.get("kind") in (None, "kv")]


def ep_messages(rows: list[dict]) -> list[dict]:
    """The expert-parallel messages among merged rows."""
    return [r for r in rows if r.get("kind") not in (None, "kv")]


def summarize(fabric_name: str, rows: list[dict], link: LinkSettings, drops: int, crashed: dict,
              warnings: list[str]) -> dict:
    """The summary of the KV transfers (its keys are a contract: README, tests and the report read them);
    the driver fills in what only it knows (requests, TTFT, the serving figures)."""
    from traffic.model import metrics
    from traffic.runtime import records

    ok = [r for r in rows if r["verified"]]
    retried, moved = records.retry_counts(rows)
    fct_s = [r["end"] - r["start"] for r in ok]
    lateness = [r["start"] - r["scheduled_start"] for r in rows if r["start"] is not None]
    first = min((r["start"] for r in ok), default=0.0)
    last = max((r["end"] for r in ok), default=0.0)
    nbytes = sum(r["bytes"] for r in ok)

    def pct(values: list[float], keys=("p50", "p99", "p999"), factor: float = 1e3) -> dict:
        """Nearest-rank percentiles (times in ms by default); None when nothing was measured."""
        return metrics.rounded_percentiles(values, keys, factor)

    slowdowns = metrics.fct_slowdowns(fct_s, [r["bytes"] for r in ok], link.rate_bps, mtu_payload=link.payload_bytes,
                                      header_bytes=scale.HEADER_BYTES)
    goodput = nbytes * 8 / (last - first) if last > first else 0.0
    return {
        "fabric": fabric_name,
        "transfers": len(rows),
        "verified": len(ok),
        "failed": len(rows) - len(ok),
        "transfers_retried": retried,  # resent once after a dead connection (traffic.runtime.agent)
        "transfers_moved": moved,  # sent over the other NIC port pair
        "requests": None,  # the driver's
        "bytes": nbytes,
        "goodput_bps": round(goodput),
        "goodput_real_equivalent_bps": round(goodput * link.bytes_scale),
        "fct_ms": pct(fct_s),
        "slowdown": pct(slowdowns, ("p50", "p95", "p99", "p999"), factor=1.0),
        "ttft_ms": pct([], ("p50", "p99")),  # the driver's
        "start_lateness_ms": pct(lateness, ("p50", "p99")),
        "requests_per_s": round(len({r["request_id"] for r in ok}) / (last - first), 3) if last > first else 0.0,
        "queue_drops": drops,
        "crashed_agents": crashed,
        "rate_bps": link.rate_bps,
        "bytes_scale": link.bytes_scale,
        "represents_bps": link.represents_bps,
        # the live driver's keys, as a planned replay has them: no serving loop, no expert traffic
        "driver": "plan", "time_dilation": 1.0, "closed_loop": False, "throughput_tokens_per_s": None,
        "ep_bytes": 0,
        "kv_bytes": None,  # the driver's
        "transfer_packets": {"p50": metrics.percentile([-(-r["bytes"] // link.payload_bytes) for r in ok], 50)
                             if ok else None},
        "warnings": warnings,
    }


def write_queue_samples(path: Path, counters: QueueCounters) -> None:
    """queues.csv: every queue of every sample (time on the backend's clock)."""
    towards = {q.qid: q.towards for q in counters.queues}
    with open(path, "w") as fh:
        fh.write("time,queue,towards,backlog_bytes,drops,sent_bytes\n")
        for t, snapshot in counters.samples:
            for qid, c in snapshot.items():
                fh.write(f"{t:.3f},{qid},{towards.get(qid, '')},{c['backlog']},{c['drops']},{c['bytes']}\n")


def write_breakdowns(run_dir: Path, rows: list[dict], counters: QueueCounters | None, link: LinkSettings) -> dict:
    """Per-link utilization (hotspots; with counters only), per-NIC-port bytes (a server's NIC
    imbalance), goodput per second, FCT slowdown by size bin."""
    from traffic.model import metrics
    from traffic.runtime import records

    util = {}
    if counters is not None:
        write_queue_samples(run_dir / "queues.csv", counters)
        span = max(counters.t_last - counters.t_first, 1e-9)
        util = {q: (towards, nbytes, nbytes * 8 / span / link.rate_bps)
                for q, (towards, nbytes) in counters.link_bytes().items()}
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
        slow = metrics.fct_slowdowns([r["end"] - r["start"] for r in ok], [r["bytes"] for r in ok], link.rate_bps,
                                     mtu_payload=link.payload_bytes, header_bytes=scale.HEADER_BYTES)
        bins = metrics.binned_slowdowns([r["bytes"] for r in ok], slow)
        (run_dir / "slowdown_bins.json").write_text(json.dumps(bins, indent=1))
    hot = max(util.items(), key=lambda kv: kv[1][2], default=None)
    return {"hottest_queue": hot[0] if hot else None,
            "max_link_utilization": round(hot[1][2], 4) if hot else None}


def check_invariants(run_dir: Path, link: LinkSettings, counters: QueueCounters | None, rows: list[dict],
                     pfc_enabled: bool, fabric: Fabric, faults: list[dict] | None = None) -> dict:
    """The measurement invariants (testbed.repetition.invariants) on this run's samples, transfers and pause log;
    ``faults``: the fault actions applied (a switch with a cable cut loses bytes no counter sees). Without
    counters (a backend with no queues) only the transfers are checked."""
    if counters is None:
        return invariants.check_all([], {}, {}, span_s=0.0, rate_bps=link.rate_bps, burst_bytes=link.burst_bytes,
                                    frame_bytes=link.frame_bytes, rows=rows, pfc_enabled=False, counted=False)
    events = []
    if pfc_enabled and (run_dir / LOG_FILE).is_file():
        from pfc import analysis

        events = [(e.time_ns, e.queue, e.event) for e in analysis.read_events(run_dir / LOG_FILE)]
    regressions = [r for (t_a, a), (t_b, b) in zip(counters.samples, counters.samples[1:])
                   for r in invariants.counter_regressions(a, b, t_a, t_b)]
    return invariants.check_all([q.as_dict() for q in counters.queues], counters.first, counters.last,
                                span_s=counters.t_last - counters.t_first, rate_bps=link.rate_bps,
                                burst_bytes=link.burst_bytes, frame_bytes=link.frame_bytes, rows=rows,
                                pfc_enabled=pfc_enabled, pause_events=events, regressions=regressions,
                                sampler_error=counters.error, read_s=counters.read_s,
                                cut_switches=cut_switches(fabric, faults or []))


def cut_switches(fabric: Fabric, faults: list[dict]) -> frozenset[str]:
    """Switches at an end of a cable that a fault took down (a dead switch: it and its neighbours)."""
    from fabrics.failover import far_end, parse_target

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


def write_pfc_outputs(run_dir: Path, fabric: Fabric, pauses: PauseLog, rows: list[dict], t0: float, t_end: float,
                      drops: int) -> tuple[dict, list[dict] | None]:
    """pfc.txt (the run's slice of the pause log), pfc_ports.csv, and the summary's "pfc" block:
    pauses, per-port figures, how far pauses spread, victim flows, the lossless verdict; with the per-port
    rows and the time each queue that caused pauses was congested (None, None without PFC)."""
    if not pauses.enabled:
        return {"enabled": False, "pauses": 0, "resumes": 0, "lossless_ok": None}, (None, None)
    from pfc import analysis

    t0_ns, t_end_ns = int(t0 * 1e9), int(t_end * 1e9)
    lines = [ln for ln in pauses.lines
             if ln.strip() and t0_ns - PAUSE_LOG_LEAD_NS <= int(ln.split()[0]) <= t_end_ns]
    (run_dir / LOG_FILE).write_text("".join(ln + "\n" for ln in lines))
    events = analysis.read_events(run_dir / LOG_FILE)
    ports = analysis.port_stats(events, t0_ns, t_end_ns)
    congested = congestion.congested_spans([e for e in events if e.time_ns >= t0_ns], t_end_ns)
    analysis.write_port_stats_csv(run_dir / "pfc_ports.csv", ports)
    spread = analysis.spread(events)
    transfers = [{"request_id": r["request_id"], "src": r["src"], "dst": r["dst"], "src_ip": r["src_ip"],
                  "dst_ip": r["dst_ip"], "start_ns": int((t0 + r["start"]) * 1e9),
                  "end_ns": int((t0 + r["end"]) * 1e9)}
                 for r in rows if r["start"] is not None and r["end"] is not None]
    victims = analysis.victim_flows(events, transfers, fabric)
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
        "pause_latency_ms": pauses.pause_latency_ms,
        "resume_latency_ms": pauses.resume_latency_ms,
        "helper_netlink_errors": pauses.netlink_errors,
        "lossless_ok": drops == 0,
    }, (ports, congested)


def write_up(run_dir: Path, spec: RepetitionSpec, driver: Driver, prepared: Prepared, carried: Carried,
             net: Network) -> dict:
    """transfers.csv (KV), fct.txt, the driver's files, the breakdowns, summary.json, config.json and
    link_traffic.csv; the summary."""
    from traffic.model import metrics
    from traffic.runtime import records

    link = LinkSettings.of(carried.fabric.datapath, spec.represents_bps)  # what the fabric ran with
    all_rows = carried.rows
    rows = kv_rows(all_rows)
    records.write_transfers_csv(rows, run_dir / "transfers.csv")
    fct_records = [metrics.FctRecord(int(r["src"][3:]), int(r["dst"][3:]), int(r["bytes"]),
                                     int(round(r["start"] * 1e9)), int(round((r["end"] - r["start"]) * 1e9)),
                                     int(round(metrics.ideal_fct_s(r["bytes"], link.rate_bps,
                                                                   mtu_payload=link.payload_bytes,
                                                                   header_bytes=scale.HEADER_BYTES) * 1e9)))
                   for r in rows if r["verified"]]
    metrics.write_fct_txt(run_dir / "fct.txt", fct_records)
    warnings = list(prepared.warnings) + list(carried.fabric.warnings)
    if carried.crashed:
        warnings.append(f"agents exited early: {carried.crashed}")
    counters = carried.counters
    drops = counters.drops() if counters is not None else 0
    fabric_drops = counters.drops("switch") if counters is not None else 0
    summary = summarize(carried.fabric.kind, rows, link, drops, carried.crashed, warnings)
    summary |= driver.summarize(prepared, carried, all_rows, run_dir, net.model, link)
    if carried.serving is not None:
        warnings += carried.serving.warnings
    summary["backend"] = spec.backend
    summary["wall_per_run_s"] = spec.wall_per_run_s  # wall seconds per second of the run's own clock
    summary["agents_ready_s"] = carried.ready_s
    summary["agents_cpu_s"] = carried.cpu_s  # all agents' CPU seconds, start to stop
    summary |= write_breakdowns(run_dir, all_rows, counters, link)
    summary["cross_traffic"] = carried.cross
    if carried.faults is not None:
        summary["faults"] = [{k: ev[k] for k in ("trace_s", "target", "action", "late_ms", "wall_s")}
                             for ev in carried.faults]
        summary["fault_errors"] = carried.fault_errors or []
    summary["pfc"], (ports, congested) = write_pfc_outputs(run_dir, net.model, carried.pauses, rows, carried.t0,
                                                           carried.t_end, fabric_drops)
    summary["congestion"] = {"by_class": congestion.by_class(counters, ports, spec.wall_per_run_s, congested),
                             "kv_by_nic": congestion.kv_by_nic(rows, spec.gpus_per_server, link.bytes_scale
                                                               / (spec.time_dilation if spec.live else 1.0))}
    summary["invariants"] = check_invariants(run_dir, link, counters, all_rows, summary["pfc"]["enabled"],
                                             net.model, carried.faults)
    if carried.clocks is not None:
        _clock_check(summary, carried.clocks)
    summary["in_flight"] = in_flight_verdict(run_dir, driver, prepared, carried)
    _warn_on_checks(summary, fabric_drops)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    f = carried.fabric
    (run_dir / "config.json").write_text(json.dumps({"fabric": f.args, "datapath": f.datapath, "pfc": f.pfc,
                                                     "replay": spec.record(), "backend": spec.backend}, indent=1))
    link_traffic.write_run(run_dir, net.model, all_rows, spec.gpus_per_server)  # after links.csv
    return summary


def in_flight_verdict(run_dir: Path, driver: Driver, prepared: Prepared, carried: Carried) -> dict:
    """Which figures stand with the messages still in flight when the run stopped (``testbed.repetition.in_flight``):
    the live driver's measured window is the serving spec's [warmup, duration), its measured requests those
    of requests.csv arriving in it."""
    from testbed.repetition import in_flight
    from traffic.runtime.serving_results import read_requests

    stopped = carried.t_end - carried.t0
    config = getattr(getattr(prepared, "traffic", None), "config", None)
    if driver.name != "live" or config is None:
        return in_flight.verdict(carried.rows, driver=driver.name, stopped_s=stopped)
    spec = config["spec"]
    window = (float(spec["warmup_s"]), float(spec["duration_s"]))
    measured: set = set()
    if (run_dir / "requests.csv").is_file():
        measured = {int(r["request_id"]) for r in read_requests(run_dir, *window)[1]}
    return in_flight.verdict(carried.rows, driver="live", stopped_s=stopped, dilation=float(config["dilation"]),
                             window=window, measured=measured)


def _clock_check(summary: dict, clocks: dict) -> None:
    """Several hosts: each host's clock offset from the first; an uncertainty over the lateness goal makes
    the run not fidelity-ok (an invariant violation)."""
    summary["clock_offsets_ms"] = clocks["offsets"]
    goal = clocks.get("goal_ms", 2.0)
    for host, o in clocks["offsets"].items():
        if o.get("uncertainty_ms") is None or o["uncertainty_ms"] > goal:
            summary["invariants"]["violations"].append(
                f"clocks: host {host}'s offset is uncertain by {o.get('uncertainty_ms')} ms, over the {goal:g} ms "
                "lateness goal: cross-host timestamps cannot be trusted")
            summary["invariants"]["ok"] = False


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
    if summary.get("in_flight", {}).get("note"):
        summary["warnings"].append(f"IN FLIGHT AT THE END: {summary['in_flight']['note']}")
    lat = summary["start_lateness_ms"]["p99"]
    if lat is not None and lat > 5:
        summary["warnings"].append(f"start lateness P99 {lat:.1f} ms is over 5 ms: the replay fell behind the trace")
