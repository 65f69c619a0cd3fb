"""Failover benchmark: a long TCP permutation while fabric cables are cut and cleared one after another,
then the controller restarted; what each costs the traffic.

Every GPU sends to one other on both NIC port pairs (``fidelity.permutation``: 2n flows, one ``bulk.py``
per GPU, delivered bytes counted per flow in 1 ms bins). The cables cut are the CYCLES switch-to-switch
cables the most flows may cross (their data or their acks), one at a time, each down DOWN_S then up UP_S.

Data-plane recovery is measured with UDP probe streams (a datagram every PROBE_MS carrying its send time)
between the NIC pairs whose data crosses a cut cable: from the cut to the arrival of the first datagram
sent after it, the first byte delivered on the new path; TCP's own loss recovery (200 ms minimum RTO) would
hide the switches' part. Per TCP flow crossing a cut cable: bytes its sender retransmitted while the cable
was down, goodput before, during and after; a flow that delivered nothing while it was down is ``starved``
(through the cut: TCP resends what it holds, so this is silence, not data loss; no loss count is measured). At the
controller restart: packets the switches dropped for want of a rule (the table-miss counters, read from OVS
directly), flows the restarted controller re-installed, and the bytes TCP resent in that window against a
window as long before the first cut. ``fast`` mode: group buckets watch their ports; ``controller``: only
the controller's repair moves traffic.

The switches' own reaction is stamped in the kernel as OVS hands packets to its ports (``reaction_watch``):
per probe stream that left by the cut cable, from the carrier loss to the first packet out of another port
(``switch_reaction_ms``), without the queues' or the probes' one-way delay. A ZCube cut moves the probe
streams of two NIC pairs, so each probed pair sends PROBES_PER_PAIR streams (other source ports), only
around the cuts its data crosses (fewer datagrams in the queues). A TCP flow that delivered nothing during
a cut is classified: ``blackholed`` (its path was dead for the whole cut: the fabric's failure),
``backoff`` (its path was live, its sender waiting out TCP's doubled retransmission timer: transport),
``downstream`` (path live, sender not in back-off: held in queues downstream, PFC pauses).
"""

from __future__ import annotations

import bisect
import json
import os
import re
import subprocess
import time
from pathlib import Path

from common.errors import TestbedError
from fabrics import Fabric, addressing
from fabrics.datapath import DatapathConfig, netns_of
from fabrics.routing import forwarding_tables, walk
from testbed.bench import ovs_watch, reaction_watch
from testbed.bench.fidelity import BULK, _cpu_between, _cpu_sample, _saturated, permutation
from testbed.emulation import fabricctl, faults
from traffic.model.metrics import rounded_percentiles

MODES = ("fast", "controller")
BIN_MS = 1.0
PORT = 5400
# seconds after the traffic starts: warm-up, then CYCLES cuts (each down DOWN_S, then up UP_S), the restart
WARM_S, CYCLES, DOWN_S, UP_S, RESTART_WINDOW_S = 4.0, 8, 1.5, 1.5, 3.5
RESTART_S = WARM_S + CYCLES * (DOWN_S + UP_S) + 0.5
DURATION_S = RESTART_S + RESTART_WINDOW_S
PROBE_MS = 4.0  # between probe datagrams: the recovery's resolution
# ROFT hashes 5-tuples over its ECMP set: several source ports; ZCube moves a destination's streams together,
# but the samples of the switch's reaction are a stream's
PROBES_PER_PAIR = {"zcube": 6, "roft": 4}
# a probe stream sends from this long before a cut to this long after its clear (up to the next cut: the loop
# slips when a clear's restore runs long on a busy machine)
PROBE_LEAD_S, PROBE_TAIL_S = 1.0, UP_S
EPOCH_LEAD_S = 0.3  # the reaction watch starts its rows again this long before a cut: the ports used before it
LOSS_BEFORE_MS = 200.0  # datagrams sent this long before the cut may still have been on the dead cable
GOAL_P99_MS = 50.0


