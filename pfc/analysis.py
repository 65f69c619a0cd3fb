"""What the PFC pause daemon's log says: per-port pause time, how far pauses
spread from their congestion points, and which transfers were victims.

``pfc.txt`` (close to HPCC's), one event a line, whitespace-separated::

    time_ns node node_type port event cause
    1700000000123456789 sw3 1 9 1 sw4:3

* ``time_ns``: CLOCK_MONOTONIC nanoseconds (the clock of ``transfers.csv``);
* ``node``: the PAUSED transmitter ("sw3", "leaf2", "gpu5");
* ``node_type``: 1 switch, 0 host;
* ``port``: OpenFlow port (switch) or NIC port 1/2 (host);
* ``event``: 1 pause, 0 resume;
* ``cause``: queue id of the congested queue that made this pause/resume happen.

A transmitter can be held by several causes at once: a count per (node, port),
+1 on pause and -1 on resume; it is paused from the first pause while none was
active until the resume that releases the last active cause. A resume takes
back the hold of its own cause when that cause holds the transmitter, else the
oldest hold (so a log that records only transitions, as ``pfcd`` writes it:
the pause with the first cause and the resume with the last, still pairs up,
and the pausing cause is credited with the whole paused stretch). A resume
with cause ``exit`` (pfcd's shutdown) releases every hold; a resume with
nothing held is ignored.

Queue ids: "sw3:9" is switch sw3's OpenFlow port 9 egress queue, "gpu5:p1" is
GPU 5's NIC port 1 queue; the transmitter of an event is the queue ``node:port``
(``node:p<port>`` for a host).
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from pathlib import Path

from common.errors import TestbedError
from fabrics import addressing
from fabrics.routing import walk
from fabrics.topology import Fabric
from pfc.policy import queue_sort_key, tables_of
from traffic.model import metrics

FIELDS = ("time_ns", "node", "node_type", "port", "event", "cause")
PORT_STATS_COLUMNS = ("node", "port", "queue", "pauses", "paused_s", "longest_pause_s", "paused_fraction")
EXIT_CAUSE = "exit"  # pfcd's release_all on shutdown


@dataclass(frozen=True)
class PauseEvent:
    time_ns: int
    node: str
    node_type: int  # 1 switch, 0 host
    port: int
    event: int  # 1 pause, 0 resume
    cause: str

    @property
    def queue(self) -> str:
        """Queue id of the paused transmitter: "sw3:9" or "gpu5:p1"."""
        return queue_id(self.node, self.node_type, self.port)

    def line(self) -> str:
        return f"{self.time_ns} {self.node} {self.node_type} {self.port} {self.event} {self.cause}"


def queue_id(node: str, node_type: int, port: int) -> str:
    return f"{node}:{port}" if node_type == 1 else f"{node}:p{port}"


def percentiles(values) -> dict:
    """{"n", "p50", "p99", "max"} of a list of latencies (nearest-rank), rounded to 3 decimals (None when empty)."""
    vals = list(values)
    return {"n": len(vals), **metrics.rounded_percentiles(vals, ("p50", "p99")),
            "max": round(float(max(vals)), 3) if vals else None}


# ---------------------------------------------------------------------- I/O
def _int_field(path, number: int, name: str, text: str, allowed=None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise TestbedError(f"{path}:{number}: field {name} {text!r} is not an integer") from None
    if value < 0:
        raise TestbedError(f"{path}:{number}: field {name} {value} is negative")
    if allowed is not None and value not in allowed:
        raise TestbedError(f"{path}:{number}: field {name} {value} is invalid: expected "
                           f"{' or '.join(str(a) for a in allowed)}")
    return value


def read_events(path) -> list[PauseEvent]:
    """Events of a pfc.txt in file order. Blank lines and ``#`` comments are skipped; any other
    bad line raises a one-line TestbedError naming the file, the line number and the field."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise TestbedError(f"cannot read the PFC log {path}: {exc.strerror or exc}") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) != len(FIELDS):
            missing = FIELDS[len(parts)] if len(parts) < len(FIELDS) else None
            what = f"field {missing} is missing" if missing else f"{len(parts) - len(FIELDS)} extra field(s)"
            raise TestbedError(f"{path}:{number}: {what}: expected '{' '.join(FIELDS)}', got {line.strip()[:60]!r}")
        t = _int_field(path, number, "time_ns", parts[0])
        node = parts[1]
        node_type = _int_field(path, number, "node_type", parts[2], (0, 1))
        if node_type == 0 and not node.startswith("gpu"):
            raise TestbedError(f"{path}:{number}: field node {node!r} is not a host (gpu<i>) but node_type is 0")
        if node_type == 1 and node.startswith("gpu"):
            raise TestbedError(f"{path}:{number}: field node {node!r} is a host but node_type is 1 (switch)")
        port = _int_field(path, number, "port", parts[3], (1, 2) if node_type == 0 else None)
        if port == 0:
            raise TestbedError(f"{path}:{number}: field port 0 is invalid: ports are numbered from 1")
        event = _int_field(path, number, "event", parts[4], (0, 1))
        out.append(PauseEvent(t, node, node_type, port, event, parts[5]))
    return out


