"""Measurement invariants every replay checks on its own numbers.

Pure functions on plain data (no fabric, no root): each check takes dicts and
lists and returns a list of violations, short strings with the numbers; an
empty list means it holds. ``check_all`` runs them all and is what
``testbed.repetition.writeup.write_up`` calls at the end of every repetition (``summary.json``
"invariants"; the report's fidelity section shows the violations and fails on
them).

Data shapes:

* ``queues``: the fabric's queues as the state file lists them, dicts with
  ``qid`` ("leaf1:9" switch egress port, "gpu3:p1" NIC port), ``kind``
  ("switch" or "nic") and ``towards`` (what the queue feeds: a switch name, or
  "gpu3:p1" for a switch port cabled to a GPU).
* a sample: ``{qid: {"bytes", "packets", "drops", "backlog", ...}}`` as
  ``testbed.emulation.fabricctl.read_queues`` reads the bfifo of each queue
  (bytes and packets sent, drops in packets, backlog in bytes). A missing
  counter is never read as 0: that is how links.csv got negative bytes.
* ``rows``: merged transfer rows (``traffic.runtime.records.merge_results``) with
  ``src_ip``, ``bytes`` (planned), ``received_bytes`` and ``verified``, and
  ``sent_src_ip`` where the sender moved the transfer to the other port pair.
* ``pause_events``: ``(time_ns, queue, event)`` with event 1 pause, 0 resume
  (``pfc.analysis.read_events``; queue = the paused transmitter).
"""

from __future__ import annotations

COUNTERS = ("bytes", "packets", "drops")
MAX_LINES = 10  # per check; the rest are counted in one line
PFC_FRAME_BYTES = 60  # an XOFF or XON frame as the queue counts it (minimum Ethernet frame without FCS)
# Open vSwitch (userspace datapath) sends a batch of up to NETDEV_MAX_BURST = 32 packets to a port with
# sendmmsg(); when the port's queue drops one (ENOBUFS), sendmmsg stops there, OVS retries that packet
# once and, if it is dropped again, frees the rest of the batch without any counter seeing it
# (lib/netdev-linux.c, netdev_linux_sock_batch_send / netdev_linux_send). So a counted drop can stand
# for up to 32 frames that never left. Measured with PFC off (default replay, n=32, both fabrics):
# 1.1-1.8 frames lost per counted drop on the switches that dropped, 0 B unaccounted on the others.
OVS_SEND_BATCH = 32
# Conservation slack per switch (bytes). Both samples are taken on a quiet fabric (the first before the
# agents start, the last after they stopped and their last bytes were acked), so in-flight bytes are
# only what the agents' closing connections still had on the wire when the last sample read the
# switch: FIN/ACK/RST segments of 66 B. Measured (default replay, n=32, both fabrics, PFC off):
# exactly 0 B unaccounted on every switch that neither dropped nor saw a PFC frame. Four full frames
# per switch cover a few such segments with room.
CONSERVATION_SLACK_FRAMES = 4


def _capped(lines: list[str], what: str = "more") -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return lines[:MAX_LINES] + [f"... and {len(lines) - MAX_LINES} {what}"]


def _delta(first: dict, last: dict, qid: str, field: str) -> int | None:
    a, b = first.get(qid) or {}, last.get(qid) or {}
    if field not in a or field not in b:
        return None
    return b[field] - a[field]


# ------------------------------------------------------------------ counters
def counter_deltas(first: dict, last: dict, fields=COUNTERS) -> list[str]:
    """Every queue's counters between the sampler's first and last sample: present in both, never lower."""
    out = []
    for qid in sorted(set(first) | set(last)):
        if qid not in first or qid not in last:
            out.append(f"{qid}: missing from the {'first' if qid not in first else 'last'} queue sample")
            continue
        for f in fields:
            a, b = first[qid].get(f), last[qid].get(f)
            if a is None or b is None:
                out.append(f"{qid}: no {f} counter in the {'first' if a is None else 'last'} queue sample")
            elif b < a:
                out.append(f"{qid}: {f} went down by {a - b} over the run ({a} -> {b})")
    return _capped(out, "queue counters")


