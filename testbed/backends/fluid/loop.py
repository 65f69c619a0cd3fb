"""The serving cluster on the fluid network: the cluster's batched path (``Cluster(batched=True)``) drives it,
one ``Exchange`` per expert-parallel phase and one message per KV slice, each message a flow on its persistent
connection (the NIC port pair the policy picks, ``PortPicker``'s rule, vectorised per phase for the static
policies), and each done phase or slice told back to the cluster at its time / dilation, as the twin does.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numba as nb
import numpy as np

from fabrics.routing import port_pairs
from testbed.backends.fluid.network import Paths
from testbed.backends.fluid.solver import Network
from testbed.backends.ns3.apps import DRAIN_S, SAMPLES, PortPicker
from traffic.model.serving_events import Exchange, Send, Timer

# Flows whose last byte leaves within a quarter of the smallest frame's time on the wire (the agents' 24 B frame
# header in a packet of its own: 90 B, 240 us at 3 Mbit/s) of each other depart together: the fluid engine's time
# resolution for departures, finer than any packet engine's.
BATCH_FRAMES = 0.25


class EnginePorts:
    """An engine's GPU pairs' port choices and connections as arrays (local indices in the engine's GPUs)."""

    def __init__(self, gpus: tuple[int, ...], policy: str) -> None:
        self.gpus = np.array(sorted(gpus), dtype=np.int64)
        g = len(self.gpus)
        opts = {(a, b): port_pairs(int(x), int(y), policy) for a, x in enumerate(self.gpus)
                for b, y in enumerate(self.gpus) if a != b}
        most = max((len(o) for o in opts.values()), default=1)
        self.nopts = np.ones((g, g), dtype=np.int64)
        self.sp = np.ones((g, g, most), dtype=np.int64)
        self.dp = np.ones((g, g, most), dtype=np.int64)
        for (a, b), o in opts.items():
            self.nopts[a, b] = len(o)
            for k, (sp, dp) in enumerate(o):
                self.sp[a, b, k], self.dp[a, b, k] = sp, dp
        self.count = np.zeros((g, g), dtype=np.int64)
        self.conn = np.full((g, g, most), -1, dtype=np.int64)

    def choose(self, src: np.ndarray, dst: np.ndarray, paths: Paths) -> tuple[np.ndarray, ...]:
        """(src port, dst port, connection) per message: the pair's choices in turn (the k-th message of a pair
        takes choice k mod their number: ``PortPicker``'s static rule)."""
        la, lb, choice, sp, dp, conn = _choices(self.gpus, np.asarray(src, dtype=np.int64),
                                                np.asarray(dst, dtype=np.int64), self.count, self.nopts, self.sp,
                                                self.dp, self.conn)
        for i in np.flatnonzero(conn < 0):
            c = paths.connection(int(src[i]), int(sp[i]), int(dst[i]), int(dp[i]))
            self.conn[la[i], lb[i], choice[i]] = c
            conn[i] = c
        return sp, dp, conn


@nb.njit(cache=True)
def _choices(gpus, src, dst, count, nopts, sp_of, dp_of, conn_of):
    """``EnginePorts.choose``'s rule in one compiled call (a phase's ~70 messages cost a few numpy calls each
    otherwise): every message's choice from the pair's count before the phase, then the counts raised; (local
    source, local destination, choice, src port, dst port, connection or -1: not opened yet)."""
    m = len(src)
    la, lb = np.searchsorted(gpus, src), np.searchsorted(gpus, dst)
    choice = np.empty(m, dtype=np.int64)
    sp, dp, conn = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    rank = 0
    for i in range(m):  # a pair's messages (slices) are contiguous: a run's k-th takes the pair's count + k
        rank = rank + 1 if i > 0 and la[i] == la[i - 1] and lb[i] == lb[i - 1] else 0
        a, b = la[i], lb[i]
        c = (count[a, b] + rank) % nopts[a, b]
        choice[i], sp[i], dp[i], conn[i] = c, sp_of[a, b, c], dp_of[a, b, c], conn_of[a, b, c]
    for i in range(m):
        count[la[i], lb[i]] += 1
    return la, lb, choice, sp, dp, conn


class Streams:
    """A connection is a byte stream: its messages go one after another (a message written behind another waits in
    the sender's buffer, and its time there counts in its FCT, as on TCP). ``enqueue`` says whether the connection
    was idle (send now); ``done`` gives the next message waiting on it, if any, when its current one is delivered.
    (Only KV slices ever wait: a phase's expert-parallel messages each have a connection of their own, and the
    next phase starts after the last of them arrived.)"""

    def __init__(self) -> None:
        self.waiting: dict[int, deque] = {}

    def enqueue(self, conn: int, message: tuple) -> bool:
        if conn in self.waiting:
            self.waiting[conn].append(message)
            return False
        self.waiting[conn] = deque()
        return True

    def done(self, conn: int) -> tuple | None:
        queue = self.waiting[conn]
        if queue:
            return queue.popleft()
        del self.waiting[conn]
        return None


class Progress:
    """A progress bar (rich, when stderr is a terminal) of cluster seconds served, updated a few times a second."""

    def __init__(self, label: str, target_s: float) -> None:
        self.target = target_s
        self.next = time.monotonic() + 0.25
        self.bar = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn(label), BarColumn(), TextColumn("{task.completed:.1f}/{task.total:g} "
                                "cluster s"), TimeElapsedColumn(), TimeRemainingColumn(), transient=True)
            self.task = self.bar.add_task(label, total=target_s)
            self.bar.start()

    def tick(self, cluster_s: float) -> None:
        if self.bar is not None and time.monotonic() >= self.next:
            self.next = time.monotonic() + 0.25
            self.bar.update(self.task, completed=min(cluster_s, self.target))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@dataclass