# -------------------------------------------------------------- timelines
@dataclass
class _Timeline:
    node: str
    port: int
    queue: str
    paused: list[tuple[int, int | None]]  # transmitter paused [start, end); end None: still paused at the log's end
    by_cause: dict[str, list[tuple[int, int | None]]]  # cause -> merged intervals it held the transmitter
    max_hops: int = 0


@dataclass
class _Replay:
    timelines: dict[str, _Timeline]
    roots: set[str]


def _replay(events) -> _Replay:
    """Run the log in time order (same-time events keep file order).

    Per transmitter, the active holds are a list of (cause, since, hops): a
    pause appends one, a resume removes the oldest hold of its cause, or the
    oldest hold of any cause when its cause holds nothing (a log that records
    only transitions, as pfcd writes it: the pause with the first cause, the
    resume with the last, credits the pausing cause with the whole stretch);
    a resume with cause ``exit`` removes them all; a resume with nothing
    active is ignored. Paused = at least one hold. A hold's hops are 1 when
    its cause queue was not paused at the pause (the cause is a root), else
    the fewest hops among the cause's own holds + 1."""
    timelines: dict[str, _Timeline] = {}
    holds: dict[str, list[list]] = {}
    roots: set[str] = set()
    raw: dict[str, dict[str, list]] = {}
    for e in sorted(events, key=lambda e: e.time_ns):
        q = e.queue
        tl = timelines.get(q)
        if tl is None:
            tl = timelines[q] = _Timeline(e.node, e.port, q, [], {})
            holds[q], raw[q] = [], {}
        active = holds[q]
        if e.event == 1:
            over = holds.get(e.cause)
            if over:
                h = min(x[2] for x in over) + 1
            else:
                roots.add(e.cause)
                h = 1
            if not active:
                tl.paused.append((e.time_ns, None))
            active.append([e.cause, e.time_ns, h])
            tl.max_hops = max(tl.max_hops, h)
            continue
        if not active:
            continue
        if e.cause == EXIT_CAUSE:
            gone = list(active)
        else:
            idx = next((i for i, x in enumerate(active) if x[0] == e.cause), 0)
            gone = [active[idx]]
        for x in gone:
            active.remove(x)
            raw[q].setdefault(x[0], []).append((x[1], e.time_ns))
        if not active:
            tl.paused[-1] = (tl.paused[-1][0], e.time_ns)
    for q, active in holds.items():
        for cause, since, _ in active:
            raw[q].setdefault(cause, []).append((since, None))
    for q, by_cause in raw.items():
        timelines[q].by_cause = {c: _merge(spans) for c, spans in by_cause.items()}
    return _Replay(timelines, roots)