def cut_times(i: int) -> tuple[float, float]:
    """When cycle ``i`` cuts its cable and clears it, in seconds after the start."""
    cut = WARM_S + i * (DOWN_S + UP_S)
    return cut, cut + DOWN_S


# TCP_INFO samples: a baseline as long as the restart window before the first cut, then just before each cut
# and clear, then before the restart (the sender adds a final one as it stops)
MARKS_S = (WARM_S - RESTART_WINDOW_S - 0.05, *(t - 0.05 for i in range(CYCLES) for t in cut_times(i)),
           RESTART_S - 0.05)
MARK_BASE, MARK_RESTART, MARK_END = 0, 1 + 2 * CYCLES, 2 + 2 * CYCLES


# ------------------------------------------------------------------ pure analysis
def flows_of(fabric: Fabric) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
    """The permutation's flows on both port pairs: key "s>d:p<sp>" -> (src NIC port, dst NIC port)."""
    pairs, _ = permutation(fabric, 1.0)
    return {f"{s}>{d}:p{sp}": ((s, sp), (d, 3 - sp)) for s, d in pairs for sp in (1, 2)}


def cables_crossed(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int], tables=None) -> set[tuple[str, int]]:
    """Every switch output port (a cable end) any of the flow's paths, or its acks' paths, leaves by."""
    tables = tables or forwarding_tables(fabric)
    out = set()
    for a, b in ((src, dst), (dst, src)):
        for hops, ports in walk(fabric, tables, a, b):
            out |= {(sw, p) for sw, p in zip(hops, ports) if not fabric.peer(sw, p)[0].startswith("gpu")}
    return out


def probe_windows(cables: list[set], crosses) -> str:
    """``@LO-HI,...`` (seconds after the start) around the cuts of the cables (``crosses(cable)``: whether the
    pair's data crosses it), or "" when it crosses every cut cable (send all the time)."""
    spans = [(round(lo - PROBE_LEAD_S, 3), round(hi + PROBE_TAIL_S, 3))
             for i, cable in enumerate(cables) if crosses(cable) for lo, hi in [cut_times(i)]]
    return "" if len(spans) == len(cables) else "@" + ",".join(f"{lo:g}-{hi:g}" for lo, hi in spans)


def cables_to_cut(fabric: Fabric, flows: dict, k: int = CYCLES) -> list[tuple[tuple[str, int], list[str]]]:
    """The ``k`` switch-to-switch cables (by one end) the most flows may cross, with those flows."""
    tables = forwarding_tables(fabric)
    crossing: dict[tuple[str, int], set[str]] = {}
    for key, (src, dst) in flows.items():
        for sw, p in cables_crossed(fabric, src, dst, tables):
            end = min((sw, p), fabric.peer(sw, p))  # one name per cable
            crossing.setdefault(end, set()).add(key)
    if not crossing:
        raise TestbedError(f"no flow of the permutation crosses a switch-to-switch cable of {fabric.describe()}")
    ranked = sorted(sorted(crossing), key=lambda e: -len(crossing[e]))
    return [(end, sorted(crossing[end])) for end in ranked[:k]]


def data_crosses(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int], cable: set, tables=None) -> bool:
    """Whether any path of the flow's data (not its acks) leaves by an end of ``cable``."""
    tables = tables or forwarding_tables(fabric)
    return any(set(zip(hops, ports)) & cable for hops, ports in walk(fabric, tables, src, dst))


