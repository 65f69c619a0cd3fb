"""OpenFlow rules for a fabric, as plain data (no OpenFlow library needed).

The controller turns these into FlowMods and GroupMods and compares what a
switch reports back with them; unit tests run them through a fake flow table
instead of a switch (``tests/fakes``). One program per switch:

* priority 100: ``ip, ipv4_dst=<NIC port address>`` -> output port, or the
  select group of the ECMP set (ROFT cross-rail traffic);
* priority 1000: the cabling probe ethertype -> controller;
* priority 0: table-miss, no action (drop). Its packet counter is the
  health figure "unexpected packets" and should stay zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.fabric import Fabric
from testbed.fabric.routing import ForwardingTables, forwarding_tables

ETH_IPV4 = 0x0800
PROBE_ETHERTYPE = 0x88B5  # IEEE local experimental: cabling probes
PROBE_DST_MAC = "02:ff:ff:ff:ff:fe"
PRIO_ROUTE, PRIO_PROBE, PRIO_MISS = 100, 1000, 0


@dataclass(frozen=True)
class FlowSpec:
    """One flow entry as plain, hashable data: what is sent and what a read-back must equal."""

    priority: int
    match: tuple[tuple[str, object], ...]  # sorted (field, value) pairs
    actions: tuple[tuple[str, int], ...]  # ("output", port) | ("group", id) | ("controller", 0); () drops

    @property
    def match_dict(self) -> dict:
        """The match as keyword arguments (an OpenFlow match is built from them)."""
        return dict(self.match)


@dataclass(frozen=True)
class GroupSpec:
    """One select group (ROFT's ECMP set), comparable like a FlowSpec."""

    group_id: int
    ports: tuple[int, ...]  # one bucket per port; type is always select


@dataclass
class SwitchProgram:
    """Everything one switch should hold, so a connect can install it in one batch."""

    switch: str
    dpid: int
    flows: list[FlowSpec]
    groups: list[GroupSpec]


def _match(**fields) -> tuple[tuple[str, object], ...]:
    """Sorted pairs: equal matches compare equal however they were written."""
    return tuple(sorted(fields.items()))


def switch_program(fabric: Fabric, switch: str, tables: ForwardingTables | None = None) -> SwitchProgram:
    """A switch's rules from the routing model; one group per distinct ECMP port set."""
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
    """Every switch's program, from one routing computation."""
    tables = forwarding_tables(fabric)
    return {name: switch_program(fabric, name, tables) for name in fabric.switches}
