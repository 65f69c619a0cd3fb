"""OpenFlow rules for a fabric, as plain data (no OpenFlow library needed).

The controller app turns these into FlowMods and GroupMods; unit tests run
them through ``FakeFlowTable`` instead of a switch. One program per switch:

* priority 100: ``ip, ipv4_dst=<NIC port address>`` -> output port, or the
  select group of the ECMP set (ROFT cross-rail traffic);
* priority 1000: the cabling probe ethertype -> controller;
* priority 0: table-miss, no action (drop). Its packet counter is the
  health figure "unexpected packets" and should stay zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.fabric import Fabric
from testbed.fabric.routing import ForwardingTables, ecmp_bucket, forwarding_tables

ETH_IPV4 = 0x0800
PROBE_ETHERTYPE = 0x88B5  # IEEE local experimental: cabling probes
PROBE_DST_MAC = "02:ff:ff:ff:ff:fe"
PRIO_ROUTE, PRIO_PROBE, PRIO_MISS = 100, 1000, 0


@dataclass(frozen=True)
class FlowSpec:
    priority: int
    match: tuple[tuple[str, object], ...]  # sorted (field, value) pairs
    actions: tuple[tuple[str, int], ...]  # ("output", port) | ("group", id) | ("controller", 0); () drops

    @property
    def match_dict(self) -> dict:
        return dict(self.match)


@dataclass(frozen=True)
class GroupSpec:
    group_id: int
    ports: tuple[int, ...]  # one bucket per port; type is always select


@dataclass
class SwitchProgram:
    switch: str
    dpid: int
    flows: list[FlowSpec]
    groups: list[GroupSpec]


def _match(**fields) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(fields.items()))


def switch_program(fabric: Fabric, switch: str, tables: ForwardingTables | None = None) -> SwitchProgram:
    tables = tables or forwarding_tables(fabric)
    groups: dict[tuple[int, ...], int] = {}
    flows = [
        FlowSpec(PRIO_MISS, (), ()),
        FlowSpec(PRIO_PROBE, _match(eth_type=PROBE_ETHERTYPE), (("controller", 0),)),
    ]
    for dst, hop in sorted(tables[switch].items()):
        if hop.is_ecmp:
            gid = groups.setdefault(hop.ports, len(groups) + 1)
            action = ("group", gid)
        else:
            action = ("output", hop.ports[0])
        flows.append(FlowSpec(PRIO_ROUTE, _match(eth_type=ETH_IPV4, ipv4_dst=dst), (action,)))
    return SwitchProgram(
        switch=switch,
        dpid=fabric.switches[switch].dpid,
        flows=flows,
        groups=[GroupSpec(gid, ports) for ports, gid in sorted(groups.items(), key=lambda kv: kv[1])],
    )


def fabric_programs(fabric: Fabric) -> dict[str, SwitchProgram]:
    tables = forwarding_tables(fabric)
    return {name: switch_program(fabric, name, tables) for name in fabric.switches}


class FakeFlowTable:
    """A switch's OpenFlow table in memory: highest-priority match wins, select
    groups pick a bucket by the model's 5-tuple hash. Counts per rule."""

    def __init__(self, program: SwitchProgram) -> None:
        self.program = program
        self.flows = sorted(program.flows, key=lambda f: -f.priority)
        self.groups = {g.group_id: g for g in program.groups}
        self.packets = {f: 0 for f in program.flows}

    def lookup(self, pkt: dict) -> FlowSpec:
        for flow in self.flows:
            if all(pkt.get(k) == v for k, v in flow.match):
                self.packets[flow] += 1
                return flow
        raise AssertionError("no table-miss rule")  # pragma: no cover - every program has one

    def forward(self, pkt: dict) -> list[int | str]:
        """Output ports for ``pkt`` ('controller' for a punt, [] for a drop)."""
        out: list[int | str] = []
        for kind, arg in self.lookup(pkt).actions:
            if kind == "output":
                out.append(arg)
            elif kind == "controller":
                out.append("controller")
            elif kind == "group":
                ports = self.groups[arg].ports
                key = (pkt.get("ipv4_src"), pkt.get("ipv4_dst"), pkt.get("ip_proto"),
                       pkt.get("tp_src"), pkt.get("tp_dst"))
                out.append(ports[ecmp_bucket(key, len(ports))])
        return out
