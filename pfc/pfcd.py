"""The PFC pause daemon: the fast loop that turns queue thresholds into pauses.

The controller owns the policy (which queue pauses which transmitters, the
XOFF/XON thresholds: ``pfc.policy``) and starts this process with
it; this process only executes it, because the loop must run every few
hundred microseconds, next to the kernel, and an eventlet controller cannot
promise that. Split:

* kernel (queue_watch.bpf.c): counts bytes into and out of every switch queue
  and marks XOFF/XON crossings with their time;
* this loop: reads the marks from the mmapped BPF array when the kernel's
  doorbell (a ring buffer written at each crossing) wakes it, and every
  ``poll_us`` at the latest;
  on XOFF of queue C it pauses every feeder of C (reference-counted: a feeder
  held by several congested queues resumes when the last lets go), on XON it
  resumes them; pause/resume = one pre-built netlink message (tbfmsg), sent
  at once for every transmitter a crossing concerns, then, one per loop turn
  and only while no new crossing waits, a PFC XOFF/XON frame sent into the
  queue's device runs its qdisc (a paused bucket lets the frame already due
  go now, not at tbf's next timer; a resumed queue starts now). A send also
  runs the CPU's pending network softirq work, so a crossing waits for one
  frame's send at most;
* log: ``pfc.txt`` (HPCC-like, one event a line) and a status JSON once a
  second (paused transmitters, counts, measured pause/resume latencies).

Latency, measured from kernel timestamps of traffic (the daemon's own XOFF/XON
frames are stamped apart): pause latency = last departure of a paused feeder
- the XOFF crossing of its cause (feeders that sent nothing after the
crossing count 0); resume latency = first departure of a resumed feeder that
still had backlog - the XON crossing.

Run: ``python -m pfc.pfcd --policy policy.json`` (root).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common import owned
from pfc import bpfmaps, tbfmsg, xpfc
from pfc.analysis import percentiles
from pfc.bpfmaps import F
from pfc.daemon_host import Writer, away_from_pmd, no_idle_halt, quiet_gc, realtime
from pfc.files import GAPS_FILE, LATENCY_FILE
from traffic.model import metrics

MEASURE_AFTER_NS = 30_000_000  # look at departures 30 ms after a pause/resume
STALL_NS = 30_000_000
EXTEND_EVERY_NS = 2_000_000  # how often queues over XOFF look for newly active sources


@dataclass(eq=False)
class ResumeProbe:
    """One resume, until its latency is measured: the transmitter's backlog
    (read after its XON frame; 0 if paused again before that frame went out),
    which resume of the transmitter it is, and its first departure, kept here
    only when a later resume is about to reset the kernel's stamp."""

    tx: "Transmitter"
    epoch: int
    backlog: int | None = None
    first_ns: int | None = None


class Transmitter:
    """A queue that can be paused: its device, its netlink socket and messages."""

    def __init__(self, qid: str, q: dict, slot: int, ifindex: int, sock: socket.socket, kick: socket.socket,
                 rate_bps: float, burst: int, mtu: int) -> None:
        self.qid, self.slot, self.kind = qid, slot, q["kind"]
        node, port = qid.split(":")
        self.node = node
        self.node_type = 1 if q["kind"] == "switch" else 0
        self.port = int(port.lstrip("p"))
        self.sock, self.kick = sock, kick
        frame = mtu + 14
        self.ifindex = ifindex
        self.pause_msg = tbfmsg.tbf_change(ifindex, tbfmsg.PAUSE_RATE_BPS, frame, q["limit"])
        self.resume_msg = tbfmsg.tbf_change(ifindex, rate_bps, burst, q["limit"])
        self.xon_frame = tbfmsg.pfc_frame(b"\x02\xff\x00\x00\x00\x02", 0)
        self.xoff_frame = tbfmsg.pfc_frame(b"\x02\xff\x00\x00\x00\x02", 0xFFFF)
        self.holders = 0
        self.pause_cross_ns = 0  # XOFF crossing that paused it, until its pause latency is measured
        self.pause_notice_ns = 0  # when the loop saw that crossing
        self.pause_cause = ""
        self.resumes = 0  # resumes so far: a resume's measurement is tied to its number
        self.cut_short = -1  # number of the last resume that a new pause ended before any frame left
        self.deq_at_change = 0  # departure counter just before the last pause's tbf change
        self.deq_after_kick = 0  # ... and right after its XOFF frame (bytes that left later show in the log)
        self.kick_due = False  # changed, its XOFF/XON frame not sent yet (PauseDaemon.kicks)
        self.resume_item: ResumeProbe | None = None  # its last resume, until measured

    kick_errors = 0  # frames the kernel refused (class-wide: reported in the status)

    def resume(self) -> None:
        """Back to the link rate with a full bucket, and an XON frame to run the qdisc now
        (on exit; the loop sends the frame later, see PauseDaemon.kick)."""
        self.change(self.resume_msg)
        self.send_frame(self.xon_frame)

    slow_changes: list = []  # (monotonic ns, seconds) of tbf changes over 1 ms (class-wide)

    def change(self, msg: bytes) -> None:
        """One tbf change. The kernel runs it inside send() under the RTNL lock,
        so a send can wait for whoever holds that lock: slow ones are kept."""
        t0 = time.monotonic_ns()
        self.sock.send(msg)
        took = time.monotonic_ns() - t0
        if took > 1_000_000:
            Transmitter.slow_changes.append((t0, took / 1e9))

    def send_frame(self, frame: bytes) -> None:
        """Send a PFC frame into the device: it runs the qdisc now. A tbf change
        does not, so without it the one frame a paused bucket lets through would
        wait for tbf's timer (up to one frame time at the old rate: 8 ms at
        3 Mbit/s), and a resumed queue would wait for its next packet."""
        try:
            self.kick.send(frame)
        except OSError:
            Transmitter.kick_errors += 1


