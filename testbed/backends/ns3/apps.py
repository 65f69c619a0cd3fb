"""The traffic on the twin: the serving cluster (or the planned replay) over persistent TCP connections,
one per NIC port pair, as the emulator's agents carry it.

Python works per message: the cluster (``traffic.model.serving.Cluster``, clock-free) is told each whole
arrival and each timer at the simulated time, in cluster seconds (simulated time / dilation, as the
coordinator divides wall time), and its sends are written to the connection of the port pair the policy
picks (``PortPicker``, the coordinator's rule). Bytes, rates and times are the emulator's: emulated bytes
on links of the emulated rate, the cluster's time dilated (docs/twin.md says why).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

from fabrics import addressing
from fabrics.routing import port_pairs
from testbed.backends.ns3 import engine
from testbed.backends.ns3.plan import Built

DRAIN_S = 30.0  # simulated seconds after the end for messages in flight (the emulator's drain timeout)
SAMPLES = 100  # queue samples per run (at least one a simulated second... at most this many)
PROGRESS_EVERY_S = 30.0  # wall seconds between two progress lines of a repetition


class Progress:
    """A repetition's progress line every ``every_s`` wall seconds, through ``log``: simulated time reached
    (in cluster seconds) over the target, the pace (cluster seconds per wall second) since the last line and
    since the start, the time left at the recent pace (the load, hence the cost of a cluster second, grows
    over a closed-loop run's first seconds) and the messages in flight. ``tick`` is called on every callback
    from the simulation (a clock read: cheap). ``clock``: wall seconds (a parameter for the tests)."""

    def __init__(self, log: Callable[[str], None] | None, target_cluster_s: float, dilation: float,
                 every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.target, self.dilation, self.every_s, self.clock = log, target_cluster_s, dilation, every_s, clock
        self.t0 = clock()
        self.next = self.t0 + every_s
        self.last = (self.t0, 0.0)  # (wall, cluster s) at the last line
        self.lines = 0

    def tick(self, sim_s: float, in_flight: Callable[[], int]) -> None:
        if self.log is None:
            return
        now = self.clock()
        if now < self.next:
            return
        self.next = now + self.every_s
        self.lines += 1
        self.log(self.line(sim_s, now, in_flight()))
        self.last = (now, sim_s / self.dilation)

    def line(self, sim_s: float, now: float, in_flight: int) -> str:
        cluster_s, wall_s = sim_s / self.dilation, now - self.t0
        if cluster_s >= self.target:
            drained = sim_s - self.target * self.dilation
            return (f"twin: draining, {in_flight} messages in flight, {drained:.1f} of at most {DRAIN_S:g} simulated "
                    f"s after the end ({wall_s:.0f} wall s so far)")
        pace = cluster_s / wall_s if wall_s > 0 else 0.0
        recent = (cluster_s - self.last[1]) / (now - self.last[0]) if now > self.last[0] else pace
        eta = (self.target - cluster_s) / recent if recent > 0 else float("inf")
        return (f"twin: {cluster_s:.2f} of {self.target:g} cluster s ({100 * cluster_s / self.target:.0f} %) in "
                f"{wall_s:.0f} wall s; {_per(recent)} wall s per cluster s lately ({_per(pace)} on average); ETA "
                f"{_duration(eta)} at the recent pace (+ drain and write-up); {in_flight} messages in flight")


def _per(pace: float) -> str:
    return f"{1 / pace:.3g}" if pace > 0 else "inf"


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "unknown"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


class PortPicker:
    """The NIC port pair of each message: the policy's choices in turn, or (adaptive) the choice whose source
    port has the fewest of the sender's bytes not yet delivered (``traffic.runtime.coordinator``'s rule)."""

    def __init__(self, policy: str) -> None:
        self.policy = policy  # a pair's choices: fabrics.routing.port_pairs, asked on the pair's first message
        self.choices: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.adaptive = policy == "adaptive"
        self.count: dict[tuple[int, int], int] = {}
        self.outstanding: dict[tuple[int, int], int] = {}
        self.port_of: dict[int, tuple[int, int, int]] = {}

    def pick(self, mid: int, src: int, dst: int, nbytes: int) -> tuple[int, int]:
        opts = self.choices.get((src, dst))
        if opts is None:
            opts = self.choices[(src, dst)] = list(port_pairs(src, dst, self.policy))
        k = self.count.get((src, dst), 0)
        self.count[(src, dst)] = k + 1
        if not self.adaptive or len(opts) == 1:
            sp, dp = opts[k % len(opts)]
        else:
            order = opts[k % len(opts):] + opts[:k % len(opts)]
            sp, dp = min(order, key=lambda c: self.outstanding.get((src, c[0]), 0))
        self.outstanding[(src, sp)] = self.outstanding.get((src, sp), 0) + nbytes
        self.port_of[mid] = (src, sp, nbytes)
        return sp, dp

    def settle(self, mid: int) -> None:
        src, sp, nbytes = self.port_of.pop(mid, (None, None, 0))
        if src is not None:
            self.outstanding[(src, sp)] -= nbytes


@dataclass
class Sampler:
    """Every queue's counters at regular simulated times (the emulator samples once a wall second)."""

    built: Built
    period_s: float
    samples: list[tuple[float, dict]] = field(default_factory=list)

    def take(self) -> None:
        flat = list(self.built.twin.Snapshot())
        snap = {q.qid: {"bytes": flat[4 * i], "packets": flat[4 * i + 1], "drops": flat[4 * i + 2],
                        "backlog": flat[4 * i + 3]} for i, q in enumerate(self.built.queues)}
        self.samples.append((float(engine.load().Now()), snap))


