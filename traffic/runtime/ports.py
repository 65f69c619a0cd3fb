"""The source port of a persistent connection, drawn on purpose: ROFT's spine is OVS's select-group hash of the
5-tuple, so the source ports are a repetition's ECMP lottery. Drawn from a seed and the address pair (the same
rule as the ns-3 twin's ``testbed.backends.ns3.plan.source_port``: the same seed gives both the same ports),
the next free one on a clash. Standard library only (the agents import it)."""

from __future__ import annotations

import random

EPHEMERAL = (32768, 60999)  # Linux's ip_local_port_range


def source_port(seed: int, src_ip: str, dst_ip: str, used: set[tuple[str, int]]) -> int:
    """The connection's source port: drawn from the seed and the pair, the next free one on a clash; marked
    used (a second connection of the pair, e.g. after a dead one, takes the next)."""
    rnd = random.Random(f"{seed}|{src_ip}|{dst_ip}")
    lo, hi = EPHEMERAL
    port = rnd.randint(lo, hi)
    while (src_ip, port) in used:
        port = lo if port == hi else port + 1
    used.add((src_ip, port))
    return port