def _in_netns(name: str | None, fn):
    """``fn()`` inside network namespace ``name`` (None: where we are)."""
    if name is None:
        return fn()
    from traffic.runtime import netns

    with netns.inside(name):
        return fn()


def _ifindex(name: str) -> int:
    """A device's index in the current namespace."""
    return socket.if_nametoindex(name)


def _kick_socket(dev: str) -> socket.socket:
    """A raw socket on ``dev`` for the XOFF/XON frames that run its qdisc."""
    k = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    # frames held in a paused queue keep counting against the socket's send
    # buffer; with the default one a later kick would fail (EAGAIN) unseen
    k.setsockopt(socket.SOL_SOCKET, 32, 1 << 22)  # SO_SNDBUFFORCE (root): 4 MB
    k.bind((dev, 0))
    k.setblocking(False)
    return k


@dataclass(frozen=True, eq=False)
class DaemonConfig:
    """What the policy asks of the loop, worked out once: every queue's kernel row, which
    queues are watched, the switches' shared pools, and where a queue's packets come from."""

    policy: dict
    queues: dict  # queue id -> the policy's entry
    qids: list[str]  # sorted: a queue's row in the kernel's table is its index here
    slot: dict[str, int]
    watched: list[str]  # queues with an XOFF threshold, whose crossings the loop acts on
    watched_slots: np.ndarray
    switch_slot: dict[str, int]  # dynamic thresholds: one extra row per switch counts its pool
    nic_index: dict[str, int]  # NIC queue id -> its column in the kernel's tb_seen table
    sources: dict[str, list[tuple[str, frozenset]]]  # watched queue -> (feeder, NIC columns through it)
    window_ns: dict[str, int]  # how long a packet that entered a watched queue may still be in it
    poll_s: float
    frame: int  # bytes of one full-size frame

    @classmethod
    def from_policy(cls, policy: dict) -> "DaemonConfig":
        """Everything the loop needs from ``policy`` that no kernel object is needed for."""
        queues = policy["queues"]
        qids = sorted(queues)
        slot = {qid: i for i, qid in enumerate(qids)}
        watched = [qid for qid in qids if queues[qid].get("xoff")]
        switches = sorted({queues[q]["dynamic"]["switch"] for q in watched if queues[q].get("dynamic")})
        nic_index = {nic: i for i, nic in enumerate(sorted(policy.get("nics", {})))}
        return cls(policy=policy, queues=queues, qids=qids, slot=slot, watched=watched,
                   watched_slots=np.array([slot[q] for q in watched], dtype=np.int64),
                   switch_slot={sw: len(qids) + i for i, sw in enumerate(switches)}, nic_index=nic_index,
                   sources={qid: _sources(queues[qid], nic_index) for qid in watched},
                   window_ns={qid: _window_ns(queues[qid], policy["rate_bps"]) for qid in watched},
                   poll_s=policy["poll_us"] / 1e6, frame=policy["mtu"] + 14)

    def check_fits(self) -> None:
        """Exit unless every queue and switch pool has a row in the kernel's table."""
        if len(self.qids) + len(self.switch_slot) > bpfmaps.MAX_QUEUES:
            raise SystemExit(f"pfcd: {len(self.qids)} queues and {len(self.switch_slot)} switch pools do not fit "
                             f"the kernel's {bpfmaps.MAX_QUEUES} rows")