SAMPLE_KEY = -1


# a message sent by the cluster, as ``serve`` keeps it until the run is over (a tuple: the rows of a
# 32-cluster-second run at n=512 are millions, and a dict each cost ~0.7 KB more): ``plan_row`` makes the dict
Sent = tuple  # (id, request_id, src gpu, dst gpu, src ip, dst ip, bytes, start, kind, engine, step)


def plan_row(m: Sent) -> dict:
    """The plan part of a message's row: id, request_id, src, dst, src_ip, dst_ip, bytes, start, kind, engine, step."""
    return {"id": m[0], "request_id": m[1], "src": f"gpu{m[2]}", "dst": f"gpu{m[3]}", "src_ip": m[4], "dst_ip": m[5],
            "bytes": m[6], "start": m[7], "kind": m[8], "engine": m[9], "step": m[10]}


def serve(built: Built, cluster, config: dict, dilation: float, duration_s: float,
          progress: Progress | None = None) -> tuple[list[Sent], Sampler]:
    """Run the cluster on the twin until it is quiet or the drain ran out; its messages (``Sent`` tuples, in
    the order sent: ``plan_row`` gives each one's plan row) and the queue samples. ``progress``: told the
    simulated time on every callback (it reports every so many wall seconds)."""
    from traffic.model import serving

    tb = engine.load()
    twin = built.twin
    ips = config["ips"]
    picker = PortPicker(config["policy"])
    send_delay = float(twin.sendDelayS)
    timers: dict[int, tuple] = {}
    serial = itertools.count()
    rows: list[Sent] = []
    horizon = duration_s * dilation + DRAIN_S
    sampler = Sampler(built, max(1.0, horizon / SAMPLES))
    progress = progress or Progress(None, duration_s, dilation)
    in_flight = lambda: cluster.in_flight  # noqa: E731

    def apply(actions: list) -> None:
        now = float(tb.Now())
        start = round(now + send_delay, 6)  # the message starts at its write, as an agent's when its order came
        for a in actions:
            if isinstance(a, serving.Timer):
                kid = next(serial)
                timers[kid] = (a.key, a.at)
                twin.Timer(a.at * dilation, kid)
                continue
            m = a.message
            sp, dp = picker.pick(m.id, m.src_gpu, m.dst_gpu, m.bytes)
            rows.append((m.id, m.request_id, m.src_gpu, m.dst_gpu, ips[str(m.src_gpu)][sp - 1],
                         ips[str(m.dst_gpu)][dp - 1], m.bytes, start, m.kind, m.engine, m.step))
            twin.Send(built.connection(m.src_gpu, sp, m.dst_gpu, dp), m.id, m.bytes)
        if cluster.quiet:
            tb.StopNow()

    def on_delivered(mid: int) -> None:
        mid = int(mid)
        if mid not in cluster.messages:
            return
        picker.settle(mid)
        now = float(tb.Now())
        apply(cluster.delivered(mid, now / dilation))
        progress.tick(now, in_flight)

    def on_timer(kid: int) -> None:
        kid = int(kid)
        if kid == SAMPLE_KEY:
            sampler.take()
            twin.Timer(float(tb.Now()) + sampler.period_s, SAMPLE_KEY)
            progress.tick(float(tb.Now()), in_flight)
            return
        key, at = timers.pop(kid)
        apply(cluster.timer(key, at))
        progress.tick(float(tb.Now()), in_flight)

    twin.onDelivered = on_delivered
    twin.onTimer = on_timer
    sampler.take()
    twin.Timer(sampler.period_s, SAMPLE_KEY)
    apply(cluster.start(0.0))
    tb.StopAt(horizon)
    tb.Run()
    sampler.take()
    return rows, sampler


def carry(built: Built, plan_rows: list[dict]) -> tuple[list[dict], Sampler]:
    """Send every planned message at its start (seconds after t0 = 0) on its NIC port pair; stop when all
    arrived or the drain ran out. The rows' ids are kept; the twin knows them by their index."""
    tb = engine.load()
    twin = built.twin
    rows = sorted(plan_rows, key=lambda r: (r["start"], str(r["id"])))
    remaining = {"n": len(rows)}
    horizon = max((r["start"] for r in rows), default=0.0) + DRAIN_S
    sampler = Sampler(built, max(1.0, horizon / SAMPLES))

    def on_delivered(_mid: int) -> None:
        remaining["n"] -= 1
        if remaining["n"] == 0:
            tb.StopNow()

    def on_timer(kid: int) -> None:
        sampler.take()
        twin.Timer(float(tb.Now()) + sampler.period_s, SAMPLE_KEY)

    twin.onDelivered = on_delivered
    twin.onTimer = on_timer
    for i, r in enumerate(rows):
        src, sp = addressing.parse_ip(r["src_ip"])
        dst, dp = addressing.parse_ip(r["dst_ip"])
        twin.SendAt(float(r["start"]), built.connection(src, sp, dst, dp), i, int(r["bytes"]))
    sampler.take()
    twin.Timer(sampler.period_s, SAMPLE_KEY)
    if rows:
        tb.StopAt(horizon)
        tb.Run()
    sampler.take()
    return rows, sampler