class Served:
    """What a run carried: KV messages (``apps.Sent`` tuples), expert-parallel phases (arrays), every message's
    delivery time by id (NaN: not delivered), the links' samples (time, bytes, packets)."""

    kv: list[tuple] = field(default_factory=list)
    phases: list[tuple] = field(default_factory=list)  # (first_id, src, dst, sp, dp, bytes, start, kind, engine, step)
    ends: np.ndarray | None = None
    samples: list[tuple[float, np.ndarray, np.ndarray]] = field(default_factory=list)
    solves: int = 0
    rounds: int = 0
    sim_s: float = 0.0


def batch_s(paths: Paths) -> float:
    """``BATCH_FRAMES`` of the smallest frame's time on the wire."""
    return BATCH_FRAMES * paths.smallest_frame_bytes * 8 / paths.link.rate_bps


def run_cluster(paths: Paths, cluster, config: dict, dilation: float, duration_s: float,
                label: str = "fluid") -> Served:
    """Run the (batched) cluster on the fluid network until it is quiet or the drain ran out."""
    net = Network(paths.capacity, paths.longest, batch_s(paths))
    ips = config["ips"]
    picker = PortPicker(config["policy"])
    engines = {e.name: EnginePorts(e.gpus, config["policy"]) for es in cluster.engines.values() for e in es
               if e.hits is not None}
    groups: list[tuple] = []
    stream = Streams()
    out = Served()
    timers: list = []
    serial = itertools.count()
    horizon = duration_s * dilation + DRAIN_S
    period = max(1.0, horizon / SAMPLES)
    progress = Progress(label, duration_s)

    def sample() -> None:
        out.samples.append((net.now, net.nbytes.copy(), net.npk.copy()))

    def add(conn: np.ndarray, payload: np.ndarray, group: np.ndarray, tags: np.ndarray) -> None:
        net.add(group=group, tag=tags, **paths.flows(conn, payload))

    def apply(actions: list) -> None:
        now = net.now
        for a in actions:
            if isinstance(a, Timer):
                heapq.heappush(timers, (a.at * dilation, next(serial), a.key, a.at))
            elif isinstance(a, Send):
                m = a.message
                sp, dp = picker.pick(m.id, m.src_gpu, m.dst_gpu, m.bytes)
                c = paths.connection(m.src_gpu, sp, m.dst_gpu, dp)
                out.kv.append((m.id, m.request_id, m.src_gpu, m.dst_gpu, ips[str(m.src_gpu)][sp - 1],
                               ips[str(m.dst_gpu)][dp - 1], m.bytes, round(now, 6), m.kind, m.engine, m.step))
                if stream.enqueue(c, (m.id, m.bytes)):
                    send_kv(c, m.id, m.bytes)
            else:
                exchange(a, now)

    def send_kv(c: int, mid: int, nbytes: int) -> None:
        g = net.new_group(1)
        groups.append(("kv", mid, c))
        add(np.array([c]), np.array([nbytes]), np.array([g]), np.array([mid]))

    def exchange(a: Exchange, now: float) -> None:
        src, dst = np.asarray(a.src), np.asarray(a.dst)
        if picker.adaptive:
            picked = [picker.pick(a.first_id + i, int(s), int(d), int(b))
                      for i, (s, d, b) in enumerate(zip(src, dst, a.bytes))]
            sp, dp = np.array([p[0] for p in picked]), np.array([p[1] for p in picked])
            conn = np.array([paths.connection(int(s), int(x), int(d), int(y)) for s, x, d, y in zip(src, sp, dst, dp)])
        else:
            sp, dp, conn = engines[a.engine].choose(src, dst, paths)
        g = net.new_group(len(a))
        groups.append(("ex", a.engine, a.first_id, len(a)))
        tags = np.arange(a.first_id, a.first_id + len(a))
        add(conn, np.asarray(a.bytes), np.full(len(a), g), tags)
        out.phases.append((a.first_id, src, dst, sp, dp, np.asarray(a.bytes), round(now, 6), a.kind, a.engine,
                           a.step))

    heapq.heappush(timers, (0.0, next(serial), None, None))  # the first sample
    apply(cluster.start(0.0))
    try:
        while not cluster.quiet:
            t_timer = timers[0][0] if timers else horizon
            done = net.advance(min(t_timer, horizon))
            if done is not None:
                g, t = done
                what = groups[g]
                if what[0] == "kv":
                    picker.settle(what[1])
                    following = stream.done(what[2])
                    if following is not None:
                        send_kv(what[2], *following)
                    apply(cluster.delivered(what[1], t / dilation))
                else:
                    if picker.adaptive:
                        for mid in range(what[2], what[2] + what[3]):
                            picker.settle(mid)
                    apply(cluster.exchange_delivered(what[1], net.last_of(g), t / dilation))
                progress.tick(t / dilation)
                continue
            if net.now >= horizon or not timers:
                break
            _, _, key, at = heapq.heappop(timers)
            if key is None:
                sample()
                heapq.heappush(timers, (net.now + period, next(serial), None, None))
            else:
                apply(cluster.timer(key, at))
            progress.tick(net.now / dilation)
    finally:
        progress.close()
    sample()
    out.ends = net.m_end[:cluster.message_count].copy() if len(net.m_end) >= cluster.message_count else \
        np.concatenate([net.m_end, np.full(cluster.message_count - len(net.m_end), np.nan)])
    out.solves, out.rounds, out.sim_s = net.solves, net.rounds, net.now
    return out