def _sources(q: dict, nic_index: dict[str, int]) -> list[tuple[str, frozenset]]:
    """Each feeder of a watched queue with the NIC columns whose packets can come through it."""
    return [(f, frozenset(nic_index[n] for n in q.get("sources", {}).get(f, []) if n in nic_index))
            for f in q["feeders"]]


def _window_ns(q: dict, rate_bps: float) -> int:
    """Packets that entered within the time the queue takes to drain XOFF bytes (x1.5) are still
    in it (dynamic thresholds: the highest XOFF the queue can see)."""
    return int(1.5 * q.get("dynamic", {}).get("xoff_max", q["xoff"]) * 8 / rate_bps * 1e9)


class NetlinkSockets:
    """Netlink sockets by network namespace: a non-blocking one for tbf changes (a pause never
    waits for the kernel's answer) and, in a GPU's namespace, a blocking one for reading a NIC
    queue's backlog (``PauseDaemon._backlog`` waits for that answer)."""

    def __init__(self) -> None:
        self.nonblocking: dict[str | None, socket.socket] = {}
        self.blocking: dict[str, socket.socket] = {}

    def for_namespace(self, ns: str | None) -> socket.socket:
        """The non-blocking socket of ``ns``, opened with its blocking twin on first use."""
        if ns not in self.nonblocking:
            self.nonblocking[ns] = _in_netns(ns, tbfmsg.route_socket)
            if ns is not None:
                self.blocking[ns] = _in_netns(ns, lambda: tbfmsg.route_socket(timeout=0.05))
        return self.nonblocking[ns]

    def drain_errors(self) -> int:
        """Errors the kernel answered to tbf changes since the last call."""
        return sum(len(tbfmsg.drain_errors(s)) for s in self.nonblocking.values())


@dataclass
class LoopStats:
    """What the loop did, for the status file."""

    xoffs: int = 0
    pauses: int = 0
    resumes: int = 0
    stalls: int = 0  # resumes with backlog that sent nothing within STALL_NS
    resyncs: int = 0
    eaten: int = 0  # pauses of an empty queue whose bucket had to be eaten
    cut_short: int = 0  # resumes ended by a new pause before any frame left (not measured)
    netlink_errors: int = 0
    xoff_at: list[float] = field(default_factory=list)  # XOFF threshold at each crossing (bytes): dynamic ones vary
    pause_lat_ms: list[float] = field(default_factory=list)
    resume_lat_ms: list[float] = field(default_factory=list)