def counter_regressions(prev: dict, cur: dict, t_prev: float, t_cur: float, fields=COUNTERS) -> list[str]:
    """Counters that went down between two consecutive samples (queues.csv rows)."""
    out = []
    for qid, row in cur.items():
        before = prev.get(qid)
        if before is None:
            continue
        for f in fields:
            a, b = before.get(f), row.get(f)
            if a is not None and b is not None and b < a:
                out.append(f"{qid}: {f} went down by {a - b} between samples at {t_prev:.3f} and {t_cur:.3f} s "
                           f"({a} -> {b})")
    return out


def utilization_tolerance(span_s: float, rate_bps: float, burst_bytes: int, frame_bytes: int,
                          pauses: int = 0, resumes: int = 0, read_s: float = 0.0) -> float:
    """How far over 1 a queue's measured utilization (bytes x 8 / span / rate) may honestly read.

    tbf sends at most rate x t + one bucket in any window t. The bucket is the burst at the start,
    and every tbf change refills it (PFC: a pause sets a one-frame bucket, a resume a full burst), so
    each pause adds up to a frame and each resume up to a burst. The span is measured between the
    starts of the first and last sample reads, while a queue is read somewhere inside each read,
    so its real window can be longer by up to one read's duration."""
    capacity = rate_bps / 8 * span_s
    if capacity <= 0:
        return float("inf")
    extra = burst_bytes * (1 + resumes) + frame_bytes * pauses + rate_bps / 8 * read_s
    return extra / capacity


def utilization_bounds(util: dict[str, float], tolerance: dict[str, float] | float) -> list[str]:
    """Every queue's utilization within [0, 1 + tolerance] (tolerance per queue or one for all)."""
    out = []
    for qid, u in sorted(util.items()):
        tol = tolerance.get(qid, 0.0) if isinstance(tolerance, dict) else tolerance
        if u < 0:
            out.append(f"{qid}: utilization {u:.4f} is negative")
        elif u > 1 + tol:
            out.append(f"{qid}: utilization {u:.4f} is over 1 + {tol:.4f} (link rate plus tbf bursts)")
    return _capped(out, "utilizations")


# -------------------------------------------------------------- conservation
def switch_feeds(queues: list[dict]) -> dict[str, dict[str, list[str]]]:
    """switch -> {"in": queues that feed it, "out": its own egress queues}.

    A switch's egress queue is its ``<switch>:<port>`` switch queue; what feeds a switch is every
    queue whose ``towards`` is that switch: other switches' egress queues cabled to it and the NIC
    queues of the GPU ports attached to it (fabrics.datapath: their receive ends are ports of
    the switch's receive bridge)."""
    out: dict[str, dict[str, list[str]]] = {}
    for q in queues:
        if q["kind"] == "switch":
            out.setdefault(q["qid"].split(":")[0], {"in": [], "out": []})["out"].append(q["qid"])
    for q in queues:
        if q["towards"] in out:
            out[q["towards"]]["in"].append(q["qid"])
    return out


def control_bytes(queues: list[dict], pause_events: list, frame_bytes: int) -> dict[str, dict[str, int]]:
    """Per switch, the most bytes of PFC frames on its two sides that no switch forwards:
    ``{"in": ..., "out": ..., "nic": ...}`` ("nic": the part of "in" from GPU NIC queues).

    On a pause pfcd sends one XOFF frame (60 B) into the paused transmitter's device and, if that
    left too (the queue was empty), a padded frame that eats the rest of the one-frame bucket (under
    a frame); on a resume one XON frame (60 B). The transmitter's queue counts them as sent, but they
    go to 01:80:c2:00:00:01, which the next switch's receive bridge never forwards. So they inflate
    the "in" of the switch the transmitter feeds and, for a switch's own paused egress queue, the
    "out" of that switch, though they never came in. Summed over the fabric the frames of switch
    transmitters cancel (counted out of one switch and into the next); those of NIC transmitters
    do not."""
    by_qid = {q["qid"]: q for q in queues}
    out: dict[str, dict[str, int]] = {}
    for _, queue, event in pause_events:
        q = by_qid.get(queue)
        if q is None:
            continue
        size = PFC_FRAME_BYTES + frame_bytes if event == 1 else PFC_FRAME_BYTES
        out.setdefault(q["towards"], {"in": 0, "out": 0, "nic": 0})["in"] += size
        if q["kind"] == "switch":
            out.setdefault(queue.split(":")[0], {"in": 0, "out": 0, "nic": 0})["out"] += size
        else:
            out[q["towards"]]["nic"] += size
    return out


