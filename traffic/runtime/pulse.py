"""A synthetic load with a decode step's shape, for timing the order path (``testbed bench control-path``).

Every ``period_s`` (cluster time) a burst of ``burst`` messages of ``bytes`` each goes between random pairs of
``gpus`` on different servers (a dispatch, set off by a timer); when its last message has arrived, a second burst
(a combine, set off by that arrival) goes the other way. The default bench takes the 16 GPUs of the default
layout's decode engine (servers 3 and 4), whose 128 cross-server pairs are a decode step's messages. Orders per
second of cluster time: 2 x ``burst`` / ``period_s``. It speaks ``traffic.model.serving.Cluster``'s language
(start, timer, delivered, messages, quiet, in_flight, the result files), so the coordinator and the host run it
unchanged when their config has ``pulse`` instead of ``spec``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from traffic.model.serving_events import Message, Send, Timer


@dataclass(frozen=True)
class PulseSpec:
    gpus: tuple[int, ...]
    gpus_per_server: int
    burst: int
    bytes: int
    period_s: float
    duration_s: float
    seed: int = 0

    @classmethod
    def of(cls, d: dict) -> "PulseSpec":
        return cls(tuple(d["gpus"]), int(d["gpus_per_server"]), int(d["burst"]), int(d["bytes"]),
                   float(d["period_s"]), float(d["duration_s"]), int(d.get("seed", 0)))


class PulseCluster:
    def __init__(self, spec: PulseSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.messages: dict[int, Message] = {}
        self.sent_at: dict[int, float] = {}
        self.delivered_at: dict[int, float] = {}
        self._phase: dict[int, tuple[int, str]] = {}  # message id -> (step, kind)
        self._pending: dict[tuple[int, str], int] = {}
        self._pairs: dict[int, list[tuple[int, int]]] = {}
        self._next_id = 0
        self.stopped = False
        gps = spec.gpus_per_server
        self.cross = [(a, b) for a in spec.gpus for b in spec.gpus if (a - 1) // gps != (b - 1) // gps]

    def _burst(self, step: int, kind: str, pairs: list[tuple[int, int]], now: float) -> list:
        out = []
        for src, dst in pairs:
            m = Message(self._next_id, kind, src, dst, self.spec.bytes, self.spec.bytes, None, "pulse", step)
            self._next_id += 1
            self.messages[m.id] = m
            self.sent_at[m.id] = now
            self._phase[m.id] = (step, kind)
            out.append(Send(m))
        self._pending[(step, kind)] = len(pairs)
        return out

    def start(self, now: float = 0.0) -> list:
        return [Timer(self.spec.duration_s, ("end",)), Timer(now, ("step", 0))]

    def timer(self, key: tuple, now: float) -> list:
        if key[0] == "end":
            self.stopped = True
            return []
        step = key[1]
        pairs = [self.rng.choice(self.cross) for _ in range(self.spec.burst)]
        self._pairs[step] = pairs
        out = self._burst(step, "dispatch", pairs, now)
        if now + self.spec.period_s < self.spec.duration_s:
            out.append(Timer(now + self.spec.period_s, ("step", step + 1)))
        return out

    def delivered(self, message_id: int, now: float) -> list:
        if message_id in self.delivered_at or message_id not in self._phase:
            return []
        self.delivered_at[message_id] = now
        step, kind = self._phase.pop(message_id)
        self._pending[(step, kind)] -= 1
        if self._pending[(step, kind)] or kind != "dispatch" or self.stopped:
            return []
        return self._burst(step, "combine", [(b, a) for a, b in self._pairs.pop(step)], now)

    @property
    def in_flight(self) -> int:
        return len(self._phase)

    @property
    def quiet(self) -> bool:
        return self.stopped and not self._phase

    @property
    def message_count(self) -> int:
        """Orders sent so far (what serving.json's "messages" counts)."""
        return self._next_id

    # -- the result files (traffic.runtime.serving_results) ------------------------------------
    def results(self, end_s: float | None = None) -> dict:
        return {"pulse": True, "measured_requests": 0, "completed_requests": 0, "ep_bytes": 0,
                "orders": len(self.messages)}

    def request_rows(self) -> list[dict]:
        return []

    def step_rows(self) -> list[dict]:
        return []