class LoopGaps:
    """Times something kept the loop from watching for over 2 ms, by phase: counted, the longest
    kept, and each one a line of pfc_gaps.txt (when, ns at the end of the gap; phase; ms)."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.max_ms: dict[str, float] = {}
        self.lines: list[str] = []  # not yet handed to the writer

    def note(self, phase: str, seconds: float, at_ns: int | None = None) -> None:
        """A loop phase that took ``seconds`` (or a sleep that overslept by that much)."""
        if seconds > 0.002:
            self.count[phase] = self.count.get(phase, 0) + 1
            self.max_ms[phase] = max(self.max_ms.get(phase, 0.0), round(seconds * 1e3, 3))
            self.lines.append(f"{at_ns or time.monotonic_ns()} {phase} {seconds * 1e3:.3f}\n")


class PauseDaemon(xpfc.OtherHosts):
    """The pause daemon's loop: watches the kernel's queue table, pauses and resumes feeders,
    measures pause and resume latencies, and hands status and log lines to the writer."""

    def __init__(self, policy: dict) -> None:
        self.policy = policy
        self.cfg = DaemonConfig.from_policy(policy)
        self.bell = bpfmaps.Doorbell()  # first: select() wants a low fd
        self.table = bpfmaps.QueueTable()
        self.sockets = NetlinkSockets()
        self.tx: dict[str, Transmitter] = self._open_transmitters()
        self.cfg.check_fits()
        self._arm_thresholds()
        self.last_over = np.zeros(len(self.cfg.watched), dtype=np.uint64)
        self.seen = self._open_sources()
        self.next_extend_ns = 0
        self.held: dict[str, set[str]] = {}  # congested queue -> the feeders it holds
        self.pending: list[tuple] = []  # (due_ns, kind, crossed_ns, feeders, cause, noticed_ns)
        self.kicks: collections.deque[Transmitter] = collections.deque()  # changed, frame not sent yet
        self.stats = LoopStats()
        self.gaps = LoopGaps()
        self.log: list[str] = []  # pfc.txt lines not yet handed to the writer
        self.lat_log: list[str] = []  # pfc_latency.txt lines
        self.scheduling = ""  # how the loop is run (real-time, cores, idle polling), set by main
        self.init_other_hosts(policy)  # pfc/xpfc.py: pauses to and from other hosts, by 802.1Qbb frame

    def _open_transmitters(self) -> dict[str, Transmitter]:
        """Every queue's kernel row cleared and found by its devices (enqueue on the queue's own,
        departure on its veth peer's), and a Transmitter to pause it with."""
        enq, deq = bpfmaps.open_pinned("tb_enq_slot"), bpfmaps.open_pinned("tb_deq_slot")
        tx = {}
        for qid in self.cfg.qids:
            q, s = self.cfg.queues[qid], self.cfg.slot[qid]
            self.table.table[s, :] = 0
            if q["kind"] == "switch":
                bpfmaps.update_u32(enq, _ifindex(q["dev"]), s)
            bpfmaps.update_u32(deq, _ifindex(q["peer"]), s)
            tx[qid] = self._transmitter(qid, q, s)
        os.close(enq)
        os.close(deq)
        return tx

    def _transmitter(self, qid: str, q: dict, s: int) -> Transmitter:
        """The Transmitter of queue ``qid``, with its namespace's netlink socket and its own raw one."""
        ns = q["netns"]
        sock = self.sockets.for_namespace(ns)
        ifindex = _in_netns(ns, lambda: _ifindex(q["dev"]))
        return Transmitter(qid, q, s, ifindex, sock, _in_netns(ns, lambda: _kick_socket(q["dev"])),
                           self.policy["rate_bps"], self.policy["burst_bytes"], self.policy["mtu"])

    def _arm_thresholds(self) -> None:
        """The watched queues' thresholds into their kernel rows (switch pools cleared first)."""
        t = self.table.table
        for row in self.cfg.switch_slot.values():
            t[row, :] = 0
        for qid in self.cfg.watched:
            row, q = t[self.cfg.slot[qid]], self.cfg.queues[qid]
            if q.get("dynamic"):
                d = q["dynamic"]
                row[F["shared"]], row[F["sw_slot"]] = d["shared"], self.cfg.switch_slot[d["switch"]]
                row[F["alpha_x256"]] = max(1, round(d["alpha"] * 256))
            row[F["xon"]] = q["xon"]
            row[F["xoff"]] = q["xoff"]  # xoff last: it arms the crossing

    def _open_sources(self) -> bpfmaps.QueueTable:
        """Ingress accounting: the kernel maps each NIC's address to its column (tb_src) and stamps,
        per watched queue, when a packet of that NIC last entered it (tb_seen, returned)."""
        seen = bpfmaps.QueueTable("tb_seen", bpfmaps.MAX_NICS)
        src_map = bpfmaps.open_pinned("tb_src")
        for nic, ip in self.policy.get("nics", {}).items():
            bpfmaps.update_u32(src_map, bpfmaps.ip_key(ip), self.cfg.nic_index[nic])
        os.close(src_map)
        for qid in self.cfg.watched:
            seen.table[self.cfg.slot[qid], :] = 0
        return seen

    # ------------------------------------------------------------------ loop
    def step(self) -> None:
        """One turn: act on every XOFF/XON crossing since the last, extend held pauses, measure."""
        t = self.table.table
        over = t[self.cfg.watched_slots, F["over"]]
        changed = np.nonzero(over != self.last_over)[0]
        if len(changed):
            now = time.monotonic_ns()
            for i in changed:
                cause = self.cfg.watched[i]
                if over[i]:
                    self._xoff(cause, now)
                else:
                    self._xon(cause, now)
            self.last_over = over.copy()
        if self.held and time.monotonic_ns() >= self.next_extend_ns:
            self.extend()
            self.next_extend_ns = time.monotonic_ns() + EXTEND_EVERY_NS
        if self.pending and self.pending[0][0] <= time.monotonic_ns():
            self._measure()

    def _active_feeders(self, cause: str, since_ns: int) -> list[str]:
        """Feeders of ``cause`` through which some NIC whose packets entered it
        after ``since_ns`` came."""
        active = set(np.flatnonzero(self.seen.table[self.cfg.slot[cause]] >= since_ns).tolist())
        return [f for f, nics in self.cfg.sources[cause] if not nics.isdisjoint(active)]

    def _xoff(self, cause: str, now: int) -> None:
        """``cause`` crossed XOFF: pause the feeders its recent packets came through (all if none known)."""
        self.stats.xoffs += 1
        crossed = int(self.table.table[self.cfg.slot[cause], F["xoff_ns"]])
        self.stats.xoff_at.append(float(self.table.table[self.cfg.slot[cause], F["xoff_at"]]))
        self.held[cause] = set()
        active = self._active_feeders(cause, crossed - self.cfg.window_ns[cause])
        self._hold(cause, active or list(self.cfg.queues[cause]["feeders"]), crossed, now)  # none known: all

    def _hold(self, cause: str, feeders: list[str], crossed: int, now: int, log_cause: str = "") -> None:
        """Pause those of ``feeders`` that ``cause`` does not hold yet (``log_cause``: the congested
        queue to log when ``cause`` is a cable from another host)."""
        held = self.held[cause]
        fresh = []
        for f in feeders:
            if f in held:
                continue
            held.add(f)
            if self.remote is not None and f in self.remote:  # on another host: its frame goes now
                self.remote.hold(f, cause, crossed)
                continue
            tx = self.tx[f]
            tx.holders += 1
            if tx.holders == 1:
                if tx.resume_item is not None and tx.resume_item.backlog is None:
                    tx.resume_item.backlog = 0  # paused again before its XON frame: nothing to measure
                self._pause(tx)
                tx.pause_cross_ns, tx.pause_notice_ns, tx.pause_cause = crossed, now, log_cause or cause
                self.stats.pauses += 1
                fresh.append(tx)
                self.log.append(f"{now} {tx.node} {tx.node_type} {tx.port} 1 {log_cause or cause}\n")
        if fresh:
            self.pending.append((now + MEASURE_AFTER_NS, "pause", crossed, fresh, cause, now))

    def extend(self) -> None:
        """While a queue stays over XOFF, NICs that start sending into it get
        their feeders paused too (a real switch would pause their ingress port
        once their bytes piled up)."""
        now = time.monotonic_ns()
        for cause, held in self.held.items():
            if cause not in self.cfg.sources:  # a cable from another host: its sender extends it
                continue
            if len(held) < len(self.cfg.queues[cause]["feeders"]):
                active = self._active_feeders(cause, now - self.cfg.window_ns[cause])
                if not set(active) <= held:
                    self._hold(cause, active, now, now)

    def _pause(self, tx: Transmitter) -> None:
        """Pause = a one-frame bucket at 1 byte/s; the XOFF frame that runs the
        qdisc follows (``kick``): the frame already due leaves then (or at the
        next packet into the queue), then any that fit in the rest of the
        bucket; one that does not fit waits a second per missing byte."""
        t = self.table.table
        if t[tx.slot, F["resume_mark"]]:  # resumed, but no frame has left since: that resume measures nothing
            tx.cut_short = tx.resumes
            self.stats.cut_short += 1
        tx.deq_at_change = tx.deq_after_kick = int(t[tx.slot, F["deq_bytes"]])
        tx.change(tx.pause_msg)
        self._kick_later(tx)

    def _kick_later(self, tx: Transmitter) -> None:
        """Queue ``tx``'s XOFF/XON frame for ``kick`` (once, however often it changes meanwhile)."""
        if not tx.kick_due:
            tx.kick_due = True
            self.kicks.append(tx)

    def kick(self) -> None:
        """Send the oldest pending XOFF/XON frame (the one the transmitter's
        state now calls for). Separate from the tbf changes, which all go out
        at the crossing, so a crossing waits for one send at most: a send also
        runs the CPU's pending network softirq work (forwarding others'
        packets), which can take milliseconds (logged as "kick" hold-ups);
        sending every frame of a crossing in one turn would keep the loop from
        seeing other queues cross XOFF for that long each.

        After an XOFF frame: if it left too (the kernel stamps MAC control
        frames), the queue ran dry with part of the bucket unused, and a later
        short frame (an ACK) could slip out while paused, so a padded frame
        eats what is left, down to 59 B: less than any frame. After an XON
        frame: the backlog its resume measurement needs (a NIC's costs a
        netlink read)."""
        tx = self.kicks.popleft()
        tx.kick_due = False
        t = self.table.table
        if tx.holders:
            kicked_ns = time.monotonic_ns()
            tx.send_frame(tx.xoff_frame)
            tx.deq_after_kick = int(t[tx.slot, F["deq_bytes"]])
            left = self.cfg.frame - (tx.deq_after_kick - tx.deq_at_change)  # bucket still unused
            if int(t[tx.slot, F["ctl_deq_ns"]]) >= kicked_ns and left - 59 >= len(tx.xoff_frame):
                tx.send_frame(tx.xoff_frame.ljust(left - 59, b"\0"))
                self.stats.eaten += 1
        else:
            tx.send_frame(tx.xon_frame)
            if tx.resume_item is not None and tx.resume_item.backlog is None:
                tx.resume_item.backlog = self._backlog(tx)

    def _xon(self, cause: str, now: int, crossed: int | None = None, log_cause: str = "") -> None:
        """``cause`` fell below XON: resume the feeders it held that no other queue holds
        (``crossed``/``log_cause``: the XON of a cable from another host, as its frame says)."""
        t = self.table.table
        if crossed is None:
            crossed = int(t[self.cfg.slot[cause], F["xon_ns"]])
        fresh = []
        for f in sorted(self.held.pop(cause, ())):
            if self.remote is not None and f in self.remote:
                self.remote.release(f, cause, crossed)
                continue
            tx = self.tx[f]
            if tx.holders == 0:
                continue
            tx.holders -= 1
            if tx.holders == 0:
                self._pause_latency(tx)  # before it sends again
                if tx.resume_item is not None and tx.resume_item.first_ns is None:
                    # the previous resume is still waiting for its measurement: its first
                    # departure is about to be reset for this one, so keep it now
                    tx.resume_item.first_ns = int(t[tx.slot, F["first_deq_ns"]])
                t[tx.slot, F["first_deq_ns"]] = 0
                t[tx.slot, F["resume_mark"]] = 1
                tx.change(tx.resume_msg)
                self._kick_later(tx)
                self.stats.resumes += 1
                tx.resumes += 1
                tx.resume_item = ResumeProbe(tx, tx.resumes)
                fresh.append(tx.resume_item)
                self.log.append(f"{now} {tx.node} {tx.node_type} {tx.port} 0 {log_cause or cause}\n")
        if fresh:
            self.pending.append((now + MEASURE_AFTER_NS, "resume", crossed, fresh, log_cause or cause, now))

    def _pause_latency(self, tx: Transmitter) -> None:
        """Last departure after the XOFF crossing that paused ``tx`` (0: it sent nothing after it)."""
        if not tx.pause_cross_ns:
            return
        last = int(self.table.table[tx.slot, F["last_deq_ns"]])
        lat = (last - tx.pause_cross_ns) / 1e6 if last > tx.pause_cross_ns else 0.0
        self.stats.pause_lat_ms.append(lat)
        later = int(self.table.table[tx.slot, F["deq_bytes"]]) - tx.deq_after_kick
        self._latency_line("pause", tx, tx.pause_cause, tx.pause_cross_ns, tx.pause_notice_ns, last, lat, later)
        tx.pause_cross_ns = 0

    def _latency_line(self, kind: str, tx: Transmitter, cause: str, crossed: int, noticed: int, seen: int,
                      lat_ms: float, later: int = 0) -> None:
        """One measured latency: which transmitter, the crossing, when the loop saw
        it, the departure that ends the latency (0: none), so a tail can be split
        into reaction (noticed - crossed) and datapath."""
        self.lat_log.append(f"{kind} {tx.qid} {cause} {crossed} {noticed} {seen} {lat_ms:.3f} {later}\n")

    def resync(self, ipr) -> None:
        """A queue that dropped (PFC too slow, or bad thresholds) counts more backlog
        than it holds, and would stay 'over' for ever. For queues over XON for a
        while, read the real backlog (netlink, a few queues only) and correct."""
        t = self.table.table
        now = time.monotonic_ns()
        for qid, slot in zip(self.cfg.watched, self.cfg.watched_slots):
            row = t[slot]
            if not row[F["over"]] or now - int(row[F["xoff_ns"]]) < 50_000_000:
                continue
            counted = _counted_backlog(row)
            real = _real_backlog(ipr, self.cfg.queues[qid]["dev"])
            if real is None or counted - real <= self.cfg.frame:
                continue
            row[F["drop_adjust"]] += counted - real
            if row[F["alpha_x256"]]:  # the bytes were counted into the switch's pool too
                t[int(row[F["sw_slot"]]), F["drop_adjust"]] += counted - real
            self.stats.resyncs += 1
            if real < int(row[F["xon"]]):
                row[F["xon_ns"]] = time.monotonic_ns()
                row[F["over"]] = 0

    def _backlog(self, tx: Transmitter) -> int | None:
        """Bytes in the queue. Switch queues: the kernel counters. NIC queues are
        not counted on enqueue (their device is in a namespace): one netlink
        read (~75 us), taken after the resume went out, so it does not delay it;
        a frame that already left counts as backlog (first_deq is set)."""
        if tx.kind != "switch":
            if self.table.table[tx.slot, F["first_deq_ns"]]:
                return 1
            try:
                stats = tbfmsg.queue_stats(self.sockets.blocking[self.cfg.queues[tx.qid]["netns"]], tx.ifindex)
            except (OSError, KeyError):
                return None
            return stats["backlog"] if stats else None
        return _counted_backlog(self.table.table[tx.slot])

    def _measure(self) -> None:
        """Pause and resume latencies whose departures are due to be read (MEASURE_AFTER_NS after)."""
        now = time.monotonic_ns()
        t = self.table.table
        while self.pending and self.pending[0][0] <= now:
            _, kind, crossed, items, cause, noticed = self.pending.pop(0)
            if kind == "pause":
                for tx in items:
                    self._pause_latency(tx)
            else:
                for probe in items:
                    tx = probe.tx
                    # paused again before its first frame left, or nothing was waiting (a first
                    # frame would be new traffic; None: never read): no resume latency to measure
                    if tx.cut_short == probe.epoch or not probe.backlog:
                        continue
                    first = probe.first_ns
                    if first is None:  # not resumed again since: the kernel's stamp is this resume's
                        first = int(t[tx.slot, F["first_deq_ns"]])
                    if first:
                        lat = max(0, first - crossed) / 1e6
                    else:
                        self.stats.stalls += 1  # had backlog, sent nothing for 30 ms after resume
                        lat = STALL_NS / 1e6
                    self.stats.resume_lat_ms.append(lat)
                    self._latency_line("resume", tx, cause, crossed, noticed, first, lat)

    # ---------------------------------------------------------------- status
    def status(self) -> dict:
        """The status document (pfc_status.json): counts, pauses now, latencies, loop hold-ups."""
        self.stats.netlink_errors += self.sockets.drain_errors()
        t = self.table.table
        return {
            "pid": os.getpid(),
            "ready": True,
            "updated": time.time(),
            "xoff_crossings": self.stats.xoffs,
            "pauses": self.stats.pauses,
            "resumes": self.stats.resumes,
            "paused_now": sorted(q for q, tx in self.tx.items() if tx.holders),
            "over_now": [q for q, o in zip(self.cfg.watched, t[self.cfg.watched_slots, F["over"]]) if o],
            "pause_latency_ms": percentiles(self.stats.pause_lat_ms),
            "resume_latency_ms": percentiles(self.stats.resume_lat_ms),
            "xoff_threshold_bytes": _spread(self.stats.xoff_at),
            "resume_stalls": self.stats.stalls,
            "backlog_resyncs": self.stats.resyncs,
            "empty_pauses": self.stats.eaten,
            "kick_errors": Transmitter.kick_errors,
            "resumes_cut_short": self.stats.cut_short,
            "scheduling": self.scheduling,
            "doorbell_rings": self.bell.rings,
            "loop_gaps": self.gaps.count,
            "loop_gap_max_ms": self.gaps.max_ms,
            "netlink_errors": self.stats.netlink_errors,
            "remote": {"sent": dict(self.remote.sent), "held": self.remote.held} if self.remote else None,
            "remote_rx": {"frames": self.rx.frames, "ignored": self.rx.ignored,
                          "held_now": sorted(k[6:] for k in self.held if k.startswith("cable:"))} if self.rx else None,
            "max_backlog": {q: int(t[self.cfg.slot[q], F["max_backlog"]]) for q in self.cfg.watched
                            if t[self.cfg.slot[q], F["max_backlog"]]},
        }

    def hand_over(self, writer: "Writer") -> None:
        """Status and new log lines to the writer thread (no file I/O here)."""
        for at, took in Transmitter.slow_changes:
            self.gaps.note("netlink", took, at)
        Transmitter.slow_changes.clear()
        doc = self.status()
        logs = {os.path.basename(self.policy["log"]): self.log, LATENCY_FILE: self.lat_log, GAPS_FILE: self.gaps.lines}
        self.log, self.lat_log, self.gaps.lines = [], [], []
        if self.remote is not None and self.remote.log:
            logs["pfc_remote.txt"], self.remote.log = self.remote.log, []
        writer.put(doc, logs)

    def release_all(self) -> None:
        """Resume everything still paused (on exit: never leave a queue held)."""
        now = time.monotonic_ns()
        self.held.clear()
        if self.remote is not None:
            self.remote.release_all()
        for tx in self.tx.values():
            if tx.holders:
                tx.holders = 0
                tx.resume()
                self.log.append(f"{now} {tx.node} {tx.node_type} {tx.port} 0 exit\n")