def switch_conservation(queues: list[dict], first: dict, last: dict, frame_bytes: int,
                        control: dict[str, dict[str, int]] | None = None, slack_bytes: int | None = None,
                        margins: dict | None = None, cut: frozenset[str] = frozenset()) -> list[str]:
    """Per switch: bytes in = bytes out + change of what is queued + bytes dropped, within a tolerance.

    in = bytes sent by the queues that feed it; out = bytes sent by its egress queues; queued =
    their backlog at the end minus at the start. What is left, ``unaccounted = in - out - queued``,
    must lie in [-(control out) - slack, drops x OVS_SEND_BATCH frames + control in + slack]: drops
    are counted in packets, and each may stand for the rest of an OVS send batch that was discarded
    uncounted (see ``OVS_SEND_BATCH``), ``control`` are the PFC frames counted on either side that never
    crossed the switch (``control_bytes``), and ``slack`` the bytes in flight when a sample read the
    switch (``CONSERVATION_SLACK_FRAMES`` frames by default).
    Anything else (frames OVS or the AF_XDP receive path lost without a queue counting them, a
    counter read from the wrong qdisc, a sample cut short) shows up here. ``margins`` (a dict, if
    given) receives per switch the unaccounted bytes and the allowed range.

    A switch in ``cut`` had a cable cut during the run (``testbed fault``, an experiment's ``faults:``):
    the kernel flushes the queue of a port that loses carrier and OVS sends into it until it notices, and
    none of that is counted as a drop, so its bytes lost are reported (``lost_at_cut``), not checked."""
    slack = CONSERVATION_SLACK_FRAMES * frame_bytes if slack_bytes is None else slack_bytes
    control = control or {}
    out = []
    total = {"unaccounted": 0, "drops": 0, "nic": 0, "switches": 0, "missing": 0}
    for sw, feeds in sorted(switch_feeds(queues).items()):
        need = [(q, f) for q in feeds["in"] + feeds["out"] for f in ("bytes",)]
        need += [(q, f) for q in feeds["out"] for f in ("backlog", "drops")]
        missing = [f"{q} {f}" for q, f in need if _delta(first, last, q, f) is None]
        if missing:
            out.append(f"{sw}: conservation not checkable, no {missing[0]} in the first or last sample")
            total["missing"] += 1
            continue
        into = sum(_delta(first, last, q, "bytes") for q in feeds["in"])
        sent = sum(_delta(first, last, q, "bytes") for q in feeds["out"])
        queued = sum(_delta(first, last, q, "backlog") for q in feeds["out"])
        drops = sum(_delta(first, last, q, "drops") for q in feeds["out"])
        unaccounted = into - sent - queued
        ctl = control.get(sw, {})
        lo, hi = -ctl.get("out", 0) - slack, drops * OVS_SEND_BATCH * frame_bytes + ctl.get("in", 0) + slack
        beyond = max(0, unaccounted - drops * frame_bytes - ctl.get("in", 0))
        if margins is not None:
            margins[sw] = {"in": into, "out": sent, "queued": queued, "drops": drops,
                           "unaccounted": unaccounted, "allowed": [lo, hi]}
            margins[sw]["lost_at_cut" if sw in cut else "beyond_counted_drops"] = beyond
        if sw in cut:
            total["cut"] = total.get("cut", 0) + beyond
        elif not lo <= unaccounted <= hi:
            out.append(f"{sw}: {into} B in, {sent} B out, {queued:+d} B queued, {drops} drops: {unaccounted:+d} B "
                       f"unaccounted, allowed {lo:+d} .. {hi:+d} B")
        total["unaccounted"] += unaccounted
        total["drops"] += drops
        total["nic"] += ctl.get("nic", 0)
        total["switches"] += 1
    if total["switches"] and not total["missing"]:
        # the whole fabric: bytes the NICs sent = bytes delivered to GPUs + queued + dropped, where only
        # the NICs' own PFC frames are unforwarded (the switches' cancel out): a much tighter window
        u, lo = total["unaccounted"], -slack
        hi = total["drops"] * OVS_SEND_BATCH * frame_bytes + total["nic"] + total.get("cut", 0) + slack
        if margins is not None:
            margins["fabric"] = {"unaccounted": u, "allowed": [lo, hi]}
        if not lo <= u <= hi:
            out.append(f"fabric: {u:+d} B sent by NICs but neither delivered, queued nor dropped, allowed "
                       f"{lo:+d} .. {hi:+d} B ({total['drops']} drops, {total['nic']} B of NIC PFC frames at most)")
    return _capped(out, "switches")


