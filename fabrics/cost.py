"""Capex model: switches, ports, cables and transceivers for each fabric.

Counting rule (stated once, used everywhere): every cable is an optical link
with one transceiver at each end, host cables included, because in both
designs a GPU's NIC reaches a switch that serves several servers (a rail leaf
in ROFT, a multi-rail or server switch in ZCube), so it leaves the rack. The
figure "fabric optics" counts only switch-to-switch cables, the part that
differs in kind between the designs.

Prices are relative units, not quotes: a switch port costs 1, a transceiver
1.5, a fibre 0.1 (roughly the ratio of 51.2T-switch cost per 200G port to a
200G optical module). They are parameters; counts are the model's result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fabrics.topology import Fabric
from fabrics.zcube import SWITCH_PORTS_51T

DEFAULT_PRICES = {"switch_port": 1.0, "transceiver": 1.5, "cable": 0.1}

# (label, n, ZCube k, radix): the scales the project reports. The last two are
# 51.2 Tbit/s switches used as 256 x 200G ports (testbed scale's sizes: docs/fabrics.md, "At scale").
SCALES = [
    ("n=32 (emulated)", 32, 8, 16),
    ("n=64 (emulated)", 64, 8, 16),
    ("n=1024, 51.2T", 1024, 128, SWITCH_PORTS_51T),
    ("n=16384, 51.2T", 16384, 128, SWITCH_PORTS_51T),
]


@dataclass(frozen=True)
class Cost:
    switches: int
    switch_ports: int  # ports of all switches (radix x switches)
    used_ports: int
    cables: int
    host_cables: int
    fabric_cables: int
    transceivers: int
    fabric_transceivers: int
    capex_units: float

    def as_dict(self) -> dict:
        return asdict(self)


def cost_of(fabric: Fabric, prices: dict | None = None) -> Cost:
    p = {**DEFAULT_PRICES, **(prices or {})}
    switch_ports = sum(sw.radix for sw in fabric.switches.values())
    used = sum(len(sw.ports) for sw in fabric.switches.values())
    host = len(fabric.host_cables)
    fab = len(fabric.fabric_cables)
    transceivers = 2 * (host + fab)
    capex = switch_ports * p["switch_port"] + transceivers * p["transceiver"] + (host + fab) * p["cable"]
    return Cost(
        switches=len(fabric.switches),
        switch_ports=switch_ports,
        used_ports=used,
        cables=host + fab,
        host_cables=host,
        fabric_cables=fab,
        transceivers=transceivers,
        fabric_transceivers=2 * fab,
        capex_units=round(capex, 3),
    )


def ratios(zcube: Cost, roft: Cost) -> dict:
    """ZCube / ROFT for every figure."""
    a, b = zcube.as_dict(), roft.as_dict()
    return {key: round(a[key] / b[key], 4) for key in a if b[key]}


def cost_table(prices: dict | None = None) -> list[dict]:
    """ZCube and ROFT cost at each of ``SCALES``, with their ratio."""
    from fabrics import build_fabric

    rows = []
    for label, n, k, radix in SCALES:
        z = cost_of(build_fabric("zcube", gpus=n, gpus_per_switch=k), prices)
        r = cost_of(build_fabric("roft", gpus=n, radix=radix), prices)
        rows.append({"scale": label, "gpus": n, "radix": radix, "zcube": z.as_dict(),
                     "roft": r.as_dict(), "ratio": ratios(z, r)})
    return rows