def _spread(values: list[float]) -> dict:
    """{"n", "min", "p50", "max"} of byte values (None when empty): static thresholds give one value."""
    if not values:
        return {"n": 0, "min": None, "p50": None, "max": None}
    vals = list(values)  # one snapshot for all four numbers
    return {"n": len(vals), "min": int(min(vals)), "p50": int(metrics.percentile(vals, 50)), "max": int(max(vals))}


def _counted_backlog(row) -> int:
    """A switch queue's backlog from the kernel counters (as queue_watch.bpf.c computes it)."""
    return int(row[F["enq_bytes"]]) - int(row[F["deq_bytes"]]) - int(row[F["drop_adjust"]])


def _real_backlog(sock: socket.socket, dev: str) -> int | None:
    """A root-namespace queue's backlog as its qdisc reports it (None: no answer)."""
    try:
        stats = tbfmsg.queue_stats(sock, _ifindex(dev))
    except OSError:
        return None
    return stats["backlog"] if stats else None


def main(argv: list[str] | None = None) -> int:
    """Run the pause daemon on a policy file until SIGTERM/SIGINT or its controller's exit;
    every queue it paused is resumed on the way out."""
    ap = argparse.ArgumentParser(prog="pfcd")
    ap.add_argument("--policy", required=True)
    ap.add_argument("--lifeline-fd", type=int, help="the read end of the lifeline of the process that brought the "
                    "fabric up: cut (it died before letting go), every queue is resumed and the daemon exits")
    args = ap.parse_args(argv)
    policy = json.loads(Path(args.policy).read_text())
    stop = _stop_on_signals()
    daemon = PauseDaemon(policy)
    sys.setswitchinterval(0.0005)  # the loop gets the GIL back from the writer within 0.5 ms, not 5
    writer = Writer(policy)
    writer.start()  # before realtime: the writer thread stays SCHED_OTHER
    qos_fd, idle = no_idle_halt()
    sched = daemon.scheduling = ", ".join((realtime(), away_from_pmd(), idle))
    quiet_gc(daemon)
    daemon.hand_over(writer)
    print(f"pfcd: watching {len(daemon.cfg.watched)} queues, {len(daemon.tx)} transmitters, poll "
          f"{policy['poll_us']} us, scheduling {sched}", file=sys.stderr, flush=True)
    fabric_state = Path(args.policy).with_name("state.json")
    ipr = tbfmsg.route_socket(timeout=0.05)  # blocking: resync waits for each answer
    try:
        _loop(daemon, writer, stop, ipr, fabric_state, args.lifeline_fd)
    finally:
        daemon.release_all()
        daemon.hand_over(writer)
        writer.close()
        if qos_fd is not None:
            os.close(qos_fd)
    return 0