# ------------------------------------------------------------------ payload
def nic_of_ip(ip: str) -> str:
    """"10.p.h.l" -> NIC queue id "gpu<h*256+l>:p<p>" (fabrics.addressing's plan)."""
    _, port, hi, lo = (int(x) for x in ip.split("."))
    return f"gpu{hi * 256 + lo}:p{port}"


def nic_sent_covers_payload(first: dict, last: dict, rows: list[dict]) -> list[str]:
    """Bytes each NIC port's queue sent (headers, ACKs and retransmissions included) >= the payload
    of the verified transfers that left from it; and the same for the whole fabric."""
    payload: dict[str, int] = {}
    for r in rows:
        if r.get("verified"):
            nic = nic_of_ip(r.get("sent_src_ip") or r["src_ip"])  # a transfer moved to the other pair left there
            payload[nic] = payload.get(nic, 0) + int(r.get("received_bytes") or r["bytes"])
    out = []
    total_sent = 0
    for nic, need in sorted(payload.items()):
        sent = _delta(first, last, nic, "bytes")
        if sent is None:
            out.append(f"{nic}: no sent bytes sampled, but its verified transfers carried {need} B")
            continue
        if sent < need:
            out.append(f"{nic}: its queue sent {sent} B, less than the {need} B of payload receivers verified from it")
    for qid in first:
        if qid in last and qid.startswith("gpu") and ":p" in qid:
            total_sent += _delta(first, last, qid, "bytes") or 0
    total = sum(payload.values())
    if total_sent < total:
        out.append(f"NIC queues sent {total_sent} B in all, less than the {total} B of verified payload")
    return _capped(out, "NIC ports")


def verified_bytes_match_plan(rows: list[dict]) -> list[str]:
    """Bytes the receivers verified = bytes planned, over the verified transfers (and row by row)."""
    ok = [r for r in rows if r.get("verified")]
    bad = [r for r in ok if r.get("received_bytes") is None or int(r["received_bytes"]) != int(r["bytes"])]
    got = sum(int(r.get("received_bytes") or 0) for r in ok)
    planned = sum(int(r["bytes"]) for r in ok)
    if not bad and got == planned:
        return []
    eg = bad[0] if bad else None
    example = (f" (e.g. transfer {eg.get('id')}: {eg.get('received_bytes')} of {eg['bytes']} B)" if eg else "")
    return [f"{len(ok)} verified transfers: receivers verified {got} B but {planned} B were planned; "
            f"{len(bad)} differ{example}"]


# --------------------------------------------------------------------- PFC
def lossless(queues: list[dict], first: dict, last: dict) -> list[str]:
    """PFC on: no switch (fabric) queue dropped during the run."""
    out = []
    for q in queues:
        if q["kind"] == "switch":
            d = _delta(first, last, q["qid"], "drops")
            if d:
                out.append(f"{q['qid']}: dropped {d} packets with PFC on")
    total = sum(_delta(first, last, q["qid"], "drops") or 0 for q in queues if q["kind"] == "switch")
    return _capped(out, "queues dropped") + ([f"fabric queues dropped {total} packets in all with PFC on"]
                                              if len(out) > 1 else [])


def pauses_paired(pause_events: list) -> list[str]:
    """Per transmitter, pauses and resumes alternate: every pause has its resume or is still open at
    the end; no second pause while paused (a lost resume) and no resume while not paused."""
    paused_at: dict[str, int] = {}
    out = []
    for t, queue, event in sorted(pause_events, key=lambda e: e[0]):
        if event == 1:
            if queue in paused_at:
                out.append(f"{queue}: paused again at {t} ns without a resume of its pause at {paused_at[queue]} ns")
            paused_at[queue] = t
        else:
            if queue not in paused_at:
                out.append(f"{queue}: resumed at {t} ns while not paused")
            paused_at.pop(queue, None)
    return _capped(out, "pause/resume mismatches")


