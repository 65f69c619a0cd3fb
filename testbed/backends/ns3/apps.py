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
from dataclasses import dataclass, field

from testbed.backends.ns3 import engine
from testbed.backends.ns3.plan import Built
from testbed.fabric import addressing

DRAIN_S = 30.0  # simulated seconds after the end for messages in flight (the emulator's drain timeout)
SAMPLES = 100  # queue samples per run (at least one a simulated second... at most this many)


class PortPicker:
    """The NIC port pair of each message: the policy's choices in turn, or (adaptive) the choice whose source
    port has the fewest of the sender's bytes not yet delivered (``traffic.runtime.coordinator``'s rule)."""

    def __init__(self, choices: dict, adaptive: bool) -> None:
        self.config = choices  # "src,dst" -> [[sp, dp], ...], read per pair on first use (n=512: 261,632 pairs)
        self.choices: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.adaptive = adaptive
        self.count: dict[tuple[int, int], int] = {}
        self.outstanding: dict[tuple[int, int], int] = {}
        self.port_of: dict[int, tuple[int, int, int]] = {}

    def pick(self, mid: int, src: int, dst: int, nbytes: int) -> tuple[int, int]:
        opts = self.choices.get((src, dst))
        if opts is None:
            opts = self.choices[(src, dst)] = [tuple(c) for c in self.config[f"{src},{dst}"]]
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


def serve(built: Built, cluster, config: dict, dilation: float, duration_s: float) -> tuple[list[dict], Sampler]:
    """Run the cluster on the twin until it is quiet or the drain ran out; its message rows (plan part:
    id, request_id, src, dst, src_ip, dst_ip, bytes, start, kind, engine, step) and the queue samples."""
    from traffic.model import serving

    tb = engine.load()
    twin = built.twin
    ips = config["ips"]
    picker = PortPicker(config["choices"], config.get("policy") == "adaptive")
    timers: dict[int, tuple] = {}
    serial = itertools.count()
    rows: list[dict] = []
    horizon = duration_s * dilation + DRAIN_S
    sampler = Sampler(built, max(1.0, horizon / SAMPLES))

    def apply(actions: list) -> None:
        now = float(tb.Now())
        for a in actions:
            if isinstance(a, serving.Timer):
                kid = next(serial)
                timers[kid] = (a.key, a.at)
                twin.Timer(a.at * dilation, kid)
                continue
            m = a.message
            sp, dp = picker.pick(m.id, m.src_gpu, m.dst_gpu, m.bytes)
            rows.append({"id": m.id, "request_id": m.request_id, "src": f"gpu{m.src_gpu}", "dst": f"gpu{m.dst_gpu}",
                         "src_ip": ips[str(m.src_gpu)][sp - 1], "dst_ip": ips[str(m.dst_gpu)][dp - 1],
                         "bytes": m.bytes, "start": round(now, 6), "kind": m.kind, "engine": m.engine,
                         "step": m.step})
            twin.Send(built.connection(m.src_gpu, sp, m.dst_gpu, dp), m.id, m.bytes)
        if cluster.quiet:
            tb.StopNow()

    def on_delivered(mid: int) -> None:
        mid = int(mid)
        if mid not in cluster.messages:
            return
        picker.settle(mid)
        apply(cluster.delivered(mid, float(tb.Now()) / dilation))

    def on_timer(kid: int) -> None:
        kid = int(kid)
        if kid == SAMPLE_KEY:
            sampler.take()
            twin.Timer(float(tb.Now()) + sampler.period_s, SAMPLE_KEY)
            return
        key, at = timers.pop(kid)
        apply(cluster.timer(key, at))

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