def _merge(spans: list[tuple[int, int | None]]) -> list[tuple[int, int | None]]:
    """Union of intervals (None end = open), sorted and disjoint."""
    out: list[list] = []
    for a, b in sorted(spans, key=lambda s: s[0]):
        if out and (out[-1][1] is None or a <= out[-1][1]):
            if out[-1][1] is not None and (b is None or b > out[-1][1]):
                out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _timelines(events) -> dict[str, _Timeline]:
    return _replay(events).timelines


# ---------------------------------------------------------------- per port
def port_stats(events, t_start_ns: int, t_end_ns: int) -> list[dict]:
    """One row per transmitter in the log (natural queue order):
    node, port, queue, pauses (transitions into paused at a time within
    [t_start, t_end]), paused_s (paused time within the window; a pause still
    active at the log's end counts until t_end), longest_pause_s (longest
    paused stretch clipped to the window), paused_fraction (paused_s / window)."""
    if t_end_ns <= t_start_ns:
        raise TestbedError(f"window end {t_end_ns} ns is not after its start {t_start_ns} ns")
    window = (t_end_ns - t_start_ns) / 1e9
    rows = []
    for q in sorted(timelines := _timelines(events), key=queue_sort_key):
        tl = timelines[q]
        pauses, total, longest = 0, 0, 0
        for a, b in tl.paused:
            if t_start_ns <= a <= t_end_ns:
                pauses += 1
            b = t_end_ns if b is None else b
            d = min(b, t_end_ns) - max(a, t_start_ns)
            if d > 0:
                total += d
                longest = max(longest, d)
        rows.append({"node": tl.node, "port": tl.port, "queue": q, "pauses": pauses, "paused_s": total / 1e9,
                     "longest_pause_s": longest / 1e9, "paused_fraction": total / 1e9 / window})
    return rows


def write_port_stats_csv(path, rows) -> Path:
    path = Path(path)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(PORT_STATS_COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 9) if isinstance(v, float) else v) for k, v in r.items()})
    return path


# ------------------------------------------------------------------ spread
def spread(events) -> dict:
    """How far pauses spread from where the congestion was.

    Events are taken in time order. A pause whose cause queue was not itself
    paused at that moment comes from a congestion point (a root) and is 1 hop;
    a pause whose cause was paused, at h hops (the fewest over the holds on
    the cause then), is h + 1 hops. Returns {"roots": sorted cause queues that
    were unpaused when they caused a pause, "max_hops": the largest hop count
    seen (0 without pauses), "hops_by_queue": {paused transmitter queue: its
    largest hop count over the run}}."""
    rep = _replay(events)
    hops = {q: tl.max_hops for q, tl in rep.timelines.items() if tl.max_hops}
    return {"roots": sorted(rep.roots, key=queue_sort_key), "max_hops": max(hops.values(), default=0),
            "hops_by_queue": {q: hops[q] for q in sorted(hops, key=queue_sort_key)}}


# ----------------------------------------------------------------- victims
class _Spans:
    """Disjoint sorted intervals with prefix sums: overlap with [s, e] in O(log n)."""

    __slots__ = ("starts", "ends", "prefix")

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.starts = [a for a, _ in spans]
        self.ends = [b for _, b in spans]
        self.prefix = [0]
        for a, b in spans:
            self.prefix.append(self.prefix[-1] + (b - a))

    def overlap(self, s: int, e: int) -> int:
        i = bisect.bisect_right(self.ends, s)  # first span ending after s
        j = bisect.bisect_left(self.starts, e)  # spans [i, j) start before e
        if i >= j:
            return 0
        total = self.prefix[j] - self.prefix[i]
        total -= max(0, s - self.starts[i])
        total -= max(0, self.ends[j - 1] - e)
        return max(0, total)


