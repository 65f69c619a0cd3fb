"""Benchmarks of the emulated fabric, one module each: fidelity (goodput vs the model), pfc (pause latency,
spreading), replay (does the live replay keep time as the load rises), exchange (expert-parallel exchanges
against their ideal), failover (recovery from cut cables and a controller restart)."""

from __future__ import annotations

import json


def iperf3_result(text: str) -> tuple[float, int | None]:
    """(goodput in bit/s at the receiver, sender retransmits) of an ``iperf3 -J``
    client's output; (0.0, None) when it printed no result (the flow failed)."""
    try:
        end = json.loads(text)["end"]
        return end["sum_received"]["bits_per_second"], end["sum_sent"].get("retransmits", 0)
    except (json.JSONDecodeError, KeyError):
        return 0.0, None