def _stop_on_signals() -> dict:
    """A flag that SIGTERM and SIGINT raise, so the loop ends between turns and resumes every queue."""
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def _loop(daemon: PauseDaemon, writer: Writer, stop: dict, ipr, fabric_state: Path,
          lifeline_fd: int | None = None) -> None:
    """The fast loop: a step, at most one frame, resync every 0.1 s and status every second, then
    sleep until the doorbell rings or ``poll_s`` passed; each phase over 2 ms is a noted gap.

    It ends when told to, when the fabric's state file is gone (the fabric was torn down without
    stopping it) or when its lifeline is cut (the process bringing the fabric up died); not when the
    controller exits, because a restarted controller adopts it and the
    pauses are the datapath's."""
    gaps, poll_s = daemon.gaps, daemon.cfg.poll_s
    next_status = time.monotonic() + 1.0
    next_resync = time.monotonic() + 0.1
    while not stop["flag"]:
        t0 = time.monotonic()
        daemon.step()
        now = time.monotonic()
        gaps.note("step", now - t0)
        if daemon.rx is not None or daemon.remote is not None:
            daemon.remote_step()
        if daemon.kicks:  # one frame a turn: a crossing meanwhile is seen before the next one
            daemon.kick()
            t1 = time.monotonic()
            gaps.note("kick", t1 - now)
            now = t1
        if now >= next_resync:
            daemon.resync(ipr)
            gaps.note("resync", time.monotonic() - now)
            next_resync = now + 0.1
        if now >= next_status:
            daemon.hand_over(writer)
            gaps.note("status", time.monotonic() - now)
            next_status = now + 1.0
            if not fabric_state.exists():
                print("pfcd: the fabric is gone; resuming every queue and exiting", file=sys.stderr)
                break
            line = owned.lifeline_state(lifeline_fd) if lifeline_fd is not None else None
            if line == owned.LIFELINE_CUT:
                print("pfcd: the process bringing the fabric up died; resuming every queue and exiting",
                      file=sys.stderr)
                break
            if line == owned.LIFELINE_RELEASED:
                lifeline_fd = None  # the fabric outlives it on purpose
        if daemon.kicks:
            continue
        t1 = time.monotonic()
        if not daemon.wait(poll_s):
            gaps.note("sleep", time.monotonic() - t1 - poll_s)  # timed out late by that much


if __name__ == "__main__":
    sys.exit(main())
