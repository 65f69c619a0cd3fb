"""The serving cluster against an ideal network (``run_ideal``): the reference an exchange is compared with, the
ideal backend's network and the unit tests'."""

from __future__ import annotations

import heapq
import math

from traffic.model._check import real_positive
from traffic.model.serving_events import Timer


def run_ideal(cluster, port_bps: float, ports: int = 2, latency_s: float = 0.0,
              until_s: float | None = None):
    """Run ``cluster`` (a ``traffic.model.serving.Cluster``, which imports this module) against an ideal
    fabric: each GPU sends its messages one after the other at ``ports`` x ``port_bps`` (its NIC is the only
    bottleneck: a non-blocking fabric, receivers never congested), each arriving ``latency_s`` after its last
    byte left (a reference, and the unit tests' network)."""
    real_positive("port_bps", port_bps)
    heap: list = []
    serial = 0
    nic_free: dict[int, float] = {}

    def push(actions: list, now: float) -> None:
        nonlocal serial
        for a in actions:
            serial += 1
            if isinstance(a, Timer):
                heapq.heappush(heap, (a.at, serial, "timer", a.key))
            else:
                m = a.message
                share = m.bytes / max(1, math.ceil(m.real_bytes / cluster.spec.bytes_scale))
                wire = m.real_bytes * share * 8 / (port_bps * ports)
                done = max(now, nic_free.get(m.src_gpu, 0.0)) + wire
                nic_free[m.src_gpu] = done
                heapq.heappush(heap, (done + latency_s, serial, "deliver", m.id))

    push(cluster.start(0.0), 0.0)
    horizon = until_s if until_s is not None else cluster.spec.duration_s * 10
    while heap:
        at, _, what, key = heapq.heappop(heap)
        if at > horizon:
            break
        push(cluster.timer(key, at) if what == "timer" else cluster.delivered(key, at), at)
    return cluster


__all__ = ["run_ideal"]