def run_plan(paths: Paths, plan_rows: list[dict]) -> tuple[Served, list[dict]]:
    """The planned replay: every row a flow from its start (seconds after t0 = 0) on its NIC port pair's
    connection; until all arrived or the drain ran out. The rows in the order carried (``Served.ends`` by index)."""
    from fabrics import addressing

    net = Network(paths.capacity, paths.longest, batch_s(paths))
    rows = sorted(plan_rows, key=lambda r: (r["start"], str(r["id"])))
    out = Served()
    horizon = max((r["start"] for r in rows), default=0.0) + DRAIN_S
    period = max(1.0, horizon / SAMPLES)
    out.samples.append((0.0, net.nbytes.copy(), net.npk.copy()))
    next_sample, i, left = period, 0, len(rows)
    stream, conn_of = Streams(), {}

    def send(c: int, k: int) -> None:
        g = net.new_group(1)
        conn_of[g] = c
        net.add(group=np.array([g]), tag=np.array([k]), **paths.flows(np.array([c]), np.array([int(rows[k]["bytes"])])))

    while left and net.now < horizon:
        t_start = rows[i]["start"] if i < len(rows) else horizon
        done = net.advance(min(t_start, next_sample, horizon))
        if done is not None:
            left -= 1
            following = stream.done(conn_of[done[0]])
            if following is not None:
                send(conn_of[done[0]], following[0])
            continue
        if net.now >= next_sample:
            out.samples.append((net.now, net.nbytes.copy(), net.npk.copy()))
            next_sample += period
        while i < len(rows) and rows[i]["start"] <= net.now:
            r = rows[i]
            c = paths.connection(*addressing.parse_ip(r["src_ip"]), *addressing.parse_ip(r["dst_ip"]))
            if stream.enqueue(c, (i,)):
                send(c, i)
            i += 1
    out.samples.append((net.now, net.nbytes.copy(), net.npk.copy()))
    out.ends = np.concatenate([net.m_end, np.full(max(0, len(rows) - len(net.m_end)), np.nan)])[:len(rows)]
    out.solves, out.rounds, out.sim_s = net.solves, net.rounds, net.now
    return out, rows


__all__ = ["run_cluster", "run_plan", "Streams", "batch_s", "Served", "EnginePorts", "Progress", "BATCH_FRAMES"]
