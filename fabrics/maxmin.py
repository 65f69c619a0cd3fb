"""Ideal max-min fair rates of flows over a fabric's links (progressive filling).

A flow is the list of directed links it crosses; every directed link (a NIC
port's transmit side, a switch egress port) has a capacity. This is the
reference the fidelity benchmark compares measured TCP goodput with.
"""

from __future__ import annotations

from fabrics import Fabric
from fabrics.routing import ForwardingTables, forwarding_tables, walk


def max_min(flows: dict[str, list[str]], capacity: dict[str, float]) -> dict[str, float]:
    rate = {f: 0.0 for f in flows}
    active = {f for f, links in flows.items() if links}
    left = dict(capacity)
    while active:
        users: dict[str, list[str]] = {}
        for f in active:
            for link in flows[f]:
                users.setdefault(link, []).append(f)
        share, bottleneck = min((left[link] / len(fs), link) for link, fs in users.items())
        for f in active:
            rate[f] += share
        for link, fs in users.items():
            left[link] -= share * len(fs)
        frozen = {f for f in users[bottleneck]}
        frozen |= {f for link, fs in users.items() if left[link] <= 1e-9 for f in fs}
        active -= frozen
    return rate


def flow_links(fabric: Fabric, src: tuple[int, int], dst: tuple[int, int], tables: ForwardingTables | None = None,
               choice: int = 0) -> list[str]:
    """Directed links of the path from NIC port ``src`` to NIC port ``dst``:
    ``gpu<i>:p<p>`` (the NIC's transmit) then ``<switch>:<port>`` per hop.
    ``choice`` picks among ECMP alternatives in walk order."""
    tables = tables or forwarding_tables(fabric)
    walks = walk(fabric, tables, src, dst)
    hops, ports = walks[choice % len(walks)]
    return [f"gpu{src[0]}:p{src[1]}"] + [f"{sw}:{port}" for sw, port in zip(hops, ports)]


def all_link_capacities(fabric: Fabric, rate_bps: float) -> dict[str, float]:
    caps = {f"gpu{g}:p{p}": rate_bps for g in fabric.gpus() for p in (1, 2)}
    for name, sw in fabric.switches.items():
        for port in sw.ports:
            caps[f"{name}:{port}"] = rate_bps
    return caps