def _number(value):
    """int ns or None for missing / NaN / empty."""
    if value is None or value == "":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


def transfer_path(fabric: Fabric, tables, src_ip: str, dst_ip: str) -> tuple[frozenset[str], bool]:
    """Egress queue ids a transfer can traverse (its NIC queue, then every switch queue every
    walk allows) and whether the path is ambiguous (more than one ECMP alternative)."""
    src = addressing.parse_ip(src_ip)
    dst = addressing.parse_ip(dst_ip)
    for name, (g, _) in (("src_ip", src), ("dst_ip", dst)):
        if g > fabric.n_gpus:
            raise TestbedError(f"{name} {src_ip if name == 'src_ip' else dst_ip} is GPU {g}, "
                               f"not one of this fabric's 1..{fabric.n_gpus}")
    try:
        walks = walk(fabric, tables, src, dst)
    except RuntimeError as exc:
        raise TestbedError(f"no path from {src_ip} to {dst_ip}: {exc}") from None
    queues = {addressing.endpoint_name(*src)}
    for hops, outs in walks:
        queues.update(f"{sw}:{p}" for sw, p in zip(hops, outs))
    return frozenset(queues), len(walks) > 1


def victim_flows(events, transfers, fabric: Fabric) -> list[dict]:
    """Transfers held back by congestion they did not contribute to.

    A transfer's path is its source NIC queue ("gpu<i>:p<port>", port = the
    plane of src_ip) and every switch egress queue the forwarding tables send
    it through; at an ECMP hop (ROFT) it counts as traversing every candidate
    and its rows say ``ambiguous: True``. It is a VICTIM if, during
    [start_ns, end_ns], some queue on its path was paused by a cause queue NOT
    on its path (overlap > 0; a pause still active at the log's end lasts
    until the latest transfer end). Transfers without both times are skipped.

    One row per victim transfer, for the (paused queue, cause) pair that held
    it longest: request_id, src, dst, src_ip, dst_ip, paused_queue, cause,
    overlap_s, pairs (how many (paused queue, cause) pairs held it), ambiguous.
    Event and transfer times must be on the same clock (CLOCK_MONOTONIC ns)."""
    events = list(events)
    transfers = list(transfers)
    tables = tables_of(fabric)
    horizon = max([e.time_ns for e in events] + [t for t in (_number(r.get("end_ns")) for r in transfers)
                                                  if t is not None], default=0) + 1
    by_queue: dict[str, list[tuple[str, _Spans]]] = {}
    for q, tl in _timelines(events).items():
        by_queue[q] = [(c, _Spans([(a, horizon if b is None else b) for a, b in spans]))
                       for c, spans in sorted(tl.by_cause.items())]
    paths: dict[tuple[str, str], tuple[frozenset[str], bool]] = {}
    rows = []
    for r in transfers:
        s, e = _number(r.get("start_ns")), _number(r.get("end_ns"))
        if s is None or e is None:
            continue
        key = (r["src_ip"], r["dst_ip"])
        if key not in paths:
            paths[key] = transfer_path(fabric, tables, *key)
        path, ambiguous = paths[key]
        best, pairs = None, 0
        for q in path:
            for cause, spans in by_queue.get(q, ()):
                if cause in path:
                    continue
                ov = spans.overlap(s, e)
                if ov > 0:
                    pairs += 1
                    if best is None or ov > best[0] or (ov == best[0] and (queue_sort_key(q), cause) < best[3]):
                        best = (ov, q, cause, (queue_sort_key(q), cause))
        if best:
            rows.append({"request_id": r.get("request_id"), "src": r.get("src"), "dst": r.get("dst"),
                         "src_ip": r["src_ip"], "dst_ip": r["dst_ip"], "paused_queue": best[1],
                         "cause": best[2], "overlap_s": best[0] / 1e9, "pairs": pairs, "ambiguous": ambiguous})
    return rows