def probe_recovery(got: list[tuple[int, float, float]], cut_ms: float, until_ms: float, every_ms: float) -> dict:
    """How one probe stream (``got``: (sequence, sent ms, arrived ms) of every datagram that arrived) went
    through a cut at ``cut_ms``. ``recovery_ms``: from the cut to the arrival of the first datagram sent after
    the cut that arrived, the first byte delivered on the new path (its one-way delay included). ``lost``: the
    datagrams missing from LOSS_BEFORE_MS before the cut (in flight on the cable) up to that one; the stream
    ``stalled`` if any. ``delay_ms``: the median one-way delay of the second before the cut (queues at the
    emulated link rate), part of every recovery. ``blackhole_ms``: from the cut to the send time of the
    last of them (how long the switches sent into the dead cable). Losses after the recovery are congestion
    on the new path, which the goodput figures show."""
    got = sorted(got)
    if not got:
        return {"stalled": True, "lost": None, "delay_ms": None, "recovery_ms": None, "blackhole_ms": None}
    first = next(((seq, r) for seq, s, r in got if cut_ms <= s < until_ms), None)
    last = first[0] if first else got[-1][0] + 1
    have = {seq for seq, _, _ in got}
    # a datagram missing before one that arrived and was sent before the window was sent before it too:
    # start from the last such one (a stream's sequence runs through its idle windows: thousands of gaps)
    lo = max((seq for seq, s, _ in got if s < cut_ms - LOSS_BEFORE_MS), default=got[0][0])
    missing = [seq for seq in range(lo, last) if seq not in have
               and _sent_at(seq, got, every_ms) >= cut_ms - LOSS_BEFORE_MS]
    usual = sorted(r - s for _, s, r in got if cut_ms - 1000 <= s < cut_ms)
    return {"stalled": bool(missing) or first is None, "lost": len(missing),
            "delay_ms": round(usual[len(usual) // 2], 1) if usual else None,
            "recovery_ms": round(first[1] - cut_ms, 1) if first else None,
            "blackhole_ms": round(max(0.0, _sent_at(missing[-1], got, every_ms) - cut_ms), 1) if missing else 0.0}


def _sent_at(seq: int, got: list[tuple[int, float, float]], every_ms: float) -> float:
    """When a missing datagram was sent: between the send times of the arrived ones around it (the sender's
    loop slips when it waits for the CPU, so its schedule alone would misplace it)."""
    i = bisect.bisect_left(got, (seq,))  # got is sorted by sequence
    before = got[i - 1] if i > 0 else None
    after = next((g for g in got[i:i + 2] if g[0] > seq), None)
    if before and after:
        return before[1] + (after[1] - before[1]) * (seq - before[0]) / (after[0] - before[0])
    ref = before or after
    return ref[1] + (seq - ref[0]) * every_ms


def classify_stalled(flow_key: tuple[str, str], delivered: bool, tcp: list[dict], probes: list[dict],
                     info: dict, moved_ms: float | None = None, before: bool = True) -> str | None:
    """Why a TCP flow (``flow_key``: source and destination address) delivered nothing during a cut (None: it
    delivered). ``tcp``: the reaction watch's rows of its data streams that left by the dead cable;
    ``probes``: those of its NIC pair's probe streams; ``info``: its sender's TCP_INFO just before the clear;
    ``moved_ms``: by when the switches had moved every probe stream the cut hit (None: none was hit);
    ``before``: it delivered something in the second before the cut (a flow starved already is not the cut's).
    ``blackholed``: the cut's: none of its own packets left by another port before the clear and they still
    went into the dead cable after the switches had moved the probes (or half the cut when no probe was hit),
    or its pair's probes that used the cable never left by another port (the path was dead the whole cut);
    ``backoff``: the path was live and the sender was waiting out a doubled retransmission timer (TCP's, not
    the fabric's); ``downstream``: neither (held in a queue further on: PFC pauses)."""
    if delivered:
        return None
    late = moved_ms if moved_ms is not None else DOWN_S * 1e3 / 2
    if before and any(r["reaction_ms"] is None and r["into_dead_ms"] > late for r in tcp):
        return "blackholed"
    if before and tcp and all(r["reaction_ms"] is None for r in tcp) and probes and all(
            p["reaction_ms"] is None for p in probes):
        return "blackholed"
    if info.get("backoff", 0) > 0 or info.get("ca_state") == 4:
        return "backoff"
    return "downstream"


def goodput_bps(bins: list[tuple[int, int]], lo_ms: float, hi_ms: float) -> float:
    """Delivered bits per second between two times."""
    got = sum(n for b, n in bins if lo_ms <= b * BIN_MS < hi_ms)
    return got * 8 / ((hi_ms - lo_ms) / 1e3)


def percentiles(values: list[float]) -> dict:
    """p50, p99 (nearest rank, as every tail in the testbed), max and n."""
    got = rounded_percentiles(values, ("p50", "p99"), digits=1)
    return got | {"max": round(max(values), 1) if values else None, "n": len(values)}


def resent(infos: list[dict], lo: int, hi: int) -> int | None:
    """Bytes a sender retransmitted between two of its TCP_INFO samples (None when one is missing)."""
    try:
        return infos[hi]["bytes_retrans"] - infos[lo]["bytes_retrans"]
    except (IndexError, KeyError):
        return None


def analyse_cut(fabric: Fabric, flows: dict, cycle: int, end: tuple[str, int], crossing: list[str], bins: dict,
                sent: dict, probes: dict, cut_ms: float, clear_ms: float,
                reactions: list[dict] = ()) -> tuple[list[dict], list[dict]]:
    """One cut: a row per probe stream whose data crosses the cable (data-plane recovery), a row per TCP flow
    that may cross it (bytes resent while it was down, goodput before/during/after, ``starved``: it delivered
    nothing while the cable was down), and one per other
    flow that delivered nothing during it; ``stalled`` classifies each flow that delivered nothing
    (``classify_stalled``; ``reactions``: the reaction watch's streams that left by the cable)."""
    cable = {end, fabric.peer(*end)}
    ip_pair = {f"{addressing.ip_of(*src)}>{addressing.ip_of(*dst)}": k for k, (src, dst) in flows.items()}
    tables = forwarding_tables(fabric)  # once: building them is most of this function's time
    crosses: dict[str, bool] = {}
    streams = []
    for key, got in sorted(probes.items()):
        src, dst = key.split(">")
        flow = ip_pair[f"{src.rsplit(':', 1)[0]}>{dst}"]
        if flow not in crosses:
            crosses[flow] = data_crosses(fabric, *flows[flow], cable, tables)
        if crosses[flow]:
            streams.append({"cycle": cycle, "probe": key, "flow": flow,
                            **probe_recovery([tuple(x) for x in got], cut_ms, clear_ms, PROBE_MS)})
    moved = [r["reaction_ms"] for r in reactions if r["proto"] == reaction_watch.UDP and r["reaction_ms"] is not None]
    moved_ms = max(moved) if moved else None
    rows = []
    for key, (src, dst) in flows.items():
        ip_key = f"{addressing.ip_of(*src)}>{addressing.ip_of(*dst)}"
        fb = bins.get(ip_key, [])
        delivered = any(n for b, n in fb if cut_ms <= b * BIN_MS < clear_ms)
        if key not in crossing and delivered:
            continue
        pair = (addressing.ip_of(*src), addressing.ip_of(*dst))
        mine = [r for r in reactions if (r["src"], r["dst"]) == pair]
        infos = sent.get(ip_key, [])
        before = goodput_bps(fb, cut_ms - 1000, cut_ms) > 0
        stalled = classify_stalled(pair, delivered, [r for r in mine if r["proto"] == reaction_watch.TCP],
                                   [r for r in mine if r["proto"] == reaction_watch.UDP],
                                   infos[2 + 2 * cycle] if len(infos) > 2 + 2 * cycle else {}, moved_ms, before)
        rows.append({"cycle": cycle, "flow": key, "crossing": key in crossing, "starved": not delivered,
                     "stalled": stalled,
                     "bytes_retrans": resent(infos, 1 + 2 * cycle, 2 + 2 * cycle),
                     "goodput_before_bps": round(goodput_bps(fb, cut_ms - 1000, cut_ms)),
                     "goodput_during_bps": round(goodput_bps(fb, cut_ms, clear_ms)),
                     "goodput_after_bps": round(goodput_bps(fb, clear_ms + 200, clear_ms + 1200))})
    return streams, rows


def summarise(streams: list[dict], rows: list[dict], reactions: list[dict] = ()) -> dict:
    """The contract's figures over every cut: the switches' reaction (probe streams that left by a cut cable),
    recovery of the streams that lost something, the TCP flows crossing the cut cable that delivered nothing
    while it was down (``starved_through_cut``: silent, not a loss; they are among the flows classified
    black-holed / back-off / downstream) and why every flow that delivered nothing during a cut did."""
    hit = [r for r in streams if r["stalled"]]
    moved = [r for r in reactions if r["proto"] == reaction_watch.UDP]
    crossing = [r for r in rows if r.get("crossing", True)]
    return {"switch_reaction_ms": percentiles([r["reaction_ms"] for r in moved if r["reaction_ms"] is not None]),
            "switch_into_dead_ms": percentiles([r["into_dead_ms"] for r in moved]),
            "probes_never_moved": sum(r["reaction_ms"] is None for r in moved),
            "blackholed_flows": sum(r.get("stalled") == "blackholed" for r in rows),
            "backoff_flows": sum(r.get("stalled") == "backoff" for r in rows),
            "downstream_flows": sum(r.get("stalled") == "downstream" for r in rows),
            "recovery_ms": percentiles([r["recovery_ms"] for r in hit if r["recovery_ms"] is not None]),
            "blackhole_ms": percentiles([r["blackhole_ms"] for r in hit if r["blackhole_ms"] is not None]),
            "delay_ms": percentiles([r["delay_ms"] for r in hit if r["delay_ms"] is not None]),
            "starved_through_cut": sum(r["starved"] for r in crossing), "crossing": len(crossing),
            "probes": len(streams),
            "probes_stalled": len(hit), "probes_lost": sum(r["recovery_ms"] is None for r in hit),
            "bytes_retrans": sum(r["bytes_retrans"] or 0 for r in crossing)}


# ------------------------------------------------------------------ the fabric side
_FLOW_ROW = re.compile(r"duration=([\d.]+)s.*?n_packets=(\d+).*?priority=(\d+)")


def switch_counters(st) -> dict:
    """Per bridge: table-miss packets and every flow's age, read from OVS itself (not through a controller)."""
    out = {}
    for br in st.created.ovs_bridges:
        text = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", br], capture_output=True,
                              text=True, timeout=10).stdout
        miss, ages = 0, []
        for line in text.splitlines():
            m = _FLOW_ROW.search(line)
            if not m:
                continue
            if m.group(3) == "0":
                miss += int(m.group(2))
            ages.append(float(m.group(1)))
        out[br] = {"miss": miss, "ages": ages}
    return out


def restart_effect(before: dict, after: dict, span_s: float) -> dict:
    """Table-miss packets between two snapshots, and flows younger than the span between them (re-added)."""
    drops = sum(after[b]["miss"] - before[b]["miss"] for b in before if b in after)
    readded = sum(1 for b in after for age in after[b]["ages"] if age < span_s - 0.5)
    return {"controller_restart_drops": drops, "flows_reinstalled": readded}


def _start_bulk(fabric: Fabric, flows: dict, probed: dict[str, str], start: float) -> dict:
    """One bulk.py per GPU: its TCP flows, the UDP probes of the pairs in ``probed`` (flow -> windows), sinks
    for both."""
    procs = {}
    marks = ",".join(f"{start + m:.3f}" for m in MARKS_S)
    for g in fabric.gpus():
        argv = ["ip", "netns", "exec", netns_of(g), "python3", str(BULK), "--start", f"{start:.3f}",
                "--duration", str(DURATION_S), "--omit", "0", "--bins-ms", str(BIN_MS), "--marks", marks,
                "--probe-ms", str(PROBE_MS)]
        argv += [a for p in (1, 2) for a in ("--listen", f"{addressing.ip_of(g, p)}:{PORT}")]
        for key, ((s, sp), (d, dp)) in flows.items():
            if s != g:
                continue
            pair = f"{addressing.ip_of(s, sp)}>{addressing.ip_of(d, dp)}:{PORT}"
            argv += ["--connect", pair]
            if key in probed:
                argv += ["--probe", pair + probed[key]] * PROBES_PER_PAIR[fabric.kind]
        procs[g] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return procs


def _collect(procs: dict) -> tuple[dict, dict, dict]:
    bins, sent, probes = {}, {}, {}
    for g, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        if proc.returncode:
            raise TestbedError(f"bulk traffic in gpu{g} failed: {err.strip().splitlines()[-1:]}")
        doc = json.loads(out)
        bins.update({k: [tuple(x) for x in v] for k, v in doc["bins"].items()})
        probes.update(doc["probes"])
        sent.update(doc["sent"])
    return bins, sent, probes


def _at(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def _restart_retransmits(sent: dict) -> dict:
    """Bytes every sender resent in the restart's window and in a window as long before the first cut."""
    during = [resent(v, MARK_RESTART, MARK_END) for v in sent.values()]
    base = [resent(v, MARK_BASE, MARK_BASE + 1) for v in sent.values()]
    return {"restart_bytes_retrans": sum(x for x in during if x), "baseline_bytes_retrans": sum(x for x in base if x)}


def run_one(fabric_args: dict, config: DatapathConfig, mode: str, log=print, logs: Path | None = None,
            pfc=None) -> dict:
    """Bring a fabric up in ``mode``, run the permutation through the cuts, clears and the restart, bring it
    down; the figures of the contract, the per-stream and per-flow rows."""
    if mode not in MODES:
        raise TestbedError(f"failover mode {mode!r}: expected one of {', '.join(MODES)}")
    if fabricctl.load_state() is not None:
        raise TestbedError("a fabric is up: bench failover brings its own ('testbed down' first)")
    st = fabricctl.up(fabric_args, config, log=log, failover=mode, pfc=pfc)
    procs: dict = {}
    watch = monitor = None
    raised: list[int] = []
    try:
        fabric = st.model()
        flows = flows_of(fabric)
        cuts = cables_to_cut(fabric, flows)
        targets = [f"link {end[0]}:{end[1]}" for end, _ in cuts]
        cables = [{end, fabric.peer(*end)} for end, _ in cuts]
        tables = forwarding_tables(fabric)
        crossing = {k: [data_crosses(fabric, *flows[k], c, tables) for c in cables] for k in flows}
        probed = {k: probe_windows(cables, lambda c, k=k: crossing[k][cables.index(c)]) for k in flows
                  if any(crossing[k])}
        watch = reaction_watch.Watch(sorted(addressing.switch_intf(sw, p) for sw in fabric.switches
                                            for p in fabric.switches[sw].ports), st.directory, port=PORT)
        monitor = ovs_watch.PortStatusMonitor(sorted(fabric.switches), st.directory)
        raised = ovs_watch.realtime(log)
        wall_minus_mono = time.time() - time.monotonic()
        log(f"{fabric.kind} ({mode}): {len(flows)} flows; cutting {', '.join(targets)} in turn "
            f"({len(probed)} NIC pairs probed)")
        start = time.monotonic() + 2.0 + 0.25 * fabric.n_gpus  # ~165 ms of CPU per bulk.py, on one free core
        procs = _start_bulk(fabric, flows, probed, start)
        events, reactions = [], []
        _at(start + WARM_S - 2)
        c1 = _cpu_sample()
        for i in range(CYCLES):
            cut_s, clear_s = cut_times(i)
            _at(start + cut_s - EPOCH_LEAD_S)
            watch.epoch(i + 1)
            _at(start + cut_s)
            down = faults.inject(targets[i % len(targets)], "down", log=log)
            _at(start + clear_s)
            rows, clear_ns = watch.rows(), time.monotonic_ns()
            end = cuts[i % len(cuts)][0]
            # each dead port's carrier loss: when its far end went down, not when the verb started
            lost = {e: down.get("t_devices", {}).get(addressing.switch_intf(*e) + "r", down["t"])
                    for e in (end, fabric.peer(*end))}
            dead = {watch.ifindex[addressing.switch_intf(*e)]: round(t * 1e9) for e, t in lost.items()}
            reactions.append([r | {"cycle": i} for r in reaction_watch.stream_reactions(rows, i + 1, dead,
                                                                                         clear_ns)])
            down["wall"] = {f"{e[0]}:{e[1]}": t + wall_minus_mono for e, t in lost.items()}
            events.append((down, faults.inject(targets[i % len(targets)], "up", log=log)))
        _at(start + RESTART_S)
        c2 = _cpu_sample()
        before = switch_counters(st)
        t_before = time.monotonic()
        restart = faults.inject("controller", "restart", log=log)
        _at(start + DURATION_S - 0.5)
        effect = restart_effect(before, switch_counters(st), time.monotonic() - t_before)
        bins, sent, probes = _collect(procs)
        status, status_raw = monitor.events(), monitor.raw()
    finally:
        ovs_watch.unrealtime(raised)
        if monitor is not None:
            monitor.close()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if watch is not None:
            watch.close()
        fabricctl.down()
    streams, rows, port_status = [], [], []
    for i, (down, up) in enumerate(events):
        end, crossing = cuts[i % len(cuts)]
        more = analyse_cut(fabric, flows, i, end, crossing, bins, sent, probes, (down["t"] - start) * 1e3,
                           (up["t"] - start) * 1e3, reactions[i])
        streams += more[0]
        rows += more[1]
        for sw, port in (end, fabric.peer(*end)):
            cut_wall = down["wall"][f"{sw}:{port}"]
            ms = ovs_watch.status_after(status.get(sw, []), port, cut_wall, cut_wall + DOWN_S)
            port_status.append({"cycle": i, "switch": sw, "port": port, "port_status_ms": ms})
    cpu = _cpu_between(c1, c2)
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"failover-{fabric.kind}-{mode}.json").write_text(json.dumps(
            {"bins": bins, "sent": sent, "probes": probes, "events": events, "restart": restart, "start": start,
             "streams": streams, "flows": rows, "reactions": reactions, "port_status": port_status,
             "port_status_events": status, "port_status_raw": status_raw}))
    moved = [r for cut in reactions for r in cut]
    return {"fabric": fabric.kind, "mode": mode, **summarise(streams, rows, moved), **effect,
            **_restart_retransmits(sent),
            "cables": targets, "flows": len(flows),
            "restored_ms": percentiles([up["restored_s"] * 1e3 for _, up in events]),
            "restart_s": restart["took_s"],
            "aggregate_goodput_bps": round(sum(goodput_bps(v, 0, DURATION_S * 1e3) for v in bins.values())),
            "probes_per_pair": PROBES_PER_PAIR[fabric.kind], "cycles": CYCLES,
            "ovs_port_status_ms": percentiles([r["port_status_ms"] for r in port_status
                                               if r["port_status_ms"] is not None]),
            "ovs_port_status_missing": sum(r["port_status_ms"] is None for r in port_status),
            "ovs_realtime": os.environ.get(ovs_watch.ENV, "") if raised else "",
            "cpu": cpu, "cpu_saturated": _saturated(cpu), "per_stream": streams, "per_flow": rows,
            "per_reaction": moved, "per_port_status": port_status}


def bench(fabric_args: dict, config: DatapathConfig, modes: tuple[str, ...] = MODES, log=print,
          logs: Path | None = None, pfc=None) -> list[dict]:
    """``run_one`` per mode, on a fresh fabric each (``pfc``: a PfcConfig; lossless, so a lost datagram is
    the cut's and not a full queue's)."""
    return [run_one(fabric_args, config, m, log, logs, pfc) for m in modes]