def open_pauses(pause_events: list) -> list[str]:
    """Transmitters still paused at the end of the log (allowed; reported as information)."""
    state: dict[str, int] = {}
    for _, queue, event in sorted(pause_events, key=lambda e: e[0]):
        state[queue] = event
    return sorted(q for q, e in state.items() if e == 1)


# ----------------------------------------------------------------- together
def check_all(queues: list[dict], first: dict, last: dict, *, span_s: float, rate_bps: float, burst_bytes: int,
              frame_bytes: int, rows: list[dict], pfc_enabled: bool, pause_events: list | None = None,
              regressions: list[str] | None = None, sampler_error: str | None = None,
              read_s: float = 0.0, cut_switches: frozenset[str] = frozenset(), counted: bool = True) -> dict:
    """All invariants: {"ok", "violations", "checked", "margins"} (violations prefixed by the check's name).
    ``cut_switches``: switches a fault cut a cable of (their conservation is reported, not checked);
    ``counted``: False when the network has no queues to count (the ideal backend): only the transfers
    are checked."""
    pause_events = list(pause_events or [])
    checks: list[tuple[str, list[str]]] = []
    if not counted:
        checks.append(("verified_bytes_match_plan", verified_bytes_match_plan(rows)))
        violations = [f"{name}: {v}" for name, vs in checks for v in vs]
        return {"ok": not violations, "violations": violations, "checked": [name for name, _ in checks],
                "margins": {"conservation_max_unaccounted_bytes": None, "conservation_worst_switch": None,
                            "conservation": {}, "uncounted_loss_bytes": 0, "lost_at_cut_bytes": 0,
                            "max_utilization": None, "min_utilization": None, "open_pauses": []}}
    checks.append(("queue_samples", [f"queue sampler: {sampler_error}"] if sampler_error else []))
    checks.append(("counters_monotonic", counter_deltas(first, last) + _capped(list(regressions or []),
                                                                               "consecutive regressions")))
    span = max(span_s, 1e-9)
    pauses: dict[str, int] = {}
    resumes: dict[str, int] = {}
    for _, q, e in pause_events:
        (pauses if e == 1 else resumes)[q] = (pauses if e == 1 else resumes).get(q, 0) + 1
    util, tol = {}, {}
    for qid in last:
        b = _delta(first, last, qid, "bytes")
        if b is not None:
            util[qid] = b * 8 / span / rate_bps
            tol[qid] = utilization_tolerance(span, rate_bps, burst_bytes, frame_bytes, pauses.get(qid, 0),
                                             resumes.get(qid, 0), read_s)
    checks.append(("utilization_bounds", utilization_bounds(util, tol)))
    margins: dict = {}
    control = control_bytes(queues, pause_events, frame_bytes) if pfc_enabled else {}
    checks.append(("switch_conservation", switch_conservation(queues, first, last, frame_bytes, control,
                                                              margins=margins, cut=cut_switches)))
    checks.append(("nic_sent_covers_payload", nic_sent_covers_payload(first, last, rows)))
    checks.append(("verified_bytes_match_plan", verified_bytes_match_plan(rows)))
    if pfc_enabled:
        checks.append(("pfc_lossless", lossless(queues, first, last)))
        checks.append(("pfc_pauses_paired", pauses_paired(pause_events)))
    violations = [f"{name}: {v}" for name, vs in checks for v in vs]
    worst = max(((k, v) for k, v in margins.items() if k != "fabric"), key=lambda kv: abs(kv[1]["unaccounted"]),
                default=None)
    return {
        "ok": not violations,
        "violations": violations,
        "checked": [name for name, _ in checks],
        "margins": {
            "conservation_max_unaccounted_bytes": worst[1]["unaccounted"] if worst else None,
            "conservation_worst_switch": worst[0] if worst else None,
            "conservation": margins,
            # bytes lost beyond one frame per counted drop (and PFC frames): what queue_drops misses
            "uncounted_loss_bytes": sum(m.get("beyond_counted_drops", 0) for m in margins.values()),
            "lost_at_cut_bytes": sum(m.get("lost_at_cut", 0) for m in margins.values()),
            "max_utilization": round(max(util.values()), 4) if util else None,
            "min_utilization": round(min(util.values()), 4) if util else None,
            "open_pauses": open_pauses(pause_events) if pfc_enabled else [],
        },
    }
